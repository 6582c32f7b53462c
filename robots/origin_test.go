package robots

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
		got, err := ParseOrigin(tt.url)
		if err != nil {
			t.Errorf("ParseOrigin(%q) error: %v; want %+v", tt.url, err, tt.want)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseOrigin(%q) = %+v; want %+v", tt.url, got, tt.want)
		}
		if s := got.String(); s != tt.str {
			t.Errorf("ParseOrigin(%q).String() = %q; want %q", tt.url, s, tt.str)
		}
		if s := got.HostPort(); s != tt.hostPort {
			t.Errorf("ParseOrigin(%q).HostPort() = %q; want %q", tt.url, s, tt.hostPort)
		}
		if s := got.RobotsURL(); s != tt.robotsURL {
			t.Errorf("ParseOrigin(%q).RobotsURL() = %q; want %q", tt.url, s, tt.robotsURL)
		}
		if got.IsZero() {
			t.Errorf("ParseOrigin(%q).IsZero() = true; want false", tt.url)
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
		got, err := ParseOrigin(url)
		if err == nil {
			t.Errorf("ParseOrigin(%q) = %+v; want an error", url, got)
			continue
		}
		if !errors.Is(err, ErrBadOrigin) {
			t.Errorf("ParseOrigin(%q) error %v does not wrap ErrBadOrigin", url, err)
		}
		if !got.IsZero() {
			t.Errorf("ParseOrigin(%q) = %+v with error; want the zero Origin", url, got)
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
		got, err := OriginOf(tt.scheme, tt.authority)
		if err != nil {
			t.Errorf("OriginOf(%q, %q) error: %v; want %+v", tt.scheme, tt.authority, err, tt.want)
			continue
		}
		if got != tt.want {
			t.Errorf("OriginOf(%q, %q) = %+v; want %+v", tt.scheme, tt.authority, got, tt.want)
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
	}
	for _, tt := range tests {
		got, err := OriginOf(tt.scheme, tt.authority)
		if err == nil {
			t.Errorf("OriginOf(%q, %q) = %+v; want an error", tt.scheme, tt.authority, got)
			continue
		}
		if !errors.Is(err, ErrBadOrigin) {
			t.Errorf("OriginOf(%q, %q) error %v does not wrap ErrBadOrigin", tt.scheme, tt.authority, err)
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
		{"http://example.com/", "https://example.com/", false},
		{"http://example.com:80/", "https://example.com:80/", false},
		{"https://example.com/", "https://example.com:8443/", false},
		{"http://example.com:8080/", "http://example.com:8081/", false},
		{"https://example.com/", "https://www.example.com/", false},
	}
	for _, tt := range tests {
		a, err := ParseOrigin(tt.a)
		if err != nil {
			t.Errorf("ParseOrigin(%q) error: %v", tt.a, err)
			continue
		}
		b, err := ParseOrigin(tt.b)
		if err != nil {
			t.Errorf("ParseOrigin(%q) error: %v", tt.b, err)
			continue
		}
		if same := a == b; same != tt.same {
			t.Errorf("ParseOrigin(%q) == ParseOrigin(%q) is %v (%v, %v); want %v", tt.a, tt.b, same, a, b, tt.same)
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

// FuzzParseOrigin checks that any URL string either fails with ErrBadOrigin
// or gives an origin that is already normal: parsing its String and its
// RobotsURL gives it back.
func FuzzParseOrigin(f *testing.F) {
	for _, s := range []string{"https://example.com/", "http://[::1]:8080/x", "http://www.müller.eu/", "http://foo_bar.example./", "https://u:p@h:443/?q#f", "http://exa\xffmple.com/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, u string) {
		o, err := ParseOrigin(u)
		if err != nil {
			if !errors.Is(err, ErrBadOrigin) {
				t.Fatalf("ParseOrigin(%q) error %v does not wrap ErrBadOrigin", u, err)
			}
			return
		}
		for _, again := range []string{o.String(), o.RobotsURL()} {
			o2, err := ParseOrigin(again)
			if err != nil || o2 != o {
				t.Fatalf("ParseOrigin(%q) = %+v, %v; want %+v (from %q)", again, o2, err, o, u)
			}
		}
	})
}
