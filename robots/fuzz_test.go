package robots

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/robotsgate/robotsgate/usage"
)

// randomRobots builds an adversarial robots.txt from the pieces the
// reference treats specially: prefix-matched and misspelled keys, missing
// colons, comments, CR/LF/CRLF, BOM bytes, "*" and "$", escapes, index.htm,
// agents with versions and odd bytes.
func randomRobots(rng *rand.Rand) string {
	keys := []string{"user-agent", "User-Agent", "useragent", "user agent", "user-agents", "allow", "Allow",
		"disallow", "DISALLOW", "disalow", "dissallow", "disallaw", "diasllow", "Disallowed", "sitemap",
		"crawl-delay", "foo", "", "allows", "Content-Usage", "content-signal", "content-usages"}
	agents := []string{"*", "* foo", "*Bot", "FooBot", "foobot", "FooBot/1.0", "Foo Bot", "BarBot", "MJ12bot",
		"360Spider", "", "Foo_Bar", "foo-bot", "ツ", "*\tx"}
	pieces := []string{"/", "a", "b", "/a", "/b", "*", "$", "%2f", "%2F", "%aa", "%C3%A9", "é", "?", ";", "=",
		"index.htm", "index.html", "/index.htm", ".", "..", "x$y", "#c", " ", "\t", "\x00",
		"train-ai=n", "ai-train=no", ", search=y", "=", ","}
	ends := []string{"\n", "\r\n", "\r", "\n\n", "\r\r\n", "\n\r"}
	var b strings.Builder
	if rng.IntN(10) == 0 {
		b.WriteString("\xEF\xBB\xBF"[:rng.IntN(4)])
	}
	for range rng.IntN(12) {
		k := keys[rng.IntN(len(keys))]
		var v string
		if strings.HasPrefix(strings.ToLower(k), "user") {
			v = agents[rng.IntN(len(agents))]
		} else {
			for range rng.IntN(5) {
				v += pieces[rng.IntN(len(pieces))]
			}
		}
		sep := []string{": ", ":", " ", "\t", " : ", ":\t"}[rng.IntN(6)]
		if rng.IntN(8) == 0 {
			b.WriteString(" ")
		}
		b.WriteString(k + sep + v)
		if rng.IntN(10) == 0 {
			b.WriteString(" # comment")
		}
		b.WriteString(ends[rng.IntN(len(ends))])
	}
	return b.String()
}

func randomURL(rng *rand.Rand) string {
	pieces := []string{"/", "a", "b", "/a", "/b", "*", "$", "%2f", "%2F", "%aa", "%C3%A9", "é", "?", ";", "=",
		"index.htm", "index.html", ".", "#", "x"}
	u := []string{"http://example.com", "https://h:8080", "", "//h", "example.com", "h?", "ftp://x"}[rng.IntN(7)]
	for range rng.IntN(6) {
		u += pieces[rng.IntN(len(pieces))]
	}
	return u
}

// TestDifferentialRandom compares Parse/Group/Test with the transliterated
// reference on generated adversarial cases (a fixed number, a fixed seed).
func TestDifferentialRandom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	tokens := []string{"FooBot", "foobot", "BarBot", "", "*", "MJ", "Foo Bot", "foo-bot", "Foo_Bar", "x"}
	for i := range 20000 {
		body := randomRobots(rng)
		r := Parse([]byte(body))
		for range 4 {
			tok, u := tokens[rng.IntN(len(tokens))], randomURL(rng)
			v := r.TestURL(tok, u)
			allowed, line := refAllowed(body, tok, u)
			if v.Allowed != allowed || v.Line != line {
				t.Fatalf("case %d: TestURL(%q, %q) = %v line %d; want %v line %d\nrobots.txt: %q", i, tok, u, v.Allowed, v.Line, allowed, line, body)
			}
			if m := r.testURL(tok, u, -1); m != v {
				t.Fatalf("case %d: TestURL(%q, %q) by matchers = %+v; by scan %+v\nrobots.txt: %q", i, tok, u, m, v, body)
			}
			cold, hot := tiers(t, r)
			if c, h := cold.TestURL(tok, u), hot.TestURL(tok, u); c.String() != v.String() || h.String() != v.String() {
				t.Fatalf("case %d: TestURL(%q, %q) cold = %+v, hot = %+v; want %+v\nrobots.txt: %q", i, tok, u, c, h, v, body)
			}
		}
	}
}

