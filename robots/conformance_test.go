package robots

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// conformanceCase is one line of testdata/google-*.jsonl: a decision checked
// against Google's reference matcher (OneAgentAllowedByRobots).
type conformanceCase struct {
	Name      string `json:"name"`
	Robots    string `json:"robots"`
	RobotsB64 string `json:"robots_b64"`
	Agent     string `json:"agent"`
	URL       string `json:"url"`
	Allowed   bool   `json:"allowed"`
}

func (c conformanceCase) body(t testing.TB) []byte {
	if c.RobotsB64 == "" {
		return []byte(c.Robots)
	}
	b, err := base64.StdEncoding.DecodeString(c.RobotsB64)
	if err != nil {
		t.Fatalf("%s: decode robots_b64: %v", c.Name, err)
	}
	return b
}

func readJSONL[T any](t testing.TB, name string) []T {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func conformanceCases(t testing.TB) []conformanceCase {
	cases := readJSONL[conformanceCase](t, "google-robotstxt-tests.jsonl")
	spec := readJSONL[conformanceCase](t, "google-spec-test.jsonl")
	if len(cases) != 145 || len(spec) != 400 {
		t.Fatalf("conformance data: %d + %d cases; want 145 + 400", len(cases), len(spec))
	}
	return append(cases, spec...)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, c := range conformanceCases(t) {
		body := c.body(t)
		r := Parse(body)
		if got := r.Allowed(c.Agent, c.URL); got != c.Allowed {
			t.Errorf("%s: Allowed(%q, %q) = %v; want %v\nrobots.txt:\n%s", c.Name, c.Agent, c.URL, got, c.Allowed, body)
		}
		// Every block by its matcher, and every block by scan, alike.
		v := r.TestURL(c.Agent, c.URL)
		for _, limit := range []int32{-1, math.MaxInt32} {
			if got := r.testURL(c.Agent, c.URL, limit); got != v {
				t.Errorf("%s: TestURL(%q, %q) with scanLimit %d = %+v; want %+v", c.Name, c.Agent, c.URL, limit, got, v)
			}
		}
		// Both tiers of a cache: the file from its binary form, cold
		// (scanning) and hot (matchers).
		cold, hot := tiers(t, r)
		for _, tr := range []*Robots{cold, hot} {
			if got := tr.TestURL(c.Agent, c.URL); got.String() != v.String() {
				t.Errorf("%s: TestURL(%q, %q), cold %v = %+v; want %+v", c.Name, c.Agent, c.URL, tr.Cold(), got, v)
			}
		}
		// The naive transliteration must agree too, or it is no oracle.
		if got, _ := refAllowed(string(body), c.Agent, c.URL); got != c.Allowed {
			t.Errorf("%s: refAllowed(%q, %q) = %v; want %v", c.Name, c.Agent, c.URL, got, c.Allowed)
		}
	}
}

// TestConformanceLines checks the matching line of every conformance case
// against the transliterated reference.
func TestConformanceLines(t *testing.T) {
	t.Parallel()
	for _, c := range conformanceCases(t) {
		body := c.body(t)
		v := Parse(body).TestURL(c.Agent, c.URL)
		if _, line := refAllowed(string(body), c.Agent, c.URL); v.Line != line {
			t.Errorf("%s: TestURL(%q, %q).Line = %d; want %d", c.Name, c.Agent, c.URL, v.Line, line)
		}
	}
}

type helperCase struct {
	Name     string `json:"name"`
	Function string `json:"function"`
	Input    string `json:"input"`
	Expected any    `json:"expected"`
}

func TestReferenceHelpers(t *testing.T) {
	t.Parallel()
	cases := readJSONL[helperCase](t, "google-robotstxt-helpers.jsonl")
	counts := map[string]int{}
	for _, c := range cases {
		counts[c.Function]++
		switch c.Function {
		case "GetPathParamsQuery":
			if got := PathOf(c.Input); got != c.Expected {
				t.Errorf("%s: PathOf(%q) = %q; want %q", c.Name, c.Input, got, c.Expected)
			}
		case "MaybeEscapePattern":
			var b strings.Builder
			if writeEscapedPattern(&b, []byte(c.Input)); b.String() != c.Expected {
				got := b.String()
				t.Errorf("%s: escape(%q) = %q; want %q", c.Name, c.Input, got, c.Expected)
			}
		case "IsValidUserAgentToObey":
			if got := ValidToken(c.Input); got != c.Expected {
				t.Errorf("%s: ValidToken(%q) = %v; want %v", c.Name, c.Input, got, c.Expected)
			}
		default:
			t.Errorf("%s: unknown function %q", c.Name, c.Function)
		}
	}
	if counts["GetPathParamsQuery"] != 19 || counts["MaybeEscapePattern"] != 4 || counts["IsValidUserAgentToObey"] != 11 {
		t.Errorf("helper cases by function = %v; want 19, 4, 11", counts)
	}
}

// TestLongestPatterns checks the longest patterns a line can hold, which
// escaping or normalising triples, against the 16-bit length a rule keeps.
func TestLongestPatterns(t *testing.T) {
	t.Parallel()
	const n = maxLineBytes - len("disallow: /") // the pattern's bytes after "/" that a line keeps
	for _, tt := range []struct {
		name    string
		char    string // the pattern is "/" and n of it
		escaped string // how the file's pattern escapes it
		opts    []Option
	}{
		{"escaped", "\xff", "%FF", nil},
		{"normalised", "%", "%", []Option{WithNormalization()}},
		{"normalised quotes", "\"", "\"", []Option{WithNormalization()}},
	} {
		r := Parse([]byte("user-agent: *\ndisallow: /"+strings.Repeat(tt.char, n+100)+"\n"), tt.opts...)
		if len(r.rules) != 1 {
			t.Fatalf("%s: %d rules; want 1", tt.name, len(r.rules))
		}
		path := "/" + strings.Repeat(tt.escaped, n)
		if len(tt.opts) > 0 {
			path = Normalize(path)
		}
		if pat := r.pattern(0); pat != path || int(r.rules[0].n) != len(path) || len(path) != 1+3*n {
			t.Errorf("%s: pattern of %d bytes, rule says %d; want %d", tt.name, len(pat), r.rules[0].n, 1+3*n)
		}
		for _, limit := range []int32{-1, scanMax} {
			if v := r.Group("x").test(path, limit, nil); v.Allowed || v.Line != 2 {
				t.Errorf("%s: Test by scanLimit %d = %+v; want disallowed by line 2", tt.name, limit, v)
			}
		}
		if got, want := r.Group("x").Test(path).Rule(), "disallow: /"+strings.Repeat(tt.escaped, n); got != want {
			t.Errorf("%s: rule text %.20q… of %d bytes; want %.20q… of %d", tt.name, got, len(got), want, len(want))
		}
	}
}
