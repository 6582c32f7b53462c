package robots

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
		if v.State == Unstated {
			if v != (UsageVerdict{}) {
				t.Fatalf("Usage(%q)[%s] = %+v; want the zero verdict", path, Purpose(p), v)
			}
			continue
		}
		if v.Line < 1 || v.Line > int(r.lines) || !strings.HasPrefix(v.Statement, "content-usage: ") && !strings.HasPrefix(v.Statement, "content-signal: ") {
			t.Fatalf("Usage(%q)[%s] = %+v; want a statement on one of the file's %d lines", path, Purpose(p), v, r.lines)
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

// FuzzHeaderUsage reads response header values as usage preferences: no
// panic, statements named, and a value that parses still parses with
// spaces around it.
func FuzzHeaderUsage(f *testing.F) {
	for _, v := range []string{"train-ai=n", "train-ai=n, search=y", "ai-train=no, use=reference", "1", "a=(1 2);p=?1, b=:aGk=:",
		"x=\"s\\\"\", y=%\"%c3%a9\", z=@-12, w=1.5", "train-ai=n,", "A=b"} {
		f.Add("Content-Usage", v)
		f.Add("Content-Signal", v)
	}
	f.Add("TDM-Reservation", "1")
	f.Fuzz(func(t *testing.T, name, value string) {
		u := HeaderUsage(name, []string{value})
		for p, v := range u {
			if v.State != Unstated && (v.Line != 0 || !strings.HasSuffix(v.Statement, ": "+value)) {
				t.Fatalf("HeaderUsage(%q, %q)[%s] = %+v", name, value, Purpose(p), v)
			}
		}
		if parseDictionary(value, func(string, string) {}) && !parseDictionary("  "+value+"  ", func(string, string) {}) {
			t.Fatalf("parseDictionary(%q) parses, but not with spaces around it", value)
		}
	})
}

// FuzzLenient checks that Lenient, on any request target, gives
// a path that starts with "/" and that no server reads differently: no "//",
// "\", escaped "/", "\" or ";", ";" or dot segment in its path; and that its
// result is final (Lenient and Normalize leave it as it is).
func FuzzLenient(f *testing.F) {
	for _, tt := range lenientTests {
		f.Add(tt.in)
	}
	for _, tt := range normalizeTests {
		f.Add(tt.in)
	}
	for i, c := range conformanceCases(f) {
		if i%4 == 0 {
			f.Add(PathOf(c.URL))
		}
	}
	f.Fuzz(func(t *testing.T, in string) {
		n := in
		for r := range LenientReadings(n) {
			if !strings.HasPrefix(r, "/") || Normalize(r) != r {
				t.Fatalf("LenientReadings(%q) yields %q; want a path in Normalize's form", n, r)
			}
		}
		got := Lenient(n)
		if !strings.HasPrefix(got, "/") {
			t.Fatalf("Lenient(%q) = %q; want a leading \"/\"", n, got)
		}
		if again := Lenient(got); again != got {
			t.Fatalf("Lenient(%q) = %q; Lenient(%q) = %q; want it unchanged", n, got, got, again)
		}
		if norm := Normalize(got); norm != got {
			t.Fatalf("Lenient(%q) = %q; Normalize(%q) = %q; want it unchanged", n, got, got, norm)
		}
		path, _, _ := strings.Cut(got, "?")
		for _, bad := range []string{"//", "\\", "%2F", "%5C", "%3B", ";"} {
			if strings.Contains(path, bad) {
				t.Fatalf("Lenient(%q) = %q; path has %q", n, got, bad)
			}
		}
		for seg := range strings.SplitSeq(path, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("Lenient(%q) = %q; path has a %q segment", n, got, seg)
			}
		}
		if _, q, ok := strings.Cut(Normalize(n), "?"); ok && !strings.HasSuffix(got, "?"+q) {
			t.Fatalf("Lenient(%q) = %q; want the query %q, normalised", n, got, q)
		}
	})
}

// readUsageSeed returns the file testdata/usage/name, for a fuzz seed.
func readUsageSeed(f *testing.F, name string) []byte {
	f.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "usage", name))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// checkStatements fails t when a verdict of u states something with no
// statement, or a statement that does not start with prefix.
func checkStatements(t *testing.T, what string, u Usage, prefix string) {
	t.Helper()
	for p, v := range u {
		if v.State != Unstated && !strings.HasPrefix(v.Statement, prefix) || v.State == Unstated && v.Statement != "" {
			t.Fatalf("%s[%s] = %+v; want a statement starting %q", what, Purpose(p), v, prefix)
		}
	}
}

