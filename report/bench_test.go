package report

import (
	"runtime"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/jsonscan"
)

// BenchmarkReport10M streams a synthetic audit log of ten million lines
// (about 5 GB, generated as it is read, never held) across 50,000
// origins, and reports the heap in use afterwards: bounded by the table
// caps, not by the input.
func BenchmarkReport10M(b *testing.B) {
	g := gen{lines: 10_000_000, origins: 50_000, step: 250 * time.Millisecond}
	b.ReportAllocs()
	var s *Summary
	var n int64
	for b.Loop() {
		s = &Summary{}
		r := g.reader()
		if err := s.Read("synthetic", r); err != nil {
			b.Fatal(err)
		}
		n = r.n
	}
	b.SetBytes(n)
	if s.Total() != int64(g.lines) {
		b.Fatalf("Total() = %d; want %d", s.Total(), g.lines)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "MB-heap-inuse")
	b.ReportMetric(float64(g.lines), "lines/op")
	runtime.KeepAlive(s)
}

// BenchmarkParseLine decodes one proxy-like audit line.
func BenchmarkParseLine(b *testing.B) {
	line := gen{lines: 1, origins: 1, step: time.Second}.appendLine(nil, 4)
	var sc jsonscan.Scanner
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseLine(&sc, line); err != nil {
			b.Fatal(err)
		}
	}
}
