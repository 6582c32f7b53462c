package robots

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// usageString spells u out for a test: "ai-train=refused(statement) …".
func usageString(u Usage) string {
	var b strings.Builder
	for p := range numPurposes {
		if u[p].State == Unstated {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p.String() + "=" + u[p].State.String() + "(" + u[p].Statement + ")")
	}
	return b.String()
}

func TestRobotsTagUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		values []string
		tokens []string
		image  bool
		want   string
	}{
		{[]string{"noai"}, nil, false, "ai-train=refused(x-robots-tag: noai) ai-input=refused(x-robots-tag: noai)"},
		{[]string{"NoIndex, nofollow"}, []string{"FooBot"}, false, "search=refused(x-robots-tag: noindex, nofollow)"},
		{[]string{"none"}, nil, false, "search=refused(x-robots-tag: none)"},
		{[]string{"noimageai"}, nil, false, ""},
		{[]string{"noimageai"}, nil, true, "ai-train=refused(x-robots-tag: noimageai) ai-input=refused(x-robots-tag: noimageai)"},
		// Scoped to a crawler: only when it is obeyed.
		{[]string{"GPTBot: noai"}, []string{"FooBot"}, false, ""},
		{[]string{"GPTBot: noai"}, []string{"FooBot", "gptbot"}, false, "ai-train=refused(x-robots-tag: gptbot: noai) ai-input=refused(x-robots-tag: gptbot: noai)"},
		// A run per crawler in one line; directives after a name are its.
		{[]string{"googlebot: nofollow, FooBot: noindex, noai"}, []string{"FooBot"}, false,
			"ai-train=refused(x-robots-tag: googlebot: nofollow, foobot: noindex, noai) ai-input=refused(x-robots-tag: googlebot: nofollow, foobot: noindex, noai) search=refused(x-robots-tag: googlebot: nofollow, foobot: noindex, noai)"},
		{[]string{"FooBot: noindex, otherbot: noai"}, []string{"FooBot"}, false, "search=refused(x-robots-tag: foobot: noindex, otherbot: noai)"},
		// Valued directives are not crawler names.
		{[]string{"unavailable_after: 25 Jun 2030 15:00:00 PST, noai"}, nil, false,
			"ai-train=refused(x-robots-tag: unavailable_after: 25 jun 2030 15:00:00 pst, noai) ai-input=refused(x-robots-tag: unavailable_after: 25 jun 2030 15:00:00 pst, noai)"},
		{[]string{"max-snippet: 20", "max-image-preview: large"}, nil, false, ""},
		// Lines combine: a refusal on any line refuses.
		{[]string{"all", "noai"}, nil, false, "ai-train=refused(x-robots-tag: noai) ai-input=refused(x-robots-tag: noai)"},
		{[]string{"noai-ish, no ai, noaix"}, nil, false, ""},
		{nil, nil, false, ""},
	}
	for _, tt := range tests {
		if got := usageString(RobotsTagUsage(tt.values, tt.tokens, tt.image)); got != tt.want {
			t.Errorf("RobotsTagUsage(%q, %q, %v) = %s; want %s", tt.values, tt.tokens, tt.image, got, tt.want)
		}
	}
}

func TestMetaUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, content string
		tokens        []string
		want          string
	}{
		{"robots", "noai, noimageai", nil, "ai-train=refused(meta robots: noai, noimageai) ai-input=refused(meta robots: noai, noimageai)"},
		{"ROBOTS", "NOINDEX", nil, "search=refused(meta robots: noindex)"},
		{"GPTBot", "noai", []string{"gptbot"}, "ai-train=refused(meta gptbot: noai) ai-input=refused(meta gptbot: noai)"},
		{"GPTBot", "noai", []string{"FooBot"}, ""},
		{"tdm-reservation", "1", nil, "ai-train=refused(meta tdm-reservation: 1) ai-input=refused(meta tdm-reservation: 1)"},
		{"tdm-reservation", "0", nil, "ai-train=allowed(meta tdm-reservation: 0) ai-input=allowed(meta tdm-reservation: 0)"},
		{"tdm-reservation", "yes", nil, ""},
		{"description", "noai", nil, ""},
	}
	for _, tt := range tests {
		if got := usageString(MetaUsage(tt.name, tt.content, tt.tokens)); got != tt.want {
			t.Errorf("MetaUsage(%q, %q, %q) = %s; want %s", tt.name, tt.content, tt.tokens, got, tt.want)
		}
	}
}

