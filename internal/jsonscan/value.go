package jsonscan

import (
	"encoding/binary"
	"math/bits"
)

func (s *Scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *Scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *Scanner) ws() {
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
func (s *Scanner) literal(word string) bool {
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// str consumes a string and returns its content between the quotes.
func (s *Scanner) str() (raw []byte, escaped, ok bool) {
	if !s.eat('"') {
		return nil, false, false
	}
	b, i := s.b, s.i
	for i < len(b) {
		// Eight bytes at a time up to the first that is not plain.
		for len(b)-i >= 8 {
			if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		if i == len(b) {
			break
		}
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

// Bytes repeated across a word, for special.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special returns a word whose lowest set bit lies in the first of w's
// eight bytes (in little-endian order) that is not plain in a string: a
// control character, '"' or '\\'; 0 if all eight are plain. (A borrow
// can mark bytes after the first, never one before it.)
func special(w uint64) uint64 {
	quote, backslash := w^(ones*'"'), w^(ones*'\\')
	return ((w-ones*0x20)&^w | (quote-ones)&^quote | (backslash-ones)&^backslash) & highs
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number consumes -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *Scanner) number() bool {
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
func (s *Scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// push opens an object or an array one level deeper, reporting false past
// MaxDepth.
func (s *Scanner) push(object bool) bool {
	if s.depth >= MaxDepth {
		return false
	}
	s.depth++
	w, bit := s.depth/64, uint64(1)<<(s.depth%64)
	if object {
		s.open[w] |= bit
	} else {
		s.open[w] &^= bit
	}
	return true
}

// inObject reports whether the innermost open container is an object.
func (s *Scanner) inObject() bool {
	return s.open[s.depth/64]&(uint64(1)<<(s.depth%64)) != 0
}

// value consumes one JSON value at the current depth, iteratively: a
// deep input costs no call stack.
func (s *Scanner) value() bool {
	base := s.depth
	for {
		// A value is expected here.
		s.ws()
		switch c := s.peek(); {
		case c == '{' || c == '[':
			if !s.push(c == '{') {
				return false
			}
			s.i++
			s.ws()
			if c == '{' {
				if s.eat('}') {
					s.depth--
					break
				}
				if !s.member() {
					return false
				}
				continue
			}
			if s.eat(']') {
				s.depth--
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
			if s.depth == base {
				return true
			}
			s.ws()
			object := s.inObject()
			if object && s.eat('}') || !object && s.eat(']') {
				s.depth--
				continue
			}
			if !s.eat(',') {
				return false
			}
			if object {
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
func (s *Scanner) member() bool {
	if _, _, ok := s.str(); !ok {
		return false
	}
	s.ws()
	return s.eat(':')
}
