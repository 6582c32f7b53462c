package jsonscan

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"maps"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// seeds adds every line of testdata/*.jsonl (a chained, signed audit
// log, the report's audit lines good and bad, and edge cases) to f, and
// nesting at and past MaxDepth.
func seeds(f *testing.F) {
	names, err := filepath.Glob(filepath.Join("testdata", "*.jsonl"))
	if err != nil || len(names) == 0 {
		f.Fatalf("testdata: %v (%d files)", err, len(names))
	}
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for line := range bytes.Lines(b) {
			f.Add(bytes.TrimSuffix(line, []byte("\n")))
		}
	}
	f.Add([]byte("{\"a\":[{},[],{\"b\":[-0.5e+7,true]}]}\r\n\n{}"))
	f.Add(bytes.Repeat([]byte("["), MaxDepth+1))
	for _, n := range []int{MaxDepth - 1, MaxDepth, MaxDepth + 1} {
		f.Add([]byte(strings.Repeat("[", n) + strings.Repeat("]", n)))
		f.Add([]byte(`{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`))
	}
}

// FuzzValid: Valid says what json.Valid says, of any bytes.
func FuzzValid(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v; json.Valid says %v", b, got, want)
		}
	})
}

// members walks b with s, taking strings with Str, null with Null and
// anything else with Skip, and returns each member's value text by its
// decoded name, the last of repeated names winning; ok is End's answer.
func members(s *Scanner, b []byte) (map[string]json.RawMessage, bool) {
	if !s.Object(b) {
		return nil, false
	}
	m := map[string]json.RawMessage{}
	for s.Next() {
		raw, escaped := s.Name()
		name := string(raw)
		if escaped || !utf8.Valid(raw) {
			name = Unquote(raw)
		}
		switch {
		case s.Lead() == '"':
			v, _, ok := s.Str()
			if !ok {
				return nil, false
			}
			m[name] = json.RawMessage(`"` + string(v) + `"`)
		case s.Null():
			m[name] = json.RawMessage("null")
		default:
			v, ok := s.Skip()
			if !ok {
				return nil, false
			}
			m[name] = json.RawMessage(v)
		}
	}
	return m, s.End()
}

// FuzzObject: a Scanner accepts what encoding/json decodes as an object,
// and finds the members it finds, each value's text and each string's
// Unquote as encoding/json has them.
func FuzzObject(f *testing.F) {
	seeds(f)
	var s Scanner // reused, as the report does
	f.Fuzz(func(t *testing.T, b []byte) {
		var want map[string]json.RawMessage
		wantOK := json.Unmarshal(b, &want) == nil && want != nil
		got, ok := members(&s, b)
		if ok != wantOK {
			t.Fatalf("walk of %q: %v; encoding/json decodes an object: %v", b, ok, wantOK)
		}
		if !ok {
			return
		}
		if !maps.EqualFunc(got, want, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
			t.Fatalf("walk of %q: %q; encoding/json: %q", b, got, want)
		}
		for name, v := range got {
			var str string
			if v[0] == '"' && json.Unmarshal(v, &str) == nil && Unquote(v[1:len(v)-1]) != str {
				t.Fatalf("%s: Unquote(%s) = %q; encoding/json: %q", name, v, Unquote(v[1:len(v)-1]), str)
			}
		}
	})
}

// TestScanner holds the walk to its contract where the fuzz targets
// cannot say it: values not taken, taken twice or taken as what they
// are not, and depth counted from the object.
func TestScanner(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		walk func(s *Scanner) bool
		want bool
	}{
		{"value not taken: Next skips it", `{"a":[1,{"c":2}],"b":2}`, func(s *Scanner) bool {
			s.Next()
			s.Next()
			raw, _ := s.Name()
			return string(raw) == "b" && !s.Next() && s.End()
		}, true},
		{"no value for Next to skip", `{"a":}`, func(s *Scanner) bool { s.Next(); return s.Next() || s.End() }, false},
		{"Skip with no value pending", `{"a":1}`, func(s *Scanner) bool { s.Next(); s.Skip(); _, ok := s.Skip(); return ok }, false},
		{"Str of a number", `{"a":1}`, func(s *Scanner) bool { s.Next(); _, _, ok := s.Str(); return ok }, false},
		{"Null of a string", `{"a":"null"}`, func(s *Scanner) bool { s.Next(); return s.Null() }, false},
		{"Str after a Null that was not", `{"a":"x"}`, func(s *Scanner) bool { s.Next(); s.Null(); _, _, ok := s.Str(); return ok }, true},
		{"End before the end", `{"a":1}`, func(s *Scanner) bool { s.Next(); s.Skip(); return s.End() }, false},
		{"depth MaxDepth", `{"a":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `}`, walkAll, true},
		{"depth past MaxDepth", `{"a":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`, walkAll, false},
		{"after a failed walk", `{"a":1}`, func(s *Scanner) bool {
			s.Object([]byte(`{"a":[`))
			walkAll(s)
			s.Object([]byte(`{"a":1}`))
			return walkAll(s)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Scanner
			if !s.Object([]byte(tc.in)) {
				t.Fatalf("Object(%q) = false", tc.in)
			}
			if got := tc.walk(&s); got != tc.want {
				t.Errorf("walk of %q = %v; want %v", tc.in, got, tc.want)
			}
		})
	}
}

// walkAll skips every member's value, reporting End.
func walkAll(s *Scanner) bool {
	for s.Next() {
		if _, ok := s.Skip(); !ok {
			return false
		}
	}
	return s.End()
}

// BenchmarkValid checks one realistic audit line of the chained log.
func BenchmarkValid(b *testing.B) {
	lines, err := os.ReadFile(filepath.Join("testdata", "chain.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := bytes.Cut(lines, []byte("\n"))
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if !Valid(line) {
			b.Fatal("not valid")
		}
	}
}

// TestSpecial holds special, which reads a string's bytes eight at a
// time, to a byte-by-byte reading: the first byte it marks is the first
// control character, '"' or '\\', with one or two such bytes anywhere in
// words of plain bytes of every kind.
func TestSpecial(t *testing.T) {
	first := func(w [8]byte) int {
		for i, c := range w {
			if c < 0x20 || c == '"' || c == '\\' {
				return i
			}
		}
		return 8
	}
	check := func(w [8]byte) {
		m := special(binary.LittleEndian.Uint64(w[:]))
		got := 8
		if m != 0 {
			got = bits.TrailingZeros64(m) / 8
		}
		if want := first(w); got != want {
			t.Fatalf("special(%q) marks byte %d first; want %d", w, got, want)
		}
	}
	for _, bg := range []byte{'a', 0x20, 0x21, 0x7f, 0x80, 0xdc, 0xff} {
		for p := range 8 {
			for c := range 256 {
				var w [8]byte
				for i := range w {
					w[i] = bg
				}
				w[p] = byte(c)
				check(w)
				for q := p + 1; q < 8; q++ {
					for _, d := range []byte{0, 0x1f, '"', '\\', 0x5d, 0xa2, 0xff} {
						w2 := w
						w2[q] = d
						check(w2)
					}
				}
			}
		}
	}
}
