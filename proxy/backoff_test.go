package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// TestOriginBackoff: an origin that answers 429 with Retry-After: 2 gets
// no request from robotsgate inside those 2 s (pacing off); the request
// in between is held, then forwarded. Past max_wait it is answered 429
// paced, naming the origin's answer, and never forwarded.
func TestOriginBackoff(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var refusedAt time.Time
	var arrivals []time.Time
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		arrivals = append(arrivals, time.Now())
		if r.URL.Path == "/busy" && refusedAt.IsZero() {
			w.Header().Set("Retry-After", "2")
			refusedAt = time.Now()
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		if r.URL.Path == "/slow-down" {
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	p := startProxy(t, loopbackConfig())
	if resp, _ := get(t, p.client(), o.URL+"/busy"); resp.StatusCode != 429 || resp.Header.Get("X-Robots-Gate") != "" {
		t.Fatalf("/busy: %d %q; want the origin's own 429", resp.StatusCode, resp.Header.Get("X-Robots-Gate"))
	}
	if resp, _ := get(t, p.client(), o.URL+"/next"); resp.StatusCode != 200 {
		t.Fatalf("/next: %d; want 200 once the back-off is over", resp.StatusCode)
	}
	mu.Lock()
	if len(arrivals) < 2 || arrivals[len(arrivals)-1].Sub(refusedAt) < 2*time.Second {
		t.Errorf("the origin got /next %v after its 429 with Retry-After: 2; want nothing inside 2 s", arrivals[len(arrivals)-1].Sub(refusedAt))
	}
	mu.Unlock()
	if n := testutil.ToFloat64(p.srv.metrics.backoffs); n != 1 {
		t.Errorf("robotsgate_origin_backoffs_total = %v; want 1", n)
	}

	// A 503 with Retry-After: 5, held past max_wait (1 s): 429 paced.
	cfg := loopbackConfig()
	cfg.Politeness.MaxDelay, cfg.Politeness.MaxWait = time.Second, time.Second
	q := startProxy(t, cfg)
	get(t, q.client(), o.URL+"/slow-down")
	before := len(arrivals)
	resp, body := get(t, q.client(), o.URL+"/after")
	if resp.StatusCode != 429 || resp.Header.Get("X-Robots-Gate") != ActionPaced || resp.Header.Get("Retry-After") != "5" {
		t.Errorf("inside a 5 s back-off, max_wait 1 s: %d %q Retry-After %q; want 429 paced, Retry-After 5", resp.StatusCode, resp.Header.Get("X-Robots-Gate"), resp.Header.Get("Retry-After"))
	}
	if rec := q.lastAudit(t); rec["msg"] != "paced" || !strings.Contains(rec["reason"].(string), "503 with Retry-After: 5") || !strings.Contains(body, "503 with Retry-After: 5") {
		t.Errorf("audit %v, body %q; want paced, naming the origin's 503 with Retry-After: 5", rec, body)
	}
	mu.Lock()
	if len(arrivals) != before {
		t.Errorf("the origin was reached inside its back-off")
	}
	mu.Unlock()
}

func TestBackoffs(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	b := newBackoffs(func() time.Time { return now })
	steps := []struct {
		status     int
		retryAfter string
		want       time.Duration // the hold set; 0 for none
	}{
		{200, "", 0},
		{503, "", 0},                     // a 503 alone is no request to back off
		{429, "", 10 * time.Second},      // 429 without Retry-After: 10 s
		{429, "", 20 * time.Second},      // doubling while it repeats
		{429, "", 40 * time.Second},      //
		{200, "", 0},                     // a success ends the run
		{429, "", 10 * time.Second},      //
		{429, "3", 3 * time.Second},      // Retry-After in seconds
		{503, "7", 7 * time.Second},      // 503 with Retry-After
		{429, "86400", 10 * time.Minute}, // capped by max_backoff
		{429, now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second}, // an HTTP date
	}
	for i, s := range steps {
		got, ok := b.observe(fetch.Origin{Scheme: "https", Host: "h.example", Port: 443}, s.status, s.retryAfter, 10*time.Minute)
		if got != s.want || ok != (s.want > 0) {
			t.Errorf("step %d: observe(%d, %q) = %v, %v; want %v", i, s.status, s.retryAfter, got, ok, s.want)
		}
	}
	if until, why := b.hold("h.example"); !until.Equal(now.Add(10*time.Minute)) || why != "https://h.example:443 answered 429 with Retry-After: 86400" {
		t.Errorf("hold = %v %q; want the longest hold set, and why", until, why)
	}
	if until, _ := b.hold("other.example"); !until.IsZero() {
		t.Errorf("another host is held until %v", until)
	}
	now = now.Add(11 * time.Minute)
	if until, _ := b.hold("h.example"); !until.IsZero() {
		t.Errorf("held until %v after the back-off ended", until)
	}
}

// TestBackoffsBounded: past backoffMaxHosts hosts held at once, the table
// makes room by ending the holds that end soonest, never a longer one.
func TestBackoffsBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	b := newBackoffs(func() time.Time { return now })
	o := func(host string) fetch.Origin { return fetch.Origin{Scheme: "https", Host: host, Port: 443} }
	b.observe(o("long.example"), 429, "600", time.Hour)
	for i := range backoffMaxHosts - 1 {
		b.observe(o(fmt.Sprintf("h%d.example", i)), 429, strconv.Itoa(60+i%300), time.Hour)
	}
	b.observe(o("short.example"), 429, "1", time.Hour)
	if n := len(b.hosts); n > backoffMaxHosts {
		t.Fatalf("%d hosts remembered; want at most %d", n, backoffMaxHosts)
	}
	if until, _ := b.hold("long.example"); !until.Equal(now.Add(10 * time.Minute)) {
		t.Errorf("the longest hold was dropped (held until %v)", until)
	}
	if until, _ := b.hold("short.example"); until.IsZero() {
		t.Error("the newest hold was not recorded")
	}
	if until, _ := b.hold("h0.example"); !until.IsZero() {
		t.Errorf("a hold of the shortest kind kept until %v; want those ending soonest dropped", until)
	}
}
