// Package origin is RFC 9309's scope of one robots.txt file: an Origin
// (scheme, host, port), read from an absolute URL (Parse) or from a scheme
// and an authority (Of), in one normal form, so that two URLs share a
// robots.txt exactly when their Origins are equal; and the URLs built
// from it. It is robots/fetch's cache key, and knows nothing of fetching.
package origin

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Origin is the scope of one robots.txt file (RFC 9309 section 2.3): a
// scheme, a host and a port. Two URLs share a robots.txt exactly when their
// Origins are equal, so an Origin is also the cache key.
type Origin struct {
	Scheme string // "http" or "https"
	Host   string // lower-case ASCII (IDNA punycode), no trailing dot; IPv4 in dotted decimal; IPv6 without brackets
	Port   int    // always set: 80 and 443 are explicit
}

// ErrBad is wrapped by the errors of [Parse] and [Of].
var ErrBad = errors.New("bad origin")

// Parse returns the origin of an absolute http or https URL.
func Parse(rawURL string) (Origin, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return Origin{}, fmt.Errorf("%w: %q is not an absolute URL", ErrBad, rawURL)
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = rest[at+1:] // userinfo is not part of the origin
	}
	return Of(scheme, rest)
}

// Of returns the origin of scheme ("http" or "https", any case) and
// an authority ("host", "host:port", "[v6]:port"), as in a URL or a CONNECT
// request. The host is mapped to ASCII with IDNA's lookup profile and
// lower-cased; an ASCII host that IDNA rejects (such as "foo_bar.example")
// is kept as it is, lower-cased. A host whose last label is a number is read
// as the WHATWG URL Standard's IPv4 parser reads it, as browsers do:
// "127.1", "2130706433", "0x7f000001", "0177.0.0.1" and "127.0.0.1." are all
// "127.0.0.1", and one that is no address (such as "999.1.1.1" or "a.1") is
// an error, never a domain name.
func Of(scheme, authority string) (Origin, error) {
	var o Origin
	switch strings.ToLower(scheme) {
	case "http":
		o.Scheme, o.Port = "http", 80
	case "https":
		o.Scheme, o.Port = "https", 443
	default:
		return Origin{}, fmt.Errorf("%w: scheme %q is not http or https", ErrBad, scheme)
	}
	host, port := authority, ""
	if strings.HasPrefix(authority, "[") {
		end := strings.IndexByte(authority, ']')
		if end < 0 {
			return Origin{}, fmt.Errorf("%w: %q: missing ']'", ErrBad, authority)
		}
		host, port = authority[1:end], authority[end+1:]
		if port != "" && port[0] != ':' {
			return Origin{}, fmt.Errorf("%w: %q: junk after ']'", ErrBad, authority)
		}
		port = strings.TrimPrefix(port, ":")
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return Origin{}, fmt.Errorf("%w: %q is not an IPv6 address", ErrBad, host)
		}
		host = a.String()
	} else {
		if i := strings.LastIndexByte(authority, ':'); i >= 0 {
			host, port = authority[:i], authority[i+1:]
		}
		if strings.ContainsRune(host, ':') {
			return Origin{}, fmt.Errorf("%w: %q: IPv6 addresses need brackets", ErrBad, authority)
		}
		h, err := normalizeHost(host)
		if err != nil {
			return Origin{}, err
		}
		host = h
	}
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 || port[0] == '+' {
			return Origin{}, fmt.Errorf("%w: bad port %q", ErrBad, port)
		}
		o.Port = p
	}
	o.Host = host
	return o, nil
}

// normalizeHost returns the normal form of a host that is not an IPv6
// literal: a numeric IPv4 host in dotted decimal, any other host in lower-case
// ASCII, with no trailing dot.
func normalizeHost(host string) (string, error) {
	if isPrintableASCII(host) {
		// IDNA maps an ASCII host to itself, lower-cased, or rejects it
		// (as "foo_bar.example"), when it is used lower-cased as it is:
		// the same answer either way, without IDNA's cost on every request.
		return asciiHost(strings.ToLower(host), host)
	}
	if !utf8.ValidString(host) {
		// IDNA would map the bad bytes to U+FFFD and encode that.
		return "", fmt.Errorf("%w: host %q is not UTF-8", ErrBad, host)
	}
	ascii, err := idna.Lookup.ToASCII(host)
	if err != nil {
		return "", fmt.Errorf("%w: host %q: %v", ErrBad, host, err)
	}
	// IDNA maps full-width digits and dots to ASCII ones first, as in the
	// URL Standard: "１２７。１" is a number too.
	return asciiHost(strings.ToLower(ascii), host)
}

// asciiHost returns the normal form of a lower-case ASCII host (orig is the
// host as given, for errors): without its one trailing dot, and in dotted
// decimal if it ends in a number.
func asciiHost(ascii, orig string) (string, error) {
	ascii = strings.TrimSuffix(ascii, ".")
	if ascii == "" {
		return "", fmt.Errorf("%w: empty host", ErrBad)
	}
	if endsInNumber(ascii) {
		return parseIPv4(ascii, orig)
	}
	return checkHost(ascii, orig)
}

