package evidence

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/statefile"
	"github.com/robotsgate/robotsgate/internal/testkit"
)

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

func openStore(t *testing.T, o Options) *Store {
	t.Helper()
	if o.Dir == "" {
		o.Dir = filepath.Join(t.TempDir(), "evidence")
	}
	o.NoSweeper = true
	s, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close(time.Second) })
	return s
}

func copyOf(url string, body []byte, fetched time.Time) Copy {
	return Copy{URL: url, Sum: SumOf(body), Fetched: fetched, Status: 200}
}

// indexLines returns the store's index lines.
func indexLines(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, indexName))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func TestRoundTripAndDedupe(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "evidence")
	body := []byte("User-agent: *\nDisallow: /private\n")
	c := copyOf("https://example.com/robots.txt", body, t0)
	none := Copy{URL: "https://example.org/robots.txt", Fetched: t0, Status: 404}
	s := openStore(t, Options{Dir: dir})
	s.Keep(c, body)
	s.Keep(c, body) // the same fetch again: indexed once
	s.Keep(none, nil)
	if err := s.Close(5 * time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// A restart that reloads the copies it had indexes none again.
	s = openStore(t, Options{Dir: dir})
	s.Keep(c, body)
	s.Keep(none, nil)
	later := copyOf(c.URL, body, t0.Add(24*time.Hour)) // fetched again, unchanged: not indexed
	s.Keep(later, body)
	changed := copyOf(c.URL, []byte("User-agent: *\nDisallow: /\n"), t0.Add(72*time.Hour))
	s.Keep(changed, []byte("User-agent: *\nDisallow: /\n"))
	// http://example.net/robots.txt redirected to https://www.example.net/robots.txt:
	// found by either URL.
	moved := copyOf("https://www.example.net/robots.txt", body, t0)
	moved.For = "http://example.net/robots.txt"
	s.Keep(moved, body)
	if err := s.Close(5 * time.Second); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := indexLines(t, dir); len(got) != 4 {
		t.Errorf("index has %d lines; want 4 (a line for each change, none for the unchanged refetch):\n%s", len(got), strings.Join(got, "\n"))
	}
	got, err := GetObject(dir, c.Sum, 0)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("GetObject = %q, %v; want %q", got, err, body)
	}
	info, err := os.Stat(ObjectPath(dir, c.Sum))
	if err != nil || info.Mode().Perm() != 0o640 {
		t.Errorf("object mode = %v, %v; want 0640", info.Mode(), err)
	}
	for _, tt := range []struct {
		url    string
		at     time.Time
		ok     bool
		wantAt time.Time
	}{
		{c.URL, t0.Add(-time.Second), false, time.Time{}},
		{c.URL, t0, true, t0},
		{c.URL, t0.Add(23 * time.Hour), true, t0},
		{c.URL, t0.Add(48 * time.Hour), true, t0}, // unchanged since its first fetch
		{c.URL, t0.Add(72 * time.Hour), true, t0.Add(72 * time.Hour)},
		{none.URL, t0.Add(time.Hour), true, t0},
		{moved.URL, t0, true, t0},
		{moved.For, t0, true, t0},
		{"https://example.net/robots.txt", t0, false, time.Time{}},
	} {
		e, ok, err := InForce(dir, tt.url, tt.at, func(int, error) {})
		if err != nil || ok != tt.ok || !e.Fetched.Equal(tt.wantAt) {
			t.Errorf("InForce(%s, %v) = %v, %v, %v; want fetched %v, %v", tt.url, tt.at, e.Fetched, ok, err, tt.wantAt, tt.ok)
		}
	}
}