func TestHeadUsage(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("testdata/usage/head.html")
	if err != nil {
		t.Fatal(err)
	}
	// The head's meta elements count, not those in a script, a style or
	// the body; the title's markup does not end the head.
	const want = "ai-train=refused(meta tdm-reservation: 1) ai-input=refused(meta tdm-reservation: 1) search=refused(meta gptbot: noindex, nofollow)"
	tests := []struct {
		name     string
		page     []byte
		tokens   []string
		want     string
		wantDone bool
	}{
		{"head.html", page, []string{"GPTBot"}, want, true},
		{"head.html for another crawler", page, []string{"FooBot"}, "ai-train=refused(meta tdm-reservation: 1) ai-input=refused(meta tdm-reservation: 1)", true},
		{"cut in the head", page[:bytes.Index(page, []byte("<style>"))], []string{"GPTBot"}, want, false},
		{"cut in a tag", []byte(`<head><meta name="robots" content="noai"><meta name="GPTBot" con`), []string{"GPTBot"}, "ai-train=refused(meta robots: noai) ai-input=refused(meta robots: noai)", false},
		{"no head element", []byte(`<meta name="robots" content="noai"><p>text`), nil, "ai-train=refused(meta robots: noai) ai-input=refused(meta robots: noai)", true},
		{"text ends the head", []byte("<html>hello<meta name=robots content=noai>"), nil, "", true},
		{"body first", []byte("<body><meta name=robots content=noai>"), nil, "", true},
		{"meta without a name", []byte(`<head><meta http-equiv="X-Robots-Tag" content="noai"></head>`), nil, "", true},
		{"not HTML", []byte("\x00\x01\x02 binary"), nil, "", true},
		// A template's content is inert: it neither ends the head nor
		// states anything, nested templates and "<template/>" too.
		{"template in the head", []byte(`<head><template><div><p>x</p><meta name=robots content=noindex></div></template><meta name=robots content=noai></head>`), nil, "ai-train=refused(meta robots: noai) ai-input=refused(meta robots: noai)", true},
		{"nested templates", []byte(`<head><template><template></template><b>x</b></template><meta name=robots content=noai><body>`), nil, "ai-train=refused(meta robots: noai) ai-input=refused(meta robots: noai)", true},
		{"template not closed", []byte(`<head><template/><meta name=robots content=noai><p>text`), nil, "", false},
		{"empty", nil, nil, "", false},
	}
	for _, tt := range tests {
		u, done := HeadUsage(tt.page, tt.tokens)
		if got := usageString(u); got != tt.want || done != tt.wantDone {
			t.Errorf("%s: HeadUsage = %s, done %v; want %s, done %v", tt.name, got, done, tt.want, tt.wantDone)
		}
	}
}

