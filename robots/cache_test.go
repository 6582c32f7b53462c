package robots

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newTestCache(t testing.TB, clock *fakeClock, opts CacheOptions) *Cache {
	t.Helper()
	opts.Now = clock.Now
	if opts.Fetcher == nil {
		opts.Fetcher = testFetcher(FetchOptions{Now: clock.Now})
	}
	c, err := NewCache(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func mustGet(t *testing.T, c *Cache, o Origin) Answer {
	t.Helper()
	a, err := c.Get(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestCacheOneFetchForConcurrentColdLookups(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		<-release // hold every lookup on the one fetch
		fmt.Fprint(w, "User-agent: *\nDisallow: /x\n")
	})
	c := newTestCache(t, newFakeClock(), CacheOptions{})
	var wg sync.WaitGroup
	var blocked atomic.Int64
	for range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := c.Get(context.Background(), o.origin(t))
			if err == nil && a.Entry != nil && !a.Entry.Rules.Allowed("Bot", "http://h/x") {
				blocked.Add(1)
			}
		}()
	}
	// Let the lookups pile up on the fetch, bounded in time.
	for deadline := time.Now().Add(5 * time.Second); o.count("/robots.txt") == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if n := o.count("/robots.txt"); n != 1 {
		t.Errorf("robots.txt fetched %d times; want 1", n)
	}
	if blocked.Load() != 500 {
		t.Errorf("%d of 500 lookups got the rules; want all", blocked.Load())
	}
}

func TestCacheCancelledCallerDoesNotCancelFetch(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		fmt.Fprint(w, "User-agent: *\nDisallow: /x\n")
	})
	c := newTestCache(t, newFakeClock(), CacheOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, o.origin(t))
		first <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); o.count("/robots.txt") == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	second := make(chan Answer, 1)
	go func() {
		a, _ := c.Get(context.Background(), o.origin(t))
		second <- a
	}()
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller: err %v; want context.Canceled", err)
	}
	close(release)
	if a := <-second; a.Entry == nil || a.Entry.Outcome != Fetched {
		t.Errorf("second caller: %+v; want the fetched rules", a)
	}
	if n := o.count("/robots.txt"); n != 1 {
		t.Errorf("robots.txt fetched %d times; want 1", n)
	}
}

func TestCacheTTL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cacheControl string
		fresh        time.Duration // still cached just before this
	}{
		{"", 24 * time.Hour},
		{"max-age=0", time.Minute},
		{"no-store", time.Minute},
		{"max-age=30", time.Minute},
		{"max-age=3600", time.Hour},
		{"max-age=604800", 24 * time.Hour}, // a week: capped by cache_ttl
	}
	for _, tt := range tests {
		t.Run(tt.cacheControl, func(t *testing.T) {
			t.Parallel()
			o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.cacheControl != "" {
					w.Header().Set("Cache-Control", tt.cacheControl)
				}
				fmt.Fprint(w, "User-agent: *\nDisallow: /x\n")
			})
			clock := newFakeClock()
			c := newTestCache(t, clock, CacheOptions{})
			mustGet(t, c, o.origin(t))
			clock.Advance(tt.fresh - time.Second)
			mustGet(t, c, o.origin(t))
			if n := o.count("/robots.txt"); n != 1 {
				t.Errorf("fetched %d times before %v; want 1", n, tt.fresh)
			}
			clock.Advance(2 * time.Second)
			mustGet(t, c, o.origin(t))
			if n := o.count("/robots.txt"); n != 2 {
				t.Errorf("fetched %d times after %v; want 2", n, tt.fresh)
			}
		})
	}
}

