package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
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
			w.Header().Set("Retry-After", "60")
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

	// A 503 with Retry-After: 60, held past max_wait (1 s): 429 paced,
	// with what is left of the minute (not 5 s, which a machine that
	// stalled 4 s between the two requests would have left within
	// max_wait).
	cfg := loopbackConfig()
	cfg.Politeness.MaxDelay, cfg.Politeness.MaxWait = time.Second, time.Second
	q := startProxy(t, cfg)
	get(t, q.client(), o.URL+"/slow-down")
	before := len(arrivals)
	resp, body := get(t, q.client(), o.URL+"/after")
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != 429 || resp.Header.Get("X-Robots-Gate") != policy.ActionPaced.String() || err != nil || ra <= 1 || ra > 60 {
		t.Errorf("inside a 60 s back-off, max_wait 1 s: %d %q Retry-After %q; want 429 paced, Retry-After what is left of the 60 s", resp.StatusCode, resp.Header.Get("X-Robots-Gate"), resp.Header.Get("Retry-After"))
	}
	if rec := q.lastAudit(t); rec["msg"] != "paced" || !strings.Contains(rec["reason"].(string), "503 with Retry-After: 60") || !strings.Contains(body, "503 with Retry-After: 60") {
		t.Errorf("audit %v, body %q; want paced, naming the origin's 503 with Retry-After: 60", rec, body)
	}
	mu.Lock()
	if len(arrivals) != before {
		t.Errorf("the origin was reached inside its back-off")
	}
	mu.Unlock()
}

// TestBackoffReleasedOneAtATime: when an origin's back-off ends, the
// requests it held leave one at a time, BackoffRelease apart (pacing off,
// so no other gap applies), never as a burst; each is served.
func TestBackoffReleasedOneAtATime(t *testing.T) {
	t.Parallel()
	var refused sync.Once
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			refused.Do(func() {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
			})
		}
	})
	p := startProxy(t, pacedConfig(func(pc *config.PolitenessConfig) { pc.CrawlDelay = false }))
	starts := logStarts(p)
	if resp, _ := get(t, p.client(), o.URL+"/busy"); resp.StatusCode != 429 {
		t.Fatalf("/busy: %d; want the origin's 429", resp.StatusCode)
	}
	// n requests held by the back-off; once the first of them leaves, m
	// more, sent while the others are released: every start keeps the
	// release gap, those sent after the end included.
	const n, m = 3, 2
	done := make(chan []int)
	go func() { done <- fire(t, p.client(), o.URL+"/held", n) }()
	testkit.Eventually(t, "a held request to be released", func() bool { return o.count("/held") > 0 })
	codes := append(fire(t, p.client(), o.URL+"/after", m), <-done...)
	for i, code := range codes {
		if code != 200 {
			t.Errorf("request %d: %d; want 200 after the back-off", i, code)
		}
	}
	checkGaps(t, starts.gaps(t, o.URL), n+m-1, policy.BackoffRelease)
	if got := o.count("/held") + o.count("/after"); got != n+m {
		t.Errorf("the origin got %d requests; want %d", got, n+m)
	}
}

// backoffOrigin is an origin that answers its first /busy with a 429 and
// Retry-After, and records when each path arrived and when it refused.
type backoffOrigin struct {
	*testOrigin
	retryAfter time.Duration
	mu         sync.Mutex
	refusedAt  time.Time
	arrived    map[string]time.Time
}

func newBackoffOrigin(t *testing.T, robotsTxt string, retryAfter time.Duration) *backoffOrigin {
	o := &backoffOrigin{retryAfter: retryAfter, arrived: map[string]time.Time{}}
	o.testOrigin = newTestOrigin(t, robotsTxt, func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.arrived[r.URL.Path] = time.Now()
		if r.URL.Path == "/busy" && o.refusedAt.IsZero() {
			// Before the answer is written: robotsgate's hold begins
			// when it reads it, later.
			o.refusedAt = time.Now()
			w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	return o
}

// checkHeld asserts that the origin received none of paths within its
// back-off: each arrived no sooner than retryAfter after the 429.
func (o *backoffOrigin) checkHeld(t *testing.T, paths ...string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.refusedAt.IsZero() {
		t.Fatal("the origin never answered 429")
	}
	for _, path := range paths {
		at, ok := o.arrived[path]
		switch {
		case !ok:
			t.Errorf("%s never reached the origin", path)
		case at.Sub(o.refusedAt) < o.retryAfter:
			t.Errorf("%s reached the origin %v after its 429 with Retry-After: %d; want nothing inside it", path, at.Sub(o.refusedAt).Round(time.Microsecond), int(o.retryAfter/time.Second))
		}
	}
}

// TestBackoffHoldsQueued: a 429 holds the requests already waiting for
// their pacing slot (Scrapy keeps 8 in flight per site), not only those
// that arrive after it; once it ends they leave one per interval.
func TestBackoffHoldsQueued(t *testing.T) {
	t.Parallel()
	const gap = time.Second
	o := newBackoffOrigin(t, "User-agent: *\nCrawl-delay: 1\n", 2*time.Second)
	p := startProxy(t, pacedConfig(func(pc *config.PolitenessConfig) {
		pc.CrawlDelay, pc.MaxWait, pc.MaxDelay = true, 20*time.Second, 5*time.Second
	}))
	starts := logStarts(p)
	if resp, _ := get(t, p.client(), o.URL+"/warm"); resp.StatusCode != 200 {
		t.Fatalf("/warm: %d", resp.StatusCode)
	}
	// /busy waits for its turn, then the others queue behind it, in order.
	paths := []string{"/busy", "/r1", "/r2", "/r3"}
	codes := make(chan int, len(paths))
	for i, path := range paths {
		go func() { resp, _ := get(t, p.client(), o.URL+path); codes <- resp.StatusCode }()
		waitQueued(t, p.srv.pacer, "127.0.0.1", i+1)
	}
	got := map[int]int{}
	for range paths {
		got[<-codes]++
	}
	if got[429] != 1 || got[200] != len(paths)-1 {
		t.Errorf("statuses %v; want one 429 (the origin's) and %d 200", got, len(paths)-1)
	}
	o.checkHeld(t, paths[1:]...)
	// Each request's last start is the one that left; those the pacer gave
	// while the back-off held them did not. The last three are one
	// interval apart at least.
	g := starts.gaps(t, o.URL)
	checkGaps(t, g[len(g)-(len(paths)-2):], len(paths)-2, gap)
}
