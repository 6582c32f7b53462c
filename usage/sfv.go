package usage

// A parser of structured-field dictionaries (RFC 9651 section 4.2.2), as
// much as aipref's Content-Usage needs: members are read whole (inner
// lists, parameters and every bare item type), and each member's value is
// reported as a token, or "" when it is anything else.

// parseDictionary parses value as a dictionary and calls member for each
// member in order, with its key and its value if that is a token ("" for
// any other item, an inner list or a bare key, whose value is the boolean
// true). It reports whether the whole value parsed; on false, some members
// may have been reported already and must be discarded.
func parseDictionary(value string, member func(key, token string)) bool {
	s := sfParser{in: value}
	s.skipSP()
	if s.done() {
		return true // an empty field: an empty dictionary
	}
	for {
		key, ok := s.key()
		if !ok {
			return false
		}
		tok := ""
		if s.peek() == '=' {
			s.i++
			if s.peek() == '(' {
				ok = s.innerList()
			} else {
				tok, ok = s.bareItem()
			}
			if !ok {
				return false
			}
		}
		if !s.params() {
			return false
		}
		member(key, tok)
		s.skipOWS()
		if s.done() {
			return true
		}
		if s.peek() != ',' {
			return false
		}
		s.i++
		s.skipOWS()
		if s.done() {
			return false // a trailing comma
		}
	}
}

type sfParser struct {
	in string
	i  int
}

func (s *sfParser) done() bool {
	s.trimTrailingSP()
	return s.i >= len(s.in)
}

// trimTrailingSP drops trailing spaces once the rest is only spaces: a field
// value's trailing SP is not part of it.
func (s *sfParser) trimTrailingSP() {
	j := s.i
	for j < len(s.in) && s.in[j] == ' ' {
		j++
	}
	if j == len(s.in) {
		s.i = j
	}
}

func (s *sfParser) peek() byte {
	if s.i < len(s.in) {
		return s.in[s.i]
	}
	return 0
}

func (s *sfParser) skipSP() {
	for s.i < len(s.in) && s.in[s.i] == ' ' {
		s.i++
	}
}

func (s *sfParser) skipOWS() {
	for s.i < len(s.in) && (s.in[s.i] == ' ' || s.in[s.i] == '\t') {
		s.i++
	}
}

// key reads a key: lcalpha or "*", then lcalpha, DIGIT, "_", "-", "." or "*".
func (s *sfParser) key() (string, bool) {
	start := s.i
	if c := s.peek(); !(c >= 'a' && c <= 'z' || c == '*') {
		return "", false
	}
	for s.i < len(s.in) {
		c := s.in[s.i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		s.i++
	}
	return s.in[start:s.i], true
}

// params reads parameters: any number of ";" key ["=" bare item].
func (s *sfParser) params() bool {
	for s.peek() == ';' {
		s.i++
		s.skipSP()
		if _, ok := s.key(); !ok {
			return false
		}
		if s.peek() == '=' {
			s.i++
			if _, ok := s.bareItem(); !ok {
				return false
			}
		}
	}
	return true
}

// innerList reads "(" items separated by spaces ")" and its parameters.
func (s *sfParser) innerList() bool {
	s.i++ // "("
	for {
		s.skipSP()
		if s.peek() == ')' {
			s.i++
			return s.params()
		}
		if _, ok := s.bareItem(); !ok || !s.params() {
			return false
		}
		if c := s.peek(); c != ' ' && c != ')' {
			return false
		}
	}
}

// bareItem reads one bare item and returns it when it is a token.
func (s *sfParser) bareItem() (string, bool) {
	c := s.peek()
	switch {
	case c == '-' || c >= '0' && c <= '9':
		return "", s.number()
	case c == '"':
		return "", s.quoted()
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		return s.token(), true
	case c == ':':
		return "", s.byteSequence()
	case c == '?':
		s.i++
		if c := s.peek(); c != '0' && c != '1' {
			return "", false
		}
		s.i++
		return "", true
	case c == '@':
		s.i++
		return "", s.number()
	case c == '%':
		s.i++
		return "", s.displayString()
	}
	return "", false
}

// number reads an integer (at most 15 digits) or a decimal (at most 12
// digits before the point, 1 to 3 after).
func (s *sfParser) number() bool {
	if s.peek() == '-' {
		s.i++
	}
	start, dot := s.i, -1
	for s.i < len(s.in) {
		c := s.in[s.i]
		if c == '.' && dot < 0 {
			if s.i-start > 12 {
				return false
			}
			dot = s.i
		} else if c < '0' || c > '9' {
			break
		}
		s.i++
	}
	switch {
	case s.i == start || s.in[start] < '0' || s.in[start] > '9':
		return false
	case dot < 0:
		return s.i-start <= 15
	}
	frac := s.i - dot - 1
	return frac >= 1 && frac <= 3
}

// quoted reads a string: printable ASCII, with \" and \\ escapes.
func (s *sfParser) quoted() bool {
	s.i++
	for s.i < len(s.in) {
		c := s.in[s.i]
		s.i++
		switch {
		case c == '\\':
			if n := s.peek(); n != '"' && n != '\\' {
				return false
			}
			s.i++
		case c == '"':
			return true
		case c < 0x20 || c > 0x7E:
			return false
		}
	}
	return false
}

// token reads a token: ALPHA or "*", then tchar, ":" or "/".
func (s *sfParser) token() string {
	start := s.i
	s.i++
	for s.i < len(s.in) && (isTchar(s.in[s.i]) || s.in[s.i] == ':' || s.in[s.i] == '/') {
		s.i++
	}
	return s.in[start:s.i]
}

func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c < 0x80 && c != 0 && stringsContains("!#$%&'*+-.^_`|~", c)
}

// byteSequence reads ":" base64 ":".
func (s *sfParser) byteSequence() bool {
	s.i++
	for s.i < len(s.in) {
		c := s.in[s.i]
		s.i++
		switch {
		case c == ':':
			return true
		case !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '='):
			return false
		}
	}
	return false
}

// displayString reads a display string after its "%": a quoted string in
// which non-ASCII bytes are written as lower-case %xx escapes.
func (s *sfParser) displayString() bool {
	if s.peek() != '"' {
		return false
	}
	s.i++
	for s.i < len(s.in) {
		c := s.in[s.i]
		s.i++
		switch {
		case c == '"':
			return true
		case c == '%':
			if s.i+2 > len(s.in) || !isLowerHex(s.in[s.i]) || !isLowerHex(s.in[s.i+1]) {
				return false
			}
			s.i += 2
		case c < 0x20 || c > 0x7E:
			return false
		}
	}
	return false
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

func stringsContains(set string, c byte) bool {
	for i := 0; i < len(set); i++ {
		if set[i] == c {
			return true
		}
	}
	return false
}