// An origin that answers 503 for a while, then recovers, gets its new rules
// after retry_after: never locked out for a day, never fetched at every
// request.
func TestCacheRecoversAfter503s(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "User-agent: *\nDisallow: /new\n")
	})
	clock := newFakeClock()
	c := newTestCache(t, clock, CacheOptions{})
	for i := range 3 {
		a := mustGet(t, c, o.origin(t))
		if !a.Unreachable || a.Entry != nil || a.LastStatus != 503 {
			t.Fatalf("try %d: %+v; want unreachable with no copy", i, a)
		}
		if want := clock.Now().Add(DefaultRetryAfter); !a.RetryAt.Equal(want) {
			t.Errorf("RetryAt = %v; want %v", a.RetryAt, want)
		}
		for range 10 { // requests before retry_after do not fetch
			mustGet(t, c, o.origin(t))
		}
		if n := o.count("/robots.txt"); n != int64(i+1) {
			t.Fatalf("fetched %d times after %d retry periods; want %d", n, i, i+1)
		}
		clock.Advance(DefaultRetryAfter)
	}
	failing.Store(false)
	a := mustGet(t, c, o.origin(t))
	if a.Entry == nil || a.Unreachable || a.Entry.Rules.Allowed("Bot", "http://h/new") {
		t.Fatalf("after recovery: %+v; want the new rules", a)
	}
}

func TestCacheRetryAfterHeader(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	clock := newFakeClock()
	c := newTestCache(t, clock, CacheOptions{})
	mustGet(t, c, o.origin(t))
	clock.Advance(59 * time.Minute)
	if a := mustGet(t, c, o.origin(t)); !a.Unreachable {
		t.Errorf("%+v; want unreachable", a)
	}
	if n := o.count("/robots.txt"); n != 1 {
		t.Errorf("fetched %d times within the origin's Retry-After; want 1", n)
	}
	clock.Advance(time.Minute)
	mustGet(t, c, o.origin(t))
	if n := o.count("/robots.txt"); n != 2 {
		t.Errorf("fetched %d times after Retry-After; want 2", n)
	}
}

func TestCacheStaleCopyOnError(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "User-agent: *\nDisallow: /old\n")
	})
	clock := newFakeClock()
	c := newTestCache(t, clock, CacheOptions{})
	mustGet(t, c, o.origin(t))
	failing.Store(true)
	clock.Advance(90 * 24 * time.Hour) // however old
	a := mustGet(t, c, o.origin(t))
	if a.Entry == nil || !a.Stale || a.Unreachable || a.Entry.Rules.Allowed("Bot", "http://h/old") {
		t.Fatalf("%+v; want the stale copy", a)
	}
	if a.LastError == "" || a.LastStatus != 500 {
		t.Errorf("LastError %q, LastStatus %d; want the failure described", a.LastError, a.LastStatus)
	}
}

func TestCacheUnreachableLimit(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	clock := newFakeClock()
	c := newTestCache(t, clock, CacheOptions{UnreachableLimit: time.Hour})
	if a := mustGet(t, c, o.origin(t)); !a.Unreachable {
		t.Fatalf("%+v; want unreachable", a)
	}
	clock.Advance(59 * time.Minute)
	if a := mustGet(t, c, o.origin(t)); !a.Unreachable {
		t.Fatalf("before the limit: %+v; want unreachable", a)
	}
	clock.Advance(time.Minute)
	if a := mustGet(t, c, o.origin(t)); a.Unreachable || !a.LimitPassed || a.Entry != nil {
		t.Fatalf("after the limit: %+v; want no restrictions", a)
	}
}

