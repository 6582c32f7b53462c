package fetch_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/robots/fetch/filestore"
)

// kept is an evidence.Keeper that remembers what it is handed.
type kept struct {
	mu     sync.Mutex
	copies []evidence.Copy
	bodies [][]byte
}

func (k *kept) Keep(c evidence.Copy, body []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.copies = append(k.copies, c)
	k.bodies = append(k.bodies, bytes.Clone(body))
}

func (k *kept) all() ([]evidence.Copy, [][]byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]evidence.Copy(nil), k.copies...), append([][]byte(nil), k.bodies...)
}

// same reports whether a and b name the same copy (their times Equal:
// one read back cold is in the local zone).
func same(a, b evidence.Copy) bool {
	return a.URL == b.URL && a.Sum == b.Sum && a.Fetched.Equal(b.Fetched) && a.Status == b.Status
}

// copyOrigin serves robots.txt as body with status (200 when 0), and
// counts its fetches.
type copyOrigin struct {
	*httptest.Server
	body    atomic.Value // string
	status  atomic.Int64
	fetches atomic.Int64
}

func newCopyOrigin(t *testing.T, body string) *copyOrigin {
	t.Helper()
	o := &copyOrigin{}
	o.body.Store(body)
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.fetches.Add(1)
		if s := o.status.Load(); s != 0 {
			w.WriteHeader(int(s))
			return
		}
		w.Write([]byte(o.body.Load().(string)))
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *copyOrigin) origin(t *testing.T) fetch.Origin {
	t.Helper()
	or, err := fetch.ParseOrigin(o.URL)
	if err != nil {
		t.Fatal(err)
	}
	return or
}

