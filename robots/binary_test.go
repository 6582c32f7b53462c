package robots

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// tiers returns r's cold and hot forms: r through AppendBinary and
// DecodeBinary, and the same decoded again and made Hot (Hot changes the
// file it is given).
func tiers(t testing.TB, r *Robots) (cold, hot *Robots) {
	t.Helper()
	b, err := r.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	cold, err = DecodeBinary(b)
	if err != nil {
		t.Fatalf("DecodeBinary(AppendBinary): %v", err)
	}
	if hot, err = DecodeBinary(b); err != nil {
		t.Fatalf("DecodeBinary(AppendBinary): %v", err)
	}
	if !cold.Cold() || hot.Hot() != hot || hot.Cold() {
		t.Fatalf("DecodeBinary's file is cold %v, made Hot %v; want true, false", cold.Cold(), hot.Cold())
	}
	return cold, hot
}

// fileContent is what a file holds, apart from how it holds it
// (matchers, spare room, tier): what sameFile compares.
type fileContent struct {
	blocks                 []block
	rules                  []rule
	text                   string
	spans                  []span
	keys                   []agentKey
	groups                 []int32
	size, nGlobal, nAgents int32
	lines                  int32
	norm                   bool
	delays                 []float64
	normal                 []normalDisplay
	usage                  []usageStmt
	licenses               []span
}

// sameFile reports how a and b, two forms of one file, differ in what
// they hold (not in how they hold it: matchers, spare room, tier).
func sameFile(a, b *Robots) string {
	content := func(r *Robots) fileContent {
		c := fileContent{orNil(r.blocks), orNil(r.rules), r.text, orNil(r.spans), orNil(r.keys), orNil(r.groups),
			r.size, r.nGlobal, r.nAgents, r.lines, r.norm, nil, nil, nil, nil}
		if r.x != nil {
			c.delays, c.normal, c.usage, c.licenses = orNil(r.x.delays), orNil(r.x.normal), orNil(r.x.usage), orNil(r.x.licenses)
		}
		return c
	}
	if x, y := content(a), content(b); !reflect.DeepEqual(x, y) {
		return fmt.Sprintf("%+v\nwant %+v", y, x)
	}
	return ""
}

// orNil is s, or nil when it is empty: how much room an empty slice was
// given is not part of a file.
func orNil[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	return s
}

// sameDecisions compares every answer a and b give for tokens and paths:
// verdicts, usage, crawl delays, lines, the group and file summaries.
func sameDecisions(t *testing.T, name string, a, b *Robots, tokens, paths []string) {
	t.Helper()
	if !reflect.DeepEqual(a.Groups(), b.Groups()) || !reflect.DeepEqual(a.Sitemaps(), b.Sitemaps()) ||
		!reflect.DeepEqual(a.Statements(), b.Statements()) || a.Size() != b.Size() {
		t.Errorf("%s: file summaries differ", name)
	}
	for _, tok := range tokens {
		ga, gb := a.Group(tok), b.Group(tok)
		da, oka := ga.CrawlDelay()
		db, okb := gb.CrawlDelay()
		if da != db || oka != okb || !reflect.DeepEqual(ga.Lines(), gb.Lines()) || ga.DisallowsAll() != gb.DisallowsAll() ||
			ga.Rules() != gb.Rules() || ga.UsageEverywhere() != gb.UsageEverywhere() || !reflect.DeepEqual(ga.Statements(), gb.Statements()) {
			t.Errorf("%s: group %q differs", name, tok)
		}
		for _, p := range paths {
			if va, vb := ga.Test(p), gb.Test(p); va.String() != vb.String() {
				t.Errorf("%s: Group(%q).Test(%q) = %+v; want %+v", name, tok, p, vb, va)
			}
			if ua, ub := ga.Usage(p), gb.Usage(p); ua != ub {
				t.Errorf("%s: Group(%q).Usage(%q) = %+v; want %+v", name, tok, p, ub, ua)
			}
		}
	}
}

