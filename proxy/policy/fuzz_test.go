package policy

import (
	"strings"
	"testing"
)

// FuzzRequestTarget: any request-line URI in origin-form or absolute-form
// gives a target that starts with "/" and is the URI's own tail (after one
// added "/" at most): nothing in it is decoded, cut or rewritten; any
// other URI is given back whole, for the decision to refuse.
func FuzzRequestTarget(f *testing.F) {
	for _, s := range []string{"http://h/p?q#f", "/a", "https://h", "h?x", "", "*", "http://h:1#x/y", "http://h?q/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		got := RequestTarget(uri)
		if !strings.HasPrefix(uri, "/") && !strings.Contains(uri, "://") {
			if got != uri {
				t.Fatalf("RequestTarget(%q) = %q; want it whole", uri, got)
			}
			return
		}
		if !strings.HasPrefix(got, "/") || !strings.HasSuffix(uri, got) && !strings.HasSuffix(uri, got[1:]) {
			t.Fatalf("RequestTarget(%q) = %q", uri, got)
		}
	})
}

// FuzzPurposeHeader: any X-Robots-Gate-Purpose value is read or refused
// with an error naming the known purposes, never half-read; what is read
// reads back the same from its names.
func FuzzPurposeHeader(f *testing.F) {
	for _, s := range []string{"ai-train", "ai-train, search", " AI-Input ,, ", "training", "", ",", "search\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ps, err := ParsePurposes([]string{v})
		if err != nil {
			if ps != 0 || !strings.Contains(err.Error(), "known purposes are ai-train, ai-input, search") {
				t.Fatalf("ParsePurposes(%q) = %v, %v", v, ps, err)
			}
			return
		}
		again, err := ParsePurposes([]string{strings.Join(ps.Names(), ",")})
		if err != nil || again != ps {
			t.Fatalf("ParsePurposes(%q) = %v; its names read back as %v, %v", v, ps, again, err)
		}
	})
}
