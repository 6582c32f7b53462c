// Package lenient reads a request target as lenient origin servers do,
// where they read it otherwise than RFC 3986 and robots.Normalize do
// ("%2F" as "/", "\" as "/", ";params" dropped, runs of "/" merged, "$"
// and "%24" alike): the readings the proxy decides beside the exact one,
// blocking a request any reading of which is disallowed
// (docs/decision.md step 7: the path is ambiguous). It is not Google's
// matching, which takes the path as sent.
package lenient

import (
	"iter"
	"strings"

	"github.com/robotsgate/robotsgate/robots"
)

// Reading returns the path the most lenient origin server would serve for
// target, a raw request target (path, params and query, as sent), in
// Normalize's form: one that takes every step of Readings ("%2F",
// "%5C" and "%3B" decoded, "\" read as "/", ";params" dropped, runs of "/"
// merged, then dot segments resolved). So "/public/..%2Fprivate/x",
// "/public/..\private/x", "/public/..;/private/x", "//private/x",
// "/a//../private/x" and "/a/b%2F../../private/x" all give "/private/x".
// A real server takes only some of those steps, and may serve another
// path: the proxy decides every reading of Readings, of which this
// is one. Reading is idempotent; when target holds nothing a lenient server
// reads differently, it is robots.Normalize(target) (target itself, without
// allocating, when that is already normal).
func Reading(target string) string {
	path, query := splitQuery(target)
	if !needsPathReading(path) {
		return robots.Normalize(target)
	}
	return lenientReading(robots.NormalEscapes(path), query, allWays, path)
}

// A way is a set of the steps by which servers read a path otherwise than
// Normalize (RFC 3986) does.
type way uint16

const (
	waySlash          way                                                       = 1 << iota // "%2F" is "/" (Python's http.server, nginx)
	wayBack                                                                                 // "\" and "%5C" are "/" (IIS, Windows)
	wayParams                                                                               // ";params" are dropped from each segment (Tomcat, Jetty)
	wayParams3B                                                                             // and so are those after "%3B" (some frameworks)
	wayRawParams                                                                            // and they end only at a "/" as sent, before "%2F" is decoded (Tomcat)
	wayMerge                                                                                // runs of "/" are one (nginx, Python, Go's path.Clean)
	wayTrim                                                                                 // no trailing "/" the target did not end with (Python's normpath)
	wayEscapeSyntax                                                                         // "$" and "*" read as "%24" and "%2A" (every server decodes them alike)
	wayUnescapeSyntax                                                                       // "%24" read as "$"
	allWays           = waySlash | wayBack | wayParams | wayParams3B | wayMerge             // Reading's
	lastWay           = allWays | wayRawParams | wayTrim | wayEscapeSyntax | wayUnescapeSyntax
)

// maxReadings bounds the readings Readings yields for one target:
// every combination of the ways above that can change it, at most 5 × 2 ×
// 2 × 2 × 2 × 3 = 240. Each is decided, so it bounds the work of deciding a
// request too (with the matching Budget).
const maxReadings = 240

// Readings yields each path that a server taking some of the
// lenient steps would serve for target, a raw request target, that differs
// from robots.Normalize(target), in Normalize's form, so that each can be decided
// by a file parsed with [robots.WithNormalization]. The steps, each taken or not
// by a given server, are: "%2F" decoded to "/"; "\" and "%5C" read as "/";
// ";params" dropped from every segment (and after "%3B" too, and up to a
// "/" as sent rather than a decoded one); runs of "/" merged; and, after dot segments are resolved (RFC 3986 section 5.2.4,
// always last: resolving them first would let ".." eat a segment such a
// server splits, merges or drops), a trailing "/" dropped when target's
// path did not end with one. A server that keeps ";" as a name while
// another drops it sees different segments for "..", so one reading cannot
// speak for all of them; the proxy blocks a request when any reading is
// disallowed (docs/decision.md step 7: the path is ambiguous).
//
// "$" and "*" are the pattern syntax of robots.txt, so a rule that names a
// literal "$" or "*" escapes it ("Disallow: /price%24list"), or writes "$"
// where it is not last ("Disallow: /price$list"); servers decode "%24" and
// "%2A" and serve one file for both spellings. So a target holding either
// spelling is also read with every "$" and "*" escaped, and with every
// "%24" decoded, in its path and query alike.
//
// At most maxReadings are yielded, each once. This is not Google's
// matching, which takes the path as sent: [robots.Group.Test], [robots.Robots.TestURL]
// and robotsgate's "check -exact" never use it. When target holds nothing
// servers read differently (the common case), it yields nothing and
// allocates nothing.
func Readings(target string) iter.Seq[string] { return ReadingsWithin(target, nil) }

