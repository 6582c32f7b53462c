package robots

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

func TestPathOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url, want string
	}{
		{"http://example.com/a?b#c", "/a?b"},
		{"example.com?a", "/?a"},
		{"", "/"},
		{"http://h", "/"},
		{"//h/x", "/x"},
		{"http://h/#frag", "/"},
		{"http://h;p", "/;p"},
		{"http://h#frag/x", "/"},
		{"http://h?q#f", "/?q"},
		{"https://example.com:8443/a/b;c?d=e&f#g", "/a/b;c?d=e&f"},
		{"http://user:pw@h/x", "/x"},
		{"example.com", "/"},
		{"example.com/a", "/a"},
		{"/a/b", "/a/b"},
		{"/a?x=http://h/b", "/a?x=http://h/b"},
		{"h/a://b", "/a://b"},
		{"http://h/%2e%2e/%41?%zz", "/%2e%2e/%41?%zz"},
		{"http://h//x", "//x"},
		{"#x", "/"},
	}
	for _, tt := range tests {
		if got := PathOf(tt.url); got != tt.want {
			t.Errorf("PathOf(%q) = %q; want %q", tt.url, got, tt.want)
		}
	}
}

// normalizeTests are request targets and their normal form (docs/decision.md
// step 7).
var normalizeTests = []struct {
	in, want string
}{
	// Characters a URI cannot hold raw are encoded, as clients must send
	// them: a rule written with them raw matches what is sent.
	{"/a{b}", "/a%7Bb%7D"},
	{"/c<d>\"e", "/c%3Cd%3E%22e"},
	{"/g|h^i`j\\k", "/g%7Ch%5Ei%60j%5Ck"},
	{"/q?x={|}", "/q?x=%7B%7C%7D"},
	{"/a%7bb", "/a%7Bb"},
	// In a path, escapes of the reserved characters every server reads
	// alike are decoded too; not "$" or "*" (rule syntax), "/", "?", "#",
	// "%" or "\\"; not in the query.
	{"/wiki/Special%3aSearch", "/wiki/Special:Search"},
	{"/a%28b%29%2B%2C%3B%3D%40%21%26%27%5B%5D", "/a(b)+,;=@!&'[]"},
	{"/a%24b%2Ac%2Fd%3Fe%23f%25g%5Ch", "/a%24b%2Ac%2Fd%3Fe%23f%25g%5Ch"},
	{"/q?x=%3A%28", "/q?x=%3A%28"},
	// Escapes of unreserved characters are decoded.
	{"/%70rivate", "/private"},
	{"/%7Euser/", "/~user/"},
	{"/%7euser/", "/~user/"},
	{"/%41%5a%61%7A%30%39%2D%2E%5F", "/AZaz09-._"},
	{"/x?q=%70", "/x?q=p"},

	// Other escapes are upper-cased and kept, %2F included.
	{"/caf%c3%a9", "/caf%C3%A9"},
	{"/caf%C3%A9", "/caf%C3%A9"},
	{"/a%2Fb", "/a%2Fb"},
	{"/a%2fb", "/a%2Fb"},
	{"/a%3fb", "/a%3Fb"},
	{"/a%25", "/a%25"},
	{"/a%2541", "/a%2541"},
	{"/x?q=%2f", "/x?q=%2F"},

	// Bytes outside 0x21-0x7E are escaped.
	{"/café", "/caf%C3%A9"},
	{"/a b", "/a%20b"},
	{"/a\tb", "/a%09b"},
	{"/a\x00b", "/a%00b"},
	{"/a\x7fb", "/a%7Fb"},
	{"/a\xffb", "/a%FFb"},
	{"/x?q=a b", "/x?q=a%20b"},

	// A "%" that starts no escape is encoded, so that one pass is final.
	{"/%", "/%25"},
	{"/a%", "/a%25"},
	{"/a%4", "/a%254"},
	{"/%zz", "/%25zz"},
	{"/%z1", "/%25z1"},
	{"/%1z", "/%251z"},
	{"/%%", "/%25%25"},
	{"/x?%", "/x?%25"},
	{"/%%6100", "/%25a00"},
	{"/%%3641", "/%25641"},
	{"/a/%%32e/b", "/a/%252e/b"},

	// Dot segments are removed from the path, not from the query.
	{"/public/../private", "/private"},
	{"/a/./b/../c", "/a/c"},
	{"/..", "/"},
	{"/.", "/"},
	{"/a/..", "/"},
	{"/a/b/..", "/a/"},
	{"/a/b/.", "/a/b/"},
	{"/../../a", "/a"},
	{"/a/%2e%2e/b", "/b"},
	{"/a/%2E%2E/b", "/b"},
	{"/a/.%2e/b", "/b"},
	{"/a/%2e/b", "/a/b"},
	{"/a/..b/c", "/a/..b/c"},
	{"/a/b../c", "/a/b../c"},
	{"/a/.b", "/a/.b"},
	{"/a/.../b", "/a/.../b"},
	{"/x?q=../y", "/x?q=../y"},
	{"/a/../x?q=/../y", "/x?q=/../y"},
	{"/a/./x?q=./y", "/a/x?q=./y"},

	// "//", case, ";" and other reserved characters stay as sent.
	{"//x", "//x"},
	{"/a//b", "/a//b"},
	{"/A", "/A"},
	{"/a;b=c", "/a;b=c"},
	{"/*$", "/*$"},
	{"/plain/path?x=1", "/plain/path?x=1"},
	{"/", "/"},
	{"", ""},
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	for _, tt := range normalizeTests {
		if got := Normalize(tt.in); got != tt.want {
			t.Errorf("Normalize(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// TestNormalizeNoChange checks that a target already in normal form, with
// no escape in it and no dot segment in its path, is returned itself, without
// allocating. AllocsPerRun counts every allocation in the process and panics
// during parallel tests, so this test is not parallel.
func TestNormalizeNoChange(t *testing.T) {
	for _, in := range []string{"/plain/path?x=1", "/", "", "//x", "/A", "/x?q=../y", "/a;b=c", "/a..b/c.", "/*$"} {
		got := Normalize(in)
		if got != in {
			t.Errorf("Normalize(%q) = %q; want %q", in, got, in)
		}
		if unsafe.StringData(got) != unsafe.StringData(in) {
			t.Errorf("Normalize(%q) returned a copy; want the same string", in)
		}
	}
	const in = "/plain/path?x=1"
	var sink string
	if n := testing.AllocsPerRun(100, func() { sink = Normalize(in) }); n != 0 {
		t.Errorf("Normalize(%q) allocates %v times; want 0", in, n)
	}
	_ = sink
}

// FuzzNormalize checks that Normalize is idempotent and its result is
// printable ASCII with no dot segment in the path.
func FuzzNormalize(f *testing.F) {
	for _, tt := range normalizeTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := Normalize(in)
		if again := Normalize(got); again != got {
			t.Fatalf("Normalize(%q) = %q; Normalize(%q) = %q; want it unchanged", in, got, got, again)
		}
		for i := 0; i < len(got); i++ {
			if c := got[i]; c <= ' ' || c >= 0x7F {
				t.Fatalf("Normalize(%q) = %q; has byte %#x at %d", in, got, c, i)
			}
		}
		path, _, _ := strings.Cut(got, "?")
		for seg := range strings.SplitSeq(path, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("Normalize(%q) = %q; path has a %q segment", in, got, seg)
			}
		}
	})
}

// lenientTests are request targets, as a client sends them, and the path a
// lenient server would serve, in Normalize's form (docs/decision.md step 7,
// lenient reading).
var lenientTests = []struct {
	in, want string
}{
	// Dot segments are resolved after the lenient steps, not before: each
	// of these went through when Lenient was given Normalize's output,
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
		if got := Lenient(tt.in); got != tt.want {
			t.Errorf("Lenient(%q) = %q; want %q", tt.in, got, tt.want)
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
		got := Lenient(in)
		if got != in {
			t.Errorf("Lenient(%q) = %q; want %q", in, got, in)
		}
		if unsafe.StringData(got) != unsafe.StringData(in) {
			t.Errorf("Lenient(%q) returned a copy; want the same string", in)
		}
	}
	const in = "/a/b/c.html?x=1"
	var sink string
	if n := testing.AllocsPerRun(100, func() { sink = Lenient(in) }); n != 0 {
		t.Errorf("Lenient(%q) allocates %v times; want 0", in, n)
	}
	_ = sink
}

// TestLenientDecides shows the intended use: a target that Google's
// matching allows, because the path as sent does not start with "/private",
// and that a lenient server would serve from "/private", is disallowed in its
// lenient reading.
func TestLenientDecides(t *testing.T) {
	t.Parallel()
	g := Parse([]byte("User-agent: *\nDisallow: /private\n"), WithNormalization()).Group("*")
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
		n := Normalize(tt.target)
		if got := g.Test(n).Allowed; got != tt.exact {
			t.Errorf("Test(Normalize(%q)) allowed = %v; want %v", tt.target, got, tt.exact)
		}
		l := Lenient(tt.target)
		if got := g.Test(l).Allowed; got != tt.lenient {
			t.Errorf("Test(Lenient(%q)) = Test(%q) allowed = %v; want %v", tt.target, l, got, tt.lenient)
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
				Lenient(in)
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
		for r := range LenientReadings(tt.target) {
			got = append(got, r)
		}
		for _, w := range tt.want {
			if !slices.Contains(got, w) && Normalize(tt.target) != w {
				t.Errorf("LenientReadings(%q) = %q; want %q among them", tt.target, got, w)
			}
		}
	}
	for _, plain := range []string{"/a/b/c.html?x=1", "/", "/dir/", "/a/../b", "/%7Euser/", "/a%2A"} {
		for r := range LenientReadings(plain) {
			t.Errorf("LenientReadings(%q) yields %q; want nothing", plain, r)
		}
	}
	in := "/a/b/c.html?x=1"
	if n := testing.AllocsPerRun(100, func() {
		for range LenientReadings(in) {
		}
	}); n != 0 {
		t.Errorf("LenientReadings(%q) allocates %v times; want 0", in, n)
	}
}

// TestLenientReadingsBounded: a target with every feature the readings act
// on yields each reading once, and at most maxReadings.
func TestLenientReadingsBounded(t *testing.T) {
	t.Parallel()
	target := "/a%2F;b%5C%3Bc//x/..$%24*" + "?q=$%24*"
	seen := map[string]bool{}
	for r := range LenientReadings(target) {
		if seen[r] {
			t.Errorf("LenientReadings(%q) yields %q twice", target, r)
		}
		seen[r] = true
	}
	if len(seen) == 0 || len(seen) > maxReadings {
		t.Errorf("LenientReadings(%q) yields %d readings; want 1 to %d", target, len(seen), maxReadings)
	}
}

// BenchmarkLongTarget decides the readings of a 57 KB target full of
// dot segments and lenient separators: the work must grow linearly with
// the target (a fresh-clone trial found it quadratic: 3.4 s of CPU).
func BenchmarkLongTarget(b *testing.B) {
	target := "/" + strings.Repeat("a%2F;b%5C%3Bc//x/..", 3000)
	b.ReportAllocs()
	for b.Loop() {
		Normalize(target)
		for r := range LenientReadings(target) {
			_ = r
		}
	}
}

// writeEscapedPattern skips plain bytes eight at a time: a byte to escape
// at every position of a long pattern, against a byte-by-byte escape.
func TestWriteEscapedPatternEveryPosition(t *testing.T) {
	naive := func(v []byte) string {
		var b strings.Builder
		for i := 0; i < len(v); i++ {
			switch c := v[i]; {
			case c == '%' && i+2 < len(v) && isHex(v[i+1]) && isHex(v[i+2]):
				b.WriteByte('%')
				b.WriteByte(upper(v[i+1]))
				b.WriteByte(upper(v[i+2]))
				i += 2
			case c >= 0x80:
				fmt.Fprintf(&b, "%%%02X", c)
			default:
				b.WriteByte(c)
			}
		}
		return b.String()
	}
	for _, special := range []string{"%", "%2f", "%zz", "\xc3\xa9", "\xff"} {
		for pos := range 24 {
			v := []byte(strings.Repeat("a", pos) + special + strings.Repeat("b", 20))
			var b strings.Builder
			writeEscapedPattern(&b, v)
			if got, want := b.String(), naive(v); got != want {
				t.Errorf("escape(%q) = %q; want %q", v, got, want)
			}
		}
	}
}
