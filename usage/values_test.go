package usage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// want is a compact expected Usage: per purpose "state line" ("refused 3",
// "allowed 0", "" for unstated).
type wantUsage [NumPurposes]string

func compact(u *Usage) wantUsage {
	var w wantUsage
	for p, v := range u {
		if v.State != Unstated {
			w[p] = fmt.Sprintf("%s %d", v.State, v.Line)
		}
	}
	return w
}

func TestHeaderUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values []string
		want   wantUsage
		text   string
	}{
		{"Content-Usage", []string{"train-ai=n"}, wantUsage{"refused 0", "", ""}, "content-usage: train-ai=n"},
		{"content-usage", []string{"train-ai=n", "search=y"}, wantUsage{"refused 0", "", "allowed 0"}, "content-usage: train-ai=n, search=y"},
		{"Content-Usage", []string{"train-ai=maybe"}, wantUsage{}, ""},
		{"Content-Usage", []string{"TRAIN-AI=n"}, wantUsage{}, ""},
		{"Content-Signal", []string{"ai-train=no, ai-input=no, search=yes"}, wantUsage{"refused 0", "refused 0", "allowed 0"}, "content-signal: ai-train=no, ai-input=no, search=yes"},
		{"TDM-Reservation", []string{"1"}, wantUsage{"refused 0", "refused 0", ""}, "tdm-reservation: 1"},
		{"tdm-reservation", []string{" 0 "}, wantUsage{"allowed 0", "allowed 0", ""}, "tdm-reservation:  0 "},
		{"tdm-reservation", []string{"yes"}, wantUsage{}, ""},
		{"TDM-Reservation", []string{"1", "1"}, wantUsage{"refused 0", "refused 0", ""}, "tdm-reservation: 1, 1"},
		{"TDM-Reservation", []string{"0", "1"}, wantUsage{"refused 0", "refused 0", ""}, "tdm-reservation: 0, 1"},
		{"TDM-Reservation", []string{"1 ;"}, wantUsage{"refused 0", "refused 0", ""}, "tdm-reservation: 1 ;"},
		{"Content-Usage", []string{"train-ai=n", "train-ai=y"}, wantUsage{"refused 0", "", ""}, "content-usage: train-ai=n, train-ai=y"},
		{"Content-Usage", []string{"train-ai=y", "not a dictionary", "train-ai=n"}, wantUsage{"refused 0", "", ""}, "content-usage: train-ai=y, not a dictionary, train-ai=n"},
		{"Content-Signal", []string{"ai-train=no", "ai-train=yes"}, wantUsage{"refused 0", "", ""}, "content-signal: ai-train=no, ai-train=yes"},
		{"X-Robots-Tag", []string{"noai"}, wantUsage{}, ""},
		{"Content-Usage", nil, wantUsage{}, ""},
	}
	for _, tt := range tests {
		u := HeaderUsage(tt.name, tt.values)
		if got := compact(&u); got != tt.want {
			t.Errorf("HeaderUsage(%q, %q) = %q; want %q", tt.name, tt.values, got, tt.want)
		}
		if tt.text != "" && u[AITrain].Statement != tt.text && u[Search].Statement != tt.text {
			t.Errorf("HeaderUsage(%q, %q) statement = %q; want %q", tt.name, tt.values, u[AITrain].Statement, tt.text)
		}
	}
}

// TestParseDictionary checks the structured-field dictionary parser on the
// shapes RFC 9651 allows and some it does not.
func TestParseDictionary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		ok   bool
		want string // "key=token" members, space-separated
	}{
		{"", true, ""},
		{"   ", true, ""},
		{"a=b", true, "a=b"},
		{"a=b, c=d", true, "a=b c=d"},
		{"a=b,c=d", true, "a=b c=d"},
		{"a=b ,\tc=d ", true, "a=b c=d"},
		{"a", true, "a="},
		{"a;p=1", true, "a="},
		{"a=1, b=-2.5, c=\"x\\\"y\", d=:aGk=:, e=?1, f=@123, g=%\"caf%c3%a9\", h=*tok/x:y", true, "a= b= c= d= e= f= g= h=*tok/x:y"},
		{"a=(1 b \"c\");q=2, d=()", true, "a= d="},
		{"*k=v", true, "*k=v"},
		{"a=b;c", true, "a=b"},
		{"A=b", false, ""},
		{"1a=b", false, ""},
		{"a=b,", false, ""},
		{"a=b,,c=d", false, ""},
		{"a=b c=d", false, ""},
		{"a=", false, ""},
		{"a=\"unterminated", false, ""},
		{"a=\"bad\\q\"", false, ""},
		{"a=?2", false, ""},
		{"a=1.2345", false, ""},
		{"a=1234567890123456", false, ""},
		{"a=(1 2", false, ""},
		{"a=:not base64!:", false, ""},
		{"a=%\"%C3\"", false, ""},
		{"a=é", false, ""},
		{"\ta=b", false, ""},
	}
	for _, tt := range tests {
		var got []string
		ok := parseDictionary(tt.in, func(k, v string) { got = append(got, k+"="+v) })
		if ok != tt.ok || ok && strings.Join(got, " ") != tt.want {
			t.Errorf("parseDictionary(%q) = %v %q; want %v %q", tt.in, ok, strings.Join(got, " "), tt.ok, tt.want)
		}
	}
}

