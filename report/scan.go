package report

import (
	"encoding/json"
	"unicode/utf8"
)

// maxDepth is the deepest nesting a line may have, as encoding/json allows.
const maxDepth = 10000

// field is one string member of the record object as found in the line.
type field struct {
	raw     []byte // the string's content between its quotes, escapes undone later
	escaped bool   // raw holds a backslash
	set     bool   // the member is present and not null
	bad     bool   // present with a value that is neither a string nor null
}

// text returns the field's string, undoing escapes as encoding/json does
// (invalid UTF-8 and lone surrogates become U+FFFD).
func (f *field) text() string {
	if !f.escaped && utf8.Valid(f.raw) {
		return string(f.raw)
	}
	quoted := make([]byte, 0, len(f.raw)+2)
	quoted = append(append(append(quoted, '"'), f.raw...), '"')
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return "" // unreachable: scanString has validated the string
	}
	return s
}

// bytes is text as bytes: raw itself when it needs no decoding.
func (f *field) bytes() []byte {
	if !f.escaped && utf8.Valid(f.raw) {
		return f.raw
	}
	return []byte(f.text())
}

// recordFields are the members of an audit line that a report reads.
// time, decision, origin, token and rule must be strings (or null);
// method and status are read leniently: a method that is not a string,
// or a status that is not a number, is as if absent.
type recordFields struct {
	time, decision, origin, token, rule field
	method                              field
	status                              field // raw: the number's text
	msg                                 field // "checkpoint" for the chain's signed lines
}

// bad returns the name of the first member that is neither a string nor
// null, or "".
func (r *recordFields) bad() string {
	switch {
	case r.time.bad:
		return "time"
	case r.decision.bad:
		return "decision"
	case r.origin.bad:
		return "origin"
	case r.token.bad:
		return "token"
	case r.rule.bad:
		return "rule"
	}
	return ""
}

// slot returns the field that member key fills, or nil.
func (r *recordFields) slot(key []byte) *field {
	switch string(key) { // no allocation: the compiler compares in place
	case "time":
		return &r.time
	case "decision":
		return &r.decision
	case "origin":
		return &r.origin
	case "token":
		return &r.token
	case "rule":
		return &r.rule
	case "method":
		return &r.method
	case "status":
		return &r.status
	case "msg":
		return &r.msg
	}
	return nil
}

// scanner validates one line as a JSON object (RFC 8259, as encoding/json's
// checkValid does) and picks out the members a report reads, without
// decoding the others: a fast path for the few fields of a long line.
// Member names match exactly; when a name repeats, the last one wins, as
// decoding into a map[string]json.RawMessage does.
type scanner struct {
	b     []byte
	i     int
	stack []byte // open '{' and '[' of the value being skipped
}

// scanRecord fills r from line, reporting whether line is one JSON object;
// s is reused from line to line, for its stack.
func scanRecord(s *scanner, line []byte, r *recordFields) bool {
	s.b, s.i = line, 0
	s.ws()
	if !s.eat('{') {
		return false
	}
	s.ws()
	if !s.eat('}') {
		for {
			s.ws()
			key, escaped, ok := s.str()
			if !ok {
				return false
			}
			if escaped {
				// An escaped name: compare its decoded form.
				k := field{raw: key, escaped: true}
				key = []byte(k.text())
			}
			s.ws()
			if !s.eat(':') {
				return false
			}
			s.ws()
			f := r.slot(key)
			switch {
			case f == nil:
				if !s.value(1) {
					return false
				}
			case f == &r.status:
				start := s.i
				if !s.value(1) {
					return false
				}
				*f = field{}
				if c := s.b[start]; c == '-' || '0' <= c && c <= '9' {
					*f = field{raw: s.b[start:s.i], set: true}
				}
			case s.peek() == '"':
				raw, escaped, ok := s.str()
				if !ok {
					return false
				}
				*f = field{raw: raw, escaped: escaped, set: true}
			case s.literal("null"):
				*f = field{}
			default:
				if !s.value(1) {
					return false
				}
				*f = field{bad: f != &r.method}
			}
			s.ws()
			if s.eat('}') {
				break
			}
			if !s.eat(',') {
				return false
			}
		}
	}
	s.ws()
	return s.i == len(s.b)
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// literal consumes word (true, false, null) if it is next.
func (s *scanner) literal(word string) bool {
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// str consumes a string and returns its content between the quotes.
func (s *scanner) str() (raw []byte, escaped, ok bool) {
	if !s.eat('"') {
		return nil, false, false
	}
	b, i := s.b, s.i
	for i < len(b) {
		c := b[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		switch c {
		case '"':
			raw, s.i = b[s.i:i], i+1
			return raw, escaped, true
		case '\\':
			escaped = true
			i++
			if i == len(b) {
				return nil, false, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(b)-i < 5 || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return nil, false, false
				}
				i += 5
			default:
				return nil, false, false
			}
		default: // a control character
			return nil, false, false
		}
	}
	return nil, false, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number consumes -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *scanner) number() bool {
	s.eat('-')
	switch c := s.peek(); {
	case c == '0':
		s.i++
	case '1' <= c && c <= '9':
		s.digits()
	default:
		return false
	}
	if s.eat('.') && !s.digits() {
		return false
	}
	if s.eat('e') || s.eat('E') {
		if !s.eat('+') {
			s.eat('-')
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits consumes [0-9]+.
func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// value consumes one JSON value found at nesting depth (the record object
// is depth 1), iteratively: a deep line costs no stack.
func (s *scanner) value(depth int) bool {
	s.stack = s.stack[:0]
	for {
		// A value is expected here.
		s.ws()
		switch c := s.peek(); {
		case c == '{' || c == '[':
			if depth+len(s.stack)+1 > maxDepth {
				return false
			}
			s.i++
			s.stack = append(s.stack, c)
			s.ws()
			if c == '{' {
				if s.eat('}') {
					s.stack = s.stack[:len(s.stack)-1]
					break
				}
				if !s.member() {
					return false
				}
				continue
			}
			if s.eat(']') {
				s.stack = s.stack[:len(s.stack)-1]
				break
			}
			continue
		case c == '"':
			if _, _, ok := s.str(); !ok {
				return false
			}
		case c == '-' || '0' <= c && c <= '9':
			if !s.number() {
				return false
			}
		case s.literal("true"), s.literal("false"), s.literal("null"):
		default:
			return false
		}
		// A value has ended: close what it ends, or go on to the next.
		for {
			if len(s.stack) == 0 {
				return true
			}
			s.ws()
			open := s.stack[len(s.stack)-1]
			if open == '{' && s.eat('}') || open == '[' && s.eat(']') {
				s.stack = s.stack[:len(s.stack)-1]
				continue
			}
			if !s.eat(',') {
				return false
			}
			if open == '{' {
				s.ws()
				if !s.member() {
					return false
				}
			}
			break
		}
	}
}

// member consumes a member's name and colon.
func (s *scanner) member() bool {
	if _, _, ok := s.str(); !ok {
		return false
	}
	s.ws()
	return s.eat(':')
}