func addSeeds(f *testing.F) {
	f.Helper()
	for _, c := range conformanceCases(f) {
		f.Add(c.body(f), c.Agent, c.URL)
	}
	for _, tt := range usageTests {
		f.Add([]byte(tt.robots), tt.token, "https://example.com"+tt.path)
	}
	for _, c := range readJSONL[attachCase](f, "aipref-attach-05.jsonl") {
		f.Add([]byte(c.Robots), c.Agent, "https://example.com"+c.Path)
	}
	files, _ := filepath.Glob("testdata/corpus/*.txt")
	for i, name := range files {
		if i%8 != 0 {
			continue
		}
		b, err := os.ReadFile(name)
		if err == nil && len(b) < 64<<10 {
			f.Add(b, "Googlebot", "https://example.com/search?q=1")
		}
	}
}

// FuzzMatch compares the indexed matcher with the naive transliteration of
// the reference, on the decision and on the matching line.
func FuzzMatch(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, agent, url string) {
		if len(body) > 4096 || len(url) > 256 {
			return // the naive reference is quadratic
		}
		r := Parse(body)
		v := r.TestURL(agent, url)
		allowed, line := refAllowed(string(body), agent, url)
		if v.Allowed != allowed || v.Line != line {
			t.Fatalf("TestURL(%q, %q) = %v line %d; want %v line %d\nrobots.txt: %q", agent, url, v.Allowed, v.Line, allowed, line, body)
		}
		// Small blocks are scanned: their matchers must agree.
		if m := r.testURL(agent, url, -1); m != v {
			t.Fatalf("TestURL(%q, %q) by matchers = %+v; by scan %+v\nrobots.txt: %q", agent, url, m, v, body)
		}
		// So must both tiers of a cache.
		cold, hot := tiers(t, r)
		if c, h := cold.TestURL(agent, url), hot.TestURL(agent, url); c.String() != v.String() || h.String() != v.String() {
			t.Fatalf("TestURL(%q, %q) cold = %+v, hot = %+v; want %+v\nrobots.txt: %q", agent, url, c, h, v, body)
		}
	})
}

// FuzzParse checks that any body parses without panic, and that what Parse
// reports is consistent: rule texts name their directive, lines are in range.
func FuzzParse(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, agent, url string) {
		r := Parse(body)
		if r.Size() != len(body) {
			t.Fatalf("Size() = %d; want %d", r.Size(), len(body))
		}
		for _, tok := range []string{agent, "*", ExtractToken(agent)} {
			g := r.Group(tok)
			v := g.Test(PathOf(url))
			if v.Line < 0 || v.Line > int(r.lines) {
				t.Fatalf("Test(%q).Line = %d; file has %d lines", url, v.Line, r.lines)
			}
			if v.Line > 0 && !strings.HasPrefix(v.Rule(), "allow:") && !strings.HasPrefix(v.Rule(), "disallow:") {
				t.Fatalf("Test(%q).Rule = %q; want an allow or disallow rule", url, v.Rule())
			}
			if !v.Allowed && v.Line == 0 {
				t.Fatalf("Test(%q) disallowed with no line", url)
			}
		}
		_ = Parse(body, WithNormalization()).TestURL(agent, url)
		checkUsage(t, r, agent, PathOf(url))
	})
}

// checkUsage checks that every usage verdict names a statement of the file
// on a line it has, and that the file's statements agree with the groups'.
func checkUsage(t *testing.T, r *Robots, agent, path string) {
	t.Helper()
	u := r.Group(agent).Usage(path)
	for p, v := range u {
		if v.State == usage.Unstated {
			if v != (usage.Verdict{}) {
				t.Fatalf("Usage(%q)[%s] = %+v; want the zero verdict", path, usage.Purpose(p), v)
			}
			continue
		}
		if v.Source != usage.FromRobotsTxt || v.Line < 1 || v.Line > int(r.lines) || !strings.HasPrefix(v.Statement, "content-usage: ") && !strings.HasPrefix(v.Statement, "content-signal: ") {
			t.Fatalf("Usage(%q)[%s] = %+v; want a statement on one of the file's %d lines", path, usage.Purpose(p), v, r.lines)
		}
	}
	// A purpose refused on every path is refused on this one.
	every := r.Group(agent).UsageEverywhere()
	for p, v := range every {
		if v.State == usage.Refused && u[p].State != usage.Refused {
			t.Fatalf("UsageEverywhere()[%s] = %+v, but Usage(%q) = %+v", usage.Purpose(p), v, path, u[p])
		}
	}
	all := r.Statements()
	for _, s := range r.Group(agent).Statements() {
		found := false
		for _, a := range all {
			found = found || a == s
		}
		if !found || s.Group >= len(r.Groups()) {
			t.Fatalf("Group(%q).Statements() holds %+v, which Statements() lacks", agent, s)
		}
	}
}
