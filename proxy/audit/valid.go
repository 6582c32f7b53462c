package audit

// validJSON reports whether b is one JSON value (RFC 8259) with nothing
// but white space around it: what json.Valid says (FuzzValidJSON holds
// the two to the same answers), in one pass without json.Valid's state
// machine, for verify's million-line logs. Like encoding/json, it does
// not check that strings are UTF-8 and refuses nesting deeper than
// 10,000.
func validJSON(b []byte) bool {
	s := jsonScan{b: b}
	s.space()
	if !s.value() {
		return false
	}
	s.space()
	return s.i == len(b)
}

// maxDepth is encoding/json's bound on nesting.
const maxDepth = 10000

type jsonScan struct {
	b     []byte
	i     int
	depth int
}

func (s *jsonScan) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next reports whether the byte at i is c, and moves past it if so.
func (s *jsonScan) next(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *jsonScan) value() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.container('}')
	case c == '[':
		return s.container(']')
	case c == '"':
		return s.str()
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

// container reads an object (end '}') or an array (end ']').
func (s *jsonScan) container(end byte) bool {
	s.i++
	if s.depth++; s.depth > maxDepth {
		return false
	}
	s.space()
	if s.next(end) {
		s.depth--
		return true
	}
	for {
		if end == '}' {
			if s.i >= len(s.b) || s.b[s.i] != '"' || !s.str() {
				return false
			}
			s.space()
			if !s.next(':') {
				return false
			}
			s.space()
		}
		if !s.value() {
			return false
		}
		s.space()
		if s.next(end) {
			s.depth--
			return true
		}
		if !s.next(',') {
			return false
		}
		s.space()
	}
}

// str reads a string, its opening quote at i.
func (s *jsonScan) str() bool {
	b := s.b
	for i := s.i + 1; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return true
		case c == '\\':
			if i+1 >= len(b) {
				return false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return false
				}
				i += 6
			default:
				return false
			}
		case c < 0x20:
			return false
		default:
			i++
		}
	}
	return false
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func (s *jsonScan) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *jsonScan) number() bool {
	s.next('-')
	switch {
	case s.next('0'):
	case s.i < len(s.b) && s.b[s.i] >= '1' && s.b[s.i] <= '9':
		s.digits()
	default:
		return false
	}
	if s.next('.') && !s.digits() {
		return false
	}
	if s.next('e') || s.next('E') {
		if !s.next('+') {
			s.next('-')
		}
		return s.digits()
	}
	return true
}

func (s *jsonScan) literal(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}
