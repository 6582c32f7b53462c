package robots

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/golden")

// corpusPaths derives paths to test from a file's own patterns, so that
// the rules of real files are actually exercised: each pattern with "*"
// filled in, "$" dropped, and variants just past and just short of it.
func corpusPaths(r *Robots) []string {
	paths := []string{"/", "/index.html", "/search?q=x", "/a/b/c", "/robots.txt", "/%7Euser/", "/caf%C3%A9"}
	step := len(r.rules)/40 + 1 // about 40 rules keeps the naive reference fast
	for i := 0; i < len(r.rules); i += step {
		p := strings.TrimSuffix(strings.ReplaceAll(r.pattern(int32(i)), "*", "x"), "$")
		if !strings.HasPrefix(p, "/") {
			p = "/" + p
		}
		paths = append(paths, p, p+"/more?x=1", p[:len(p)/2+1])
	}
	return paths
}

// TestCorpus parses every real file of testdata/corpus and compares the
// decisions for several crawlers with the transliterated reference.
func TestCorpus(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/corpus/*.txt")
	if err != nil || len(files) < 200 {
		t.Fatalf("corpus: %d files, %v", len(files), err)
	}
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			t.Parallel() // the files are independent: the test takes every CPU
			corpusFile(t, name)
		})
	}
}

// corpusFile is TestCorpus for one file.
func corpusFile(t *testing.T, name string) {
	body, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	r := Parse(body)
	if r.Size() != len(body) {
		t.Errorf("%s: Size() = %d; want %d", name, r.Size(), len(body))
	}
	// Scan and matchers agree on every block, as read and normalised.
	for _, rr := range []*Robots{r, Parse(body, WithNormalization())} {
		for _, tok := range []string{"Googlebot", "*", "GPTBot", "bingbot", "python-requests"} {
			g := rr.Group(tok)
			for _, p := range corpusPaths(rr) {
				v := g.Test(p)
				for _, limit := range []int32{-1, math.MaxInt32} {
					if got := g.test(p, limit, nil); got != v {
						t.Errorf("%s: Group(%q).test(%q, %d, nil) = %+v; want %+v", name, tok, p, limit, got, v)
					}
				}
			}
		}
	}
	if len(body) > 32<<10 {
		return // the naive reference re-parses per path: too slow here
	}
	for _, tok := range []string{"Googlebot", "*", "GPTBot", "bingbot", "python-requests"} {
		for _, p := range corpusPaths(r) {
			v := r.Group(tok).Test(p)
			allowed, line := refAllowed(string(body), tok, "http://example.com"+p)
			if strings.IndexByte(p, 0) < 0 && (v.Allowed != allowed || v.Line != line) {
				t.Errorf("%s: Group(%q).Test(%q) = %v line %d; want %v line %d", name, tok, p, v.Allowed, v.Line, allowed, line)
			}
		}
	}
}

// TestGolden summarises a few real files (the large, the malformed, the
// odd) and compares with testdata/golden; run with -update to rewrite.
func TestGolden(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"126.com.txt",       // an HTML login page served as robots.txt
		"17track.net.txt",   // BOM, no final newline
		"wsj.com.txt",       // 21 groups, many wildcards
		"github.com.txt",    // wildcard-heavy
		"atlassian.com.txt", // 300 KB
		"1stdibs-robots-txt.txt",
	} {
		body, err := os.ReadFile(filepath.Join("testdata/corpus", name))
		if err != nil {
			t.Fatal(err)
		}
		got := summary(Parse(body))
		golden := filepath.Join("testdata/golden", strings.TrimSuffix(name, ".txt")+".golden")
		if *update {
			if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test ./robots -run TestGolden -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: summary differs from %s; got:\n%s", name, golden, got)
		}
	}
}

func summary(r *Robots) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "size %d, lines %d, rules %d, sitemaps %d\n", r.Size(), r.lines, len(r.rules), len(r.Sitemaps()))
	groups := r.Groups()
	for i, g := range groups {
		if i == 12 {
			fmt.Fprintf(&b, "... %d more groups\n", len(groups)-i)
			break
		}
		fmt.Fprintf(&b, "group line %d: agents %q, %d rules, crawl-delay %g\n", g.Line, g.Agents, g.Rules, g.CrawlDelay)
	}
	for _, tok := range []string{"Googlebot", "GPTBot", "python-requests"} {
		g := r.Group(tok)
		fmt.Fprintf(&b, "token %s: specific %v, %d rules\n", tok, g.Specific(), g.Rules())
		for _, p := range []string{"/", "/search?q=1", "/login", "/api/v1/x", "/wp-admin/", "/index.html", "/a.pdf"} {
			v := g.Test(p)
			fmt.Fprintf(&b, "  %-14s allowed %-5v line %-5d %s\n", p, v.Allowed, v.Line, v.Rule())
		}
	}
	return b.Bytes()
}