// FuzzRobotsTag reads X-Robots-Tag values: no panic; every verdict names
// its header; a refusal of search needs noindex or none, of AI purposes
// noai or noimageai, somewhere in the value; and for a value with no
// crawler named, every crawler gets the same answer.
func FuzzRobotsTag(f *testing.F) {
	for _, v := range []string{"noai", "GPTBot: noai, otherbot: noindex", "unavailable_after: 25 Jun 2030 15:00:00 PST, none", "noimageai", "max-snippet: -1, NOINDEX"} {
		f.Add(v, "GPTBot", true)
	}
	f.Fuzz(func(t *testing.T, value, token string, image bool) {
		u := RobotsTagUsage([]string{value}, []string{token}, image)
		checkStatements(t, "RobotsTagUsage", u, "x-robots-tag: ")
		low := strings.ToLower(value)
		if u[Search].State == Refused && !strings.Contains(low, "noindex") && !strings.Contains(low, "none") ||
			u[AITrain].State == Refused && !strings.Contains(low, "noai") && !strings.Contains(low, "noimageai") {
			t.Fatalf("RobotsTagUsage(%q) = %s: a refusal no directive states", value, usageString(u))
		}
		if !strings.Contains(value, ":") && usageString(u) != usageString(RobotsTagUsage([]string{value}, nil, image)) {
			t.Fatalf("RobotsTagUsage(%q) depends on the crawler, with none named", value)
		}
	})
}

// FuzzHeadUsage reads any bytes as an HTML page's head: no panic, every
// verdict names a meta element, and reading more of a page whose head has
// ended changes nothing.
func FuzzHeadUsage(f *testing.F) {
	f.Add(readUsageSeed(f, "head.html"), "GPTBot")
	f.Add([]byte(`<meta name=robots content="noai,noindex"><meta name=tdm-reservation content=1>`), "FooBot")
	f.Add([]byte("<head><title><meta name=robots content=noai></title>"), "")
	f.Fuzz(func(t *testing.T, page []byte, token string) {
		u, done := HeadUsage(page, []string{token})
		checkStatements(t, "HeadUsage", u, "meta ")
		if !done {
			return
		}
		more, _ := HeadUsage(append(slices.Clip(page), `<meta name="robots" content="noai, noindex">`...), []string{token})
		if usageString(more) != usageString(u) {
			t.Fatalf("HeadUsage(%q) = %s, done; with a meta element after: %s", page, usageString(u), usageString(more))
		}
	})
}

// FuzzParseTDMRep reads any bytes as a tdmrep.json file: refused with
// ErrTDMRep, or a file whose every answer names its entry and refuses or
// grants ai-train and ai-input together.
func FuzzParseTDMRep(f *testing.F) {
	f.Add(readUsageSeed(f, "tdmrep.json"), "/open-access/paper.pdf")
	f.Add([]byte(`[{"location":"/*a*a*a$","tdm-reservation":"1"}]`), "/aaaa")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		tr, err := ParseTDMRep(body, WithNormalization())
		if err != nil {
			if !errors.Is(err, ErrTDMRep) {
				t.Fatalf("ParseTDMRep: %v; want ErrTDMRep", err)
			}
			return
		}
		u, ok := tr.UsageWithin(Normalize("/"+path), NewBudget(1<<20))
		if !ok {
			return
		}
		checkStatements(t, "TDMRep.Usage", u, "tdmrep.json: ")
		if u[AITrain] != u[AIInput] || u[Search].State != Unstated {
			t.Fatalf("TDMRep.Usage(%q) = %s", path, usageString(u))
		}
		// What is reserved on every path is reserved on this one.
		if all := tr.UsageEverywhere(); all[AITrain].State == Refused && u[AITrain].State != Refused {
			t.Fatalf("TDMRep.UsageEverywhere = %s, but Usage(%q) = %s", usageString(all), path, usageString(u))
		}
	})
}

// FuzzParseRSL reads any bytes as an RSL document: refused with ErrRSL, or
// a document whose every answer names it, and which a licence lifts only
// the licence server's refusals of.
func FuzzParseRSL(f *testing.F) {
	f.Add(readUsageSeed(f, "license.xml"), "/premium/x")
	f.Add([]byte(`<rsl><content url="*"><license><prohibits type="usage">ai-all</prohibits></license></content></rsl>`), "/")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		const src = "https://publisher.example/license.xml"
		l, err := ParseRSL(src, body, WithNormalization())
		if err != nil {
			if !errors.Is(err, ErrRSL) {
				t.Fatalf("ParseRSL: %v; want ErrRSL", err)
			}
			return
		}
		p := Normalize("/" + path)
		u, ok := l.UsageWithin("https", "publisher.example", p, false, NewBudget(1<<20))
		lic, ok2 := l.UsageWithin("https", "publisher.example", p, true, NewBudget(1<<20))
		if !ok || !ok2 {
			return
		}
		checkStatements(t, "RSL.Usage", u, "rsl "+src+": ")
		// What is refused on every path is refused on this one.
		if all, ok := l.UsageEverywhere("https", "publisher.example", false, NewBudget(1<<20)); ok {
			for pur := range all {
				if all[pur].State == Refused && u[pur].State != Refused {
					t.Fatalf("RSL.UsageEverywhere = %s, but Usage(%q) = %s", usageString(all), path, usageString(u))
				}
			}
		}
		for pur := range u {
			if u[pur] != lic[pur] && !strings.Contains(u[pur].Statement, ": license server ") {
				t.Fatalf("RSL.Usage(%q)[%s]: %+v unlicensed, %+v licensed", path, Purpose(pur), u[pur], lic[pur])
			}
		}
	})
}
