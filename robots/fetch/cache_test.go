package fetch

import (
	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/robots"

	"context"
	"errors"
	"fmt"
	"io"
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
		opts.Fetcher = testFetcher(FetcherOptions{Now: clock.Now})
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
	// Let the lookups pile up on the fetch.
	testkit.Eventually(t, "the fetch the lookups pile up on", func() bool { return o.count("/robots.txt") > 0 })
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
	testkit.Eventually(t, "the first caller's fetch", func() bool { return o.count("/robots.txt") > 0 })
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
	fetcher := testFetcher(FetcherOptions{Now: clock.Now, Transport: NewTransport(TransportOptions{DialContext: dial})})
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

// silentOrigins is a TCP listener on 127.0.0.1 that accepts connections and
// never answers: every origin that dialTo sends to it hangs.
type silentOrigins struct {
	net.Listener
	accepted, open atomic.Int64
}

func newSilentOrigins(t *testing.T) *silentOrigins {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentOrigins{Listener: l}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.open.Add(1)
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(io.Discard, conn) // until the fetcher closes it
				conn.Close()
				s.open.Add(-1)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

// dialTo returns a fetcher, with the real transport, whose every origin is
// the server at addr.
func dialTo(addr string, timeout time.Duration) *Fetcher {
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	return testFetcher(FetcherOptions{Timeout: timeout, Transport: NewTransport(TransportOptions{DialContext: dial})})
}

func siteOrigin(i int) Origin {
	return Origin{Scheme: "http", Host: fmt.Sprintf("site%d.test", i), Port: 80}
}

// getResult is what one Get returned.
type getResult struct {
	a   Answer
	err error
}

// getAsync runs c.Get(ctx, o) in the background; its result comes on the
// channel.
func getAsync(c *Cache, ctx context.Context, o Origin) <-chan getResult {
	ch := make(chan getResult, 1)
	go func() {
		a, err := c.Get(ctx, o)
		ch <- getResult{a, err}
	}()
	return ch
}

// patientFetcher is a fetcher whose own timeout does not end the fetches a
// test holds in flight.
func patientFetcher(clock *fakeClock) *Fetcher {
	return testFetcher(FetcherOptions{Now: clock.Now, Timeout: time.Minute})
}

// occupy fills the only fetch slot of c with a fetch that a caller waits
// for, on an origin that answers when release is called; release returns
// that caller's result.
func occupy(t *testing.T, c *Cache) (release func() getResult) {
	t.Helper()
	ch := make(chan struct{})
	var once sync.Once
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-ch:
			fmt.Fprint(w, "User-agent: *\nDisallow: /busy\n")
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { once.Do(func() { close(ch) }) })
	res := getAsync(c, t.Context(), o.origin(t))
	testkit.Eventually(t, "fetching the busy origin", func() bool { return o.count("/robots.txt") == 1 })
	return func() getResult {
		once.Do(func() { close(ch) })
		return <-res
	}
}

// The finding: requests to many cold origins that never answer, whose
// clients leave at once, must not pile up fetches and descriptors.
func TestCacheBoundsFetchesInFlight(t *testing.T) {
	t.Parallel()
	const bound = 4
	silent := newSilentOrigins(t)
	c := newTestCache(t, newFakeClock(), CacheOptions{MaxFetches: bound, Fetcher: dialTo(silent.Addr().String(), time.Minute)})

	// Sample the fetches in flight all along.
	stop, sampled := make(chan struct{}), make(chan int)
	go func() {
		most := 0
		for {
			most = max(most, c.Stats().FetchesInFlight)
			select {
			case <-stop:
				sampled <- most
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()

	// bound callers wait on bound fetches: every slot taken.
	var leave [bound]context.CancelFunc
	var waiting [bound]<-chan getResult
	for i := range bound {
		ctx, cancel := context.WithCancel(t.Context())
		leave[i] = cancel
		waiting[i] = getAsync(c, ctx, siteOrigin(i))
	}
	testkit.Eventually(t, "connected to 4 origins", func() bool { return silent.accepted.Load() == bound })

	// Past the bound, Gets fail fast, and no fetch starts.
	var wg sync.WaitGroup
	for i := bound; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			// Failing fast: on its own short bound, not at its ctx's end.
			_, err := c.Get(ctx, siteOrigin(i))
			if !errors.Is(err, ErrOverloaded) || errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Get(site %d) with every slot taken: err %v; want ErrOverloaded before its deadline", i, err)
			}
		}()
	}
	wg.Wait()
	if n := silent.accepted.Load(); n != bound {
		t.Errorf("%d connections made with every slot taken; want %d", n, bound)
	}

	// The callers leave: their fetches go on until a slot is needed, then
	// the next Get gives them all up and starts its own.
	for i := range bound {
		leave[i]()
		if r := <-waiting[i]; !errors.Is(r.err, context.Canceled) {
			t.Errorf("caller %d left: err %v; want context.Canceled", i, r.err)
		}
	}
	if s := c.Stats(); s.FetchesInFlight != bound || s.FetchesAbandoned != 0 {
		t.Errorf("after the callers left: %d in flight, %d abandoned; want %d and 0", s.FetchesInFlight, s.FetchesAbandoned, bound)
	}
	live := getAsync(c, t.Context(), siteOrigin(bound))
	testkit.Eventually(t, "given up the fetches nobody waits for", func() bool {
		return silent.accepted.Load() == bound+1 && silent.open.Load() == 1 && c.Stats().FetchesInFlight == 1
	})
	if n := c.Stats().FetchesAbandoned; n != bound {
		t.Errorf("%d fetches given up; want %d", n, bound)
	}

	// Clients that leave at once: each takes a slot (giving up the fetches
	// of those before it when none is free) or is refused; the
	// connections held stay within the bound.
	for i := bound + 1; i < 50; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 25*time.Millisecond)
		_, err := c.Get(ctx, siteOrigin(i))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrOverloaded) {
			t.Errorf("Get(site %d) whose client left: err %v; want its deadline or ErrOverloaded", i, err)
		}
	}
	if n := silent.accepted.Load(); n <= 2*bound {
		t.Errorf("%d connections for %d origins; want fetches past the bound once callers left", n, 50)
	}
	// A dial that completes after its fetch was given up parks its
	// connection in the transport's idle pool (net/http dials on, detached
	// from the request's cancellation, so that another request can use
	// it): the transport's, bounded by its MaxIdleConns, not a fetch.
	testkit.Eventually(t, "within the bound", func() bool {
		c.CloseIdleConnections()
		return silent.open.Load() <= bound
	})

	// Close cancels the fetches in flight, the live caller's too.
	c.Close()
	if r := <-live; !errors.Is(r.err, ErrClosed) {
		t.Errorf("caller waiting when the cache closed: err %v; want ErrClosed", r.err)
	}
	testkit.Eventually(t, "closed every connection", func() bool { return silent.open.Load() == 0 })
	close(stop)
	if most := <-sampled; most > bound {
		t.Errorf("%d fetches in flight at once; want at most %d", most, bound)
	}
	if s := c.Stats(); s.FetchesInFlight != 0 {
		t.Errorf("%d fetches in flight after Close; want 0", s.FetchesInFlight)
	}
}

