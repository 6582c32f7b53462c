package evidence

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkCorpusBytes keeps every real robots.txt of robots/testdata/corpus
// (one per origin) and reports the store's bytes per origin on disk (the
// compressed objects, and with the index) and the ratio to the raw bodies.
func BenchmarkCorpusBytes(b *testing.B) {
	files, err := filepath.Glob("../robots/testdata/corpus/*.txt")
	if err != nil || len(files) == 0 {
		b.Fatalf("no corpus: %v", err)
	}
	var bodies [][]byte
	var raw int64
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		bodies = append(bodies, body)
		raw += int64(len(body))
	}
	b.ReportAllocs()
	var objects, index int64
	for b.Loop() {
		dir := filepath.Join(b.TempDir(), "evidence")
		s, err := Open(Options{Dir: dir, NoSweeper: true, QueueLen: len(bodies) + 1, QueueBytes: raw + 1})
		if err != nil {
			b.Fatal(err)
		}
		for i, body := range bodies {
			name := strings.TrimSuffix(filepath.Base(files[i]), ".txt")
			s.Keep(copyOf("https://"+name+"/robots.txt", body, t0), body)
		}
		if err := s.Close(time.Minute); err != nil {
			b.Fatal(err)
		}
		if s.Dropped() > 0 {
			b.Fatalf("%d copies dropped", s.Dropped())
		}
		objects = s.Bytes()
		info, err := os.Stat(filepath.Join(dir, indexName))
		if err != nil {
			b.Fatal(err)
		}
		index = info.Size()
	}
	n := float64(len(bodies))
	b.ReportMetric(float64(raw)/n, "raw-B/origin")
	b.ReportMetric(float64(objects)/n, "stored-B/origin")
	b.ReportMetric(float64(objects+index)/n, "with-index-B/origin")
	b.ReportMetric(float64(raw)/float64(objects), "ratio")
}