func copyCache(t *testing.T, clk *testkit.Clock, k evidence.Keeper, store fetch.Store) *fetch.Cache {
	t.Helper()
	c, err := fetch.NewCache(fetch.CacheOptions{
		Fetcher: fetch.NewFetcher(fetch.FetcherOptions{Now: clk.Now, Timeout: 5 * time.Second}),
		Now:     clk.Now, TTL: time.Hour, Keeper: k, Store: store,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestCopies: every answer with rules names the copy they came from: the
// SHA-256 of the body the origin served, its status and when it was
// fetched, whether the answer was fetched, read back cold, kept stale
// after a failed refresh or adopted from the state directory; a 404 names
// its status and no body. The Keeper is handed each body once, when it
// is fetched or adopted, and never for an answer the cache held.
func TestCopies(t *testing.T) {
	t.Parallel()
	const body = "User-agent: *\nDisallow: /private\n"
	sum := sha256.Sum256([]byte(body))
	for _, tt := range []struct {
		name    string
		status  int  // what robots.txt answers; 0: body
		stale   bool // refreshed after the TTL, the origin failing
		adopted bool // read by a second cache from the first's state directory
		wantSum [32]byte
		want    int // the status the copy names
	}{
		{name: "fetched", wantSum: sum, want: 200},
		{name: "404", status: 404, want: 404},
		{name: "stale", stale: true, wantSum: sum, want: 200},
		{name: "adopted", adopted: true, wantSum: sum, want: 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newCopyOrigin(t, body)
			o.status.Store(int64(tt.status))
			clk := testkit.NewClock(time.Date(2026, 11, 23, 8, 41, 38, 637_000_000, time.UTC))
			fetchedAt := clk.Now()
			var k kept
			var store fetch.Store
			dir := t.TempDir()
			if tt.adopted {
				st, err := filestore.Open(dir, 1<<20, nil)
				if err != nil {
					t.Fatal(err)
				}
				store = st
			}
			c := copyCache(t, clk, &k, store)
			want := evidence.Copy{URL: o.URL + "/robots.txt", Sum: tt.wantSum, Fetched: fetchedAt, Status: tt.want}
			check := func(what string, c *fetch.Cache) {
				t.Helper()
				a, err := c.Get(t.Context(), o.origin(t))
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				got, ok := a.Copy()
				if !ok || !same(got, want) || !same(a.Entry.Copy(), got) {
					t.Errorf("%s: Copy = %+v, %v; want %+v", what, got, ok, want)
				}
			}
			check("fetched", c)
			check("read back cold", c) // the hot tier takes an origin at its second cold decision
			check("again", c)
			if s := c.Stats(); s.ColdHits == 0 {
				t.Errorf("no answer was read back cold: %+v", s)
			}
			if tt.stale {
				clk.Advance(2 * time.Hour)
				o.status.Store(503)
				check("stale", c)
				if a, _ := c.Get(t.Context(), o.origin(t)); !a.Stale {
					t.Errorf("not stale: %+v", a)
				}
			}
			if tt.adopted {
				c.Close() // written to the state directory
				st, err := filestore.Open(dir, 1<<20, nil)
				if err != nil {
					t.Fatal(err)
				}
				k = kept{}
				check("adopted after a restart", copyCache(t, clk, &k, st))
				if n := o.fetches.Load(); n != 1 {
					t.Errorf("robots.txt fetched %d times; want once, before the restart", n)
				}
			}
			copies, bodies := k.all()
			wantBody := []byte(body)
			if tt.status != 0 {
				wantBody = nil
			}
			if len(copies) != 1 || !same(copies[0], want) || !bytes.Equal(bodies[0], wantBody) {
				t.Errorf("kept %+v %q; want %+v %q once", copies, bodies, want, wantBody)
			}
		})
	}
}

// memDocs is a DocStore in memory: the fleet's Redis, for files.
type memDocs struct {
	mu   sync.Mutex
	docs map[string]*fetch.StoredDoc
}

func (m *memDocs) LoadDoc(_ context.Context, url string) (*fetch.StoredDoc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.docs[url], nil
}

func (m *memDocs) SaveDoc(_ context.Context, url string, d *fetch.StoredDoc) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.docs[url] = d
	return nil
}

func (m *memDocs) DeleteDoc(_ context.Context, url string) error { return nil }

// TestDocCopies: a usage file names the copy it was read from, fetched or
// taken from a store another process wrote, and the Keeper is handed its
// body once in each process, never for an answer held.
func TestDocCopies(t *testing.T) {
	t.Parallel()
	const body = `[{"location":"/","tdm-reservation":1}]`
	o := newCopyOrigin(t, body)
	clk := testkit.NewClock(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC))
	docs := &memDocs{docs: map[string]*fetch.StoredDoc{}}
	newDocs := func(k evidence.Keeper) *fetch.DocCache[string] {
		return fetch.NewDocCache(fetch.DocCacheOptions[string]{
			Fetcher: fetch.NewFetcher(fetch.FetcherOptions{Now: clk.Now, Timeout: 5 * time.Second}),
			Parse:   func(_ string, b []byte) (string, error) { return string(b), nil },
			Now:     clk.Now, Store: docs, Keeper: k,
		})
	}
	url := o.URL + "/.well-known/tdmrep.json"
	want := evidence.Copy{URL: url, Sum: sha256.Sum256([]byte(body)), Fetched: clk.Now(), Status: 200}
	for _, who := range []string{"fetching", "from the store"} {
		var k kept
		c := newDocs(&k)
		for range 3 {
			d, err := c.Get(t.Context(), url)
			if got, ok := d.Copy(); err != nil || !ok || !same(got, want) {
				t.Errorf("%s: Copy = %+v, %v (%v); want %+v", who, got, ok, err, want)
			}
		}
		if copies, bodies := k.all(); len(copies) != 1 || !same(copies[0], want) || string(bodies[0]) != body {
			t.Errorf("%s: kept %+v %q; want the body once", who, copies, bodies)
		}
	}
	if n := o.fetches.Load(); n != 1 {
		t.Errorf("fetched %d times; want once, the second process reading the store", n)
	}
	o.status.Store(404)
	clk.Advance(48 * time.Hour)
	var k kept
	d, err := newDocs(&k).Get(t.Context(), url)
	want404 := evidence.Copy{URL: url, Fetched: clk.Now(), Status: 404}
	if got, ok := d.Copy(); err != nil || !ok || !same(got, want404) {
		t.Errorf("404: Copy = %+v, %v (%v); want %+v", got, ok, err, want404)
	}
	if copies, bodies := k.all(); len(copies) != 1 || !same(copies[0], want404) || bodies[0] != nil {
		t.Errorf("404: kept %+v %q; want its copy, no body", copies, bodies)
	}
}

// TestCopyRedirected: a robots.txt answered after a redirect names the URL
// its body came from, and the origin's own /robots.txt as the URL asked
// for, so that the evidence index finds it by either.
func TestCopyRedirected(t *testing.T) {
	t.Parallel()
	const body = "User-agent: *\nDisallow: /moved\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.Redirect(w, r, "/real/robots.txt", http.StatusMovedPermanently)
			return
		}
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	o, err := fetch.ParseOrigin(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	clk := testkit.NewClock(time.Date(2026, 11, 23, 8, 41, 38, 0, time.UTC))
	var k kept
	a, err := copyCache(t, clk, &k, nil).Get(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := a.Copy()
	want := evidence.Copy{URL: srv.URL + "/real/robots.txt", For: o.RobotsURL(), Sum: sha256.Sum256([]byte(body)), Fetched: clk.Now(), Status: 200}
	if !ok || !same(got, want) || got.For != want.For {
		t.Errorf("Copy() = %+v, %v; want %+v", got, ok, want)
	}
	if kc, _ := k.all(); len(kc) != 1 || kc[0].For != want.For {
		t.Errorf("the Keeper was handed %+v; want one copy asked for as %s", kc, want.For)
	}
}
