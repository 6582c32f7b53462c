package filestore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/robotsgate/robotsgate/robots/fetch"
)

func openTestStore(t *testing.T, dir string, maxBytes int64, log *bytes.Buffer) *Store {
	t.Helper()
	var h slog.Handler = slog.DiscardHandler
	if log != nil {
		h = slog.NewTextHandler(log, nil)
	}
	s, err := Open(dir, maxBytes, slog.New(h))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStoreRoundTrip(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "robots") // created by the store
	s := openTestStore(t, dir, 1<<20, nil)
	o := fetch.Origin{Scheme: "https", Host: "example.com", Port: 443}
	at := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	g := &fetch.GoodCopy{Outcome: fetch.Fetched, Status: 200, Body: []byte("User-agent: *\nDisallow: /x\n"), URL: "https://example.com/robots.txt", FetchedAt: at, Expires: at.Add(time.Hour)}
	if err := s.SaveGood(t.Context(), o, g); err != nil {
		t.Fatal(err)
	}
	f := &fetch.Failure{UnreachableSince: at.Add(2 * time.Hour), RetryAt: at.Add(3 * time.Hour), LastError: "refused", LastKind: "refused"}
	if err := s.SaveFailure(t.Context(), o, f); err != nil {
		t.Fatal(err)
	}
	// A store opened again on the same directory reads the same.
	rec, err := openTestStore(t, dir, 1<<20, nil).Load(t.Context(), o)
	if err != nil || rec.Good == nil || rec.Failure == nil {
		t.Fatalf("Load = %+v, %v", rec, err)
	}
	if !bytes.Equal(rec.Good.Body, g.Body) || !rec.Good.FetchedAt.Equal(at) || rec.Failure.LastError != "refused" || !rec.Failure.RetryAt.Equal(f.RetryAt) {
		t.Errorf("Load = %+v %+v", rec.Good, rec.Failure)
	}
	// A success clears the failure.
	s.SaveGood(t.Context(), o, g)
	if rec, _ := s.Load(t.Context(), o); rec.Failure != nil {
		t.Errorf("failure kept after a success: %+v", rec.Failure)
	}
	if rec, err := s.Load(t.Context(), fetch.Origin{Scheme: "http", Host: "other.example", Port: 80}); err != nil || rec.Good != nil || rec.Failure != nil {
		t.Errorf("Load of an unknown origin = %+v, %v", rec, err)
	}
	if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("store directory mode %v, %v; want 0700", info.Mode(), err)
	}
}

// TestStoreIgnoresBadFiles: a file that does not decode, or decodes to
// something no fetch could make, is logged, removed and treated as absent.
func TestStoreIgnoresBadFiles(t *testing.T) {
	t.Parallel()
	o := fetch.Origin{Scheme: "https", Host: "example.com", Port: 443}
	at := time.Now()
	for _, tt := range []struct{ name, content string }{
		{"garbage", "\x00\x01not json"},
		{"truncated", `{"v":1,"origin":"https://example.com:443","good":{"outcome":"fetched"`},
		{"other version", `{"v":9,"origin":"https://example.com:443"}`},
		{"other origin", `{"v":1,"origin":"https://evil.example:443","good":{"outcome":"fetched","status":200,"url":"x","fetched_at":"2026-01-01T00:00:00Z","expires":"2026-01-02T00:00:00Z"}}`},
		{"bad outcome", `{"v":1,"origin":"https://example.com:443","good":{"outcome":"allow-all","status":200,"url":"x","fetched_at":"2026-01-01T00:00:00Z","expires":"2026-01-02T00:00:00Z"}}`},
		{"bad status", fmt.Sprintf(`{"v":1,"origin":"https://example.com:443","good":{"outcome":"fetched","status":0,"url":"x","fetched_at":%q,"expires":%q}}`, at.Format(time.RFC3339), at.Format(time.RFC3339))},
		{"failure without a time", `{"v":1,"origin":"https://example.com:443","failure":{"last_error":"x"}}`},
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, fileName(o))
		if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		rec, err := openTestStore(t, dir, 1<<20, &log).Load(t.Context(), o)
		if err != nil || rec.Good != nil || rec.Failure != nil {
			t.Errorf("%s: Load = %+v, %v; want nothing", tt.name, rec, err)
		}
		if !strings.Contains(log.String(), "ignoring an unreadable file") {
			t.Errorf("%s: not logged: %q", tt.name, log.String())
		}
		if _, err := os.Stat(path); err == nil {
			t.Errorf("%s: the bad file is still there", tt.name)
		}
	}
}