// TestQueueFullNeverBlocks: a store that cannot write (its objects
// directory replaced by a file) and a queue of one: Keep returns at once
// every time, and every copy is counted as dropped.
func TestQueueFullNeverBlocks(t *testing.T) {
	t.Parallel()
	var log testkit.Buffer
	clk := testkit.NewClock(t0)
	s := openStore(t, Options{QueueLen: 1, QueueBytes: 1 << 20, Logger: slogTo(&log), Now: clk.Now})
	objects := filepath.Join(s.Dir(), "objects")
	if err := os.Remove(objects); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(objects, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			body := []byte(fmt.Sprintf("User-agent: *\nDisallow: /%d\n", i))
			s.Keep(copyOf("https://example.com/robots.txt", body, t0.Add(time.Duration(i))), body)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Keep blocked")
	}
	testkit.Eventually(t, "every copy dropped", func() bool { return s.Dropped() == n })
	// Logged, but not n times: at most a line a minute.
	if got := strings.Count(log.String(), "copy not kept"); got != 1 {
		t.Errorf("%d lines log the drops in the same minute; want 1:\n%s", got, log.String())
	}
	// The byte bound drops too.
	small := openStore(t, Options{QueueBytes: 10})
	small.Keep(copyOf("https://example.com/robots.txt", []byte("0123456789ab"), t0), []byte("0123456789ab"))
	if small.Dropped() != 1 {
		t.Errorf("Dropped() = %d after a body over the queue's bytes; want 1", small.Dropped())
	}
}

// keepAll keeps bodies and waits until each is written.
func keepAll(t *testing.T, s *Store, bodies ...string) [][32]byte {
	t.Helper()
	var sums [][32]byte
	for _, b := range bodies {
		c := copyOf("https://"+b+".example/robots.txt", []byte(b), t0)
		s.Keep(c, []byte(b))
		sums = append(sums, c.Sum)
	}
	for _, sum := range sums {
		testkit.Eventually(t, "copy written", func() bool { return s.Has(sum) })
	}
	return sums
}

func TestRetentionSweep(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(t0)
	s := openStore(t, Options{Now: clk.Now, Retention: 400 * 24 * time.Hour})
	sums := keepAll(t, s, "a", "b", "c")
	clk.Set(t0.Add(200 * 24 * time.Hour))
	s.Named([]Copy{{Sum: sums[0]}, {}}) // a record names a; a no-body copy is nothing to renew
	testkit.Eventually(t, "a renewed", func() bool {
		info, err := os.Stat(s.objectPath(sums[0]))
		return err == nil && info.ModTime().Equal(clk.Now())
	})
	clk.Set(t0.Add(401 * 24 * time.Hour))
	r, err := s.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if r.Expired != 2 || r.Evicted != 0 || !s.Has(sums[0]) || s.Has(sums[1]) || s.Has(sums[2]) {
		t.Errorf("Sweep = %+v, has a %v b %v c %v; want b and c expired", r, s.Has(sums[0]), s.Has(sums[1]), s.Has(sums[2]))
	}
}

