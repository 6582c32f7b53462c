package source

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/usage"
)

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
		want               usage.Purpose
		refused            bool
	}{
		{"https", "xn--bcher-kva.example", "/books/1", usage.AITrain, true},
		{"https", "xn--bcher-kva.example", "/other", usage.AITrain, false},
		{"http", "xn--bcher-kva.example", "/books/1", usage.AITrain, false}, // another scheme, another origin
		{"https", "img.cdn.example", "/a.jpg", usage.AIInput, true},
		{"https", "a.b.cdn.example", "/a.jpg", usage.AIInput, true},
		{"https", "cdn.example", "/a.jpg", usage.AIInput, false}, // "*." needs a label
		{"https", "evilcdn.example", "/a.jpg", usage.AIInput, false},
		{"https", "www.xn--bcher-kva.example", "/x", usage.Search, true},
		{"http", "example.com:8080", "/x", usage.Search, true},
		{"http", "example.com", "/x", usage.Search, false},
	}
	for _, tt := range tests {
		u := l.Usage(tt.scheme, tt.host, tt.path, false)
		if got := u[tt.want].State == usage.Refused; got != tt.refused {
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
	b := robots.MakeBudget(10_000)
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

// FuzzParseRSL reads any bytes as an RSL document: refused with ErrRSL, or
// a document whose every answer names it, and which a licence lifts only
// the licence server's refusals of.
func FuzzParseRSL(f *testing.F) {
	f.Add(readUsageSeed(f, "license.xml"), "/premium/x")
	f.Add([]byte(`<rsl><content url="*"><license><prohibits type="usage">ai-all</prohibits></license></content></rsl>`), "/")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		const src = "https://publisher.example/license.xml"
		l, err := ParseRSL(src, body, robots.WithNormalization())
		if err != nil {
			if !errors.Is(err, ErrRSL) {
				t.Fatalf("ParseRSL: %v; want ErrRSL", err)
			}
			return
		}
		p := robots.Normalize("/" + path)
		u, ok := l.UsageWithin("https", "publisher.example", p, false, robots.NewBudget(1<<20))
		lic, ok2 := l.UsageWithin("https", "publisher.example", p, true, robots.NewBudget(1<<20))
		if !ok || !ok2 {
			return
		}
		checkStatements(t, "RSL.Usage", u, "rsl "+src+": ")
		// What is refused on every path is refused on this one.
		if all, ok := l.UsageEverywhere("https", "publisher.example", false, robots.NewBudget(1<<20)); ok {
			for pur := range all {
				if all[pur].State == usage.Refused && u[pur].State != usage.Refused {
					t.Fatalf("RSL.UsageEverywhere = %s, but Usage(%q) = %s", usageString(all), path, usageString(u))
				}
			}
		}
		for pur := range u {
			if u[pur] != lic[pur] && !strings.Contains(u[pur].Statement, ": license server ") {
				t.Fatalf("RSL.Usage(%q)[%s]: %+v unlicensed, %+v licensed", path, usage.Purpose(pur), u[pur], lic[pur])
			}
		}
	})
}
