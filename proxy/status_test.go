package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/admin"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// statusJSON is GET /status.json with its recent records as sent.
type statusJSON struct {
	admin.Status
	Recent []json.RawMessage `json:"recent"`
}

// getStatus reads GET /status.json over loopback.
func getStatus(t *testing.T, p *testProxy) statusJSON {
	t.Helper()
	resp, body := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/status.json")
	var st statusJSON
	if err := json.Unmarshal([]byte(body), &st); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/status.json: %d %q: %v", resp.StatusCode, body, err)
	}
	return st
}

// TestStatusJSON: /status.json counts every answer per origin, shows each
// origin's robots.txt state, and keeps the recent non-allow records.
func TestStatusJSON(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, usageRobots, nil)
	down := "http://" + closedAddr(t)
	p := startProxy(t, loopbackConfig())
	c := p.client()
	get(t, c, o.URL+"/a")
	get(t, c, o.URL+"/b")
	get(t, c, o.URL+"/private/x")
	get(t, c, o.URL+"/train/x", policy.PurposeHeader, "ai-train")
	get(t, c, down+"/x")
	st := getStatus(t, p)
	if st.Mode != "enforce" || st.Started.IsZero() || st.Now.Before(st.Started) {
		t.Errorf("mode %q started %v now %v", st.Mode, st.Started, st.Now)
	}
	byOrigin := map[string]admin.OriginStatus{}
	for _, oj := range st.Origins {
		byOrigin[oj.Origin] = oj
	}
	want := map[string]struct {
		state     string
		decisions map[string]int64
	}{
		o.URL: {"fetched", map[string]int64{"allowed": 2, "disallowed": 1, "usage-refused": 1}},
		down:  {"unreachable", map[string]int64{"unreachable": 1}},
	}
	for origin, w := range want {
		oj, ok := byOrigin[origin]
		if !ok {
			t.Errorf("no entry for %s: %+v", origin, st.Origins)
			continue
		}
		if oj.State != w.state || fmt.Sprint(oj.Decisions) != fmt.Sprint(w.decisions) {
			t.Errorf("%s: state %q decisions %v; want %q %v", origin, oj.State, oj.Decisions, w.state, w.decisions)
		}
	}
	if oj := byOrigin[o.URL]; oj.Status != 200 || oj.FetchedAt == nil || oj.ExpiresAt == nil || !oj.ExpiresAt.After(*oj.FetchedAt) {
		t.Errorf("fetched origin: %+v", oj)
	}
	if oj := byOrigin[down]; oj.LastError == "" {
		t.Errorf("unreachable origin has no last error: %+v", oj)
	}
	if st.Origins[0].Origin != o.URL {
		t.Errorf("origins are not by decisions, most first: %+v", st.Origins)
	}
	var decisions []string
	for _, r := range st.Recent {
		var rec map[string]any
		if err := json.Unmarshal(r, &rec); err != nil {
			t.Fatal(err)
		}
		if len(rec) != len(auditFields) {
			t.Errorf("recent record has %d fields; want the audit log's %d: %v", len(rec), len(auditFields), rec)
		}
		decisions = append(decisions, rec["decision"].(string))
	}
	if got := strings.Join(decisions, " "); got != "disallowed usage-refused unreachable" {
		t.Errorf("recent decisions, oldest first = %q", got)
	}
	// The HTML page: served with a policy that lets it load nothing else.
	resp, body := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/status")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") || !strings.Contains(body, "status.json") {
		t.Errorf("/status: %d %v", resp.StatusCode, resp.Header)
	}
	for _, ext := range []string{"src=\"http", "href=\"http", "@import", "url(http"} {
		if strings.Contains(body, ext) {
			t.Errorf("/status loads an external asset (%q)", ext)
		}
	}
}