func TestBoundSweep(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(t0)
	dir := filepath.Join(t.TempDir(), "evidence")
	s := openStore(t, Options{Dir: dir, Now: clk.Now})
	var sums [][32]byte
	for i, b := range []string{"oldest", "middle", "newest"} {
		clk.Set(t0.Add(time.Duration(i) * time.Hour))
		sums = append(sums, keepAll(t, s, b)...)
	}
	s.Close(time.Second)
	var one int64
	if info, err := os.Stat(ObjectPath(dir, sums[0])); err == nil {
		one = info.Size()
	}
	// Reopened with room for about two objects: the one named longest
	// ago goes, and the log says the store was over its bound.
	var log testkit.Buffer
	s = openStore(t, Options{Dir: dir, Now: clk.Now, MaxBytes: 2*one + 8, Logger: slogTo(&log)})
	if s.Has(sums[0]) || !s.Has(sums[1]) || !s.Has(sums[2]) {
		t.Errorf("after the sweep at start: has %v %v %v; want the oldest removed", s.Has(sums[0]), s.Has(sums[1]), s.Has(sums[2]))
	}
	for _, want := range []string{"over its bound at start", "removed the copies named longest ago", "count=1"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
	if s.Bytes() > 2*one+8 {
		t.Errorf("Bytes() = %d; want at most %d", s.Bytes(), 2*one+8)
	}
}

// TestGetRefuses: what Get refuses, each naming the file.
func TestGetRefuses(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "evidence")
	s := openStore(t, Options{Dir: dir, MaxBody: 1 << 20})
	good := []byte("User-agent: *\nDisallow: /\n")
	sum := keepAll(t, s, string(good))[0]
	plant := func(name string, b []byte) [32]byte {
		sum := SumOf([]byte(name))
		p := ObjectPath(dir, sum)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o640); err != nil {
			t.Fatal(err)
		}
		return sum
	}
	bomb := plant("bomb", gzipped(bytes.Repeat([]byte{0}, 4<<20)))
	other := plant("other", gzipped([]byte("not the body named")))
	garbage := plant("garbage", []byte("\x1f\x8b not gzip"))
	// An objects directory that is a link to one holding the object.
	elsewhere := t.TempDir()
	sub := filepath.Dir(ObjectPath(dir, sum))
	if err := os.Rename(sub, filepath.Join(elsewhere, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "moved"), sub); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		sum  [32]byte
		want error
	}{
		{"gzip bomb", bomb, ErrTooLarge},
		{"another body", other, ErrCorrupt},
		{"not gzip", garbage, ErrCorrupt},
		{"linked directory", sum, statefile.ErrSymlink},
		{"never stored", SumOf([]byte("never")), ErrMissing},
	}
	for _, tt := range tests {
		_, err := s.Get(tt.sum)
		if !errors.Is(err, tt.want) || !strings.Contains(fmt.Sprint(err), ObjectPath(dir, tt.sum)) {
			t.Errorf("Get(%s) = %v; want %v naming %s", tt.name, err, tt.want, ObjectPath(dir, tt.sum))
		}
	}
	// A store whose directory is a link is not opened.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(Options{Dir: link}); err == nil {
		s.Close(time.Second)
		t.Errorf("Open(a link) succeeded; want it refused")
	}
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// TestIndexCorruption: each bad line is reported with its file and line
// and skipped; the good ones are read; the store opens on such an index
// and ends a line cut short before it appends.
func TestIndexCorruption(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/index/bad.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var good int
	var bad []string
	err = ScanIndex(bytes.NewReader(append(b, strings.Repeat("x", MaxIndexLine+10)...)), "bad.jsonl",
		func(Entry) error { good++; return nil },
		func(_ int, err error) { bad = append(bad, err.Error()) })
	if err != nil {
		t.Fatal(err)
	}
	wantBad := []string{"bad.jsonl:2:", "bad.jsonl:3:", "bad.jsonl:4:", "bad.jsonl:5:", "bad.jsonl:6:", "bad.jsonl:7:", "bad.jsonl:8:", "bad.jsonl:10:", "bad.jsonl:11: line longer"}
	if good != 2 || len(bad) != len(wantBad) {
		t.Fatalf("ScanIndex: %d good, bad %q; want 2 good, %d bad", good, bad, len(wantBad))
	}
	for i, w := range wantBad {
		if !strings.HasPrefix(bad[i], w) {
			t.Errorf("bad line %d reported as %q; want it to start %q", i, bad[i], w)
		}
	}
	dir := filepath.Join(t.TempDir(), "evidence")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, indexName), b[:len(b)-1], 0o640); err != nil { // no final newline
		t.Fatal(err)
	}
	var log testkit.Buffer
	s := openStore(t, Options{Dir: dir, Logger: slogTo(&log)})
	s.Keep(Copy{URL: "https://example.net/robots.txt", Fetched: t0, Status: 404}, nil)
	s.Close(5 * time.Second)
	lines := indexLines(t, dir)
	if e, err := DecodeEntry([]byte(lines[len(lines)-1])); err != nil || e.URL != "https://example.net/robots.txt" {
		t.Errorf("last index line %q: %v; want the new entry on a line of its own", lines[len(lines)-1], err)
	}
	if !strings.Contains(log.String(), "index.jsonl:3:") {
		t.Errorf("log does not name the bad lines:\n%s", log.String())
	}
}

