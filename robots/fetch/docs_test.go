package fetch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
)

// testTDMRep stands for a parsed tdmrep.json file in these tests (fetch
// cannot import its parser, usage/source.ParseTDMRep, which imports
// fetch): its entries, as decoded JSON.
type testTDMRep []map[string]any

// errNotTDMRep is wrapped by parseTDMRep's errors.
var errNotTDMRep = errors.New("not a tdmrep.json file")

// parseTDMRep reads body as a JSON array of objects.
func parseTDMRep(_ string, body []byte) (*testTDMRep, error) {
	var t testTDMRep
	if err := json.Unmarshal(body, &t); err != nil {
		return nil, fmt.Errorf("%w: %v", errNotTDMRep, err)
	}
	return &t, nil
}

// reservesAll reports whether t's first entry reserves every path.
func (t *testTDMRep) reservesAll() bool {
	return t != nil && len(*t) > 0 && (*t)[0]["location"] == "/" && (*t)[0]["tdm-reservation"] == 1.0
}

// tdmCache is a DocCache of tdmrep.json files on a fake clock.
func tdmCache(now *atomic.Int64, maxEntries int) *DocCache[*testTDMRep] {
	return NewDocCache(DocCacheOptions[*testTDMRep]{
		Fetcher:    testFetcher(FetcherOptions{}),
		Parse:      parseTDMRep,
		Accept:     "application/json",
		MaxEntries: maxEntries,
		Now:        func() time.Time { return time.Unix(now.Load(), 0) },
	})
}

// TestDocCache: a file is fetched once by every caller waiting for it,
// kept for its max-age (at least a minute, at most the TTL), refetched
// after; a failure keeps the last answer that was not one (stale) and is
// remembered until its retry time; a body that is not such a file is an
// answer with its ParseErr.
func TestDocCache(t *testing.T) {
	t.Parallel()
	var mode atomic.Value // what the origin answers
	mode.Store("ok")
	release := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "slow":
			<-release
			fallthrough
		case "ok":
			w.Header().Set("Cache-Control", "max-age=300")
			w.Write([]byte(`[{"location": "/", "tdm-reservation": 1}]`))
		case "down":
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "gone":
			w.WriteHeader(http.StatusNotFound)
		case "garbage":
			w.Write([]byte("<html>not json</html>"))
		}
	})
	url := o.URL + "/.well-known/tdmrep.json"
	var now atomic.Int64
	now.Store(1_000_000)
	c := tdmCache(&now, 0)
	ctx := t.Context()
	get := func() Doc[*testTDMRep] {
		t.Helper()
		d, err := c.Get(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	// Ten callers at once, one fetch.
	mode.Store("slow")
	var wg sync.WaitGroup
	docs := make([]Doc[*testTDMRep], 10)
	for i := range docs {
		wg.Go(func() { docs[i], _ = c.Get(ctx, url) })
	}
	testkit.Eventually(t, "a fetch of tdmrep.json", func() bool { return o.count("/.well-known/tdmrep.json") > 0 })
	close(release)
	wg.Wait()
	for i, d := range docs {
		if !d.Good() || !d.Value.reservesAll() {
			t.Fatalf("caller %d: %+v; want the file", i, d)
		}
	}
	if n := o.count("/.well-known/tdmrep.json"); n != 1 {
		t.Errorf("%d fetches for 10 callers; want 1", n)
	}

	// Kept for its max-age, then fetched again: unreachable now, the last
	// good copy answers, and the failure is remembered until its retry.
	mode.Store("down")
	now.Add(299)
	if get(); o.count("/.well-known/tdmrep.json") != 1 {
		t.Fatal("refetched within max-age")
	}
	now.Add(2)
	d := get()
	if !d.Stale || !d.Good() || d.RetryAt != time.Unix(now.Load()+120, 0) || d.Err == "" {
		t.Errorf("unreachable with a good copy: %+v; want it, stale, retried in 120 s (the site's Retry-After)", d)
	}
	now.Add(60)
	if get(); o.count("/.well-known/tdmrep.json") != 2 {
		t.Error("fetched again before the retry time")
	}

	// 404: no file, kept for the TTL; a body that is not a file.
	mode.Store("gone")
	now.Add(61)
	if d := get(); d.Outcome != Unavailable || d.Good() || d.Stale {
		t.Errorf("404: %+v; want unavailable", d)
	}
	c.Forget(url)
	mode.Store("garbage")
	if d := get(); d.Outcome != Fetched || d.Good() || !errors.Is(d.ParseErr, errNotTDMRep) {
		t.Errorf("garbage: %+v; want fetched, with a ParseErr", d)
	}

	// Unreachable with nothing before: Unreachable, no value.
	c.Forget(url)
	mode.Store("down")
	if d := get(); d.Outcome != Unreachable || d.Good() || d.Stale || d.Value != nil {
		t.Errorf("unreachable with nothing held: %+v", d)
	}

	// A caller that gives up stops waiting.
	c.Forget(url)
	mode.Store("slow")
	release = make(chan struct{})
	defer close(release)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Get(short, url); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get with a short context: %v; want its deadline", err)
	}
}

