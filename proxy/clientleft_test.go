package proxy

import (
	"encoding/json"
	"net"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/admin"
)

// TestClientLeftWhileHeld: a client that closes its connection while its
// request is held (for its turn, for the origin's back-off, for
// robots.txt) is audited as what happened: msg and decision client-left,
// status 0 (nothing was sent), the reason saying where it was held; and
// it is counted under client-left in /metrics and /status, never as
// paced, unreachable or a robots.txt block. The origin never gets the
// request. Each step waits for what the proxy recorded, never for time
// to pass.
func TestClientLeftWhileHeld(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		robots string
		setup  func(t *testing.T, o *testOrigin, p *testProxy) (held func() bool) // primes the hold; held reports the request is in it
		reason string
	}{
		{"held for its turn", "User-agent: *\nCrawl-delay: 60\n", func(t *testing.T, o *testOrigin, p *testProxy) func() bool {
			if resp, _ := get(t, p.client(), o.URL+"/first"); resp.StatusCode != 200 {
				t.Fatalf("first: %d", resp.StatusCode)
			}
			return func() bool { return p.srv.pacer.Waiting("127.0.0.1") == 1 }
		}, "client left while waiting for its turn"},
		{"held for the origin's back-off", "User-agent: *\nAllow: /\n", func(t *testing.T, o *testOrigin, p *testProxy) func() bool {
			if resp, _ := get(t, p.client(), o.URL+"/busy"); resp.StatusCode != 429 {
				t.Fatalf("/busy: %d; want the origin's 429", resp.StatusCode)
			}
			return func() bool { return p.srv.backoffs.Held("127.0.0.1") == 1 }
		}, "client left while the origin's back-off"},
		{"held for robots.txt", "User-agent: *\nAllow: /\n", func(t *testing.T, o *testOrigin, p *testProxy) func() bool {
			hold := make(chan struct{})
			o.robotsHold.Store(&hold)
			t.Cleanup(func() { close(hold) }) // before the origin closes
			return func() bool { return o.count("/robots.txt") == 1 }
		}, "client left while its robots.txt was being fetched"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newTestOrigin(t, tt.robots, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/busy" {
					w.Header().Set("Retry-After", "60")
					w.WriteHeader(http.StatusTooManyRequests)
				}
			})
			cfg := loopbackConfig()
			cfg.Politeness.CrawlDelay, cfg.Politeness.MaxDelay, cfg.Politeness.MaxWait = true, time.Minute, 2*time.Minute
			p := startProxy(t, cfg)
			held := tt.setup(t, o, p)

			c, err := net.DialTimeout("tcp", p.url.Host, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("GET " + o.URL + "/left HTTP/1.1\r\nHost: " + o.Listener.Addr().String() + "\r\nUser-Agent: LeftBot/1.0\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, "the request held", held)
			c.Close()
			waitForLog(t, p.audit, `"decision":"client-left"`)

			rec := p.lastAudit(t)
			if rec["msg"] != "client-left" || rec["decision"] != "client-left" || rec["status"] != 0.0 || rec["level"] != "WARN" ||
				!regexp.MustCompile(regexp.QuoteMeta(tt.reason)).MatchString(rec["reason"].(string)) || rec["url"] != o.URL+"/left" {
				t.Errorf("audit record: %v; want msg and decision client-left, status 0, reason %q", rec, tt.reason)
			}
			if n := o.count("/left"); n != 0 {
				t.Errorf("the origin got /left %d times; want never", n)
			}

			_, metrics := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/metrics")
			if !regexp.MustCompile(`(?m)^robotsgate_requests_total\{decision="client-left",scheme="http"\} 1$`).MatchString(metrics) {
				t.Errorf("/metrics counts no client-left request")
			}
			if m := regexp.MustCompile(`(?m)^robotsgate_requests_total\{decision="(paced|disallowed|unreachable)",scheme="http"\} [1-9].*$`).FindString(metrics); m != "" {
				t.Errorf("/metrics: %s; want the client that left counted under client-left alone", m)
			}

			_, body := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/status.json")
			var st admin.Status
			if err := json.Unmarshal([]byte(body), &st); err != nil {
				t.Fatalf("/status.json: %v", err)
			}
			found := false
			for _, or := range st.Origins {
				if or.Decisions["client-left"] == 0 {
					continue
				}
				found = true
				if or.Decisions["client-left"] != 1 || or.Decisions["paced"] != 0 || or.Decisions["disallowed"] != 0 || or.Decisions["unreachable"] != 0 {
					t.Errorf("/status.json %s: decisions %v; want client-left 1, no paced, disallowed or unreachable", or.Origin, or.Decisions)
				}
			}
			if !found {
				t.Errorf("/status.json counts no client-left request: %v", st.Origins)
			}
		})
	}
}
