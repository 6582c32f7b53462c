package robots

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// benchPaths are request paths of the kinds scrapers send to the sites the
// benchmark file comes from: pages, searches with queries, deep links.
var benchPaths = []string{
	"/",
	"/en-us/store/b/home",
	"/en-us/p/surface-pro/8n17j0m5zzqs?activetab=pivot:overviewtab",
	"/search?q=robots&sort=date",
	"/en-us/download/details.aspx?id=12345",
	"/feed/rss",
	"/wall-123_456?reply=7",
	"/someone/comments",
	"/catalog?action=catalogsearch&catalog_mode=list&page=2",
	"/images/logo.png",
	"/about/careers",
	"/pin/12345/",
	"/articles/SB123",
	"/en-us/help/4028685/windows-10",
	"/topic/Go-programming-language/questions",
	"/music/artist/wal/",
	"/calls/123",
	"/index.html",
	"/some/deep/path/to/page.html?utm_source=x&m=1",
	"/en-gb/p/xbox/cfq7ttc0k5dj?ActivityUID=77",
}

func readBench(b *testing.B, name string) []byte {
	b.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkTest is one decision on a realistic 4.5 KB file: 22 named groups
// and a "*" group of 100 wildcard rules, for a token that gets the "*" group
// ("hot": parsed once, its matchers built as decisions need them), and the
// same decisions in the same run by the baseline, the naive transliteration
// of Google's reference used as the tests' oracle ("reference": like the
// reference and grobotstxt, it reads the file for every decision).
func BenchmarkTest(b *testing.B) {
	body := readBench(b, "bench/realistic-5k.txt")
	b.Run("hot", func(b *testing.B) {
		g := Parse(body).Group("Scrapy")
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			g.Test(benchPaths[i%len(benchPaths)])
			i++
		}
	})
	b.Run("reference", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			refAllowed(string(body), "Scrapy", "http://example.com"+benchPaths[i%len(benchPaths)])
			i++
		}
	})
}

// BenchmarkGroupTest is what the proxy does per request: select the group
// for the token, then decide.
func BenchmarkGroupTest(b *testing.B) {
	r := Parse(readBench(b, "bench/realistic-5k.txt"))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.Group("python-requests").Test(benchPaths[i%len(benchPaths)])
		i++
	}
}

// BenchmarkTestReal decides on real files with many groups and wildcards.
func BenchmarkTestReal(b *testing.B) {
	for _, name := range []string{"wsj.com.txt", "quora.com.txt", "eventbrite.com.txt", "github.com-2019.txt"} {
		b.Run(name, func(b *testing.B) {
			g := Parse(readBench(b, "corpus/"+name)).Group("Scrapy")
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				g.Test(benchPaths[i%len(benchPaths)])
				i++
			}
		})
	}
}

// BenchmarkParse parses files of several sizes ("robotsgate"), and reads
// them in the same run as the baseline does ("reference": the naive
// transliteration of Google's reference, whose decision on a path no rule
// names is a read of every line).
func BenchmarkParse(b *testing.B) {
	small := readBench(b, "bench/realistic-5k.txt")
	big := bytes.Repeat(small, 512<<10/len(small)) // ~500 KiB: 112 copies, 2 500 groups
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"realistic-5k", small},
		{"repeated-500k", big},
		{"paytm.com-616k", readBench(b, "corpus/paytm.com.txt")},
		{"atlassian.com-302k", readBench(b, "corpus/atlassian.com.txt")},
	} {
		b.Run(c.name+"/robotsgate", func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				Parse(c.body)
			}
		})
		b.Run(c.name+"/reference", func(b *testing.B) {
			body := string(c.body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				refAllowed(body, "Scrapy", "http://example.com/no-rule-names-this")
			}
		})
	}
}

// BenchmarkParseCorpus parses every real file in testdata/corpus once per op.
func BenchmarkParseCorpus(b *testing.B) {
	files, err := filepath.Glob("testdata/corpus/*.txt")
	if err != nil || len(files) == 0 {
		b.Fatal("no corpus", err)
	}
	var bodies [][]byte
	var n int64
	for _, f := range files {
		body := readBench(b, f[len("testdata/"):])
		bodies = append(bodies, body)
		n += int64(len(body))
	}
	b.SetBytes(n)
	b.ReportAllocs()
	for b.Loop() {
		for _, body := range bodies {
			Parse(body)
		}
	}
}

