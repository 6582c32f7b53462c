package origin

import (
	"errors"
	"testing"
)

func TestParseOrigin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url       string
		want      Origin
		str       string // String()
		hostPort  string // HostPort()
		robotsURL string // RobotsURL()
	}{
		{
			url:       "https://example.com/a?b#c",
			want:      Origin{"https", "example.com", 443},
			str:       "https://example.com:443",
			hostPort:  "example.com:443",
			robotsURL: "https://example.com/robots.txt",
		},
		{
			url:       "http://example.com",
			want:      Origin{"http", "example.com", 80},
			str:       "http://example.com:80",
			hostPort:  "example.com:80",
			robotsURL: "http://example.com/robots.txt",
		},
		{
			url:       "HTTPS://WWW.Example.COM/Path",
			want:      Origin{"https", "www.example.com", 443},
			str:       "https://www.example.com:443",
			hostPort:  "www.example.com:443",
			robotsURL: "https://www.example.com/robots.txt",
		},
		{
			url:       "https://www.müller.eu/",
			want:      Origin{"https", "www.xn--mller-kva.eu", 443},
			str:       "https://www.xn--mller-kva.eu:443",
			hostPort:  "www.xn--mller-kva.eu:443",
			robotsURL: "https://www.xn--mller-kva.eu/robots.txt",
		},
		{
			url:       "https://www.xn--mller-kva.eu/",
			want:      Origin{"https", "www.xn--mller-kva.eu", 443},
			str:       "https://www.xn--mller-kva.eu:443",
			hostPort:  "www.xn--mller-kva.eu:443",
			robotsURL: "https://www.xn--mller-kva.eu/robots.txt",
		},
		{
			url:       "https://WWW.MÜLLER.EU/",
			want:      Origin{"https", "www.xn--mller-kva.eu", 443},
			str:       "https://www.xn--mller-kva.eu:443",
			hostPort:  "www.xn--mller-kva.eu:443",
			robotsURL: "https://www.xn--mller-kva.eu/robots.txt",
		},
		{
			url:       "http://example.com./x",
			want:      Origin{"http", "example.com", 80},
			str:       "http://example.com:80",
			hostPort:  "example.com:80",
			robotsURL: "http://example.com/robots.txt",
		},
		{
			url:       "http://example.com.:8080/x",
			want:      Origin{"http", "example.com", 8080},
			str:       "http://example.com:8080",
			hostPort:  "example.com:8080",
			robotsURL: "http://example.com:8080/robots.txt",
		},
		{
			url:       "http://[::1]:8080/x",
			want:      Origin{"http", "::1", 8080},
			str:       "http://[::1]:8080",
			hostPort:  "[::1]:8080",
			robotsURL: "http://[::1]:8080/robots.txt",
		},
		{
			url:       "https://[2001:DB8:0:0::1]/",
			want:      Origin{"https", "2001:db8::1", 443},
			str:       "https://[2001:db8::1]:443",
			hostPort:  "[2001:db8::1]:443",
			robotsURL: "https://[2001:db8::1]/robots.txt",
		},
		{
			url:       "http://127.0.0.1:8080",
			want:      Origin{"http", "127.0.0.1", 8080},
			str:       "http://127.0.0.1:8080",
			hostPort:  "127.0.0.1:8080",
			robotsURL: "http://127.0.0.1:8080/robots.txt",
		},
		{
			url:       "https://example.com:443/",
			want:      Origin{"https", "example.com", 443},
			str:       "https://example.com:443",
			hostPort:  "example.com:443",
			robotsURL: "https://example.com/robots.txt",
		},
		{
			url:       "http://example.com:443/",
			want:      Origin{"http", "example.com", 443},
			str:       "http://example.com:443",
			hostPort:  "example.com:443",
			robotsURL: "http://example.com:443/robots.txt",
		},
		{
			url:       "https://example.com:8443/",
			want:      Origin{"https", "example.com", 8443},
			str:       "https://example.com:8443",
			hostPort:  "example.com:8443",
			robotsURL: "https://example.com:8443/robots.txt",
		},
		{
			url:       "https://user:pass@example.com/",
			want:      Origin{"https", "example.com", 443},
			str:       "https://example.com:443",
			hostPort:  "example.com:443",
			robotsURL: "https://example.com/robots.txt",
		},
		{
			url:       "https://user@evil.example@example.com:8443/",
			want:      Origin{"https", "example.com", 8443},
			str:       "https://example.com:8443",
			hostPort:  "example.com:8443",
			robotsURL: "https://example.com:8443/robots.txt",
		},
		{
			url:       "https://example.com/@evil.example",
			want:      Origin{"https", "example.com", 443},
			str:       "https://example.com:443",
			hostPort:  "example.com:443",
			robotsURL: "https://example.com/robots.txt",
		},
		{
			url:       "http://Foo_Bar.Example/",
			want:      Origin{"http", "foo_bar.example", 80},
			str:       "http://foo_bar.example:80",
			hostPort:  "foo_bar.example:80",
			robotsURL: "http://foo_bar.example/robots.txt",
		},
		{
			url:       "http://example.com?q",
			want:      Origin{"http", "example.com", 80},
			str:       "http://example.com:80",
			hostPort:  "example.com:80",
			robotsURL: "http://example.com/robots.txt",
		},
		{
			url:       "http://example.com#frag",
			want:      Origin{"http", "example.com", 80},
			str:       "http://example.com:80",
			hostPort:  "example.com:80",
			robotsURL: "http://example.com/robots.txt",
		},
	}
	for _, tt := range tests {
		got, err := Parse(tt.url)
		if err != nil {
			t.Errorf("Parse(%q) error: %v; want %+v", tt.url, err, tt.want)
			continue
		}
		if got != tt.want {
			t.Errorf("Parse(%q) = %+v; want %+v", tt.url, got, tt.want)
		}
		if s := got.String(); s != tt.str {
			t.Errorf("Parse(%q).String() = %q; want %q", tt.url, s, tt.str)
		}
		if s := got.HostPort(); s != tt.hostPort {
			t.Errorf("Parse(%q).HostPort() = %q; want %q", tt.url, s, tt.hostPort)
		}
		if s := got.RobotsURL(); s != tt.robotsURL {
			t.Errorf("Parse(%q).RobotsURL() = %q; want %q", tt.url, s, tt.robotsURL)
		}
		if got.IsZero() {
			t.Errorf("Parse(%q).IsZero() = true; want false", tt.url)
		}
	}
}

