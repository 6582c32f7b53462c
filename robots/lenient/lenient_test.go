package lenient

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/robotsgate/robotsgate/robots"
)

// lenientTests are request targets, as a client sends them, and the path a
// lenient server would serve, in Normalize's form (docs/decision.md step 7,
// lenient reading).
var lenientTests = []struct {
	in, want string
}{
	// Dot segments are resolved after the lenient steps, not before: each
	// of these went through when Reading was given Normalize's output,
	// where ".." had already eaten the segment a lenient server splits,
	// merges or drops.
	{"/a//../private/secret.txt", "/private/secret.txt"},
	{"/x//..//private", "/private"},
	{"/public//../private/x", "/private/x"},
	{"/a/b//../../private", "/private"},
	{"/a/b%2F../../private", "/private"},
	{"/a/b%2f../../private", "/private"},
	{"/a/b%2F%2E%2E/../private", "/private"},
	{`/a/b\../../private`, "/private"},
	{"/a/b%5C../../private", "/private"},
	{"/public/.;/../private", "/private"},
	{"/public/..;/../private", "/private"},
	{"/a/;/../private", "/private"},
	{"/public/x%2F../../admin", "/admin"},

	// The spellings of "/private/x" that reached disallowed files.
	{"/public/..%2Fprivate/x", "/private/x"},
	{"/public/..%2fprivate/x", "/private/x"},
	{"/public%2F..%2Fprivate%2Fx", "/private/x"},
	{`/public/..\private/x`, "/private/x"},
	{`/public\..\private\x`, "/private/x"},
	{"/public/..%5Cprivate/x", "/private/x"},
	{"/public/..%5cprivate/x", "/private/x"},
	{"//private/x", "/private/x"},
	{"///private//x", "/private/x"},
	{"/public/..;/private/x", "/private/x"},
	{"/public;a=b/..;c=d/private;e/x", "/private/x"},
	{"/public/..%3B/private/x", "/private/x"},
	{"/public/..%3b/private/x", "/private/x"},
	{"/a.secret%3Bv=1", "/a.secret"},
	{"/public/%2e%2e%2fprivate", "/private"},
	{"/public/%2E%2E%2Fprivate", "/private"},
	{"/public/.%2e/private/x", "/private/x"},
	{"/public/%2e%2e/private/x", "/private/x"},
	{"/public/..%2F..%2F..%2Fprivate/x", "/private/x"},
	{"/x/%2F%2Fprivate", "/x/private"},
	{"/%2Fprivate", "/private"},
	{"/.%2Fprivate", "/private"},
	{"/public/..%2F/private", "/private"},

	// Decoding is one pass: a double-encoded "/" stays encoded.
	{"/public/..%252Fprivate/x", "/public/..%252Fprivate/x"},
	{"/public/..%255Cprivate/x", "/public/..%255Cprivate/x"},

	// ";params" are dropped from every segment; "/" ends them, decoded or not.
	{"/a;x=1/b", "/a/b"},
	{"/a;", "/a"},
	{"/a;/", "/a/"},
	{"/;x/b", "/b"},
	{"/a;x%2Fb", "/a/b"},
	{`/a;x\b`, "/a/b"},
	{"/a;x=1", "/a"},
	{"/a;jsessionid=123?q=1", "/a?q=1"},

	// The query is kept byte for byte.
	{"/a//b?x=//y%2F..;z\\", "/a/b?x=//y%2F..;z%5C"},
	{"/a?b/../c", "/a?b/../c"},

	// The result starts with "/".
	{"", "/"},
	{"?q", "/?q"},
	{";x", "/"},
	{"%2F", "/"},
	{"\\", "/"},
	{"/..%2F..%2F", "/"},
	{"/a/..%2F", "/"},
	{"/a/..;", "/"},
	{"/a/.;", "/a/"},
	{"//", "/"},
	{"//?", "/?"},
}