func TestCacheKeepsFetchWithWaiter(t *testing.T) {
	t.Parallel()
	other := newOrigin(t, serveText("User-agent: *\nDisallow: /x\n"))
	clock := newFakeClock()
	c := newTestCache(t, clock, CacheOptions{MaxFetches: 1, Fetcher: patientFetcher(clock)})
	release := occupy(t, c)
	for range 3 {
		if _, err := c.Get(t.Context(), other.origin(t)); !errors.Is(err, ErrOverloaded) {
			t.Fatalf("Get with the slot taken: err %v; want ErrOverloaded", err)
		}
	}
	r := release()
	if r.err != nil || r.a.Entry == nil || r.a.Entry.Outcome != Fetched {
		t.Errorf("waiting caller: %+v, err %v; want the fetched rules", r.a, r.err)
	}
	if s := c.Stats(); s.FetchesAbandoned != 0 || s.Overloads != 3 {
		t.Errorf("%d abandoned, %d overloads; want 0 and 3", s.FetchesAbandoned, s.Overloads)
	}
	if n := other.count("/robots.txt"); n != 0 {
		t.Errorf("other origin fetched %d times with the slot taken; want 0", n)
	}
	if a := mustGet(t, c, other.origin(t)); a.Entry == nil || a.Entry.Outcome != Fetched {
		t.Errorf("once the slot is free: %+v; want the fetched rules", a)
	}
}

