package robots

import (
	"fmt"
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
