package audit

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/robotsgate/robotsgate/proxy/identity"
)

// benchWrite writes one record per iteration to a Log on w, chained or
// not.
func benchWrite(b *testing.B, chained bool) {
	c := newClock()
	l, err := OpenWith("", Options{Stdout: io.Discard, Now: c.now})
	if err != nil {
		b.Fatal(err)
	}
	l.unchained = !chained
	r := testRecord(c, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		l.Write(r)
	}
}

// BenchmarkWrite is Log.Write of a realistic record (some 560 bytes) with
// the chain and without it (the Log as it was before), to io.Discard so
// that the cost measured is the Log's, not the disk's; chained reports
// its ns/op over unchained's (run first, in the same process).
func BenchmarkWrite(b *testing.B) {
	var base float64 // unchained's ns/op, of its last run
	b.Run("unchained", func(b *testing.B) {
		benchWrite(b, false)
		base = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("chained", func(b *testing.B) {
		benchWrite(b, true)
		if base > 0 {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/base, "x-unchained")
		}
	})
}

// BenchmarkVerify verifies a log of a million lines (realistic records of
// some 560 bytes, a checkpoint every 10,000 lines) and reports lines/s.
func BenchmarkVerify(b *testing.B) {
	const n, every = 1_000_000, 10_000
	path := filepath.Join(b.TempDir(), "audit.log")
	c, key := newClock(), testKey(1)
	l := openTest(b, path, key, c)
	r := testRecord(c, 1)
	for i := range n - n/every - 1 {
		l.Write(r)
		if (i+1)%(every-1) == 0 {
			l.mu.Lock()
			l.checkpoint(EventInterval, true)
			l.mu.Unlock()
		}
	}
	l.Close()
	info, _ := os.Stat(path)
	b.SetBytes(info.Size())
	b.ReportAllocs()
	b.ResetTimer()
	var lines int
	for b.Loop() {
		rep, err := Verify([]string{path}, VerifyOptions{Keys: []*identity.Key{key}})
		if err != nil || !rep.Intact() {
			b.Fatalf("Verify: %v\n%s", err, findings(rep))
		}
		lines = rep.Lines
	}
	b.ReportMetric(float64(lines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}
