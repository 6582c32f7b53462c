package robots

import "strings"

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
// controls and spaces percent-encoded, and dot segments removed from the path
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
	b = appendNormalEscapes(b, path)
	b = removeDotSegments(b)
	b = appendNormalEscapes(b, query)
	return string(b)
}

// needsNormalizing reports exactly whether normalize would change s, so
// that the common case returns s without allocating.
func needsNormalizing(s string) bool {
	inPath := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c <= ' ' || c >= 0x7F:
			return true
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return true // a lone "%" becomes "%25"
			}
			if isUnreserved(unhex(s[i+1])<<4|unhex(s[i+2])) || upper(s[i+1]) != s[i+1] || upper(s[i+2]) != s[i+2] {
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

func appendNormalEscapes(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			if d := unhex(s[i+1])<<4 | unhex(s[i+2]); isUnreserved(d) {
				b = append(b, d)
			} else {
				b = append(b, '%', upper(s[i+1]), upper(s[i+2]))
			}
			i += 2
		case c <= ' ' || c >= 0x7F || c == '%':
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
	out := make([]byte, 0, len(in))
	for len(in) > 0 {
		s := string(in) // no allocation: compared, not kept
		switch {
		case strings.HasPrefix(s, "../"):
			in = in[3:]
		case strings.HasPrefix(s, "./"):
			in = in[2:]
		case strings.HasPrefix(s, "/./"):
			in = in[2:]
		case s == "/.":
			in = append(in[:0], '/')
		case strings.HasPrefix(s, "/../"):
			in = in[3:]
			out = dropLastSegment(out)
		case s == "/..":
			in = append(in[:0], '/')
			out = dropLastSegment(out)
		case s == "." || s == "..":
			in = in[:0]
		default:
			n := 0
			if in[0] == '/' {
				n = 1
			}
			if j := strings.IndexByte(s[n:], '/'); j >= 0 {
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

// Lenient returns the path a lenient origin server would serve for target,
// a raw request target (path, params and query, as sent), in Normalize's
// form, so that it can be decided by a file parsed with [WithNormalization].
// It models what servers such as nginx, Apache httpd, Tomcat, IIS and
// Python's http.server do with the path (the query is only normalised), in
// this order: escapes are normalised as Normalize does (so "%2e" is "."),
// "%2F", "%5C" and "%3B" are decoded (one pass: "%252F" stays), "\" is
// read as "/", ";params" are dropped from every segment ("/..;/" is
// "/../"), runs of "/" are merged, and only then are dot segments resolved
// (RFC 3986 section 5.2.4): resolving them first, as Normalize does, would
// let ".." consume a segment that such a server splits, merges or drops.
// So "/public/..%2Fprivate/x", "/public/..\private/x",
// "/public/..;/private/x", "//private/x", "/a//../private/x" and
// "/a/b%2F../../private/x" all give "/private/x". The result always starts
// with "/".
//
// This is not Google's matching, which takes the path as sent: [Group.Test],
// [Robots.TestURL] and robotsgate's "check -exact" never use Lenient. The
// proxy decides both readings of a request, Normalize(target) and
// Lenient(target), and blocks it when either is disallowed (DESIGN.md,
// "Deciding a request", step 7): a path that one server would read as a
// disallowed one is ambiguous.
//
// Lenient is idempotent and its result is in Normalize's form. When target
// holds nothing a lenient server reads differently, it is Normalize(target),
// which is target itself, without allocating, when that is already normal.
func Lenient(target string) string {
	path, query := target, ""
	if q := strings.IndexByte(target, '?'); q >= 0 {
		path, query = target[:q], target[q:]
	}
	if !needsLenient(path) {
		return Normalize(target)
	}
	escaped := string(appendNormalEscapes(make([]byte, 0, len(path)+8), path))
	b := make([]byte, 1, len(target)+8)
	b[0] = '/' // the result starts with "/"; a "/" that follows is merged
	params := false
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		if c == '%' {
			if d := escapedSeparator(escaped, i); d != 0 {
				c = d
				i += 2
			}
		}
		if c == '\\' {
			c = '/'
		}
		switch {
		case c == '/':
			params = false
			if b[len(b)-1] == '/' {
				continue
			}
		case c == ';':
			params = true
		}
		if !params {
			b = append(b, c)
		}
	}
	b = removeDotSegments(b)
	return string(appendNormalEscapes(b, query))
}

// needsLenient reports whether a lenient server could read path otherwise
// than Normalize does: whether it does not start with "/", or has a "\",
// ";", "//", or an escaped "/", "\" or ";".
func needsLenient(path string) bool {
	if path == "" || path[0] != '/' {
		return true
	}
	for i := 0; i < len(path); i++ {
		switch path[i] {
		case '\\', ';':
			return true
		case '/':
			if i+1 < len(path) && path[i+1] == '/' {
				return true
			}
		case '%':
			if escapedSeparator(path, i) != 0 {
				return true
			}
		}
	}
	return false
}

// escapedSeparator returns the separator that s[i:] escapes, in either
// case: '/' for "%2F", '\\' for "%5C", ';' for "%3B" (decoded before
// Tomcat-style ";params" are dropped, as some frameworks do); 0 for any
// other escape.
func escapedSeparator(s string, i int) byte {
	if i+2 >= len(s) {
		return 0
	}
	switch lo := s[i+2] | 0x20; {
	case s[i+1] == '2' && lo == 'f':
		return '/'
	case s[i+1] == '5' && lo == 'c':
		return '\\'
	case s[i+1] == '3' && lo == 'b':
		return ';'
	}
	return 0
}