func TestCacheEvictionOnlyCostsARefetch(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "User-agent: *\nDisallow: /%s\n", r.Host) // each site its own rule
	})
	addr := o.Listener.Addr().String()
	clock := newFakeClock()
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr) // every site.test is this server
	}
	fetcher := testFetcher(FetchOptions{Now: clock.Now, Transport: NewTransport(TransportOptions{DialContext: dial})})
	c := newTestCache(t, clock, CacheOptions{MaxBytes: 8 << 10, Fetcher: fetcher}) // room for a few sites
	site := func(i int) Origin { return Origin{Scheme: "http", Host: fmt.Sprintf("site%d.test", i), Port: 80} }
	for round := range 2 {
		for i := range 40 {
			a := mustGet(t, c, site(i))
			own := fmt.Sprintf("http://h/site%d.test", i)
			if a.Entry == nil || a.Entry.Rules.Allowed("Bot", own) || !a.Entry.Rules.Allowed("Bot", "http://h/other") {
				t.Fatalf("round %d, site %d: %+v; want its own rules", round, i, a)
			}
			c.Wait()
		}
	}
	s := c.Stats()
	if s.StateBytes > 8<<10 {
		t.Errorf("state holds %d bytes; bound is %d", s.StateBytes, 8<<10)
	}
	if s.Fetches <= 40 {
		t.Errorf("%d fetches for 80 lookups of 40 sites in 8 KiB; want refetches after eviction", s.Fetches)
	}
}

func TestCachePurge(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, serveText("User-agent: *\nDisallow: /x\n"))
	c := newTestCache(t, newFakeClock(), CacheOptions{})
	mustGet(t, c, o.origin(t))
	c.Wait()
	if _, ok := c.Peek(o.origin(t)); !ok {
		t.Fatal("Peek after Get: nothing held")
	}
	if !c.Purge(o.origin(t)) {
		t.Error("Purge = false; want true")
	}
	if _, ok := c.Peek(o.origin(t)); ok {
		t.Error("Peek after Purge: still held")
	}
	mustGet(t, c, o.origin(t))
	if n := o.count("/robots.txt"); n != 2 {
		t.Errorf("fetched %d times; want 2 (purge forces a refetch)", n)
	}
}

// BenchmarkCacheHit is the proxy's per-request lookup of cached rules.
func BenchmarkCacheHit(b *testing.B) {
	clock := newFakeClock()
	o := Origin{Scheme: "https", Host: "example.com", Port: 443}
	c := newTestCache(b, clock, CacheOptions{})
	e := &Entry{Origin: o, Outcome: Fetched, Rules: Parse([]byte("User-agent: *\nDisallow: /x\n")), Expires: clock.Now().Add(time.Hour), Size: 100}
	c.rc.Set(c.key(o), e, 100)
	c.Wait()
	b.ReportAllocs()
	for b.Loop() {
		if a, err := c.Get(context.Background(), o); err != nil || a.Entry != e {
			b.Fatal("miss")
		}
	}
}

// BenchmarkMemoryPerOrigin reports the heap held per cached origin for the
// real files of testdata/corpus (parsed as the proxy parses them, the group
// a crawler uses compiled), what Robots.MemSize estimates for them (the
// cache's cost), and both for the files of median size.
func BenchmarkMemoryPerOrigin(b *testing.B) {
	files, _ := filepath.Glob("testdata/corpus/*.txt")
	var bodies [][]byte
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		bodies = append(bodies, body)
	}
	slices.SortFunc(bodies, func(x, y []byte) int { return len(x) - len(y) })
	median := bodies[len(bodies)*2/5 : len(bodies)*3/5] // the middle fifth
	heldBy := func(bodies [][]byte) (heap, est float64) {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		held := make([]*Robots, 0, len(bodies))
		sum := 0
		for _, body := range bodies {
			r := Parse(body, WithNormalization())
			r.Group("python-requests").Test("/")
			held = append(held, r)
			sum += r.MemSize()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(held)
		n := float64(len(bodies))
		return float64(after.HeapAlloc-before.HeapAlloc) / n, float64(sum) / n
	}
	var fileMed int
	for _, body := range median {
		fileMed += len(body)
	}
	b.ReportAllocs()
	for b.Loop() {
		heap, est := heldBy(bodies)
		heapMed, estMed := heldBy(median)
		b.ReportMetric(heap, "heap-B/origin")
		b.ReportMetric(est, "cost-B/origin")
		b.ReportMetric(heapMed, "median-heap-B/origin")
		b.ReportMetric(estMed, "median-cost-B/origin")
		b.ReportMetric(float64(fileMed)/float64(len(median)), "median-file-B")
	}
}
