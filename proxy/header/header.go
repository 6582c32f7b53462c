// Package header holds a proxy's rules for HTTP header fields: which are
// hop-by-hop, which a trailer may carry, which are robotsgate's own
// (X-Robots-Gate*), and when a request asks for a WebSocket. The listener
// and the loop inside tunnels share them, so that both forward the same
// fields.
package header

import (
	"net/http"
	"strings"
)

// IsWebSocketUpgrade reports whether h asks for (or, on a 101, agrees to)
// a WebSocket upgrade: the one protocol switch robotsgate relays.
func IsWebSocketUpgrade(h http.Header) bool {
	return len(h["Connection"]) > 0 && Has(h, "Connection", "upgrade") && Has(h, "Upgrade", "websocket")
}

// Has reports whether a comma-separated list in any of h's name fields
// holds token, case aside.
func Has(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// ConnectionNamed returns the field names a Connection header lists.
func ConnectionNamed(h http.Header) []string {
	var names []string
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				names = append(names, name)
			}
		}
	}
	return names
}

// RemoveHopByHop deletes the hop-by-hop fields that must not be forwarded
// (RFC 9110 section 7.6.1), and those named in Connection. With upgrade (a
// WebSocket upgrade request, or a 101 answer to one) Connection and
// Upgrade are kept; without it they go too, so that no other protocol is
// switched to and no client is left holding a connection that was never
// upgraded.
func RemoveHopByHop(h http.Header, upgrade bool) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.TrimSpace(name)
			if name != "" && !(upgrade && strings.EqualFold(name, "Upgrade")) {
				h.Del(name)
			}
		}
	}
	// Canonical names, deleted from the map directly: Header.Del would
	// canonicalise each one again on every request.
	for _, name := range [...]string{"Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer"} {
		delete(h, name)
	}
	if !upgrade {
		delete(h, "Connection")
		delete(h, "Upgrade")
	}
}

// TrailerNames is the value of a Trailer field that announces t's names.
func TrailerNames(t http.Header) string {
	names := make([]string, 0, len(t))
	for k := range t {
		names = append(names, k)
	}
	return strings.Join(names, ", ")
}

// FilterTrailer deletes from a request's trailer the fields that never
// reach an origin as headers (hop-by-hop fields, those connNamed names,
// Proxy-Authorization, robotsgate's own), and those a trailer may not
// carry (RFC 9110 section 6.5.1: framing, routing, authentication, request
// modifiers and content metadata, which a recipient must read before the
// content): a trailer is a header that comes late, under the same rules.
func FilterTrailer(t http.Header, connNamed []string) {
	for k := range t {
		if !trailerAllowed(k) {
			delete(t, k)
		}
	}
	for _, name := range connNamed {
		t.Del(name)
	}
}

// trailerAllowed reports whether a field may go upstream in a request's
// trailer.
func trailerAllowed(name string) bool {
	switch strings.ToLower(name) {
	case "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
		"host", "authorization", "cookie", "cookie2", "forwarded", "via", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto",
		"content-length", "content-type", "content-encoding", "content-range",
		"expect", "max-forwards", "range", "if-match", "if-none-match", "if-modified-since", "if-unmodified-since",
		"if-range", "cache-control", "pragma", "signature", "signature-input", "signature-agent":
		return false
	}
	lower := strings.ToLower(name)
	return !strings.HasPrefix(lower, "proxy-") && !IsGateField(name)
}

// IsGateField reports whether a field name is X-Robots-Gate or one of its
// X-Robots-Gate-* fields, in any case and with "_" for "-": robotsgate's
// own, never an origin's or a client's to send on.
func IsGateField(name string) bool {
	const prefix = "x-robots-gate"
	return spelledAs(name, prefix) && (len(name) == len(prefix) || name[len(prefix)] == '-' || name[len(prefix)] == '_')
}

// SameName reports whether a field name is name (as written in lower
// case, "crawler-exact-price") in any spelling a server may read as it:
// in any case, and with "_" for "-" (servers behind CGI-style gateways
// read X_Foo as X-Foo). A field robotsgate removes or replaces is removed
// in every such spelling, or a client could pass it on beside
// robotsgate's own.
func SameName(k, name string) bool {
	return len(k) == len(name) && spelledAs(k, name)
}

// RemoveSpellings deletes from h every field that is one of names in any
// spelling (SameName). names are written in lower case.
func RemoveSpellings(h http.Header, names ...string) {
	for k := range h {
		for _, n := range names {
			if SameName(k, n) {
				delete(h, k)
				break
			}
		}
	}
}

// spelledAs reports whether name starts with prefix (lower case) in any
// case, "_" read as "-".
func spelledAs(name, prefix string) bool {
	if len(name) < len(prefix) {
		return false
	}
	for i := range len(prefix) {
		c := name[i]
		switch {
		case c == '_':
			c = '-'
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

// RemoveGateFields deletes X-Robots-Gate and every X-Robots-Gate-* field
// from an origin's response header or trailer: a client can trust that
// those it sees are robotsgate's (docs/security.md, "Security model").
func RemoveGateFields(h http.Header) {
	for k := range h {
		if IsGateField(k) {
			delete(h, k)
		}
	}
}
