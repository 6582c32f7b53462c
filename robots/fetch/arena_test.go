package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// copyBytes is the content of state i's copy number v: every copy's bytes
// tell whose they are, so a copy moved to the wrong place is seen.
func copyBytes(i, v, n int) []byte {
	unit := fmt.Sprintf("%d.%d;", i, v)
	return bytes.Repeat([]byte(unit), n/len(unit)+1)[:n]
}

// The arena under churn: copies replaced, forgotten and added at random,
// some larger than a slab. After every step each state's copy reads back
// as it was written, what is counted held is what states hold, and what is
// mapped stays within a quarter more (and two slabs) of it.
func TestArenaChurn(t *testing.T) {
	a := newArena()
	var maps, unmaps int
	a.alloc = func(n int) ([]byte, error) { maps++; return make([]byte, n), nil }
	a.unmap = func([]byte) { unmaps++ }
	const states = 600
	sts := make([]*originState, states)
	want := make([][]byte, states)
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 20_000 {
		i := rng.IntN(states)
		st := sts[i]
		if st == nil {
			st = &originState{}
			sts[i] = st
		}
		if g := st.good; g != nil {
			st.good = nil
			a.free(g.ref)
			want[i] = nil
		}
		if rng.IntN(4) > 0 { // three in four are replaced, one forgotten
			n := 200 + rng.IntN(3000)
			if rng.IntN(500) == 0 {
				n = slabSize + rng.IntN(slabSize) // a copy larger than a slab
			}
			b := copyBytes(i, step, n)
			ref, err := a.put(b, st)
			if err != nil {
				t.Fatal(err)
			}
			st.good = &coldCopy{ref: ref}
			want[i] = b
		}
		var held int64
		for j, st := range sts {
			if st == nil || st.good == nil {
				continue
			}
			held += int64(st.good.ref.n)
			if step%97 == 0 || j == i {
				if got := a.bytes(st.good.ref); !bytes.Equal(got, want[j]) {
					t.Fatalf("step %d: state %d reads %d bytes %.20q; want %d bytes %.20q", step, j, len(got), got, len(want[j]), want[j])
				}
			}
		}
		if held != a.live {
			t.Fatalf("step %d: arena counts %d bytes held; states hold %d", step, a.live, held)
		}
		if a.mapped > a.live+a.live/4+2*slabSize+2*slabSize {
			t.Fatalf("step %d: %d bytes mapped for %d held", step, a.mapped, a.live)
		}
	}
	t.Logf("%d slabs mapped, %d unmapped; %d bytes mapped for %d held", maps, unmaps, a.mapped, a.live)
	if unmaps == 0 {
		t.Error("no slab was ever unmapped")
	}
	a.releaseAll()
	if unmaps != maps {
		t.Errorf("%d slabs mapped, %d unmapped after releaseAll", maps, unmaps)
	}
}

// The cold tier through the cache, under churn: origins (a real server on
// loopback) answer a new robots.txt, of a new size, at each fetch, and
// every copy expires each round, so copies are replaced, the slabs hold
// holes and compaction moves copies. Every answer must be the origin's
// latest file, cold or hot.
func TestCacheColdCopiesUnderChurn(t *testing.T) {
	var mu sync.Mutex
	version := map[string]int{}
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		mu.Lock()
		version[host]++
		v := version[host]
		mu.Unlock()
		fmt.Fprintf(w, "User-agent: *\nDisallow: /only-%s/\nDisallow: /v%d/\n", host, v)
		rng := rand.New(rand.NewPCG(uint64(v), uint64(len(host))))
		for range 20 + rng.IntN(300) { // a size of its own, little to compress
			fmt.Fprintf(w, "Disallow: /%x/\n", rng.Uint64())
		}
	})
	addr := o.Listener.Addr().String()
	clock := newFakeClock()
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	fetcher := testFetcher(FetcherOptions{Now: clock.Now, Transport: NewTransport(TransportOptions{DialContext: dial})})
	c := newTestCache(t, clock, CacheOptions{Fetcher: fetcher, TTL: time.Minute})
	const sites, rounds = 150, 6
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range rounds {
		for range 3 * sites {
			i := rng.IntN(sites)
			site := Origin{Scheme: "http", Host: fmt.Sprintf("site%d.test", i), Port: 80}
			a := mustGet(t, c, site)
			mu.Lock()
			v := version[site.Host]
			mu.Unlock()
			if a.Entry == nil || a.Entry.Rules.Allowed("Bot", fmt.Sprintf("http://h/only-%s/x", site.Host)) ||
				a.Entry.Rules.Allowed("Bot", fmt.Sprintf("http://h/v%d/", v)) || !a.Entry.Rules.Allowed("Bot", "http://h/other") {
				t.Fatalf("round %d, %s: not its latest rules (version %d): %+v", round, site.Host, v, a)
			}
		}
		c.Wait()
		clock.Advance(time.Minute + time.Second) // every copy expires
	}
	c.mu.Lock()
	mapped, live, moved := c.arena.mapped, c.arena.live, c.arena.moved
	c.mu.Unlock()
	t.Logf("%d bytes mapped for %d held; %d copies moved by compaction", mapped, live, moved)
	if moved == 0 {
		t.Error("compaction never ran: the churn did not exercise it")
	}
	if mapped > live+live/4+2*slabSize {
		t.Errorf("%d bytes mapped for %d held: more than a quarter and two slabs over", mapped, live)
	}
}