// TestStatusPageInBrowser loads /status in a real headless browser: the
// page reads /status.json and renders the origins (filtered and sorted as
// its link asks) and the recent records.
func TestStatusPageInBrowser(t *testing.T) {
	t.Parallel()
	browser := testkit.Browser()
	if browser == "" {
		t.Skip("no headless browser (chromium) on PATH: install the Debian package chromium to run this test")
	}
	a := newTestOrigin(t, "User-agent: *\nDisallow: /private\n", nil)
	b := newTestOrigin(t, "User-agent: *\nDisallow:\n", nil)
	p := startProxy(t, loopbackConfig())
	c := p.client()
	get(t, c, a.URL+"/private/<script>alert(1)</script>")
	get(t, c, a.URL+"/ok")
	for range 3 {
		get(t, c, b.URL+"/ok")
	}
	dom := func(query string) string {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-proxy-server",
			"--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", p.url.String()+"/status"+query).Output()
		if err != nil {
			t.Fatalf("%s --dump-dom: %v", browser, err)
		}
		return string(out)
	}
	page := dom("")
	if !strings.Contains(page, `data-loaded="true"`) {
		t.Fatalf("the page never rendered /status.json:\n%.2000s", page)
	}
	ia, ib := strings.Index(page, ">"+a.URL+"<"), strings.Index(page, ">"+b.URL+"<")
	if ia < 0 || ib < 0 || ib > ia {
		t.Errorf("origins missing, or not by requests (b has more) first: a at %d, b at %d", ia, ib)
	}
	if !strings.Contains(page, "disallowed 1") || !strings.Contains(page, "disallow: /private (line 2)") ||
		!strings.Contains(page, ">2xx 3<") || !strings.Contains(page, "this instance alone") {
		t.Errorf("counts or the recent block missing:\n%.3000s", page)
	}
	if strings.Contains(page, "<script>alert(1)") {
		t.Error("a URL was rendered as markup")
	}
	page = dom("?filter=" + url.QueryEscape(strings.TrimPrefix(a.URL, "http://")) + "&sort=origin&dir=asc")
	if !strings.Contains(page, ">"+a.URL+"<") || strings.Contains(page, ">"+b.URL+"<") || !strings.Contains(page, "(1 of 2)") {
		t.Errorf("filtered page:\n%.3000s", page)
	}
}

