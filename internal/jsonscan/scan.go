// Package jsonscan validates JSON as encoding/json does (RFC 8259,
// nesting bounded at 10,000, strings not checked for UTF-8) in one pass,
// without allocating and without decoding: Valid for a whole value, and a
// Scanner that walks one object's members so that a caller picks out the
// few it reads and skips the others. It is the audit log's fast path:
// audit verify checks every line with Valid, and the report reads a
// line's few members with a Scanner.
package jsonscan

import "encoding/json"

// MaxDepth is the deepest nesting accepted, encoding/json's bound.
const MaxDepth = 10000

// Valid reports whether b is one JSON value with nothing but white space
// around it: what json.Valid says, of any bytes.
func Valid(b []byte) bool {
	var s Scanner
	s.b = b
	s.ws()
	if !s.value() {
		return false
	}
	s.ws()
	return s.i == len(b)
}

// Unquote returns the string whose content between its quotes is raw
// (as Str and Name return it), undoing escapes as encoding/json does:
// invalid UTF-8 and lone surrogates become U+FFFD. raw must have been
// validated by a Scanner; "" if it was not.
func Unquote(raw []byte) string {
	quoted := make([]byte, 0, len(raw)+2)
	quoted = append(append(append(quoted, '"'), raw...), '"')
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return ""
	}
	return s
}

// Scanner walks one JSON object member by member, validating it as it
// goes: Object starts it, each Next moves to a member, whose Name the
// caller reads and whose value it then takes with Str, Null or Skip
// (Lead tells which fits), or leaves for Next to skip; End says whether
// the whole input was one valid object. Nothing is decoded or copied:
// names and values are slices of the input. The zero Scanner is ready
// for Object, and one reused from input to input allocates nothing.
type Scanner struct {
	b     []byte
	i     int
	state uint8                   // see the constants below
	esc   bool                    // name holds a backslash
	name  []byte                  // the current member's name
	depth int                     // open objects and arrays around i
	open  [MaxDepth/64 + 1]uint64 // bit d: the container at depth d is an object
}

// Scanner states.
const (
	idle    = iota // no walk started
	inFirst        // after the object's '{'
	inNext         // after a member's value
	inValue        // after a member's name and ':', its value to take
	closed         // after the object's '}'
	failed         // b is not one JSON object
)

// Object starts a walk of b, reporting whether it opens an object.
func (s *Scanner) Object(b []byte) bool {
	s.b, s.i, s.depth, s.state = b, 0, 1, failed
	s.ws()
	if !s.eat('{') {
		return false
	}
	s.state = inFirst
	return true
}

// Next moves to the object's next member, reporting whether there is one;
// false at the object's end and on invalid input (End tells which). The
// value of the member before, if not taken, is skipped as Skip does.
func (s *Scanner) Next() bool {
	switch s.state {
	case inFirst:
		s.ws()
		if s.eat('}') {
			s.state = closed
			return false
		}
	case inValue:
		if !s.value() {
			return s.fail()
		}
		fallthrough
	case inNext:
		s.ws()
		if s.eat('}') {
			s.state = closed
			return false
		}
		if !s.eat(',') {
			return s.fail()
		}
		s.ws()
	default: // no walk, its end, or a failure
		return false
	}
	name, esc, ok := s.str()
	if !ok {
		return s.fail()
	}
	s.ws()
	if !s.eat(':') {
		return s.fail()
	}
	s.ws()
	s.name, s.esc, s.state = name, esc, inValue
	return true
}

// Name returns the current member's name between its quotes, and whether
// it holds an escape (Unquote decodes it).
func (s *Scanner) Name() (raw []byte, escaped bool) { return s.name, s.esc }

// Lead returns the first byte of the current member's value: '"' for a
// string, 'n' for null, and so on (0 at the end of the input).
func (s *Scanner) Lead() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// Str takes the current member's value, a string, returning its content
// between the quotes and whether it holds an escape (Unquote decodes it);
// ok is false, and the walk over, if no value is pending or it is no
// valid string.
func (s *Scanner) Str() (raw []byte, escaped, ok bool) {
	if s.state != inValue {
		return nil, false, s.fail()
	}
	if raw, escaped, ok = s.str(); !ok {
		return nil, false, s.fail()
	}
	s.state = inNext
	return raw, escaped, true
}

// Null takes the current member's value if it is null, reporting whether
// it was; if not, the value is still to take.
func (s *Scanner) Null() bool {
	if s.state != inValue || !s.literal("null") {
		return false
	}
	s.state = inNext
	return true
}

// Skip takes the current member's value, whatever it is, validating it
// without decoding it, and returns its text; ok is false, and the walk
// over, if no value is pending or it is no valid JSON value.
func (s *Scanner) Skip() (raw []byte, ok bool) {
	start := s.i
	if s.state != inValue || !s.value() {
		return nil, s.fail()
	}
	s.state = inNext
	return s.b[start:s.i], true
}

// End reports whether the input was one valid JSON object with nothing
// but white space after it, once Next has returned false.
func (s *Scanner) End() bool {
	if s.state != closed {
		return false
	}
	s.ws()
	return s.i == len(s.b)
}

// fail ends the walk: the input is not one JSON object.
func (s *Scanner) fail() bool {
	s.state = failed
	return false
}