// With no memory to map, a fetched copy cannot be kept cold: the answer
// is still the file's, OnBadRecord hears of it (ErrColdCopy), and the
// entry is kept hot, its only copy.
func TestCacheColdCopyWithoutMemory(t *testing.T) {
	o := newOrigin(t, serveText("User-agent: *\nDisallow: /x\n"))
	var bad []error
	var mu sync.Mutex
	c := newTestCache(t, newFakeClock(), CacheOptions{OnBadRecord: func(_ Origin, err error) {
		mu.Lock()
		bad = append(bad, err)
		mu.Unlock()
	}})
	c.mu.Lock()
	c.arena.alloc = func(int) ([]byte, error) { return nil, errors.New("cannot allocate memory") }
	c.mu.Unlock()
	for range 2 {
		a := mustGet(t, c, o.origin(t))
		if a.Entry == nil || a.Entry.Rules.Allowed("Bot", "http://h/x") || !a.Entry.Rules.Allowed("Bot", "http://h/y") {
			t.Fatalf("%+v; want the file's rules", a)
		}
		c.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) != 1 || !errors.Is(bad[0], ErrColdCopy) {
		t.Errorf("OnBadRecord got %v; want one error wrapping ErrColdCopy", bad)
	}
	if s := c.Stats(); s.Fetches != 1 || s.Hits != 1 {
		t.Errorf("%d fetches, %d hits; want one fetch, then a hit of the hot tier", s.Fetches, s.Hits)
	}
}

// The hot tier holds what its share of the bound allows: origins asked
// again and again are promoted past it, the ones that cool are let go
// (their cold copies answer), and every answer is the origin's own.
func TestCacheHotTierBounded(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "User-agent: *\nDisallow: /only-%s/\n", r.Host)
		for i := range 40 { // a block of more than scanMax rules: a matcher once hot
			fmt.Fprintf(w, "Disallow: /%s/%d/*.pdf$\n", r.Host, i)
		}
	})
	addr := o.Listener.Addr().String()
	clock := newFakeClock()
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	fetcher := testFetcher(FetcherOptions{Now: clock.Now, Transport: NewTransport(TransportOptions{DialContext: dial})})
	const maxBytes = 1 << 20
	c := newTestCache(t, clock, CacheOptions{Fetcher: fetcher, MaxBytes: maxBytes})
	hotMax := hotShare(maxBytes) / heapSlack
	const sites = 120
	for round := range 4 {
		for i := range sites {
			site := Origin{Scheme: "http", Host: fmt.Sprintf("site%d.test", i), Port: 80}
			for range 3 {
				a := mustGet(t, c, site)
				if a.Entry == nil || a.Entry.Rules.Allowed("Bot", fmt.Sprintf("http://h/only-%s/x", site.Host)) ||
					a.Entry.Rules.Allowed("Bot", fmt.Sprintf("http://h/%s/7/a.pdf", site.Host)) || !a.Entry.Rules.Allowed("Bot", "http://h/other") {
					t.Fatalf("round %d, %s: not its rules: %+v", round, site.Host, a)
				}
			}
			c.Wait()
			if s := c.Stats(); s.HotBytes > hotMax {
				t.Fatalf("round %d, %s: the hot tier holds %d bytes; its share is %d", round, site.Host, s.HotBytes, hotMax)
			}
		}
	}
	s := c.Stats()
	t.Logf("%d origins, %d held; hot tier %d of %d bytes; %d hits, %d of them cold", sites, s.Origins, s.HotBytes, hotMax, s.Hits, s.ColdHits)
	if s.Origins != sites || s.Fetches != sites {
		t.Errorf("%d origins held, %d fetches; want %d of each (nothing evicted from the cold tier)", s.Origins, s.Fetches, sites)
	}
	if s.HotBytes == 0 || s.ColdHits == 0 || s.Hits <= s.ColdHits {
		t.Errorf("hot tier %d bytes, %d hits, %d cold: want both tiers to answer", s.HotBytes, s.Hits, s.ColdHits)
	}
}
