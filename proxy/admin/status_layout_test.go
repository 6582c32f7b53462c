package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/internal/testkit"
)

// layoutProbe, put into a copy of the status page, measures it once it
// has rendered /status.json: whether the page scrolls sideways, whether
// the last-error column (its header and every cell) ends within the
// window, and whether the origins table does.
const layoutProbe = `<pre id="layout"></pre><script>
(function probe() {
  if (document.body.getAttribute("data-loaded") !== "true") { setTimeout(probe, 50); return; }
  var w = document.documentElement.clientWidth, right = 0;
  document.querySelectorAll('#origins th[data-key="last_error"], #origins td.err').forEach(function (c) {
    right = Math.max(right, c.getBoundingClientRect().right);
  });
  document.getElementById("layout").textContent = "page-overflow=" + (document.documentElement.scrollWidth > w) +
    " last-error-on-screen=" + (right <= w) + " origins-fit=" + (document.getElementById("origins").getBoundingClientRect().right <= w);
})();
</script>`

// TestStatusPageLayout lays /status out in headless Chromium at 1400 px,
// over 60 origins with long host names, every decision and answer class,
// back-offs and last errors up to 300 bytes with no break in them, and a
// fleet on Sentinel: the page never scrolls sideways, and the last error
// and every other column of the origins table are on screen; on a
// phone's 390 px the page does not scroll sideways either (the table
// scrolls in its box). The page is served with a probe put into a copy of
// it, and a status.json made here.
func TestStatusPageLayout(t *testing.T) {
	t.Parallel()
	browser := testkit.Browser()
	if browser == "" {
		t.Skip("no headless browser (chromium) on PATH: install the Debian package chromium to run this test")
	}
	body, err := json.Marshal(crowdedStatus(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	page := strings.Replace(string(statusPage), "</body>", layoutProbe+"</body>", 1)
	srv := serveStatus([]byte(page), body)
	t.Cleanup(srv.Close)
	for _, tt := range []struct{ window, want string }{
		{"1400,900", "page-overflow=false last-error-on-screen=true origins-fit=true"},
		{"390,844", "page-overflow=false last-error-on-screen=true origins-fit=false"}, // the column is hidden there
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
		cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-proxy-server",
			"--user-data-dir="+t.TempDir(), "--window-size="+tt.window, "--virtual-time-budget=5000", "--dump-dom", srv.URL+"/status")
		cmd.Env = append(cmd.Environ(), "TZ=Europe/Paris") // a zone whose names are longer than UTC
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("%s --dump-dom: %v", browser, err)
		}
		m := regexp.MustCompile(`<pre id="layout">([^<]*)</pre>`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("window %s: the probe did not run:\n%.2000s", tt.window, out)
		}
		if got := string(m[1]); got != tt.want {
			t.Errorf("window %s: %s; want %s", tt.window, got, tt.want)
		}
	}
}

// serveStatus serves page at /status and body at /status.json: the
// status page over a status.json made by a test.
func serveStatus(page, body []byte) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/status.json" {
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	}))
}

// crowdedStatus is a status.json as a busy fleet instance would show it.
func crowdedStatus(now time.Time) any {
	since := now.Add(-3 * time.Hour)
	st := Status{Started: since, Now: now, Mode: "enforce", Held: 12, BackingOff: 3,
		Cluster: &cluster.Status{Up: true, Errors: 4, Topology: "sentinel", Master: "mymaster", Server: "redis-node-2.redis-headless.robotsgate.svc.cluster.local:6379", ServerSince: since}}
	errs := []string{"", "tls-verify: certificate signed by an unknown authority", "timeout: no answer in time",
		"protocol: read gzip body: gzip: invalid header", "status 503, retry after 1m0s", strings.Repeat("x", 300)}
	for i := range 60 {
		fetched, expires := now.Add(-time.Duration(i)*time.Minute), now.Add(24*time.Hour)
		delay, gap := 2.5, 2.5
		o := OriginStatus{
			Origin: fmt.Sprintf("https://www.a-rather-long-host-name-for-a-site-%d.example.co.uk:443", i), State: "fetched", Status: 200,
			FetchedAt: &fetched, ExpiresAt: &expires, LastError: errs[i%len(errs)],
			Decisions:  map[string]int64{"allowed": 12345, "disallowed": 234, "paced": 56, "unreachable": 7, "usage-refused": 8},
			Answers:    map[string]int64{"2xx": 12000, "3xx": 300, "4xx": 40, "429": 5, "5xx": 6},
			CrawlDelay: &delay, Interval: &gap, Held: i % 4,
		}
		if i%3 == 0 {
			until := now.Add(10 * time.Minute)
			o.BackoffUntil, o.BackoffReason = &until, o.Origin+" answered 429 with Retry-After: 600"
		}
		st.Origins = append(st.Origins, o)
	}
	recent := make([]map[string]any, 100)
	for i := range recent {
		recent[i] = map[string]any{"time": now.Add(-time.Duration(i) * time.Second), "decision": "disallowed",
			"url":   fmt.Sprintf("https://www.a-rather-long-host-name-for-a-site-%d.example.co.uk/private/%s", i, strings.Repeat("y", 200)),
			"token": "AcmeDataBot", "rule": "disallow: /private", "line": 7, "reason": "disallowed by robots.txt"}
	}
	return struct {
		Status
		Recent []map[string]any `json:"recent"`
	}{st, recent}
}