func TestTDMRep(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("testdata/usage/tdmrep.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseTDMRep(body)
	if err != nil {
		t.Fatal(err)
	}
	if f.Len() != 3 {
		t.Errorf("%d entries kept; want 3 (a tdm-reservation of 2 and an entry with no location are skipped)", f.Len())
	}
	tests := []struct {
		path, want, policy string
	}{
		{"/articles/1", "ai-train=refused(tdmrep.json: / tdm-reservation=1) ai-input=refused(tdmrep.json: / tdm-reservation=1)", "https://publisher.example/policies/tdm-policy.json"},
		{"/open-access/paper.html", "ai-train=allowed(tdmrep.json: /open-access/* tdm-reservation=0) ai-input=allowed(tdmrep.json: /open-access/* tdm-reservation=0)", ""},
		{"/open-access/paper.pdf", "ai-train=refused(tdmrep.json: /open-access/*.pdf$ tdm-reservation=1) ai-input=refused(tdmrep.json: /open-access/*.pdf$ tdm-reservation=1)", "https://publisher.example/policies/pdf.json"},
		{"/open-access/paper.pdf?download=1", "ai-train=allowed(tdmrep.json: /open-access/* tdm-reservation=0) ai-input=allowed(tdmrep.json: /open-access/* tdm-reservation=0)", ""},
		{"/broken", "ai-train=refused(tdmrep.json: / tdm-reservation=1) ai-input=refused(tdmrep.json: / tdm-reservation=1)", "https://publisher.example/policies/tdm-policy.json"},
	}
	for _, tt := range tests {
		if got := usageString(f.Usage(tt.path)); got != tt.want {
			t.Errorf("Usage(%q) = %s; want %s", tt.path, got, tt.want)
		}
		if got := f.Policy(tt.path); got != tt.policy {
			t.Errorf("Policy(%q) = %q; want %q", tt.path, got, tt.policy)
		}
	}
	// Locations are escaped and normalised as robots.txt patterns are.
	g, err := ParseTDMRep([]byte(`[{"location": "/caf%c3%a9/%7euser", "tdm-reservation": 1}]`), WithNormalization())
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Usage(Normalize("/caf%C3%A9/~user/x"))[AITrain].State; got != Refused {
		t.Errorf("a normalised location: %v; want refused", got)
	}
	for _, bad := range []string{``, `{}`, `[1, 2]`, `"x"`, `[{"location": "/"}`, "\xff"} {
		if _, err := ParseTDMRep([]byte(bad)); !errors.Is(err, ErrTDMRep) {
			t.Errorf("ParseTDMRep(%q) = %v; want ErrTDMRep", bad, err)
		}
	}
	var none *TDMRep
	if got := usageString(none.Usage("/")); got != "" || none.Policy("/") != "" || none.Len() != 0 {
		t.Errorf("a nil TDMRep states %s", got)
	}
}

func TestRSL(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("testdata/usage/license.xml")
	if err != nil {
		t.Fatal(err)
	}
	const src = "https://publisher.example/license.xml"
	l, err := ParseRSL(src, body)
	if err != nil {
		t.Fatal(err)
	}
	if l.Len() != 5 || l.URL() != src {
		t.Errorf("%d contents from %q; want 5 from %q", l.Len(), l.URL(), src)
	}
	const p = "rsl " + src + ": "
	tests := []struct {
		scheme, host, path string
		licensed           bool
		want               string
	}{
		{"https", "publisher.example", "/about", false,
			"ai-train=refused(" + p + "prohibits usage ai-train) ai-input=refused(" + p + "permits usage search) search=allowed(" + p + "permits usage search)"},
		{"https", "publisher.example", "/news/today", false,
			"ai-train=refused(" + p + "permits usage search ai-input) ai-input=allowed(" + p + "permits usage search ai-input) search=allowed(" + p + "permits usage search ai-input)"},
		{"https", "publisher.example", "/premium/report", false,
			"ai-train=refused(" + p + "license server https://license.publisher.example/api) ai-input=refused(" + p + "license server https://license.publisher.example/api) search=allowed(" + p + "permits usage ai-all search)"},
		{"https", "publisher.example", "/premium/report", true,
			"ai-train=allowed(" + p + "permits usage ai-all search) ai-input=allowed(" + p + "permits usage ai-all search) search=allowed(" + p + "permits usage ai-all search)"},
		{"https", "cdn.publisher.example", "/images/a.jpg", false,
			"ai-train=refused(" + p + "prohibits usage all) ai-input=refused(" + p + "prohibits usage all) search=refused(" + p + "prohibits usage all)"},
		{"https", "publisher.example", "/open/data", false,
			"ai-train=allowed(" + p + "permits usage all) ai-input=allowed(" + p + "permits usage all) search=allowed(" + p + "permits usage all)"},
		// The absolute content URL names another host: only "/" applies.
		{"https", "other.example", "/images/a.jpg", false,
			"ai-train=refused(" + p + "prohibits usage ai-train) ai-input=refused(" + p + "permits usage search) search=allowed(" + p + "permits usage search)"},
	}
	for _, tt := range tests {
		if got := usageString(l.Usage(tt.scheme, tt.host, tt.path, tt.licensed)); got != tt.want {
			t.Errorf("Usage(%s://%s%s, licensed %v) =\n%s; want\n%s", tt.scheme, tt.host, tt.path, tt.licensed, got, tt.want)
		}
	}
	// Whole-site statements, for a tunnel that cannot see paths: in
	// license.xml, "/" refuses ai-train, but /open/* permits all, so no
	// purpose is refused on every path of any host.
	if u, ok := l.UsageEverywhere("https", "publisher.example", false, nil); usageString(u) != "" || !ok {
		t.Errorf("UsageEverywhere(license.xml) = %s, %v; want nothing refused", usageString(u), ok)
	}
	whole, err := ParseRSL(src, []byte(`<rsl><content url="/"><license><prohibits type="usage">ai-train</prohibits></license></content>
<content url="https://cdn.publisher.example/images/*"><license><prohibits type="usage">all</prohibits></license></content></rsl>`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ host, want string }{
		{"publisher.example", "ai-train=refused(" + p + "prohibits usage ai-train)"},
		{"cdn.publisher.example", "ai-train=refused(" + p + "prohibits usage ai-train)"}, // ai-input: refused on /images/* only
	} {
		u, ok := whole.UsageEverywhere("https", tt.host, false, nil)
		if got := usageString(u); got != tt.want || !ok {
			t.Errorf("UsageEverywhere(%s) = %s, %v; want %s", tt.host, got, ok, tt.want)
		}
	}
	for _, bad := range []string{
		``,
		`<html><body>not rsl</body></html>`,
		`<rsl><content url="/"></rsl>`,
		`<!DOCTYPE rsl [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]><rsl><content url="&b;"/></rsl>`,
		strings.Repeat("<rsl>", 100) + strings.Repeat("</rsl>", 100),
	} {
		if _, err := ParseRSL(src, []byte(bad)); !errors.Is(err, ErrRSL) {
			t.Errorf("ParseRSL(%.40q) = %v; want ErrRSL", bad, err)
		}
	}
	var none *RSL
	if got := usageString(none.Usage("https", "x", "/", false)); got != "" || none.Len() != 0 || none.URL() != "" {
		t.Errorf("a nil RSL states %s", got)
	}
}

// TestRSLHosts: absolute content urls name hosts as a proxy names origins
// (IDNA, case, a trailing dot and the default port aside), and a "*" in
// the host matches any run of it.
func TestRSLHosts(t *testing.T) {
	t.Parallel()
	const doc = `<rsl xmlns="https://rslstandard.org/rsl">
  <content url="HTTPS://Bücher.Example.:443/books/*"><license><prohibits type="usage">ai-train</prohibits></license></content>
  <content url="https://*.cdn.example/*"><license><prohibits type="usage">ai-input</prohibits></license></content>
  <content url="https://*.bücher.example/*"><license><prohibits type="usage">search</prohibits></license></content>
  <content url="http://example.com:8080/*"><license><prohibits type="usage">all</prohibits></license></content>
</rsl>`
	l, err := ParseRSL("https://x.example/l.xml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		scheme, host, path string
		want               Purpose
		refused            bool
	}{
		{"https", "xn--bcher-kva.example", "/books/1", AITrain, true},
		{"https", "xn--bcher-kva.example", "/other", AITrain, false},
		{"http", "xn--bcher-kva.example", "/books/1", AITrain, false}, // another scheme, another origin
		{"https", "img.cdn.example", "/a.jpg", AIInput, true},
		{"https", "a.b.cdn.example", "/a.jpg", AIInput, true},
		{"https", "cdn.example", "/a.jpg", AIInput, false}, // "*." needs a label
		{"https", "evilcdn.example", "/a.jpg", AIInput, false},
		{"https", "www.xn--bcher-kva.example", "/x", Search, true},
		{"http", "example.com:8080", "/x", Search, true},
		{"http", "example.com", "/x", Search, false},
	}
	for _, tt := range tests {
		u := l.Usage(tt.scheme, tt.host, tt.path, false)
		if got := u[tt.want].State == Refused; got != tt.refused {
			t.Errorf("Usage(%s://%s%s)[%s] refused = %v; want %v (%s)", tt.scheme, tt.host, tt.path, tt.want, got, tt.refused, usageString(u))
		}
	}
	// A wildcard host is matched within the work bound: a costly one
	// runs it out rather than the CPU.
	costly := `<rsl><content url="https://` + strings.Repeat("*a", 500) + `/*"><license><prohibits type="usage">all</prohibits></license></content></rsl>`
	c, err := ParseRSL("https://x.example/l.xml", []byte(costly))
	if err != nil {
		t.Fatal(err)
	}
	b := MakeBudget(10_000)
	if _, ok := c.UsageWithin("https", strings.Repeat("a", 250)+".example", "/", false, &b); ok {
		t.Error("a wildcard host that costs more than the budget: answered; want the budget run out")
	}
}

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*c", "abc", true}, {"a*c", "ac", true}, {"a*c", "ab", false},
		{"*.x", "a.x", true}, {"*.x", ".x", true}, {"*.x", "x", false}, {"a**b", "ab", true}, {"*a*a*", "aa", true},
		{"*a*a*", "a", false}, {"https://*.e", "https://a.b.e", true}, {"", "", true}, {"", "a", false},
	} {
		if got := globMatch(tt.pattern, tt.s); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v; want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

func TestTDMRepEverywhere(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ file, want string }{
		{`[{"location": "/", "tdm-reservation": 1}]`, "ai-train=refused(tdmrep.json: / tdm-reservation=1) ai-input=refused(tdmrep.json: / tdm-reservation=1)"},
		{`[{"location": "/news/*", "tdm-reservation": 1}, {"location": "*", "tdm-reservation": 1}]`, "ai-train=refused(tdmrep.json: * tdm-reservation=1) ai-input=refused(tdmrep.json: * tdm-reservation=1)"},
		{`[{"location": "/", "tdm-reservation": 1}, {"location": "/open/*", "tdm-reservation": 0}]`, ""},
		{`[{"location": "/news/*", "tdm-reservation": 1}]`, ""},
		{`[]`, ""},
	} {
		f, err := ParseTDMRep([]byte(tt.file))
		if err != nil {
			t.Fatal(err)
		}
		if got := usageString(f.UsageEverywhere()); got != tt.want {
			t.Errorf("%s: UsageEverywhere = %s; want %s", tt.file, got, tt.want)
		}
	}
}

func TestLicenseLines(t *testing.T) {
	t.Parallel()
	body := "License: https://publisher.example/license.xml\nUser-agent: *\nDisallow: /x\nlicense : https://cdn.example/l.xml\nLicenses: https://not-one\n"
	for _, r := range []*Robots{Parse([]byte(body)), Parse([]byte(body), WithNormalization())} {
		cold, hot := tiers(t, r)
		for _, f := range []*Robots{r, cold, hot} {
			got := f.Licenses()
			if len(got) != 2 || got[0] != "https://publisher.example/license.xml" || got[1] != "https://cdn.example/l.xml" {
				t.Errorf("Licenses() = %q; want the two License lines", got)
			}
		}
	}
	if got := Parse([]byte("User-agent: *\n")).Licenses(); got != nil {
		t.Errorf("Licenses() of a file with none = %q", got)
	}
}