// BenchmarkParseAndTest is the whole cost of a file's first decision: parse,
// select the group, compile its index, decide.
func BenchmarkParseAndTest(b *testing.B) {
	body := readBench(b, "bench/realistic-5k.txt")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		Parse(body).Group("Scrapy").Test("/search?q=robots&sort=date")
	}
}

// BenchmarkTestVsReference decides the same paths on the same file with
// the indexed matcher (parsed once) and with the naive transliteration of
// Google's reference used as the tests' oracle (which, like grobotstxt,
// parses the file for every decision), in one run, and reports the ratio.
func BenchmarkTestVsReference(b *testing.B) {
	body := readBench(b, "bench/realistic-5k.txt")
	g := Parse(body).Group("Scrapy")
	var tOurs, tRef time.Duration
	const perRound = 200
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		for k := range perRound {
			g.Test(benchPaths[(i+k)%len(benchPaths)])
		}
		tOurs += time.Since(start)
		start = time.Now()
		for k := range perRound / 20 { // the reference is slow: fewer, scaled below
			refAllowed(string(body), "Scrapy", "http://example.com"+benchPaths[(i+k)%len(benchPaths)])
		}
		tRef += time.Since(start) * 20
		i++
	}
	n := float64(b.N * perRound)
	b.ReportMetric(float64(tOurs.Nanoseconds())/n, "ns/decision")
	b.ReportMetric(float64(tRef.Nanoseconds())/n, "reference-ns/decision")
	b.ReportMetric(float64(tRef)/float64(tOurs), "speedup")
}

// BenchmarkScanVsMatcher decides paths on single blocks of the corpus's
// files, grouped by their number of rules, by scan and by a compiled
// matcher: what scanMax is chosen from.
func BenchmarkScanVsMatcher(b *testing.B) {
	files, err := filepath.Glob("testdata/corpus/*.txt")
	if err != nil || len(files) == 0 {
		b.Fatal("no corpus", err)
	}
	type blockPaths struct {
		g     Group
		paths []string
	}
	sizes := []int32{2, 4, 8, 12, 16, 32} // up to each, above the one before
	bySize := make([][]blockPaths, len(sizes))
	for _, f := range files {
		r := Parse(readBench(b, f[len("testdata/"):]), WithNormalization())
		// Room for every block's matcher, whether or not one needs it.
		r.lazy.CompareAndSwap(nil, newLazyMatchers(len(r.blocks)))
		for i := range r.blocks {
			n := r.blocks[i].last - r.blocks[i].first
			if k, _ := slices.BinarySearch(sizes, n); n > 0 && k < len(sizes) {
				bySize[k] = append(bySize[k], blockPaths{Group{r: r, blocks: []int32{int32(i)}}, append(corpusPaths(r), benchPaths...)})
			}
		}
	}
	for k, n := range sizes {
		for _, m := range []struct {
			name  string
			limit int32
		}{{"matcher", -1}, {"scan", math.MaxInt32}} {
			bps := bySize[k]
			for _, bp := range bps { // compile the matchers first
				bp.g.test("/", m.limit, nil)
			}
			b.Run(fmt.Sprintf("rules-%d/%s", n, m.name), func(b *testing.B) {
				b.ReportAllocs()
				i, j := 0, 0
				for b.Loop() {
					bp := &bps[i%len(bps)]
					bp.g.test(bp.paths[j%len(bp.paths)], m.limit, nil)
					if j++; j%7 == 0 {
						i++
					}
				}
			})
		}
	}
}

// BenchmarkCold is a cold file's decision against a hot one's, in one run:
// the median file of the corpus (bbc.co.uk, 2,643 bytes), normalised as
// the proxy parses, read back from its binary form and decided once
// (decode, group, test by scan), beside the same decision on the file kept
// hot (matchers built), and beside parsing the file.
func BenchmarkCold(b *testing.B) {
	body := readBench(b, "corpus/bbc.co.uk.txt")
	r := Parse(body, WithNormalization())
	bin, err := r.AppendBinary(nil)
	if err != nil {
		b.Fatal(err)
	}
	const path = "/iplayer/episodes/m001?x=1"
	r.Group("python-requests").Test(path) // the hot file's matchers built
	b.Run("decode+decide", func(b *testing.B) {
		b.SetBytes(int64(len(bin)))
		b.ReportAllocs()
		for b.Loop() {
			c, err := DecodeBinary(bin)
			if err != nil {
				b.Fatal(err)
			}
			c.Group("python-requests").Test(path)
		}
	})
	b.Run("decide-hot", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.Group("python-requests").Test(path)
		}
	})
	b.Run("parse", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			Parse(body, WithNormalization())
		}
	})
}