func TestParseOriginErrors(t *testing.T) {
	t.Parallel()
	tests := []string{
		"",
		"example.com",
		"example.com/path",
		"//example.com/path",
		"/path",
		"ftp://example.com/",
		"ws://example.com/",
		"https//example.com/",
		"http:///path",
		"http://",
		"http://:80/",
		"http://user@/",
		"http://.",
		"http://example.com:0/",
		"http://example.com:70000/",
		"http://example.com:65536/",
		"http://example.com:+80/",
		"http://example.com:-80/",
		"http://example.com:8o/",
		"http://example.com:80:80/",
		"http://::1/",
		"http://::1:8080/",
		"http://2001:db8::1/",
		"http://[::1/",
		"http://[::1]x/",
		"http://[::1]:0/",
		"http://[1.2.3.4]/",
		"http://[example.com]/",
		"http://[fe80::1%25eth0]/",
		"http://[fe80::1%eth0]:8080/",
		"http://ex ample.com/",
		"http://exa\tmple.com/",
		"http://ex%41mple.com/",
		"http://exa\\mple.com/",
		"http://a\u05d0.example/", // Latin then Hebrew: the bidi rule rejects it
		"http://\u2488.example/",  // a disallowed code point
		"http://exa\xffmple.com/", // not UTF-8: IDNA would encode U+FFFD
		"http://a\xc3.example/",
		"http://\xed\xa0\x80.com/",
	}
	for _, url := range tests {
		got, err := Parse(url)
		if err == nil {
			t.Errorf("Parse(%q) = %+v; want an error", url, got)
			continue
		}
		if !errors.Is(err, ErrBad) {
			t.Errorf("Parse(%q) error %v does not wrap ErrBad", url, err)
		}
		if !got.IsZero() {
			t.Errorf("Parse(%q) = %+v with error; want the zero Origin", url, got)
		}
	}
}

func TestOriginOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		scheme, authority string
		want              Origin
	}{
		{"http", "example.com", Origin{"http", "example.com", 80}},
		{"HTTP", "Example.COM", Origin{"http", "example.com", 80}},
		{"https", "example.com", Origin{"https", "example.com", 443}},
		{"HtTpS", "example.com:443", Origin{"https", "example.com", 443}},
		{"https", "example.com:8443", Origin{"https", "example.com", 8443}},
		{"https", "example.com.:8443", Origin{"https", "example.com", 8443}},
		{"https", "example.com:", Origin{"https", "example.com", 443}},
		{"http", "www.müller.eu", Origin{"http", "www.xn--mller-kva.eu", 80}},
		{"http", "www.xn--mller-kva.eu", Origin{"http", "www.xn--mller-kva.eu", 80}},
		{"http", "XN--MLLER-KVA.EU", Origin{"http", "xn--mller-kva.eu", 80}},
		{"http", "www\u3002müller\u3002eu", Origin{"http", "www.xn--mller-kva.eu", 80}},
		{"http", "\uff25\uff38\uff21\uff2d\uff30\uff2c\uff25.com", Origin{"http", "example.com", 80}},
		{"https", "[::1]:8080", Origin{"https", "::1", 8080}},
		{"https", "[::1]", Origin{"https", "::1", 443}},
		{"https", "[2001:DB8::1]:443", Origin{"https", "2001:db8::1", 443}},
		{"http", "10.0.0.1:3128", Origin{"http", "10.0.0.1", 3128}},
		{"http", "foo_bar.example", Origin{"http", "foo_bar.example", 80}},
		{"http", "FOO_BAR.example:81", Origin{"http", "foo_bar.example", 81}},
		{"https", "example.com:65535", Origin{"https", "example.com", 65535}},
		{"https", "example.com:1", Origin{"https", "example.com", 1}},
	}
	for _, tt := range tests {
		got, err := Of(tt.scheme, tt.authority)
		if err != nil {
			t.Errorf("Of(%q, %q) error: %v; want %+v", tt.scheme, tt.authority, err, tt.want)
			continue
		}
		if got != tt.want {
			t.Errorf("Of(%q, %q) = %+v; want %+v", tt.scheme, tt.authority, got, tt.want)
		}
	}
}

func TestOriginOfErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		scheme, authority string
	}{
		{"", "example.com"},
		{"ftp", "example.com"},
		{"https ", "example.com"},
		{"http", ""},
		{"http", ":80"},
		{"http", "."},
		{"http", "example.com:0"},
		{"http", "example.com:70000"},
		{"http", "example.com:+80"},
		{"http", "example.com:+0080"},
		{"http", "example.com: 80"},
		{"http", "::1"},
		{"http", "::1:80"},
		{"http", "[::1"},
		{"http", "[::1]80"},
		{"http", "[]:80"},
		{"http", "[fe80::1%eth0]:80"},
		{"http", "[::ffff:1.2.3.4%1]"},
		{"http", "a\u05d0.example"},
		{"http", "\u2488.example"},
		{"http", "exa mple.com"},
		{"http", "example.com/x"},
		{"http", "example.com?x"},
		{"http", "user@example.com"},
		{"http", "example.com.."}, // one trailing dot is the root; two are an empty label
		{"http", "example.com..:80"},
		{"http", "127.1.."},
	}
	for _, tt := range tests {
		got, err := Of(tt.scheme, tt.authority)
		if err == nil {
			t.Errorf("Of(%q, %q) = %+v; want an error", tt.scheme, tt.authority, got)
			continue
		}
		if !errors.Is(err, ErrBad) {
			t.Errorf("Of(%q, %q) error %v does not wrap ErrBad", tt.scheme, tt.authority, err)
		}
	}
}