// FuzzHeaderUsage reads response header values as usage preferences: no
// panic, statements named, and a value that parses still parses with
// spaces around it.
func FuzzHeaderUsage(f *testing.F) {
	for _, v := range []string{"train-ai=n", "train-ai=n, search=y", "ai-train=no, use=reference", "1", "a=(1 2);p=?1, b=:aGk=:",
		"x=\"s\\\"\", y=%\"%c3%a9\", z=@-12, w=1.5", "train-ai=n,", "A=b"} {
		f.Add("Content-Usage", v)
		f.Add("Content-Signal", v)
	}
	f.Add("TDM-Reservation", "1")
	for _, c := range readVocabCases(f) {
		for _, v := range c.Values {
			f.Add("Content-Usage", v)
		}
	}
	for _, c := range readSignalCases(f) {
		f.Add("Content-Signal", c.Value)
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		// use= never grants or refuses a purpose.
		st, _ := ParseContentSignal(value)
		for _, level := range []string{", use=full", "; use=immediate", ",use=reference"} {
			if more, _ := ParseContentSignal(value + level); more != st {
				t.Fatalf("ParseContentSignal(%q) = %v; with %q, %v", value, st, level, more)
			}
		}
		u := HeaderUsage(name, []string{value})
		for p, v := range u {
			if v.State != Unstated && (v.Line != 0 || !strings.HasSuffix(v.Statement, ": "+value)) {
				t.Fatalf("HeaderUsage(%q, %q)[%s] = %+v", name, value, Purpose(p), v)
			}
		}
		if parseDictionary(value, func(string, string) {}) && !parseDictionary("  "+value+"  ", func(string, string) {}) {
			t.Fatalf("parseDictionary(%q) parses, but not with spaces around it", value)
		}
	})
}

// vocabCase is one line of testdata/aipref-vocab-08.jsonl: Content-Usage
// field lines and what they state of each purpose, by name ("refused",
// "allowed"; absent for unstated), extended from the examples of
// draft-ietf-aipref-vocab-08 and draft-ietf-aipref-attach-05.
type vocabCase struct {
	Name   string            `json:"name"`
	Values []string          `json:"values"`
	Want   map[string]string `json:"want"`
}

func readVocabCases(t testing.TB) []vocabCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "aipref-vocab-08.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []vocabCase
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var c vocabCase
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatalf("aipref-vocab-08.jsonl line %d: %v", i+1, err)
		}
		out = append(out, c)
	}
	return out
}

func TestVocab08(t *testing.T) {
	t.Parallel()
	cases := readVocabCases(t)
	if len(cases) < 20 {
		t.Fatalf("%d cases; want the file's", len(cases))
	}
	for _, c := range cases {
		u := HeaderUsage("Content-Usage", c.Values)
		got := map[string]string{}
		for p, v := range u {
			if v.State != Unstated {
				got[Purpose(p).String()] = v.State.String()
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.Want) {
			t.Errorf("%s: HeaderUsage(Content-Usage, %q) = %v; want %v", c.Name, c.Values, got, c.Want)
		}
	}
}

// signalCase is one line of testdata/content-signal.jsonl: a Content-Signal
// value, what it states of each purpose and its use= level.
type signalCase struct {
	Name  string            `json:"name"`
	Value string            `json:"value"`
	Want  map[string]string `json:"want"`
	Use   string            `json:"use"`
}

func readSignalCases(t testing.TB) []signalCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "content-signal.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []signalCase
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var c signalCase
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatalf("content-signal.jsonl line %d: %v", i+1, err)
		}
		out = append(out, c)
	}
	return out
}

func TestContentSignal(t *testing.T) {
	t.Parallel()
	for _, c := range readSignalCases(t) {
		st, use := ParseContentSignal(c.Value)
		got := map[string]string{}
		for p, s := range st {
			if s != Unstated {
				got[Purpose(p).String()] = s.String()
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(c.Want) || use.String() != c.Use {
			t.Errorf("%s: ParseContentSignal(%q) = %v, use %q; want %v, use %q", c.Name, c.Value, got, use, c.Want, c.Use)
		}
	}
}
