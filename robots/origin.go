package robots

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
	Host   string // lower-case ASCII (IDNA punycode), no trailing dot; IPv6 without brackets
	Port   int    // always set: 80 and 443 are explicit
}

// ErrBadOrigin is wrapped by the errors of [ParseOrigin] and [OriginOf].
var ErrBadOrigin = errors.New("bad origin")

// ParseOrigin returns the origin of an absolute http or https URL.
func ParseOrigin(rawURL string) (Origin, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return Origin{}, fmt.Errorf("%w: %q is not an absolute URL", ErrBadOrigin, rawURL)
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = rest[at+1:] // userinfo is not part of the origin
	}
	return OriginOf(scheme, rest)
}

// OriginOf returns the origin of scheme ("http" or "https", any case) and
// an authority ("host", "host:port", "[v6]:port"), as in a URL or a CONNECT
// request. The host is mapped to ASCII with IDNA's lookup profile and
// lower-cased; an ASCII host that IDNA rejects (such as "foo_bar.example")
// is kept as it is, lower-cased.
func OriginOf(scheme, authority string) (Origin, error) {
	var o Origin
	switch strings.ToLower(scheme) {
	case "http":
		o.Scheme, o.Port = "http", 80
	case "https":
		o.Scheme, o.Port = "https", 443
	default:
		return Origin{}, fmt.Errorf("%w: scheme %q is not http or https", ErrBadOrigin, scheme)
	}
	host, port := authority, ""
	if strings.HasPrefix(authority, "[") {
		end := strings.IndexByte(authority, ']')
		if end < 0 {
			return Origin{}, fmt.Errorf("%w: %q: missing ']'", ErrBadOrigin, authority)
		}
		host, port = authority[1:end], authority[end+1:]
		if port != "" && port[0] != ':' {
			return Origin{}, fmt.Errorf("%w: %q: junk after ']'", ErrBadOrigin, authority)
		}
		port = strings.TrimPrefix(port, ":")
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return Origin{}, fmt.Errorf("%w: %q is not an IPv6 address", ErrBadOrigin, host)
		}
		host = a.String()
	} else {
		if i := strings.LastIndexByte(authority, ':'); i >= 0 {
			host, port = authority[:i], authority[i+1:]
		}
		if strings.ContainsRune(host, ':') {
			return Origin{}, fmt.Errorf("%w: %q: IPv6 addresses need brackets", ErrBadOrigin, authority)
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
			return Origin{}, fmt.Errorf("%w: bad port %q", ErrBadOrigin, port)
		}
		o.Port = p
	}
	o.Host = host
	return o, nil
}

func normalizeHost(host string) (string, error) {
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		return "", fmt.Errorf("%w: empty host", ErrBadOrigin)
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		return a.String(), nil
	}
	if isPrintableASCII(host) {
		// IDNA maps an ASCII host to itself, lower-cased, or rejects it
		// (as "foo_bar.example"), when it is used lower-cased as it is:
		// the same answer either way, without IDNA's cost on every request.
		return checkHost(strings.ToLower(host), host)
	}
	if !utf8.ValidString(host) {
		// IDNA would map the bad bytes to U+FFFD and encode that.
		return "", fmt.Errorf("%w: host %q is not UTF-8", ErrBadOrigin, host)
	}
	ascii, err := idna.Lookup.ToASCII(host)
	if err != nil {
		if !isPrintableASCII(host) {
			return "", fmt.Errorf("%w: host %q: %v", ErrBadOrigin, host, err)
		}
		ascii = host // e.g. "foo_bar.example": used as it is
	}
	return checkHost(strings.ToLower(ascii), host)
}

// checkHost refuses hosts with empty labels or characters no host has.
func checkHost(ascii, host string) (string, error) {
	ascii = strings.TrimSuffix(ascii, ".")
	if ascii == "" || strings.HasPrefix(ascii, ".") || strings.HasSuffix(ascii, ".") || strings.Contains(ascii, "..") || strings.ContainsAny(ascii, " /\\?#@[]%") {
		return "", fmt.Errorf("%w: bad host %q", ErrBadOrigin, host)
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
func (o Origin) RobotsURL() string {
	host := o.HostPort()
	if o.defaultPort() {
		host = o.Host
		if strings.ContainsRune(host, ':') {
			host = "[" + host + "]"
		}
	}
	return o.Scheme + "://" + host + "/robots.txt"
}