// TestStoreBound: past its bound the store removes the least recently
// written files, at open and on write.
func TestStoreBound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openTestStore(t, dir, 4000, nil)
	at := time.Now()
	body := bytes.Repeat([]byte("Disallow: /x\n"), 60) // ~800 bytes, ~1 KB as JSON
	for i := range 20 {
		o := fetch.Origin{Scheme: "http", Host: fmt.Sprintf("h%d.example", i), Port: 80}
		if err := s.SaveGood(t.Context(), o, &fetch.GoodCopy{Outcome: fetch.Fetched, Status: 200, Body: body, URL: "u", FetchedAt: at, Expires: at}); err != nil {
			t.Fatal(err)
		}
	}
	if s.Bytes() > 4000 {
		t.Errorf("store holds %d bytes; bound 4000", s.Bytes())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) == 0 || len(entries) > 4 {
		t.Errorf("%d files kept; want the newest few", len(entries))
	}
	if rec, _ := s.Load(t.Context(), fetch.Origin{Scheme: "http", Host: "h19.example", Port: 80}); rec.Good == nil {
		t.Error("the newest file was removed")
	}
	if rec, _ := s.Load(t.Context(), fetch.Origin{Scheme: "http", Host: "h0.example", Port: 80}); rec.Good != nil {
		t.Error("the oldest file was kept")
	}
	if s2 := openTestStore(t, dir, 1500, nil); s2.Bytes() > 1500 {
		t.Errorf("reopened with a smaller bound: %d bytes kept", s2.Bytes())
	}

	// The count bounds the index in memory, whatever the bytes.
	few := openTestStore(t, t.TempDir(), 1<<30, nil)
	few.maxFiles = 3
	for i := range 10 {
		o := fetch.Origin{Scheme: "http", Host: fmt.Sprintf("n%d.example", i), Port: 80}
		few.SaveGood(t.Context(), o, &fetch.GoodCopy{Outcome: fetch.Unavailable, Status: 404, URL: "u", FetchedAt: at, Expires: at})
	}
	if n := len(few.files); n != 3 {
		t.Errorf("%d files kept; want 3, the count bound", n)
	}
}

// TestCacheRestartKeepsLastGoodCopy: a cache started on the store of one
// that fetched an origin answers from it, without fetching while it is
// fresh, and with it (stale) while the origin fails.
func TestCacheRestartKeepsLastGoodCopy(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "User-agent: *\nDisallow: /private\n")
	})
	dir := t.TempDir()
	clock := newFakeClock()
	first := newTestCache(t, clock, fetch.CacheOptions{Store: openTestStore(t, dir, 1<<20, nil)})
	mustGet(t, first, o.origin(t))
	first.Close() // waits for the write to the store

	second := newTestCache(t, clock, fetch.CacheOptions{Store: openTestStore(t, dir, 1<<20, nil)})
	a := mustGet(t, second, o.origin(t))
	if a.Entry == nil || a.Stale || a.Entry.Rules.Allowed("Bot", "http://h/private") {
		t.Fatalf("restarted, fresh: %+v; want the stored rules", a)
	}
	if n := o.count(); n != 1 {
		t.Errorf("robots.txt fetched %d times; want once, before the restart", n)
	}

	failing.Store(true)
	clock.Advance(48 * time.Hour) // expired, and the origin answers 503
	third := newTestCache(t, clock, fetch.CacheOptions{Store: openTestStore(t, dir, 1<<20, nil)})
	a = mustGet(t, third, o.origin(t))
	if a.Entry == nil || !a.Stale || a.Unreachable || a.Entry.Rules.Allowed("Bot", "http://h/private") {
		t.Fatalf("restarted while the origin fails: %+v; want the last good copy, stale", a)
	}
	third.Close()
	// The failure is stored too: a fourth start within retry_after does
	// not fetch again, and still enforces the copy.
	before := o.count()
	fourth := newTestCache(t, clock, fetch.CacheOptions{Store: openTestStore(t, dir, 1<<20, nil)})
	a = mustGet(t, fourth, o.origin(t))
	if a.Entry == nil || !a.Stale || a.LastError == "" || o.count() != before {
		t.Errorf("fourth start: %+v, fetched %d more; want the stored failure and copy, no fetch", a, o.count()-before)
	}
}

