package robots

import "strings"

// tokenLen returns the length of the leading run of A-Z a-z _ - in s: the
// part of a user-agent value that the reference compares with the token.
func tokenLen[T string | []byte](s T) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '-') {
			return i
		}
	}
	return len(s)
}

// ExtractToken cuts s at its first byte outside A-Z a-z _ -, as the reference
// cuts robots.txt user-agent values (RFC 9309 section 2.2.1): "Googlebot/2.1"
// gives "Googlebot", "MJ12bot" gives "MJ" and "360Spider" gives "".
func ExtractToken(s string) string { return s[:tokenLen(s)] }

// ValidToken reports whether s is a product token a crawler can obey: one or
// more of A-Z a-z _ - and nothing else (the reference's IsValidUserAgentToObey).
func ValidToken(s string) bool { return s != "" && tokenLen(s) == len(s) }

// TokenFromUserAgent returns the product token that the sender of a
// User-Agent header obeys, or "" when the header names none:
//
//   - if a parenthesised comment holds a "compatible;" item, the product
//     after it ("Mozilla/5.0 (compatible; FooBot/2.1; +url)" gives "FooBot");
//   - else the header's first product ("FooBot/1.2 (+url)" gives "FooBot"),
//     except "Mozilla", which names a browser, not a crawler;
//
// the product's name (before "/") cut as [ExtractToken] cuts it.
func TokenFromUserAgent(ua string) string {
	if p, ok := compatibleProduct(ua); ok {
		return ExtractToken(productName(p))
	}
	ua = strings.TrimLeft(ua, " \t")
	end := strings.IndexAny(ua, " \t(")
	if end < 0 {
		end = len(ua)
	}
	name := productName(ua[:end])
	if strings.EqualFold(name, "Mozilla") {
		return ""
	}
	return ExtractToken(name)
}

// productName returns a product's name: the part before "/".
func productName(p string) string {
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return p
}

// compatibleProduct finds the item after a "compatible;" item inside a
// parenthesised comment of a User-Agent header.
func compatibleProduct(ua string) (string, bool) {
	for {
		open := strings.IndexByte(ua, '(')
		if open < 0 {
			return "", false
		}
		ua = ua[open+1:]
		end := strings.IndexByte(ua, ')')
		if end < 0 {
			end = len(ua)
		}
		comment := ua[:end]
		ua = ua[end:]
		for {
			semi := strings.IndexByte(comment, ';')
			if semi < 0 {
				break
			}
			item := strings.Trim(comment[:semi], " \t")
			comment = comment[semi+1:]
			if !strings.EqualFold(item, "compatible") {
				continue
			}
			for comment != "" { // the first non-empty item after it
				next, rest, _ := strings.Cut(comment, ";")
				if next = strings.Trim(next, " \t"); next != "" {
					return next, true
				}
				comment = rest
			}
			return "", true
		}
	}
}