// TestBinaryTiers: every corpus file, parsed plain and normalised, comes
// back from its binary form holding what Parse made, and decides every
// path the same cold (scanning) and hot (matchers), as Parse's does. The
// binary form of the median file is logged, with its share of the file.
func TestBinaryTiers(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/corpus/*.txt")
	if err != nil || len(files) < 200 {
		t.Fatalf("corpus: %d files, %v", len(files), err)
	}
	tokens := []string{"Googlebot", "*", "GPTBot", "bingbot", "python-requests", "CCBot"}
	for _, name := range files {
		body, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, opts := range [][]Option{nil, {WithNormalization()}} {
			r := Parse(body, opts...)
			cold, hot := tiers(t, r)
			if d := sameFile(r, cold); d != "" {
				t.Errorf("%s (%d options): decoded %s", name, len(opts), d)
				continue
			}
			paths := corpusPaths(r)
			sameDecisions(t, filepath.Base(name)+" cold", r, cold, tokens, paths)
			sameDecisions(t, filepath.Base(name)+" hot", r, hot, tokens, paths)
			if strings.HasSuffix(name, "bbc.co.uk.txt") && len(opts) == 1 {
				b, _ := r.AppendBinary(nil)
				t.Logf("bbc.co.uk: %d bytes of file, %d parsed (MemSize, matchers built), %d in binary form", len(body), r.MemSize(), len(b))
			}
		}
	}
}

// TestDecodeBinaryRefuses: data that is not the binary form is refused
// with ErrBinary, whatever part of it is wrong.
func TestDecodeBinaryRefuses(t *testing.T) {
	t.Parallel()
	good, err := Parse([]byte("User-agent: a\nCrawl-delay: 2\nDisallow: /x\nAllow: /é\nContent-Usage: train-ai=n\nSitemap: s\n"),
		WithNormalization()).AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeBinary(good); err != nil {
		t.Fatalf("DecodeBinary(good) = %v", err)
	}
	for i := range good { // every truncation, and every byte changed
		cases := [][]byte{good[:i]}
		for _, v := range []byte{0, 0x7f, 0x80, 0xff} {
			b := append([]byte(nil), good...)
			b[i] = v
			cases = append(cases, b)
		}
		for _, b := range cases {
			r, err := DecodeBinary(b)
			if err != nil {
				if !strings.Contains(err.Error(), ErrBinary.Error()) {
					t.Fatalf("DecodeBinary: %v; want ErrBinary", err)
				}
				continue
			}
			exercise(r) // accepted: it must hold together
		}
	}
	if _, err := DecodeBinary(append(good, 0)); err == nil {
		t.Error("trailing byte accepted")
	}
}

// exercise asks r everything a proxy asks of a file, as it is and made
// Hot.
func exercise(r *Robots) {
	for _, hot := range []bool{false, true} {
		rr := r
		if hot {
			rr = r.Hot()
		}
		rr.Groups()
		rr.Sitemaps()
		rr.Statements()
		rr.MemSize()
		tokens := []string{"*", "a", "Googlebot", ""}
		for _, g := range rr.Groups() {
			tokens = append(tokens, g.Agents...)
		}
		for _, tok := range tokens {
			g := rr.Group(tok)
			g.CrawlDelay()
			g.Lines()
			g.DisallowsAll()
			g.Rules()
			g.Statements()
			g.UsageEverywhere()
			for _, p := range []string{"/", "/x", "/%C3%A9", "/index.htm", "/a/b?c", ""} {
				g.Test(p)
				g.Usage(p)
				g.TestWithin(p, NewBudget(1000))
			}
		}
	}
}

// FuzzDecodeBinary feeds any bytes to DecodeBinary: refused, or a file
// that answers every question without panic and encodes back to itself.
func FuzzDecodeBinary(f *testing.F) {
	files, _ := filepath.Glob("testdata/corpus/*.txt")
	for i, name := range files {
		if i%16 != 0 {
			continue
		}
		body, err := os.ReadFile(name)
		if err != nil || len(body) > 32<<10 {
			continue
		}
		b, err := Parse(body, WithNormalization()).AppendBinary(nil)
		if err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeBinary(data)
		if err != nil {
			return
		}
		exercise(r)
		again, err := r.AppendBinary(nil)
		if err != nil {
			t.Fatalf("AppendBinary of a decoded file: %v", err)
		}
		r2, err := DecodeBinary(again)
		if err != nil {
			t.Fatalf("DecodeBinary of its own encoding: %v", err)
		}
		if d := sameFile(r, r2); d != "" {
			t.Fatalf("re-encoded: %s", d)
		}
	})
}

// TestHotWhileDeciding makes a cold file Hot while other goroutines decide
// on it: every answer is the parsed file's, before, during and after (and
// -race sees no race between Hot and the decisions).
func TestHotWhileDeciding(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("testdata/bench/realistic-5k.txt")
	if err != nil {
		t.Fatal(err)
	}
	parsed := Parse(body)
	b, err := parsed.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		r, err := DecodeBinary(b)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan string, 4)
		for w := range 4 {
			go func() {
				for i := range 200 {
					p := benchPaths[(i+w)%len(benchPaths)]
					if got, want := r.Group("Scrapy").Test(p), parsed.Group("Scrapy").Test(p); got.Allowed != want.Allowed || got.Line != want.Line {
						done <- fmt.Sprintf("Test(%q) = %v; want %v", p, got, want)
						return
					}
				}
				done <- ""
			}()
		}
		r.Hot()
		for range 4 {
			if msg := <-done; msg != "" {
				t.Fatal(msg)
			}
		}
		if r.Cold() || r.lazy.Load() == nil {
			t.Fatalf("after Hot: cold %v, room for matchers %v; want false, true", r.Cold(), r.lazy.Load() != nil)
		}
	}
}
