package config

import (
	"fmt"
	"strconv"
	"strings"
)

// lineIndex finds the line of a key in a TOML file: the first line that
// names it, as a key ("a = 1", "a.b = 1"), as a table header ("[a]",
// "[a.b]") or as an entry of an array of tables ("[[a]]" is "a[0]", then
// "a[1]"). A key that only encloses others ("a" of "[a.b]" or "a.b = 1")
// is on the line of the first of them, so that an unknown table is named
// with its line wherever it was written. It is built from text that may
// not be valid TOML (a syntax error's line finds its key here too):
// multi-line strings and values are stepped over, never read as keys.
type lineIndex map[string]int

// indexLines indexes data's keys; see lineIndex.
func indexLines(data string) lineIndex {
	ix := &indexer{idx: lineIndex{}, arrays: map[string]int{}}
	for n, line := range strings.Split(data, "\n") {
		ix.line(n+1, line)
	}
	return ix.idx
}

// indexer is indexLines' state between lines.
type indexer struct {
	idx    lineIndex
	arrays map[string]int // entries of each array of tables so far
	table  string         // the table lines' keys are in, "" at the top
	open   string         // the delimiter of a multi-line string still open
	depth  int            // brackets and braces of a value still open
}

func (ix *indexer) line(n int, line string) {
	if ix.open != "" { // inside a multi-line string
		i := strings.Index(line, ix.open)
		if i < 0 {
			return
		}
		line, ix.open = line[i+len(ix.open):], ""
		ix.value(line) // the rest of its value
		return
	}
	if ix.depth > 0 { // inside an array or inline table
		ix.value(line)
		return
	}
	rest := strings.TrimLeft(line, " \t")
	switch {
	case strings.HasPrefix(rest, "[["):
		if segs, _, ok := parseKey(rest[2:]); ok {
			ix.header(n, segs, true)
		}
	case strings.HasPrefix(rest, "["):
		if segs, _, ok := parseKey(rest[1:]); ok {
			ix.header(n, segs, false)
		}
	default:
		segs, after, ok := parseKey(rest)
		if !ok || !strings.HasPrefix(after, "=") {
			return
		}
		ix.add(n, ix.table, segs)
		ix.value(after[1:])
	}
}

// header enters the table a header names: an entry of an array of
// tables when array, whose index a sub-table's header names implicitly
// ("[a.b]" after "[[a]]" is "a[N].b").
func (ix *indexer) header(n int, segs []string, array bool) {
	path := ""
	for i, seg := range segs {
		path = join(path, seg)
		switch k := ix.arrays[path]; {
		case array && i == len(segs)-1:
			ix.arrays[path] = k + 1
			path = fmt.Sprintf("%s[%d]", path, k)
		case k > 0:
			path = fmt.Sprintf("%s[%d]", path, k-1)
		}
	}
	ix.add(n, "", splitPath(path))
	ix.table = path
}

// add indexes the key segs of table at line n, with each key it is
// within, keeping the first line of each.
func (ix *indexer) add(n int, table string, segs []string) {
	path := table
	for _, s := range segs {
		path = join(path, s)
		if _, seen := ix.idx[path]; !seen {
			ix.idx[path] = n
		}
		if i := strings.LastIndexByte(path, '['); i > 0 && strings.HasSuffix(path, "]") {
			if _, seen := ix.idx[path[:i]]; !seen { // the array, at its first entry
				ix.idx[path[:i]] = n
			}
		}
	}
}

// value steps over a value (or what is left of it on a line): strings,
// and the brackets and braces it opens or closes, until a comment.
func (ix *indexer) value(s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '#':
			return
		case '[', '{':
			ix.depth++
		case ']', '}':
			ix.depth = max(ix.depth-1, 0)
		case '"', '\'':
			delim := string(c)
			if strings.HasPrefix(s[i:], strings.Repeat(delim, 3)) {
				delim = strings.Repeat(delim, 3)
			}
			end := closeString(s[i+len(delim):], delim)
			if end < 0 {
				if len(delim) == 3 {
					ix.open = delim // continues on the next lines
				}
				return
			}
			i += len(delim) + end + len(delim) - 1
		}
	}
}

// closeString returns where delim closes a string in s (after its
// opening), or -1; a basic string's escapes are stepped over.
func closeString(s, delim string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && delim[0] == '"' {
			i++
			continue
		}
		if strings.HasPrefix(s[i:], delim) {
			for len(delim) == 3 && strings.HasPrefix(s[i+1:], delim) { // """a"""" ends with a quote
				i++
			}
			return i
		}
	}
	return -1
}

// parseKey reads a dotted key (bare, "basic" or 'literal' segments) at the
// start of s, and returns its segments and what follows it, spaces
// trimmed; ok is false when s does not start with one.
func parseKey(s string) (segs []string, rest string, ok bool) {
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return nil, "", false
		}
		var seg string
		switch q := s[0]; q {
		case '"', '\'':
			end := closeString(s[1:], string(q))
			if end < 0 {
				return nil, "", false
			}
			seg, s = s[1:1+end], s[2+end:]
			if q == '"' { // escapes, as TOML's are Go's but for \e
				if u, err := strconv.Unquote(`"` + strings.ReplaceAll(seg, `\e`, `\x1b`) + `"`); err == nil {
					seg = u
				}
			}
		default:
			end := strings.IndexFunc(s, func(r rune) bool { return !isBare(r) })
			if end < 0 {
				end = len(s)
			}
			if end == 0 {
				return nil, "", false
			}
			seg, s = s[:end], s[end:]
		}
		segs = append(segs, seg)
		s = strings.TrimLeft(s, " \t")
		if !strings.HasPrefix(s, ".") {
			return segs, s, true
		}
		s = s[1:]
	}
}

func isBare(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// join appends key segment seg to path.
func join(path, seg string) string {
	if path == "" {
		return seg
	}
	return path + "." + seg
}

// splitPath splits a path made by join back into segments, an array
// entry's index kept with its name ("a[0]").
func splitPath(path string) []string { return strings.Split(path, ".") }

// line returns the line of key, or of the nearest enclosing table that has
// one, or 0.
func (idx lineIndex) line(key string) int {
	for {
		if n, ok := idx[key]; ok { // "" too: the key "" = 1
			return n
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			return 0
		}
		key = key[:i]
	}
}

// keyOn returns the longest key first named on line n, or "".
func (idx lineIndex) keyOn(n int) string {
	key := ""
	for k, l := range idx {
		if l == n && (len(k) > len(key) || len(k) == len(key) && k < key) {
			key = k
		}
	}
	return key
}