// Never fail a request that can be answered from what is held.
func TestCacheOverloadedAnswersFromWhatIsHeld(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fail  bool // the origin answers 503
		setup func(t *testing.T, c *Cache, clock *fakeClock, o Origin)
		check func(a Answer) bool // nil: want ErrOverloaded
		want  string              // what check wants, for messages
	}{
		{
			name: "expired copy",
			setup: func(t *testing.T, c *Cache, clock *fakeClock, o Origin) {
				mustGet(t, c, o)
				clock.Advance(25 * time.Hour)
			},
			check: func(a Answer) bool {
				return a.Stale && a.Entry != nil && !a.Entry.Rules.Allowed("Bot", "http://h/x") && a.LastError != ""
			},
			want: "the stale copy",
		},
		{
			name: "copy only ristretto holds",
			setup: func(t *testing.T, c *Cache, clock *fakeClock, o Origin) {
				e := &Entry{Origin: o, Outcome: Fetched, Rules: robots.Parse([]byte("User-agent: *\nDisallow: /x\n")), Expires: clock.Now(), Size: 100}
				c.set(o, e)
				c.Wait()
			},
			check: func(a Answer) bool {
				return a.Stale && a.Entry != nil && !a.Entry.Rules.Allowed("Bot", "http://h/x")
			},
			want: "the stale copy",
		},
		{
			name: "unreachable past the limit",
			fail: true,
			setup: func(t *testing.T, c *Cache, clock *fakeClock, o Origin) {
				mustGet(t, c, o)
				clock.Advance(DefaultUnreachableLimit)
			},
			check: func(a Answer) bool { return a.LimitPassed && a.Entry == nil && !a.Unreachable },
			want:  "no restrictions",
		},
		{
			name: "unreachable, no copy",
			fail: true,
			setup: func(t *testing.T, c *Cache, clock *fakeClock, o Origin) {
				mustGet(t, c, o)
				clock.Advance(DefaultRetryAfter)
			},
		},
		{
			name:  "never fetched",
			setup: func(*testing.T, *Cache, *fakeClock, Origin) {},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.fail {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				fmt.Fprint(w, "User-agent: *\nDisallow: /x\n")
			})
			clock := newFakeClock()
			c := newTestCache(t, clock, CacheOptions{MaxFetches: 1, Fetcher: patientFetcher(clock)})
			tt.setup(t, c, clock, o.origin(t))
			before := o.count("/robots.txt")
			release := occupy(t, c)
			a, err := c.Get(t.Context(), o.origin(t))
			switch {
			case tt.check == nil && !errors.Is(err, ErrOverloaded):
				t.Errorf("Get with the slot taken: %+v, err %v; want ErrOverloaded", a, err)
			case tt.check != nil && (err != nil || !tt.check(a)):
				t.Errorf("Get with the slot taken: %+v, err %v; want %s", a, err, tt.want)
			}
			if n := o.count("/robots.txt"); n != before {
				t.Errorf("fetched %d times with the slot taken; want %d", n, before)
			}
			release()
		})
	}
}

// A fetch given up because nobody waits for it is not the origin's
// failure: nothing is recorded, and the next request fetches afresh.
func TestCacheAbandonedFetchLeavesNoFailure(t *testing.T) {
	t.Parallel()
	var tries atomic.Int64
	hanging := make(chan struct{})
	slow := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if tries.Add(1) == 1 {
			<-r.Context().Done() // the first fetch hangs until given up
			close(hanging)
			return
		}
		fmt.Fprint(w, "User-agent: *\nDisallow: /x\n")
	})
	other := newOrigin(t, serveText("User-agent: *\nDisallow: /y\n"))
	var mu sync.Mutex
	var fetched []Origin
	onFetch := func(o Origin, _ *Result) {
		mu.Lock()
		fetched = append(fetched, o)
		mu.Unlock()
	}
	clock := newFakeClock()
	c := newTestCache(t, clock, CacheOptions{MaxFetches: 1, OnFetch: onFetch, Fetcher: patientFetcher(clock)})

	ctx, leave := context.WithCancel(t.Context())
	waiting := getAsync(c, ctx, slow.origin(t))
	testkit.Eventually(t, "fetching", func() bool { return tries.Load() == 1 })
	leave()
	if r := <-waiting; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("caller left: err %v; want context.Canceled", r.err)
	}
	if n := c.Stats().FetchesInFlight; n != 1 {
		t.Errorf("%d fetches in flight after the caller left; want 1 (going on until its slot is needed)", n)
	}

	// The slot is needed: the fetch nobody waits for is given up.
	if a := mustGet(t, c, other.origin(t)); a.Entry == nil || a.Entry.Outcome != Fetched {
		t.Fatalf("other origin: %+v; want its rules", a)
	}
	select {
	case <-hanging:
	case <-time.After(30 * time.Second): // a hang guard: released at once, or never
		t.Fatal("the given-up fetch still holds its connection after 30s")
	}
	if _, ok := c.Peek(slow.origin(t)); ok {
		t.Error("Peek after a given-up fetch: state held; want none")
	}
	mu.Lock()
	if !slices.Equal(fetched, []Origin{other.origin(t)}) {
		t.Errorf("OnFetch for %v; want only the other origin", fetched)
	}
	mu.Unlock()

	a := mustGet(t, c, slow.origin(t))
	if a.Unreachable || a.Entry == nil || a.Entry.Outcome != Fetched {
		t.Errorf("next Get: %+v; want a fresh fetch's rules, not a remembered failure", a)
	}
	if n := tries.Load(); n != 2 {
		t.Errorf("fetched %d times; want 2", n)
	}
	if s := c.Stats(); s.FetchesAbandoned != 1 {
		t.Errorf("%d fetches given up; want 1", s.FetchesAbandoned)
	}
}

