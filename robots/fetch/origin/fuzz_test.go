package origin

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// FuzzOriginOf checks that any scheme and authority either fail with
// ErrBad or give an origin that is already normal: Of of its
// HostPort gives it back; an IPv4 host is in dotted decimal; and no host
// that is not an IPv4 address ends in a number (WHATWG URL hosts).
func FuzzOriginOf(f *testing.F) {
	for _, a := range []string{
		"example.com", "example.com:8080", "[::1]:8080", "www.müller.eu", "foo_bar.example.",
		"127.0.0.1", "127.1", "2130706433", "0x7f000001", "017700000001", "0x7f.1", "127.0.0.1.",
		"0x7F.0.0.1", "0177.0.0.1", "999.1.1.1", "1.2.3.4.5", "0x1g", "1.2.3.example", "0x",
		"0x7f.example.com", "123abc", "1..2", "０x7f.1", "127。0。0。1", "4294967295:81", "[::ffff:127.0.0.1]",
	} {
		f.Add("http", a)
	}
	f.Add("HTTPS", "0X7F.1:443")
	f.Fuzz(func(t *testing.T, scheme, authority string) {
		o, err := Of(scheme, authority)
		if err != nil {
			if !errors.Is(err, ErrBad) {
				t.Fatalf("Of(%q, %q) error %v does not wrap ErrBad", scheme, authority, err)
			}
			return
		}
		if o2, err := Of(o.Scheme, o.HostPort()); err != nil || o2 != o {
			t.Fatalf("Of(%q, %q) = %+v, %v; want %+v (from %q, %q)", o.Scheme, o.HostPort(), o2, err, o, scheme, authority)
		}
		a, err := netip.ParseAddr(o.Host)
		if err == nil && a.Is4() && a.String() != o.Host {
			t.Fatalf("Of(%q, %q).Host = %q; want %q", scheme, authority, o.Host, a.String())
		}
		if (err != nil || !a.Is4()) && !strings.Contains(o.Host, ":") && endsInNumber(o.Host) {
			t.Fatalf("Of(%q, %q).Host = %q ends in a number and is not an IPv4 address", scheme, authority, o.Host)
		}
	})
}
