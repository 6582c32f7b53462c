package robots

import (
	"bytes"
	"strings"
)

// PathOf returns the path, params and query of a URL, without scheme,
// authority or fragment and starting with "/", exactly as the reference's
// GetPathParamsQuery: "http://example.com/a?b#c" gives "/a?b",
// "example.com?a" gives "/?a" and "" gives "/". Nothing is decoded or
// normalised.
func PathOf(url string) string {
	start := 0
	if strings.HasPrefix(url, "//") {
		start = 2
	}
	early := indexAnyFrom(url, start, "/?;")
	protoEnd := indexFromStr(url, start, "://")
	if early >= 0 && (protoEnd < 0 || early < protoEnd) {
		protoEnd = -1 // a path, params or query before "://": no scheme
	}
	if protoEnd < 0 {
		protoEnd = start
	} else {
		protoEnd += 3
	}
	pathStart := indexAnyFrom(url, protoEnd, "/?;")
	if pathStart < 0 {
		return "/"
	}
	end := len(url)
	if hash := indexFromStr(url, start, "#"); hash >= 0 {
		if hash < pathStart {
			return "/"
		}
		end = hash
	}
	if url[pathStart] != '/' {
		return "/" + url[pathStart:end]
	}
	return url[pathStart:end]
}

func indexAnyFrom(s string, from int, chars string) int {
	if i := strings.IndexAny(s[from:], chars); i >= 0 {
		return from + i
	}
	return -1
}

func indexFromStr(s string, from int, sub string) int {
	if i := strings.Index(s[from:], sub); i >= 0 {
		return from + i
	}
	return -1
}

// Normalize returns a request target (path, params and query) in the one
// form the proxy matches, so that equivalent spellings of a path cannot slip
// past a rule: escapes of unreserved characters (ALPHA / DIGIT / "-._~",
// RFC 3986 section 2.3) are decoded, other escapes upper-cased, bytes ≥ 0x80,
// controls, spaces and the characters a URI cannot hold raw (`"<>\^{|}` and
// backquote) percent-encoded, and dot segments removed from the path
// (not the query); a "%" that starts no escape becomes "%25". "//", letter
// case and "%2F" are kept as sent. Normalize is idempotent, and returns
// target itself, without allocating, when nothing changes.
func Normalize(target string) string { return normalize(target, false) }

func normalize(s string, pattern bool) string {
	if !needsNormalizing(s) {
		return s
	}
	path, query := s, ""
	if q := strings.IndexByte(s, '?'); q >= 0 {
		path, query = s[:q], s[q:]
	}
	b := make([]byte, 0, len(s)+8)
	b = appendNormalEscapes(b, path, true)
	b = removeDotSegments(b)
	b = appendNormalEscapes(b, query, false)
	return string(b)
}

// needsNormalizing reports exactly whether normalize would change s, so
// that the common case returns s without allocating.
func needsNormalizing(s string) bool {
	inPath := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case mustEscape(c):
			return true
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return true // a lone "%" becomes "%25"
			}
			if d := unhex(s[i+1])<<4 | unhex(s[i+2]); isUnreserved(d) || inPath && pathDecodable(d) || upper(s[i+1]) != s[i+1] || upper(s[i+2]) != s[i+2] {
				return true
			}
			i += 2
		case c == '?':
			inPath = false
		case c == '.' && inPath && (i == 0 || s[i-1] == '/'):
			j := i + 1
			if j < len(s) && s[j] == '.' {
				j++
			}
			if j == len(s) || s[j] == '/' || s[j] == '?' {
				return true // a dot segment
			}
		}
	}
	return false
}

// mustEscape reports whether Normalize percent-encodes c: controls, space,
// bytes >= 0x7F, and the characters a URI can never hold as they are (RFC
// 3986: `"` `<` `>` `\` `^` backquote `{` `|` `}`). A client must send these
// encoded (the proxy refuses them raw in a path), so a rule written with
// them raw ("Disallow: /a{b") must match their encoded form ("/a%7Bb").
func mustEscape(c byte) bool {
	// Bit c of the 128-bit set: controls, space, DEL and `"<>\^{|}`.
	const lo, hi uint64 = 0x50000005ffffffff, 0xb800000150000000
	switch {
	case c < 64:
		return lo>>c&1 != 0
	case c < 128:
		return hi>>(c-64)&1 != 0
	}
	return true
}