// BenchmarkCacheHit is the proxy's per-request lookup of cached rules.
func BenchmarkCacheHit(b *testing.B) {
	clock := newFakeClock()
	o := Origin{Scheme: "https", Host: "example.com", Port: 443}
	c := newTestCache(b, clock, CacheOptions{})
	e := &Entry{Origin: o, Outcome: Fetched, Rules: robots.Parse([]byte("User-agent: *\nDisallow: /x\n")), Expires: clock.Now().Add(time.Hour), Size: 100}
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
	files, _ := filepath.Glob("../testdata/corpus/*.txt")
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
		held := make([]*robots.Robots, 0, len(bodies))
		sum := 0
		for _, body := range bodies {
			r := robots.Parse(body, robots.WithNormalization())
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

// TestCacheStatesSameKey checks the chains of states whose origins have
// the same key, which 64-bit keys make too rare to meet by chance: a
// state put at the head of another origin's chain stands for a collision.
func TestCacheStatesSameKey(t *testing.T) {
	for _, tt := range []struct {
		name      string
		otherLast bool // the other origin's state after o's in the chain, not before
	}{
		{"other first", false},
		{"other last", true},
	} {
		c, err := NewCache(CacheOptions{})
		if err != nil {
			t.Fatal(err)
		}
		o, other := siteOrigin(1), siteOrigin(2)
		c.mu.Lock()
		st := c.state(o)
		k := c.key(o)
		ost := &originState{origin: other}
		if tt.otherLast {
			st.sameKey = ost
		} else {
			ost.sameKey = st
			c.states[k] = ost
		}
		if got := c.lookup(o); got != st {
			t.Errorf("%s: lookup(o) = %p; want %p", tt.name, got, st)
		}
		c.forget(st)
		if got := c.lookup(o); got != nil {
			t.Errorf("%s: lookup(o) after forget = %p; want nil", tt.name, got)
		}
		if c.states[k] != ost || ost.sameKey != nil {
			t.Errorf("%s: chain after forget = %p → %p; want the other state alone", tt.name, c.states[k], ost.sameKey)
		}
		if c.nStates != 0 || c.lru.Newest() != nil || c.lru.Oldest() != nil {
			t.Errorf("%s: %d states, LRU %p…%p after forgetting the only one; want none", tt.name, c.nStates, c.lru.Newest(), c.lru.Oldest())
		}
		c.mu.Unlock()
		c.Close()
	}
}

// TestColdOffers: a copy read back cold is offered to the hot tier from
// its second cold decision on, and at most once a second; the hot tier's
// first answer with it makes its rules Hot.
func TestColdOffers(t *testing.T) {
	c := newManyCache(t, manyOrigins{body: func(int) []byte { return []byte("User-agent: *\nDisallow: /x\n") }}, 0)
	ctx := t.Context()
	o := siteOrigin(7)
	if _, err := c.Get(ctx, o); err != nil { // the fetch: cold only
		t.Fatal(err)
	}
	offered := func() uint32 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.lookup(o).good.offered
	}
	inHot := func() bool {
		c.Wait()
		e, ok := c.rc.Get(c.key(o))
		return ok && e.Origin == o
	}
	now := time.Now()
	decide := func(at time.Time) {
		t.Helper()
		a, ok := c.fromState(o, at)
		if !ok || a.Entry == nil || !a.Entry.Rules.Cold() {
			t.Fatalf("fromState = %+v, %v; want a cold entry", a, ok)
		}
	}
	decide(now)
	if got, hot := offered(), inHot(); got != 1 || hot {
		t.Fatalf("after one cold decision: offered %d, in the hot tier %v; want 1 (seen once), false", got, hot)
	}
	decide(now)
	if got, hot := offered(), inHot(); got != uint32(now.Unix()) || !hot {
		t.Fatalf("after two: offered %d, in the hot tier %v; want %d, true", got, hot, now.Unix())
	}
	c.Forget(o) // drops the hot copy and the state: fetched again below
	if _, err := c.Get(ctx, o); err != nil {
		t.Fatal(err)
	}
	decide(now)
	decide(now)
	c.Wait()
	c.rc.Del(c.key(o)) // as if the tier had refused it
	decide(now)        // the same second: not offered again
	if hot := inHot(); hot {
		t.Fatal("offered twice in one second")
	}
	decide(now.Add(time.Second))
	if got, hot := offered(), inHot(); got != uint32(now.Unix()+1) || !hot {
		t.Fatalf("a second later: offered %d, in the hot tier %v; want %d, true", got, hot, now.Unix()+1)
	}
	a, err := c.Get(ctx, o)
	if err != nil || a.Entry == nil || a.Entry.Rules.Cold() {
		t.Fatalf("Get from the hot tier = %+v, %v; want its entry, made Hot", a, err)
	}
}
