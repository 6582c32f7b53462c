package report

import (
	"unicode/utf8"

	"github.com/robotsgate/robotsgate/internal/jsonscan"
)

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
	return jsonscan.Unquote(f.raw)
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
// method, url, reason, charged, status and line are read leniently: a
// method, url, reason or charged that is not a string, or a status or
// line that is not a number, is as if absent (a charged that is not a string is marked bad,
// for the report to count it as a charge it could not read).
type recordFields struct {
	time, decision, origin, token, rule field
	method, url, reason, charged        field
	status, line                        field // raw: the number's text
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
	case "url":
		return &r.url
	case "reason":
		return &r.reason
	case "charged":
		return &r.charged
	case "line":
		return &r.line
	case "msg":
		return &r.msg
	}
	return nil
}

// scanRecord fills r from line, reporting whether line is one JSON object
// (RFC 8259, as encoding/json's checkValid does), without decoding the
// members a report does not read: a fast path for the few fields of a
// long line. Member names match exactly; when a name repeats, the last
// one wins, as decoding into a map[string]json.RawMessage does. s is
// reused from line to line.
func scanRecord(s *jsonscan.Scanner, line []byte, r *recordFields) bool {
	if !s.Object(line) {
		return false
	}
	for s.Next() {
		key, escaped := s.Name()
		if escaped {
			// An escaped name: compare its decoded form.
			key = []byte(jsonscan.Unquote(key))
		}
		f := r.slot(key)
		switch {
		case f == nil: // Next skips the value
		case f == &r.status || f == &r.line:
			raw, ok := s.Skip()
			if !ok {
				return false
			}
			*f = field{}
			if c := raw[0]; c == '-' || '0' <= c && c <= '9' {
				*f = field{raw: raw, set: true}
			}
		case s.Lead() == '"':
			raw, escaped, ok := s.Str()
			if !ok {
				return false
			}
			*f = field{raw: raw, escaped: escaped, set: true}
		case s.Null():
			*f = field{}
		default:
			if _, ok := s.Skip(); !ok {
				return false
			}
			*f = field{bad: f == &r.charged || f == &r.time || f == &r.decision || f == &r.origin || f == &r.token || f == &r.rule}
		}
	}
	return s.End()
}