// TestOriginEquality checks which URLs share a robots.txt (RFC 9309 section
// 2.3): the same scheme, host and port, however spelt.
func TestOriginEquality(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		same bool
	}{
		{"https://www.müller.eu/a", "https://www.xn--mller-kva.eu/b", true},
		{"https://WWW.MÜLLER.EU/", "https://www.xn--mller-kva.eu/", true},
		{"https://example.com/", "https://EXAMPLE.com./x", true},
		{"https://example.com/", "https://example.com:443/", true},
		{"http://example.com/", "http://example.com:80/", true},
		{"https://user:pw@example.com/", "https://example.com/", true},
		{"http://[::1]:8080/", "http://[0:0::1]:8080/", true},
		{"http://127.0.0.1/", "http://127.1/", true},
		{"http://127.0.0.1/", "http://2130706433/", true},
		{"http://127.0.0.1/", "http://0x7f000001/", true},
		{"http://127.0.0.1/", "http://017700000001/", true},
		{"http://127.0.0.1:80/", "http://0x7F.0.0.1./", true},
		{"http://127.0.0.1/", "http://0177.0.0.1/", true},
		{"http://127.0.0.1/", "http://127.0.0.2/", false},
		{"http://example.com/", "https://example.com/", false},
		{"http://example.com:80/", "https://example.com:80/", false},
		{"https://example.com/", "https://example.com:8443/", false},
		{"http://example.com:8080/", "http://example.com:8081/", false},
		{"https://example.com/", "https://www.example.com/", false},
	}
	for _, tt := range tests {
		a, err := Parse(tt.a)
		if err != nil {
			t.Errorf("Parse(%q) error: %v", tt.a, err)
			continue
		}
		b, err := Parse(tt.b)
		if err != nil {
			t.Errorf("Parse(%q) error: %v", tt.b, err)
			continue
		}
		if same := a == b; same != tt.same {
			t.Errorf("Parse(%q) == Parse(%q) is %v (%v, %v); want %v", tt.a, tt.b, same, a, b, tt.same)
		}
		if same := a.String() == b.String(); same != tt.same {
			t.Errorf("String() of %q and %q equal is %v (%q, %q); want %v", tt.a, tt.b, same, a, b, tt.same)
		}
	}
}

func TestOriginIsZero(t *testing.T) {
	t.Parallel()
	if !(Origin{}).IsZero() {
		t.Errorf("Origin{}.IsZero() = false; want true")
	}
	if (Origin{Scheme: "http"}).IsZero() {
		t.Errorf("Origin{Scheme: \"http\"}.IsZero() = true; want false")
	}
}

// FuzzParseOrigin checks that any URL string either fails with ErrBad
// or gives an origin that is already normal: parsing its String and its
// RobotsURL gives it back.
func FuzzParseOrigin(f *testing.F) {
	for _, s := range []string{"https://example.com/", "http://[::1]:8080/x", "http://www.müller.eu/", "http://foo_bar.example./", "https://u:p@h:443/?q#f", "http://exa\xffmple.com/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, u string) {
		o, err := Parse(u)
		if err != nil {
			if !errors.Is(err, ErrBad) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrBad", u, err)
			}
			return
		}
		for _, again := range []string{o.String(), o.RobotsURL()} {
			o2, err := Parse(again)
			if err != nil || o2 != o {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v (from %q)", again, o2, err, o, u)
			}
		}
	})
}