// endsInNumber reports whether a host, lower-cased and without its trailing
// dot, must be read as an IPv4 address: whether its last label is decimal
// digits, or "0x" and hex digits (the URL Standard's "ends in a number
// checker"). Such a host is an address or an error, never a domain name.
func endsInNumber(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if hex, ok := strings.CutPrefix(last, "0x"); ok {
		last = hex
		for i := 0; i < len(last); i++ {
			if _, ok := hexValue(last[i]); !ok {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

// parseIPv4 reads a host that ends in a number, lower-cased and without its
// trailing dot, as the URL Standard's "IPv4 parser" does, and returns the
// address in dotted decimal: "127.1", "0x7f000001", "017700000001" and
// "0x7f.0.0.1" are all "127.0.0.1". It returns host itself when that is
// already the dotted decimal form.
func parseIPv4(host, orig string) (string, error) {
	var nums [4]uint64
	n := 0
	canonical := true
	for rest := host; ; {
		part, tail, more := strings.Cut(rest, ".")
		if n == len(nums) {
			return "", fmt.Errorf("%w: host %q: an IPv4 address has at most 4 parts", ErrBad, orig)
		}
		v, decimal, ok := parseIPv4Number(part)
		if !ok {
			return "", fmt.Errorf("%w: host %q: %q is not an IPv4 number", ErrBad, orig, part)
		}
		canonical = canonical && decimal
		nums[n] = v
		n++
		if !more {
			break
		}
		rest = tail
	}
	for _, v := range nums[:n-1] {
		if v > 255 {
			return "", fmt.Errorf("%w: host %q: IPv4 part out of range", ErrBad, orig)
		}
	}
	addr := nums[n-1]
	if addr >= 1<<(8*(5-n)) {
		return "", fmt.Errorf("%w: host %q: IPv4 address out of range", ErrBad, orig)
	}
	for i, v := range nums[:n-1] {
		addr |= v << (8 * (3 - i))
	}
	if canonical && n == 4 {
		return host, nil // already "a.b.c.d", each part decimal in 0-255
	}
	return netip.AddrFrom4([4]byte{byte(addr >> 24), byte(addr >> 16), byte(addr >> 8), byte(addr)}).String(), nil
}

// parseIPv4Number reads one part of an IPv4 host as the URL Standard's "IPv4
// number parser" does: "0x" and hex digits ("0x" alone is 0), "0" and octal
// digits, or decimal digits. Values above 2³² are reported as 2³² + 1, which
// is out of range wherever it is. decimal reports whether s is the part's
// dotted decimal spelling: decimal digits without a leading zero.
func parseIPv4Number(s string) (v uint64, decimal, ok bool) {
	if s == "" {
		return 0, false, false
	}
	base := uint64(10)
	switch {
	case len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'):
		base, s = 16, s[2:]
	case len(s) >= 2 && s[0] == '0':
		base, s = 8, s[1:]
	default:
		decimal = true
	}
	for i := 0; i < len(s); i++ {
		d, ok := hexValue(s[i])
		if !ok || uint64(d) >= base {
			return 0, false, false
		}
		if v = v*base + uint64(d); v > 1<<32 {
			v = 1<<32 + 1 // stays too large; no overflow
		}
	}
	return v, decimal, true
}

// checkHost refuses hosts with empty labels or characters no host has.
func checkHost(ascii, host string) (string, error) {
	if ascii == "" || strings.HasPrefix(ascii, ".") || strings.HasSuffix(ascii, ".") || strings.Contains(ascii, "..") || strings.ContainsAny(ascii, " /\\?#@[]%") {
		return "", fmt.Errorf("%w: bad host %q", ErrBad, host)
	}
	return ascii, nil
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7F {
			return false
		}
	}
	return true
}

func (o Origin) defaultPort() bool {
	return o.Scheme == "http" && o.Port == 80 || o.Scheme == "https" && o.Port == 443
}

// IsZero reports whether o is the zero Origin.
func (o Origin) IsZero() bool { return o == Origin{} }

// HostPort returns "host:port", with IPv6 hosts bracketed: the address to
// dial, or a CONNECT authority.
func (o Origin) HostPort() string {
	return net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
}

// String returns the origin with its port always written:
// "https://example.com:443", "http://[::1]:8080".
func (o Origin) String() string {
	return o.Scheme + "://" + o.HostPort()
}

// RobotsURL returns the URL of the origin's robots.txt, leaving a default
// port out: "https://example.com/robots.txt".
func (o Origin) RobotsURL() string { return o.URL("/robots.txt") }

// LicenseURL returns the URL a License line of o's robots.txt names (RSL
// 1.0): an absolute http or https URL as written; a path ("/license.xml")
// or a scheme-relative reference ("//cdn.example/l.xml") resolved against
// o, as a browser would (RSL asks for absolute URLs, but a site that wrote
// a path still named a licence). ok is false for anything else, which
// names no licence robotsgate can fetch.
func (o Origin) LicenseURL(lic string) (url string, ok bool) {
	lower := strings.ToLower(lic)
	switch {
	case strings.HasPrefix(lower, "https://") || strings.HasPrefix(lower, "http://"):
		return lic, true
	case strings.HasPrefix(lic, "//"):
		return o.Scheme + ":" + lic, true
	case strings.HasPrefix(lic, "/"):
		return o.URL(lic), true
	}
	return "", false
}

// Authority returns the origin as a Host header names it (RFC 9110
// section 7.2): its host, in brackets when an IPv6 address, with the port
// only when it is not the scheme's default: "example.com", "[::1]:8080".
func (o Origin) Authority() string {
	switch {
	case !o.defaultPort():
		return o.HostPort()
	case strings.IndexByte(o.Host, ':') >= 0:
		return "[" + o.Host + "]"
	}
	return o.Host
}

// URL returns the URL of target (a path, params and query) at o, leaving a
// default port out: "https://example.com/a?b", "http://[::1]:8080/".
func (o Origin) URL(target string) string {
	return o.Scheme + "://" + o.Authority() + target
}

// hexValue returns the value of a hexadecimal digit.
func hexValue(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