// readingCost is what making one reading costs a Budget per byte of the
// target: some 8 ns a byte for a path thick with dot segments, which is
// how long a reading takes to make whatever it comes to (a path of
// "x/../" collapses to a few bytes).
const readingCost = 8

// ReadingsWithin is [Readings] under budget b: each reading
// tried, whether yielded or found a duplicate, costs readingCost for each
// byte of target, and once b runs out no more are made (b.Exhausted tells
// the caller that some were not).
func ReadingsWithin(target string, b *robots.Budget) iter.Seq[string] {
	return func(yield func(string) bool) {
		path, query := splitQuery(target)
		if !needsLenient(path, query) {
			return
		}
		if !b.Spend(readingCost * len(target)) {
			return
		}
		escaped := robots.NormalEscapes(path)
		f := featuresOf(escaped, query, path)
		normal := robots.Normalize(target)
		seen := map[string]bool{normal: true}
		for w := way(0); w <= lastWay; w++ {
			if w&(wayParams3B|wayRawParams) != 0 && w&wayParams == 0 || w&wayEscapeSyntax != 0 && w&wayUnescapeSyntax != 0 || !f.useful(w) {
				continue
			}
			if !b.Spend(readingCost * len(target)) {
				return
			}
			r := lenientReading(escaped, query, w, path)
			if seen[r] {
				continue
			}
			seen[r] = true
			if !yield(r) {
				return
			}
		}
	}
}

// features are what a target holds that the ways act on, found once, so
// that choosing the ways that can change it costs nothing per way.
type features uint8

const (
	hasSlashEscape  features = 1 << iota // "%2F"
	hasBack                              // "%5C" or "\"
	hasSemicolon                         // ";"
	has3B                                // "%3B"
	hasDoubleSlash                       // "//"
	hasSyntax                            // "$" or "*", in the path or the query
	hasSyntaxEscape                      // "%24", in the path or the query
	hasTrailing                          // a reading may end in a "/" the path as sent does not
)

// featuresOf finds the features of a path in Normalize's escapes, of the
// query as sent, and of raw, the path as sent.
func featuresOf(escaped, query, raw string) features {
	var f features
	if !strings.HasSuffix(raw, "/") {
		// Only a last segment that is a dot segment, or that a step
		// splits, ends a reading in a "/" the path does not end in.
		last := escaped[strings.LastIndexByte(escaped, '/')+1:]
		if last == "." || last == ".." || strings.ContainsAny(last, ";\\") || strings.Contains(last, "%2F") || strings.Contains(last, "%5C") || strings.Contains(last, "%3B") {
			f |= hasTrailing
		}
	}
	for i := 0; i < len(escaped); i++ {
		switch c := escaped[i]; c {
		case '\\':
			f |= hasBack
		case ';':
			f |= hasSemicolon
		case '$', '*':
			f |= hasSyntax
		case '/':
			if i+1 < len(escaped) && escaped[i+1] == '/' {
				f |= hasDoubleSlash
			}
		case '%':
			if i+2 < len(escaped) {
				switch escaped[i+1 : i+3] {
				case "2F":
					f |= hasSlashEscape
				case "5C":
					f |= hasBack
				case "3B":
					f |= has3B
				case "24":
					f |= hasSyntaxEscape
				}
			}
		}
	}
	for i := 0; i < len(query); i++ {
		switch query[i] {
		case '$', '*':
			f |= hasSyntax
		case '%':
			if i+2 < len(query) && query[i+1] == '2' && query[i+2] == '4' {
				f |= hasSyntaxEscape
			}
		}
	}
	return f
}