func FuzzScanIndex(f *testing.F) {
	for _, name := range []string{"good.jsonl", "bad.jsonl"} {
		b, err := os.ReadFile(filepath.Join("testdata/index", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := ScanIndex(bytes.NewReader(b), "fuzz", func(e Entry) error {
			if e.URL == "" || (e.SHA256 != "" && !isHexSum(e.SHA256)) || e.Fetched.IsZero() {
				t.Fatalf("ScanIndex accepted %+v", e)
			}
			c := e.Copy()
			if c.Hex() != e.SHA256 {
				t.Fatalf("Copy().Hex() = %q; want %q", c.Hex(), e.SHA256)
			}
			return nil
		}, func(int, error) {})
		if err != nil {
			t.Fatalf("ScanIndex of memory: %v", err)
		}
	})
}

func slogTo(w *testkit.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// TestIndexCompaction: at Open, the entries fetched before retention that
// are not their URL's last are dropped from the index; the last of each
// URL stays, however old, so that the copy in force now is found.
func TestIndexCompaction(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(t0)
	dir := filepath.Join(t.TempDir(), "evidence")
	o := Options{Dir: dir, Now: clk.Now, Retention: 400 * 24 * time.Hour}
	s := openStore(t, o)
	a, b := "https://a.example/robots.txt", "https://b.example/robots.txt"
	for _, c := range []Copy{ // a changes at each fetch
		{URL: a, Fetched: t0, Status: 404},
		{URL: b, Fetched: t0, Status: 404},
		{URL: a, Fetched: t0.Add(24 * time.Hour), Status: 410},
		{URL: a, Fetched: t0.Add(500 * 24 * time.Hour), Status: 404},
	} {
		s.Keep(c, nil)
	}
	s.Close(5 * time.Second)
	clk.Set(t0.Add(501 * 24 * time.Hour))
	var log testkit.Buffer
	o.Logger = slogTo(&log)
	s = openStore(t, o)
	s.Close(5 * time.Second)
	got := indexLines(t, dir)
	if len(got) != 2 || !strings.Contains(got[0], b) || !strings.Contains(got[1], a) {
		t.Errorf("index after compaction:\n%s\nwant b's only entry and a's last", strings.Join(got, "\n"))
	}
	if !strings.Contains(log.String(), "entries_removed=2") {
		t.Errorf("log does not say what compaction removed:\n%s", log.String())
	}
	info, err := os.Stat(filepath.Join(dir, indexName))
	if err != nil || info.Mode().Perm() != 0o640 {
		t.Errorf("index mode after compaction: %v, %v; want 0640", info.Mode(), err)
	}
}

// TestIndexRemembersBounded: the index remembers the last entry of at
// most max URLs; a URL it forgot is indexed again when fetched, unchanged
// (a line more, nothing lost), and one it remembers is not.
func TestIndexRemembersBounded(t *testing.T) {
	t.Parallel()
	x, err := openIndex(filepath.Join(t.TempDir(), indexName), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer x.f.Close()
	x.max = 2
	urls := []string{"https://a.example/robots.txt", "https://b.example/robots.txt", "https://c.example/robots.txt"}
	for _, u := range urls {
		if err := x.add(Copy{URL: u, Fetched: t0, Status: 404}); err != nil {
			t.Fatal(err)
		}
	}
	if len(x.last) != 2 {
		t.Fatalf("remembers %d URLs; want 2", len(x.last))
	}
	for _, u := range urls { // each fetched again, unchanged
		if err := x.add(Copy{URL: u, Fetched: t0.Add(time.Hour), Status: 404}); err != nil {
			t.Fatal(err)
		}
	}
	// One of the three was forgotten and is indexed again; remembered
	// then, it makes the index forget another, which is indexed again too
	// if it comes later in the loop: 4 to 6 lines, never the 3 of a
	// bounded memory that forgot nothing, nor the 6 a remembered URL
	// would add to for ever.
	if n := len(indexLines(t, filepath.Dir(x.name))); n < 4 || n > 6 || len(x.last) != 2 {
		t.Errorf("%d lines and %d URLs remembered; want 4 to 6 lines, 2 URLs", n, len(x.last))
	}
	for _, u := range urls[:1] { // a, remembered or not, once more: at most one line
		x.add(Copy{URL: u, Fetched: t0.Add(2 * time.Hour), Status: 404})
		x.add(Copy{URL: u, Fetched: t0.Add(3 * time.Hour), Status: 404})
	}
	if n := len(indexLines(t, filepath.Dir(x.name))); n > 7 {
		t.Errorf("%d lines after a remembered URL was fetched twice unchanged; want at most 7", n)
	}
}

// TestBoundBetweenSweeps: copies written between the hourly sweeps never
// take the store past max_bytes: a client that makes robotsgate fetch
// robots.txt from many hosts serving distinct bodies (or one origin
// whose body changes at each fetch) would otherwise fill the disk within
// the hour.
func TestBoundBetweenSweeps(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(t0)
	dir := filepath.Join(t.TempDir(), "evidence")
	const max = 8 << 10
	s := openStore(t, Options{Dir: dir, Now: clk.Now, MaxBytes: max})
	rnd := rand.New(rand.NewPCG(1, 2))
	var last [32]byte
	for i := range 40 {
		clk.Set(t0.Add(time.Duration(i) * time.Minute))
		body := make([]byte, 1<<10) // random: gzip does not shrink it
		for j := range body {
			body[j] = byte(rnd.Uint32())
		}
		c := copyOf(fmt.Sprintf("https://h%d.example/robots.txt", i), body, clk.Now())
		s.Keep(c, body)
		last = c.Sum
		testkit.Eventually(t, "copy written", func() bool { return s.Has(last) })
	}
	s.Close(time.Second) // the writer done: its last sweep too
	var onDisk int64
	filepath.WalkDir(filepath.Join(dir, "objects"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			info, _ := d.Info()
			onDisk += info.Size()
		}
		return nil
	})
	if onDisk > max || s.Bytes() > max {
		t.Errorf("objects of %d bytes on disk (Bytes() %d) after 40 KiB kept; want at most max_bytes %d", onDisk, s.Bytes(), max)
	}
	if !s.Has(last) {
		t.Error("the copy kept last was removed; want the ones named longest ago removed first")
	}
}

// TestRenewNoFollow: renewing a copy whose object was replaced by a
// symbolic link does not follow it: the file it points at, outside the
// store, keeps its time.
func TestRenewNoFollow(t *testing.T) {
	t.Parallel()
	clk := testkit.NewClock(t0)
	s := openStore(t, Options{Now: clk.Now})
	sum := keepAll(t, s, "linked")[0]
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("not the store's"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	os.Chtimes(outside, old, old)
	p := ObjectPath(s.Dir(), sum)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, p); err != nil {
		t.Skip(err)
	}
	clk.Set(t0.Add(2 * time.Hour))
	s.Named([]Copy{{Sum: sum}})
	keepAll(t, s, "after") // the writer has taken the renewal before this
	s.Close(time.Second)
	if info, err := os.Stat(outside); err != nil || !info.ModTime().Equal(old) {
		t.Errorf("the file a link in the store points at: mtime %v, %v; want %v, untouched", info.ModTime(), err, old)
	}
}
