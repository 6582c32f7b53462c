package proxy

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/admin"
	"github.com/robotsgate/robotsgate/proxy/config"
)

// TestClientLeftWhileHeld: a client that closes its connection while its
// request is held (for its turn, for the origin's back-off, for
// robots.txt) is audited as what happened: msg and decision client-left,
// status 503 (the answer net/http still writes to the HTTP/1 connection),
// the reason saying where it was held; and
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
			if rec["msg"] != "client-left" || rec["decision"] != "client-left" || rec["status"] != 503.0 || rec["level"] != "WARN" ||
				!regexp.MustCompile(regexp.QuoteMeta(tt.reason)).MatchString(rec["reason"].(string)) || rec["url"] != o.URL+"/left" {
				t.Errorf("audit record: %v; want msg and decision client-left, status 503, reason %q", rec, tt.reason)
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

// TestClientLeftBeforeOriginAnswered: a client that closes its connection
// while the origin works on its request, which then fails (here: past
// upstream.timeout), is client-left, its reason saying so, not the
// origin's upstream-error 504 with a WARN blaming the origin. The
// timeout is many times the moment the proxy takes to see the close.
func TestClientLeftBeforeOriginAnswered(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) }) // before the origin closes
	cfg := loopbackConfig()
	cfg.Upstream.Timeout = 3 * time.Second
	p := startProxy(t, cfg)

	c := rawRequest(t, p, o, "/slow")
	testkit.Eventually(t, "the origin has the request", func() bool { return o.count("/slow") == 1 })
	c.Close()
	waitForLog(t, p.audit, `"decision":"client-left"`)

	rec := p.lastAudit(t)
	if rec["decision"] != "client-left" || rec["reason"] != "client left before the origin answered" || rec["url"] != o.URL+"/slow" {
		t.Errorf("audit record: %v; want client-left, client left before the origin answered", rec)
	}
	if strings.Contains(p.log.String(), "upstream request failed") {
		t.Errorf("the log blames the origin for a client that left:\n%s", p.log.String())
	}
}

// TestClientLeftHalfClosed: a client that closes only its sending side
// while its request waits for its turn reads the client-left answer
// (503, Retry-After: 1, X-Robots-Gate: client-left), and the audit's
// status is that 503: what was written.
func TestClientLeftHalfClosed(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nCrawl-delay: 60\n", nil)
	cfg := loopbackConfig()
	cfg.Politeness.CrawlDelay, cfg.Politeness.MaxDelay, cfg.Politeness.MaxWait = true, time.Minute, 2*time.Minute
	p := startProxy(t, cfg)
	if resp, _ := get(t, p.client(), o.URL+"/first"); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}

	c := rawRequest(t, p, o, "/left")
	testkit.Eventually(t, "the request held", func() bool { return p.srv.pacer.Waiting("127.0.0.1") == 1 })
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a bound on a hang, not a measure
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the half-closed client read no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("X-Robots-Gate") != "client-left" {
		t.Errorf("answer %d, Retry-After %q, X-Robots-Gate %q; want 503, 1, client-left",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("X-Robots-Gate"))
	}
	waitForLog(t, p.audit, `"decision":"client-left"`)
	if rec := p.lastAudit(t); rec["status"] != 503.0 || rec["url"] != o.URL+"/left" {
		t.Errorf("audit record: %v; want status 503, what the client read", rec)
	}
}

// rawRequest sends GET o's path through p on a raw connection, which it
// returns unread (closed at the test's end).
func rawRequest(t *testing.T, p *testProxy, o *testOrigin, path string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.url.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte("GET " + o.URL + path + " HTTP/1.1\r\nHost: " + o.Listener.Addr().String() + "\r\nUser-Agent: LeftBot/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClientLeftH2StreamReset: on HTTP/2 a client that resets its stream
// while the request waits for its turn is client-left with status 0: its
// stream is gone, and nothing can be written to it.
func TestClientLeftH2StreamReset(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, "User-agent: *\nCrawl-delay: 60\n", "a.example")
	p := startMITM(t, pki, func(c *config.Config) {
		c.Politeness.CrawlDelay, c.Politeness.MaxDelay, c.Politeness.MaxWait = true, time.Minute, 2*time.Minute
	})
	r := p.rawH2(t, "a.example:"+port)
	r.request(1, nil, true, r.get("/first", "user-agent", "LeftBot/1.0")...)
	r.send()
	if st, how := r.stream(t, 1); st.status() != "200" {
		t.Fatalf("/first: %+v, %q; want 200", st, how)
	}
	r.request(3, nil, true, r.get("/left", "user-agent", "LeftBot/1.0")...)
	r.send()
	testkit.Eventually(t, "the request held for its turn", func() bool { return p.srv.pacer.Waiting("a.example") == 1 })
	r.fr.WriteRSTStream(3, http2.ErrCodeCancel)
	r.send()
	waitForLog(t, p.audit, `"decision":"client-left"`)
	if rec := p.lastAudit(t); rec["status"] != 0.0 || rec["url"] != "https://a.example:"+port+"/left" {
		t.Errorf("audit record: %v; want client-left, status 0: nothing written to a reset stream", rec)
	}
	if n := o.count("/left"); n != 0 {
		t.Errorf("the origin got /left %d times; want never", n)
	}
}
