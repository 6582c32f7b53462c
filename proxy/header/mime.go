package header

import (
	"net/http"
	"strings"
)

// ContentType returns the essence (lower-case "type/subtype") and charset
// parameter of h's Content-Type as browsers read it: the Fetch standard's
// "extract a MIME type" over every Content-Type field line and every
// comma-separated value in them, the last valid one winning (a charset of
// an earlier value of the same essence is kept when the last one names
// none). It returns "", "" when no value is a valid MIME type: the type is
// then unknown, to be sniffed.
func ContentType(h http.Header) (essence, charset string) {
	vals := h["Content-Type"]
	if len(vals) == 0 {
		return "", ""
	}
	for _, line := range vals {
		for v := range splitQuoted(line) {
			e, cs, ok := parseMIME(v)
			if !ok || e == "*/*" {
				continue
			}
			if e != essence {
				charset = ""
			}
			if cs != "" {
				charset = cs
			}
			essence = e
		}
	}
	return essence, charset
}

// splitQuoted yields s's comma-separated values, a comma inside a
// quoted string not separating them (Fetch "get, decode, and split").
func splitQuoted(s string) func(func(string) bool) {
	return func(yield func(string) bool) {
		start, quoted := 0, false
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case c == '"':
				quoted = !quoted
			case c == '\\' && quoted:
				i++
			case c == ',' && !quoted:
				if !yield(s[start:i]) {
					return
				}
				start = i + 1
			}
		}
		yield(s[start:])
	}
}

// parseMIME parses one MIME type as the MIME Sniffing standard says,
// returning its essence and its first charset parameter, unquoted.
func parseMIME(s string) (essence, charset string, ok bool) {
	s = strings.Trim(s, " \t\r\n")
	typ, rest, found := strings.Cut(s, "/")
	if !found || !isToken(typ) {
		return "", "", false
	}
	sub, params, _ := strings.Cut(rest, ";")
	sub = strings.TrimRight(sub, " \t\r\n")
	if !isToken(sub) {
		return "", "", false
	}
	seen := false
	for params != "" {
		var p string
		params = strings.TrimLeft(params, " \t\r\n")
		name, after, hasValue := cutAny(params, ";=")
		if !hasValue || after[0] == ';' {
			params = strings.TrimPrefix(after, ";")
			continue
		}
		after = after[1:] // past '='
		if len(after) > 0 && after[0] == '"' {
			var b strings.Builder
			i := 1
			for ; i < len(after) && after[i] != '"'; i++ {
				if after[i] == '\\' && i+1 < len(after) {
					i++
				}
				b.WriteByte(after[i])
			}
			p = b.String()
			_, params, _ = strings.Cut(after[min(i, len(after)):], ";")
		} else {
			p, params, _ = strings.Cut(after, ";")
			p = strings.TrimRight(p, " \t\r\n")
			if p == "" {
				continue
			}
		}
		if !seen && strings.EqualFold(name, "charset") {
			charset, seen = p, true
		}
	}
	return strings.ToLower(typ) + "/" + strings.ToLower(sub), charset, true
}

// cutAny cuts s before the first of chars, reporting whether there was one.
func cutAny(s, chars string) (before, from string, found bool) {
	if i := strings.IndexAny(s, chars); i >= 0 {
		return s[:i], s[i:], true
	}
	return s, "", false
}

// isToken reports whether s is a non-empty HTTP token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