// TestOriginOfIPv4 checks that numeric hosts are read as the URL Standard's
// IPv4 parser reads them (as browsers, curl and many servers do), so that
// every spelling of an address gives one origin.
func TestOriginOfIPv4(t *testing.T) {
	t.Parallel()
	tests := []struct{ authority, host string }{
		{"127.0.0.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0X7F000001", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"127.0.0.1.", "127.0.0.1"},
		{"0x7F.0.0.1", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0177.0.0.01", "127.0.0.1"},
		{"0x7f.0x0.0x0.0x1", "127.0.0.1"},
		{"127.0x0.0.1.", "127.0.0.1"},
		{"0x7f.0.1:8080", "127.0.0.1"},
		{"0", "0.0.0.0"},
		{"0x", "0.0.0.0"},
		{"0x.0x.0x.0x", "0.0.0.0"},
		{"00", "0.0.0.0"},
		{"0.0.0.0", "0.0.0.0"},
		{"4294967295", "255.255.255.255"},
		{"0xffffffff", "255.255.255.255"},
		{"037777777777", "255.255.255.255"},
		{"255.16777215", "255.255.255.255"},
		{"255.255.65535", "255.255.255.255"},
		{"10.1", "10.0.0.1"},
		{"192.168.257", "192.168.1.1"},
		{"0x0a.0x000000001", "10.0.0.1"},
		{"0000000000000000000010.1", "8.0.0.1"},
		{"169.254.169.254", "169.254.169.254"},
		{"2852039166", "169.254.169.254"},
		{"1.2.3.4", "1.2.3.4"},
		// IDNA maps full-width digits and dots first, as in the URL Standard.
		{"１２７.０.０.１", "127.0.0.1"},
		{"０x7f.1", "127.0.0.1"},
		{"127。0。0。1", "127.0.0.1"},
		{"127。1。", "127.0.0.1"},
		{"０Ｘ7F.1", "127.0.0.1"},
	}
	checkHosts(t, tests)
}

// TestOriginOfIPv4Errors checks that a host whose last label is a number is
// an IPv4 address or an error, never a domain name.
func TestOriginOfIPv4Errors(t *testing.T) {
	t.Parallel()
	for _, authority := range []string{
		"999.1.1.1",
		"256.0.0.0",
		"1.256.0.0",
		"1.2.3.256",
		"1.2.3.4.5",
		"1.2.3.4.5.",
		"0.0.0.0.0",
		"1..2",
		"1.2..3",
		".1.2.3",
		"1.2.3.4..",
		"4294967296",
		"0x100000000",
		"040000000000",
		"1.16777216",
		"1.1.65536",
		"99999999999999999999999",
		"0x99999999999999999999999",
		"09",
		"08.1.1.1",
		"1.2.3.09",
		"0x7g.1",
		"a.1",
		"example.com.1",
		"example.0x",
		"example.0x1f",
		"1.2.3.4:80:80",
		"１２７.０.０.２５６",
	} {
		got, err := Of("http", authority)
		if err == nil {
			t.Errorf("Of(%q, %q) = %+v; want an error", "http", authority, got)
			continue
		}
		if !errors.Is(err, ErrBad) {
			t.Errorf("Of(%q, %q) error %v does not wrap ErrBad", "http", authority, err)
		}
	}
}

// TestOriginOfNumericLookingNames checks that a host whose last label is
// not a number is a domain name, however numeric the rest of it looks.
func TestOriginOfNumericLookingNames(t *testing.T) {
	t.Parallel()
	checkHosts(t, []struct{ authority, host string }{
		{"1.2.3.example", "1.2.3.example"},
		{"0x7f.example.com", "0x7f.example.com"},
		{"123abc", "123abc"},
		{"0x1g", "0x1g"},
		{"1.2.3.4a", "1.2.3.4a"},
		{"1.2.3.0xg", "1.2.3.0xg"},
		{"127.0.0.1x", "127.0.0.1x"},
		{"1e3", "1e3"},
		{"0b101", "0b101"},
		{"1.2.3.4-5", "1.2.3.4-5"},
		{"x0x7f", "x0x7f"},
		{"123.example.", "123.example"},
		{"1.2.3.Example", "1.2.3.example"},
	})
}

// TestOriginOfNoAlloc checks that the origin of an ordinary lower-case name
// or dotted-decimal address is found without allocating. It is not parallel:
// AllocsPerRun counts every allocation in the process.
func TestOriginOfNoAlloc(t *testing.T) {
	for _, authority := range []string{"example.com", "www.example.com:8443", "127.0.0.1:8080", "foo_bar.example"} {
		var sink Origin
		if n := testing.AllocsPerRun(100, func() { sink, _ = Of("https", authority) }); n != 0 {
			t.Errorf("Of(%q, %q) allocates %v times; want 0", "https", authority, n)
		}
		_ = sink
	}
}

// BenchmarkOriginOf is step 1 of every decision: the origin of a request's
// scheme and authority.
func BenchmarkOriginOf(b *testing.B) {
	for _, authority := range []string{"example.com", "www.example.com:8443", "Example.COM", "127.0.0.1:8080", "0x7f.1", "www.müller.eu"} {
		b.Run(authority, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Of("https", authority)
			}
		})
	}
}

// checkHosts checks that Of("http", authority) gives each host.
func checkHosts(t *testing.T, tests []struct{ authority, host string }) {
	t.Helper()
	for _, tt := range tests {
		got, err := Of("http", tt.authority)
		if err != nil {
			t.Errorf("Of(%q, %q) error: %v; want host %q", "http", tt.authority, err, tt.host)
			continue
		}
		if got.Host != tt.host {
			t.Errorf("Of(%q, %q).Host = %q; want %q", "http", tt.authority, got.Host, tt.host)
		}
	}
}

// TestOriginAuthority: the Host header form of an origin, canonical.
func TestOriginAuthority(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ url, want string }{
		{"https://Example.COM./", "example.com"},
		{"https://example.com:443/", "example.com"},
		{"http://example.com:80/", "example.com"},
		{"http://example.com:8080/", "example.com:8080"},
		{"https://[::1]:443/", "[::1]"},
		{"https://[::1]:8443/", "[::1]:8443"},
		{"http://127.1/", "127.0.0.1"},
	} {
		o, err := Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := o.Authority(); got != tt.want {
			t.Errorf("Authority(%s) = %q; want %q", tt.url, got, tt.want)
		}
	}
}
