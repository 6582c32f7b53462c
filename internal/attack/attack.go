// Package attack holds the hostile inputs that robotsgate's tests and
// benchmarks aim at it: a robots.txt and request paths made to cost the
// matcher the most. They are generated, deterministic, and bounded by
// the sizes the caller gives.
package attack

import "strings"

// Robots is a robots.txt of about maxBytes of wildcard rules made to cost
// the most for Path: each rule is 40 pseudo-random bytes of "a", "b" and
// "c", so every byte and every pair of bytes of every rule is in the path,
// which repeats all nine pairs, and none matches.
func Robots(maxBytes int) string {
	var b strings.Builder
	b.WriteString("User-agent: *\n")
	x := uint32(1)
	for b.Len() < maxBytes-80 {
		b.WriteString("Disallow: /*")
		for range 40 {
			x = x*1664525 + 1013904223
			b.WriteByte("abc"[x>>30%3])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Path is an n-byte path (n > 1) that repeats all nine pairs of "a", "b"
// and "c": Robots' attack.
func Path(n int) string {
	return "/" + strings.Repeat("aabbccacb", n/9+1)[:n-1]
}

// LenientPath is an n-byte path (n > 1) thick with lenient separators and
// dot segments: dozens of readings, each costly to make.
func LenientPath(n int) string {
	return "/" + strings.Repeat("a%2F;b%5C%3Bc//x/..$%24*", n/24+1)[:n-1]
}

// DotsPath is an n-byte path (n > 40) with every feature the lenient
// readings act on, then dot segments that collapse every reading to a few
// bytes: costly when only the bytes of the readings made are counted.
func DotsPath(n int) string {
	return "/a%2F;b%5C%3B$%24*//x" + strings.Repeat("x/../", n/5)[:n-40]
}