// useful reports whether way w can change the reading of a target with
// features f: each step needs something to act on, so that equal readings
// are not made twice.
func (f features) useful(w way) bool {
	return (w&waySlash == 0 || f&hasSlashEscape != 0) &&
		(w&wayBack == 0 || f&hasBack != 0) &&
		(w&wayParams == 0 || f&hasSemicolon != 0 || w&wayParams3B != 0) &&
		(w&wayParams3B == 0 || f&has3B != 0) &&
		(w&wayRawParams == 0 || f&(hasSlashEscape|hasBack) != 0) &&
		(w&wayMerge == 0 || f&hasDoubleSlash != 0 || w&(waySlash|wayBack|wayParams) != 0) &&
		(w&wayTrim == 0 || f&hasTrailing != 0) &&
		(w&wayEscapeSyntax == 0 || f&hasSyntax != 0) &&
		(w&wayUnescapeSyntax == 0 || f&hasSyntaxEscape != 0)
}

func splitQuery(target string) (path, query string) {
	if q := strings.IndexByte(target, '?'); q >= 0 {
		return target[:q], target[q:]
	}
	return target, ""
}

// lenientReading reads escaped (a path in Normalize's escapes; raw is the
// path as sent) the way w says, then resolves dot segments, and appends
// query in Normalize's form (with "$", "*" and "%24" read as w says).
func lenientReading(escaped, query string, w way, raw string) string {
	b := make([]byte, 1, len(escaped)+len(query)+8)
	b[0] = '/' // the result starts with "/"
	params := false
	for i := 0; i < len(escaped); i++ {
		c, decoded := escaped[i], false
		if c == '%' {
			switch d := escapedSeparator(escaped, i); {
			case d == '/' && w&waySlash != 0, d == '\\' && w&wayBack != 0:
				c, i, decoded = '/', i+2, true
			case d == ';' && w&wayParams3B != 0:
				c, i = ';', i+2
			}
		} else if c == '\\' && w&wayBack != 0 {
			c = '/'
		}
		switch {
		case c == '/' && params && decoded && w&wayRawParams != 0:
			continue // still inside the ";params" a "/" as sent ends
		case c == '/':
			params = false
			if w&wayMerge != 0 && b[len(b)-1] == '/' || i == 0 {
				continue // merged, or the leading "/" already written
			}
		case c == ';' && w&wayParams != 0:
			params = true
		}
		if !params {
			b = append(b, c)
		}
	}
	b = robots.RemoveDotSegments(b)
	if w&wayTrim != 0 && len(b) > 1 && b[len(b)-1] == '/' && !strings.HasSuffix(raw, "/") {
		b = b[:len(b)-1]
	}
	b = robots.AppendNormalQuery(b, query)
	if w&(wayEscapeSyntax|wayUnescapeSyntax) != 0 {
		b = readSyntax(b, w&wayEscapeSyntax != 0)
	}
	return string(b)
}

// readSyntax rewrites the "$" and "*" of a reading in Normalize's form:
// escaped ("%24", "%2A") with escape, else "%24" decoded to "$" ("*" stays:
// a pattern cannot name a literal "*" but as "%2A", and its "*" matches
// "%2A" too).
func readSyntax(b []byte, escape bool) []byte {
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case escape && c == '$':
			out = append(out, "%24"...)
		case escape && c == '*':
			out = append(out, "%2A"...)
		case !escape && c == '%' && i+2 < len(b) && b[i+1] == '2' && b[i+2] == '4':
			out = append(out, '$')
			i += 2
		default:
			out = append(out, c)
		}
	}
	return out
}

// needsLenient reports whether a server could read a target (its path
// and query) otherwise than Normalize does: see needsPathReading, and
// whether path or query holds "$", "*" or "%24" (see Readings).
func needsLenient(path, query string) bool {
	return needsPathReading(path) || hasSyntaxBytes(path) || hasSyntaxBytes(query)
}

// needsPathReading reports whether a server could resolve path otherwise
// than Normalize does: whether it does not start with "/", or has a "\",
// ";", "//", or an escaped "/", "\" or ";", or ends in a dot segment (which
// Python's normpath resolves without the trailing "/").
func needsPathReading(path string) bool {
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
	last := path[strings.LastIndexByte(path, '/')+1:]
	last = strings.ReplaceAll(strings.ReplaceAll(last, "%2e", "."), "%2E", ".")
	return last == "." || last == ".."
}

// hasSyntaxBytes reports whether s holds "$", "*" or "%24".
func hasSyntaxBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '$' || c == '*' || c == '%' && isEscape24(s, i) {
			return true
		}
	}
	return false
}

// isEscape24 reports whether s[i:] starts with "%24".
func isEscape24(s string, i int) bool {
	return i+2 < len(s) && s[i+1] == '2' && s[i+2] == '4'
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
