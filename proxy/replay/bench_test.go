package replay

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/evidence"
)

// lineReader reads lines over and over until n lines are read: a log of
// any length without holding it.
type lineReader struct {
	lines [][]byte
	n, i  int
	cur   []byte
}

func (r *lineReader) Read(p []byte) (int, error) {
	if len(r.cur) == 0 {
		if r.i == r.n {
			return 0, io.EOF
		}
		r.cur = r.lines[r.i%len(r.lines)]
		r.i++
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// BenchmarkReplay replays a generated log of a million records over the
// real robots.txt files of robots/testdata/corpus (a copy each, a few
// hundred origins), ten paths each: records/s is replay's throughput,
// parsing, the copies' cache and deciding included.
func BenchmarkReplay(b *testing.B) {
	files, err := filepath.Glob("../../robots/testdata/corpus/*.txt")
	if err != nil || len(files) == 0 {
		b.Fatalf("no corpus: %v", err)
	}
	copies := map[evidence.Copy][]byte{}
	var order []evidence.Copy
	for i, name := range files {
		body, err := os.ReadFile(name)
		if err != nil {
			b.Fatal(err)
		}
		c := evidence.Copy{URL: fmt.Sprintf("https://o%d.example/robots.txt", i), Sum: evidence.SumOf(body), Fetched: t0, Status: 200}
		copies[c] = body
		order = append(order, c)
	}
	f := newFixture(b, nil, copies)
	paths := []string{"/", "/search?q=x", "/admin/", "/api/v1/items", "/cart", "/login", "/images/a.png", "/p/123", "/wp-admin/x", "/sitemap.xml"}
	uas := []string{"Mozilla/5.0 (compatible; GPTBot/1.1)", "CCBot/2.0", "FooBot/1.0"}
	var lines [][]byte
	for i, c := range order {
		for j, p := range paths {
			rec := f.record(b, fmt.Sprintf("https://o%d.example%s", i, p), uas[(i+j)%len(uas)], c, t0.Add(time.Hour))
			lines = append(lines, lines1(b, rec))
		}
	}
	const n = 1_000_000
	var s Summary
	b.ReportAllocs()
	for b.Loop() {
		s = Summary{}
		d, err := New(f.d.cfg, f.dir) // a cold cache each time
		if err != nil {
			b.Fatal(err)
		}
		if err := (&Replayer{D: d}).Replay(b.Context(), &lineReader{lines: lines, n: n}, "gen", &s); err != nil {
			b.Fatal(err)
		}
	}
	if s.Reproduced != n {
		b.Fatalf("Summary = %+v; want all %d reproduced", s, n)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func lines1(b *testing.B, rec any) []byte {
	return bytes.Clone(lines(b, rec))
}