// TestDocCacheBounded: past MaxEntries, the least recently used URL is
// forgotten.
func TestDocCacheBounded(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, serveText(`[]`))
	var now atomic.Int64
	now.Store(1_000_000)
	c := tdmCache(&now, 3)
	for i := range 5 {
		if _, err := c.Get(t.Context(), o.URL+"/f"+string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
		c.Get(t.Context(), o.URL+"/fa") // kept in use
	}
	if c.Len() != 3 {
		t.Errorf("%d held; want 3", c.Len())
	}
	if n := o.count("/fa"); n != 1 {
		t.Errorf("/fa fetched %d times; want 1 (kept: used most recently)", n)
	}
	c.Get(t.Context(), o.URL+"/fb")
	if n := o.count("/fb"); n != 2 {
		t.Errorf("/fb fetched %d times; want 2 (forgotten, then fetched again)", n)
	}
}

// TestDocCacheBytes: the files held stay within MaxBytes, each counted at
// twice its body, the least recently used forgotten first.
func TestDocCacheBytes(t *testing.T) {
	t.Parallel()
	body := `[` + strings.Repeat(`{"location": "/x", "tdm-reservation": 1},`, 2000) + `{"location": "/", "tdm-reservation": 0}]`
	o := newOrigin(t, serveText(body))
	c := NewDocCache(DocCacheOptions[*testTDMRep]{
		Fetcher:  testFetcher(FetcherOptions{}),
		Parse:    parseTDMRep,
		MaxBytes: 5 * 2 * int64(len(body)), // room for four (each counted 2 x body + 512)
	})
	for i := range 10 {
		if _, err := c.Get(t.Context(), fmt.Sprintf("%s/f%d", o.URL, i)); err != nil {
			t.Fatal(err)
		}
		if c.Bytes() > 5*2*int64(len(body)) {
			t.Fatalf("after %d files: %d bytes held; want at most %d", i+1, c.Bytes(), 5*2*len(body))
		}
	}
	if c.Len() != 4 {
		t.Errorf("%d files held; want the 4 most recent", c.Len())
	}
	c.Forget(fmt.Sprintf("%s/f9", o.URL))
	if c.Len() != 3 || c.Bytes() != 3*(2*int64(len(body))+512) {
		t.Errorf("after a Forget: %d files, %d bytes; want 3 and their size", c.Len(), c.Bytes())
	}
}

// TestDocCacheFetches: at most MaxFetches fetches are in flight; a Get
// that needs another waits briefly for a slot, then answers with the last
// good copy, however old (stale), or an error wrapping ErrOverloaded;
// another URL's waiters are unaffected once a slot frees.
func TestDocCacheFetches(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var slow atomic.Bool
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() && r.URL.Path == "/stuck" {
			<-release
		}
		w.Header().Set("Cache-Control", "max-age=60")
		w.Write([]byte(`[{"location": "/", "tdm-reservation": 1}]`))
	})
	var now atomic.Int64
	now.Store(1_000_000)
	c := NewDocCache(DocCacheOptions[*testTDMRep]{
		Fetcher:    testFetcher(FetcherOptions{}),
		Parse:      parseTDMRep,
		MaxFetches: 1,
		Now:        func() time.Time { return time.Unix(now.Load(), 0) },
	})
	ctx := t.Context()
	if d, err := c.Get(ctx, o.URL+"/held"); err != nil || !d.Good() {
		t.Fatalf("Get(/held) = %+v, %v", d, err)
	}
	now.Add(3600) // /held has expired
	slow.Store(true)
	stuck := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, o.URL+"/stuck")
		stuck <- err
	}()
	testkit.Eventually(t, "a fetch of /stuck", func() bool { return o.count("/stuck") > 0 })
	// The one slot is taken: a new URL is refused, a URL held answers
	// stale, without a fetch.
	if d, err := c.Get(ctx, o.URL+"/new"); !errors.Is(err, ErrOverloaded) {
		t.Errorf("Get(/new) with every slot taken = %+v, %v; want ErrOverloaded", d, err)
	}
	if d, err := c.Get(ctx, o.URL+"/held"); err != nil || !d.Good() || !d.Stale {
		t.Errorf("Get(/held) with every slot taken = %+v, %v; want its last good copy, stale", d, err)
	}
	if n := o.count("/new") + o.count("/held"); n != 1 {
		t.Errorf("%d fetches of /new and /held; want 1 (the first /held)", n)
	}
	close(release)
	if err := <-stuck; err != nil {
		t.Fatal(err)
	}
	if d, err := c.Get(ctx, o.URL+"/new"); err != nil || !d.Good() {
		t.Errorf("Get(/new) once the slot is free = %+v, %v", d, err)
	}
}