// pathDecodable reports whether an escape of c in a path is decoded by
// Normalize: the reserved characters a server reads the same written
// either way in a path ("/wiki/Special%3ASearch" is "/wiki/Special:Search"
// to every server): ":", "@", "[", "]" and the sub-delims but "$" and "*",
// which are the pattern syntax of robots.txt rules. "/", "?", "#" and "%"
// keep their escapes (they delimit), and so does "\" (a lenient reading).
func pathDecodable(c byte) bool {
	switch c {
	case ':', '@', '[', ']', '!', '&', '\'', '(', ')', '+', ',', ';', '=':
		return true
	}
	return false
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// appendNormalEscapes appends s with its escapes in Normalize's form: those
// of unreserved characters decoded, and, in a path (inPath), those of the
// reserved characters every server decodes alike (see pathDecodable);
// others upper-cased; bytes mustEscape names encoded.
func appendNormalEscapes(b []byte, s string, inPath bool) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			if d := unhex(s[i+1])<<4 | unhex(s[i+2]); isUnreserved(d) || inPath && pathDecodable(d) {
				b = append(b, d)
			} else {
				b = append(b, '%', upper(s[i+1]), upper(s[i+2]))
			}
			i += 2
		case mustEscape(c) || c == '%':
			// A "%" that starts no escape is encoded too, so that no escape
			// can appear by decoding the bytes after it: one pass is final.
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		default:
			b = append(b, c)
		}
	}
	return b
}

// removeDotSegments applies RFC 3986 section 5.2.4 to the path in b.
func removeDotSegments(in []byte) []byte {
	if !hasDotSegment(in) {
		return in
	}
	// Each step looks at the start of in only, and moves it on: linear in
	// the path (converting in to a string at each step would copy the rest
	// of it every time).
	out := make([]byte, 0, len(in))
	for len(in) > 0 {
		switch {
		case bytes.HasPrefix(in, []byte("../")):
			in = in[3:]
		case bytes.HasPrefix(in, []byte("./")):
			in = in[2:]
		case bytes.HasPrefix(in, []byte("/./")):
			in = in[2:]
		case string(in) == "/.":
			in = append(in[:0], '/')
		case bytes.HasPrefix(in, []byte("/../")):
			in = in[3:]
			out = dropLastSegment(out)
		case string(in) == "/..":
			in = append(in[:0], '/')
			out = dropLastSegment(out)
		case string(in) == "." || string(in) == "..":
			in = in[:0]
		default:
			n := 0
			if in[0] == '/' {
				n = 1
			}
			if j := bytes.IndexByte(in[n:], '/'); j >= 0 {
				n += j
			} else {
				n = len(in)
			}
			out = append(out, in[:n]...)
			in = in[n:]
		}
	}
	return out
}

func dropLastSegment(out []byte) []byte {
	for i := len(out) - 1; i >= 0; i-- {
		if out[i] == '/' {
			return out[:i]
		}
	}
	return out[:0]
}

func hasDotSegment(p []byte) bool {
	for i := 0; i < len(p); i++ {
		if p[i] != '.' || (i > 0 && p[i-1] != '/') {
			continue
		}
		j := i + 1
		if j < len(p) && p[j] == '.' {
			j++
		}
		if j == len(p) || p[j] == '/' {
			return true
		}
	}
	return false
}

// NormalEscapes returns path with its escapes as Normalize writes them
// (so "%2e" is "." and "%2f" is "%2F"), its dot segments not yet resolved:
// Normalize's first step, for readings of a path other than RFC 3986's
// (robots/lenient).
func NormalEscapes(path string) string {
	return string(appendNormalEscapes(make([]byte, 0, len(path)+8), path, true))
}

// RemoveDotSegments resolves the dot segments of path, a path in
// Normalize's escapes (RFC 3986 section 5.2.4), in place.
func RemoveDotSegments(path []byte) []byte { return removeDotSegments(path) }

// AppendNormalQuery appends query (from its "?", as sent) to b in
// Normalize's form.
func AppendNormalQuery(b []byte, query string) []byte { return appendNormalEscapes(b, query, false) }