// TestStatusOriginAnswers: per origin, /status.json shows the origin's own
// answers by class (and /metrics counts them), the Crawl-delay and the
// pacing interval applied, the back-off in force with what the origin
// answered, and the requests held now.
func TestStatusOriginAnswers(t *testing.T) {
	t.Parallel()
	codes := map[string]int{"/ok": 200, "/moved": 302, "/gone": 404, "/down": 500, "/busy": 429}
	o := newTestOrigin(t, "User-agent: *\nCrawl-delay: 0.1\n", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			w.Header().Set("Retry-After", "30")
		}
		w.WriteHeader(codes[r.URL.Path])
	})
	// Another origin of the same host: pacing and back-off are per host.
	other := newTestOrigin(t, "User-agent: *\n", nil)
	p := startProxy(t, loopbackConfig())
	c := p.client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if resp, _ := get(t, c, other.URL+"/x"); resp.StatusCode != 200 {
		t.Fatalf("other origin: %d", resp.StatusCode)
	}
	asked := time.Now() // before the 429: its back-off ends 30 s after a moment past this
	for _, path := range []string{"/ok", "/ok", "/moved", "/gone", "/down", "/busy"} {
		if resp, _ := get(t, c, o.URL+path); resp.StatusCode != codes[path] {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	// One request held by the back-off the 429 asked for.
	ctx, cancel := context.WithCancel(t.Context())
	held := make(chan struct{})
	go func() {
		defer close(held)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, o.URL+"/later", nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	var st statusJSON
	var oj, oj2 admin.OriginStatus
	// Until the request is held; past the bound, the checks below say
	// what the status page showed.
	testkit.Poll(5*time.Second, func() bool {
		st = getStatus(t, p)
		for _, x := range st.Origins {
			switch x.Origin {
			case o.URL:
				oj = x
			case other.URL:
				oj2 = x
			}
		}
		return oj.Held == 1
	})
	cancel()
	<-held
	// The host's hold shows on both its origins, and counts once.
	if oj2.Held != 1 || oj2.BackoffUntil == nil || st.Held != 1 || st.BackingOff != 1 {
		t.Errorf("the host's other origin: held %d, backoff until %v; totals: %d held, %d backing off; want 1, set, 1, 1",
			oj2.Held, oj2.BackoffUntil, st.Held, st.BackingOff)
	}
	if got := fmt.Sprint(oj.Answers); got != "map[2xx:2 3xx:1 429:1 4xx:1 5xx:1]" {
		t.Errorf("answers by class = %s", got)
	}
	if oj.CrawlDelay == nil || *oj.CrawlDelay != 0.1 || oj.Interval == nil || *oj.Interval != 0.1 {
		t.Errorf("crawl_delay %v, pacing_interval %v; want 0.1 and 0.1", oj.CrawlDelay, oj.Interval)
	}
	// Between 30 s after the requests began and 30 s after now (a second
	// of slack each way for rounding), however long they took.
	if oj.Held != 1 || oj.BackoffUntil == nil || oj.BackoffUntil.Before(asked.Add(29*time.Second)) || oj.BackoffUntil.After(time.Now().Add(31*time.Second)) ||
		oj.BackoffReason != o.URL+" answered 429 with Retry-After: 30" {
		t.Errorf("held %d, backoff until %v (%q); want 1 held, for 30 s from the 429, naming it", oj.Held, oj.BackoffUntil, oj.BackoffReason)
	}
	_, body := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/metrics")
	for _, want := range []string{`robotsgate_upstream_responses_total{class="2xx"} 3`, `robotsgate_upstream_responses_total{class="3xx"} 1`, // the other origin's answer too
		`robotsgate_upstream_responses_total{class="4xx"} 1`, `robotsgate_upstream_responses_total{class="429"} 1`,
		`robotsgate_upstream_responses_total{class="5xx"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestStatusPageFleetInBrowser: in a headless browser whose time zone is
// Tokyo's, a fleet instance's /status names the time zone of its times
// and the Redis server it uses, since when; the last error comes third,
// so that it stays on screen; /status.json says the same server.
func TestStatusPageFleetInBrowser(t *testing.T) {
	t.Parallel()
	browser := testkit.Browser()
	if browser == "" {
		t.Skip("no headless browser (chromium) on PATH: install the Debian package chromium to run this test")
	}
	r := redistest.Start(t)
	o := newTestOrigin(t, "User-agent: *\nDisallow: /private\n", nil)
	p := startFleet(t, r, 1, nil)[0]
	get(t, p.client(), o.URL+"/private/x")
	if st := getStatus(t, p); st.Cluster == nil || st.Cluster.Server != r.Addr || st.Cluster.ServerSince.IsZero() || st.Cluster.Topology != "redis" {
		t.Errorf("/status.json cluster = %+v; want the server %s, since a time", st.Cluster, r.Addr)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-proxy-server",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", p.url.String()+"/status")
	cmd.Env = append(os.Environ(), "TZ=Asia/Tokyo", "LANG=en_US.UTF-8")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --dump-dom: %v", browser, err)
	}
	page := string(out)
	if !strings.Contains(page, `data-loaded="true"`) {
		t.Fatalf("the page never rendered /status.json:\n%.2000s", page)
	}
	for _, want := range []string{"(times in Asia/Tokyo)", "GMT+9", "redis up</b>, using <b", ">" + r.Addr + "</b> since "} {
		if !strings.Contains(page, want) {
			t.Errorf("/status lacks %q:\n%.3000s", want, page)
		}
	}
	if e, n := strings.Index(page, ">last error<"), strings.Index(page, ">requests<"); e < 0 || n < 0 || e > n {
		t.Errorf("the last error column at %d, requests at %d: want it before requests, to stay on screen", e, n)
	}
}