// FuzzStoreLoad reads any bytes as a store file: nothing panics, and a
// record returned passes the checks, else the file is gone.
func FuzzStoreLoad(f *testing.F) {
	f.Add(`{"v":1,"origin":"https://example.com:443","good":{"outcome":"fetched","status":200,"body":"eA==","url":"u","fetched_at":"2026-01-01T00:00:00Z","expires":"2026-01-02T00:00:00Z"}}`)
	f.Add(`{"v":1,"origin":"https://example.com:443","failure":{"unreachable_since":"2026-01-01T00:00:00Z"}}`)
	f.Add(`{"v":2}`)
	f.Add("\x00")
	o := fetch.Origin{Scheme: "https", Host: "example.com", Port: 443}
	dir := f.TempDir()
	s, err := Open(dir, 1<<20, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, content string) {
		path := filepath.Join(dir, fileName(o))
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		rec, err := s.Load(t.Context(), o)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Good != nil && rec.Good.Check() != nil || rec.Failure != nil && rec.Failure.Check() != nil {
			t.Fatalf("accepted %q as %+v %+v", content, rec.Good, rec.Failure)
		}
		if rec.Good == nil && rec.Failure == nil {
			if _, err := os.Stat(path); err == nil && content != "" {
				var probe map[string]any
				if json.Unmarshal([]byte(content), &probe) != nil {
					t.Fatalf("an unreadable file was left in place: %q", content)
				}
			}
		}
	})
}

// heldSaves is a FileStore whose good copies are written only once
// release is closed: a write still pending when the test moves on.
type heldSaves struct {
	*Store
	release chan struct{}
}

func (h heldSaves) SaveGood(ctx context.Context, o fetch.Origin, g *fetch.GoodCopy) error {
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.Store.SaveGood(ctx, o, g)
}

// TestPurgeAfterPendingSave: a fetch's copy is written to the store after
// its waiters have their answer. A purge made meanwhile waits for that
// write and then deletes it, instead of the copy coming back from the
// store (a flaky TestProxyAdminEndpoints found it). In a bubble: that Purge
// still waits is known once every goroutine is blocked, not after 50 ms
// of hoping.
func TestPurgeAfterPendingSave(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := heldSaves{openTestStore(t, t.TempDir(), 1<<20, nil), make(chan struct{})}
		c, err := fetch.NewCache(fetch.CacheOptions{
			Fetcher: fetch.NewFetcher(fetch.FetcherOptions{Transport: oneBody("User-agent: *\nDisallow: /x\n")}),
			Store:   store,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		o := siteOrigin(1)
		if a, err := c.Get(t.Context(), o); err != nil || a.Entry == nil {
			t.Fatalf("Get = %+v, %v", a, err)
		}
		purged := make(chan struct{})
		go func() { c.Purge(o); close(purged) }()
		synctest.Wait() // Purge has returned, or waits for the write
		select {
		case <-purged:
			t.Error("Purge returned with the fetch's write to the store still pending")
		default:
		}
		close(store.release)
		select {
		case <-purged:
		case <-time.After(10 * time.Second):
			t.Fatal("Purge still waiting 10 s after the write was released")
		}
		if rec, err := store.Load(t.Context(), o); err != nil || rec.Good != nil {
			t.Errorf("store after the purge: %+v, %v; want nothing", rec.Good, err)
		}
		if a, err := c.Get(t.Context(), o); err != nil || a.Entry == nil || c.Stats().Fetches != 2 {
			t.Errorf("Get after the purge: %+v, %v, %d fetches; want a second fetch", a, err, c.Stats().Fetches)
		}
	})
}

// TestStoreFileBound: a regular file over the store's per-file bound
// is refused unread, and the store never writes one.
func TestStoreFileBound(t *testing.T) {
	t.Parallel()
	o := fetch.Origin{Scheme: "https", Host: "example.com", Port: 443}
	dir := t.TempDir()
	path := filepath.Join(dir, fileName(o))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: no disk is spent on it.
	if err := f.Truncate(maxStoreFile + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var log bytes.Buffer
	s := openTestStore(t, dir, 1<<40, &log)
	if rec, err := s.Load(t.Context(), o); err != nil || rec.Good != nil || rec.Failure != nil {
		t.Errorf("Load of a file over the bound = %+v, %v; want nothing", rec, err)
	}
	if _, err := os.Lstat(path); err == nil || !strings.Contains(log.String(), "larger than its bound") {
		t.Errorf("the file is kept (%v) or not logged: %q", err, log.String())
	}
	s.maxFile = 1000 // as maxStoreFile, without writing 100 MB
	at := time.Now()
	big := &fetch.GoodCopy{Outcome: fetch.Fetched, Status: 200, Body: make([]byte, 1000), URL: "u", FetchedAt: at, Expires: at}
	if err := s.SaveGood(t.Context(), o, big); err == nil {
		t.Error("SaveGood of a record over the bound succeeded")
	}
	if _, err := os.Lstat(path); err == nil {
		t.Error("SaveGood wrote a file over the bound")
	}
}