func TestLenient(t *testing.T) {
	t.Parallel()
	for _, tt := range lenientTests {
		if got := Reading(tt.in); got != tt.want {
			t.Errorf("Reading(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// TestLenientNoChange checks that a target with nothing for a lenient server
// to read differently is returned itself, without allocating. Like
// TestNormalizeNoChange it is not parallel, for AllocsPerRun.
func TestLenientNoChange(t *testing.T) {
	for _, in := range []string{
		"/", "/a/b/c.html?x=1", "/plain/path", "/a%252Fb", "/a%255C", "/a%3Fb", "/a%2A%24",
		"/a..b/c.", "/.a/..b", "/A/B", "/*$", "/caf%C3%A9", "/x?q=//a;b%5Cc%2F../",
		"/index.html?", "/a-b_c~d",
	} {
		got := Reading(in)
		if got != in {
			t.Errorf("Reading(%q) = %q; want %q", in, got, in)
		}
		if unsafe.StringData(got) != unsafe.StringData(in) {
			t.Errorf("Reading(%q) returned a copy; want the same string", in)
		}
	}
	const in = "/a/b/c.html?x=1"
	var sink string
	if n := testing.AllocsPerRun(100, func() { sink = Reading(in) }); n != 0 {
		t.Errorf("Reading(%q) allocates %v times; want 0", in, n)
	}
	_ = sink
}

// TestLenientDecides shows the intended use: a target that Google's
// matching allows, because the path as sent does not start with "/private",
// and that a lenient server would serve from "/private", is disallowed in its
// lenient reading.
func TestLenientDecides(t *testing.T) {
	t.Parallel()
	g := robots.Parse([]byte("User-agent: *\nDisallow: /private\n"), robots.WithNormalization()).Group("*")
	tests := []struct {
		target         string
		exact, lenient bool // allowed as sent; allowed as a lenient server reads it
	}{
		{"/public/..%2Fprivate/x", true, false},
		{"/public%2F..%2Fprivate%2Fx", true, false},
		{`/public/..\private/x`, true, false},
		{"//private/x", true, false},
		{"/public/..;/private/x", true, false},
		{"/public/%2e%2e%2fprivate", true, false},
		{"/private;x/y", false, false},
		{"/%70rivate", false, false},
		{"/public/../private", false, false},
		{"/public/x", true, true},
		{"/public/..%252Fprivate/x", true, true},
		{"/public?next=/../private", true, true},
	}
	for _, tt := range tests {
		n := robots.Normalize(tt.target)
		if got := g.Test(n).Allowed; got != tt.exact {
			t.Errorf("Test(robots.Normalize(%q)) allowed = %v; want %v", tt.target, got, tt.exact)
		}
		l := Reading(tt.target)
		if got := g.Test(l).Allowed; got != tt.lenient {
			t.Errorf("Test(Reading(%q)) = Test(%q) allowed = %v; want %v", tt.target, l, got, tt.lenient)
		}
	}
}

// BenchmarkLenient is the lenient reading of a target, done for every
// request: a plain one, which is returned as it is, and one to rewrite.
func BenchmarkLenient(b *testing.B) {
	for _, in := range []string{"/a/b/c.html?x=1", "/public/..%2Fprivate/x?y=1"} {
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Reading(in)
			}
		})
	}
}

// TestLenientReadings: each spelling's readings include the path each kind
// of server serves for it, whatever steps it takes.
func TestLenientReadings(t *testing.T) {
	tests := []struct {
		target string
		want   []string // among the readings
	}{
		// Python keeps ";" and "\\" as names; Tomcat drops ";params"; IIS
		// reads "%5C" as "/": ".." removes a different segment for each.
		{"/%2Fprivate/;/../secret.txt", []string{"/private/secret.txt", "/secret.txt"}},
		{"/%2F/private/%5C/../secret.txt", []string{"/private/secret.txt", "/secret.txt"}},
		{"/%2F/private/..;/../secret.txt", []string{"/private/secret.txt", "/secret.txt"}},
		// Python's normpath: no trailing "/" the target did not end with.
		{"/x.secret/.", []string{"/x.secret"}},
		{"/x.secret%2F", []string{"/x.secret"}},
		{"/x.secret/%2e", []string{"/x.secret"}},
		{"/a//../private/x", []string{"/private/x", "/a/private/x"}},
		// Tomcat drops ";params" up to the next "/" as sent, then decodes.
		{"/%2Fprivate;%2F..%2F/secret.txt", []string{"/private/secret.txt"}},
		{"/%2Fprivate;x%2F..", []string{"/private"}},
		{"/;%2fopen/%2Fprivate", []string{"/private"}},
		// "$" and "*" are the syntax of rules, which escape them to name
		// them; servers decode "%24" and "%2A" alike.
		{"/price$list", []string{"/price%24list"}},
		{"/price%24list", []string{"/price$list"}},
		{"/star*name", []string{"/star%2Aname"}},
		{"/q?a=$x", []string{"/q?a=%24x"}},
		{"/q?a=%24x", []string{"/q?a=$x"}},
		{"/a;b/price$list", []string{"/a/price%24list"}},
	}
	for _, tt := range tests {
		var got []string
		for r := range Readings(tt.target) {
			got = append(got, r)
		}
		for _, w := range tt.want {
			if !slices.Contains(got, w) && robots.Normalize(tt.target) != w {
				t.Errorf("Readings(%q) = %q; want %q among them", tt.target, got, w)
			}
		}
	}
	for _, plain := range []string{"/a/b/c.html?x=1", "/", "/dir/", "/a/../b", "/%7Euser/", "/a%2A"} {
		for r := range Readings(plain) {
			t.Errorf("Readings(%q) yields %q; want nothing", plain, r)
		}
	}
	in := "/a/b/c.html?x=1"
	if n := testing.AllocsPerRun(100, func() {
		for range Readings(in) {
		}
	}); n != 0 {
		t.Errorf("Readings(%q) allocates %v times; want 0", in, n)
	}
}

// TestLenientReadingsBounded: a target with every feature the readings act
// on yields each reading once, and at most maxReadings.
func TestLenientReadingsBounded(t *testing.T) {
	t.Parallel()
	target := "/a%2F;b%5C%3Bc//x/..$%24*" + "?q=$%24*"
	seen := map[string]bool{}
	for r := range Readings(target) {
		if seen[r] {
			t.Errorf("Readings(%q) yields %q twice", target, r)
		}
		seen[r] = true
	}
	if len(seen) == 0 || len(seen) > maxReadings {
		t.Errorf("Readings(%q) yields %d readings; want 1 to %d", target, len(seen), maxReadings)
	}
}

// BenchmarkLongTarget decides the readings of a 57 KB target full of
// dot segments and lenient separators: the work must grow linearly with
// the target (a fresh-clone trial found it quadratic: 3.4 s of CPU).
func BenchmarkLongTarget(b *testing.B) {
	target := "/" + strings.Repeat("a%2F;b%5C%3Bc//x/..", 3000)
	b.ReportAllocs()
	for b.Loop() {
		robots.Normalize(target)
		for r := range Readings(target) {
			_ = r
		}
	}
}

// FuzzLenient checks that Reading, on any request target, gives
// a path that starts with "/" and that no server reads differently: no "//",
// "\", escaped "/", "\" or ";", ";" or dot segment in its path; and that its
// result is final (Reading and Normalize leave it as it is).
func FuzzLenient(f *testing.F) {
	for _, tt := range lenientTests {
		f.Add(tt.in)
	}
	// The path of every fourth conformance case, read from robots'
	// testdata as its TestConformance reads it; and, in
	// testdata/fuzz/FuzzLenient, the inputs of robots' TestNormalize,
	// whose table is robots' own test's.
	for i, url := range conformanceURLs(f) {
		if i%4 == 0 {
			f.Add(robots.PathOf(url))
		}
	}
	f.Fuzz(func(t *testing.T, in string) {
		n := in
		for r := range Readings(n) {
			if !strings.HasPrefix(r, "/") || robots.Normalize(r) != r {
				t.Fatalf("Readings(%q) yields %q; want a path in Normalize's form", n, r)
			}
		}
		got := Reading(n)
		if !strings.HasPrefix(got, "/") {
			t.Fatalf("Reading(%q) = %q; want a leading \"/\"", n, got)
		}
		if again := Reading(got); again != got {
			t.Fatalf("Reading(%q) = %q; Reading(%q) = %q; want it unchanged", n, got, got, again)
		}
		if norm := robots.Normalize(got); norm != got {
			t.Fatalf("Reading(%q) = %q; robots.Normalize(%q) = %q; want it unchanged", n, got, got, norm)
		}
		path, _, _ := strings.Cut(got, "?")
		for _, bad := range []string{"//", "\\", "%2F", "%5C", "%3B", ";"} {
			if strings.Contains(path, bad) {
				t.Fatalf("Reading(%q) = %q; path has %q", n, got, bad)
			}
		}
		for seg := range strings.SplitSeq(path, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("Reading(%q) = %q; path has a %q segment", n, got, seg)
			}
		}
		if _, q, ok := strings.Cut(robots.Normalize(n), "?"); ok && !strings.HasSuffix(got, "?"+q) {
			t.Fatalf("Reading(%q) = %q; want the query %q, normalised", n, got, q)
		}
	})
}

// conformanceURLs returns the URL of each conformance case robots'
// TestConformance runs (robots/testdata/google-robotstxt-tests.jsonl, then
// google-spec-test.jsonl), in its order.
func conformanceURLs(t testing.TB) []string {
	var urls []string
	for _, name := range []string{"google-robotstxt-tests.jsonl", "google-spec-test.jsonl"} {
		data, err := os.ReadFile(filepath.Join("..", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		for line := range bytes.Lines(data) {
			var c struct {
				URL string `json:"url"`
			}
			if err := json.Unmarshal(line, &c); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			urls = append(urls, c.URL)
		}
	}
	if len(urls) != 145+400 {
		t.Fatalf("conformance data: %d cases; want 545", len(urls))
	}
	return urls
}
