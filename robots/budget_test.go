package robots

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestSearchIndex checks the search of a segment through a long path's
// index (the rarest byte's places, after the pairs filter) against
// strings.Index, over random paths and segments from a small alphabet,
// where matches and near misses are many.
func TestSearchIndex(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int, alphabet string) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for range 300 {
		alphabet := "abc/?=%"[:2+rng.IntN(6)]
		path := "/" + word(indexMinPath+rng.IntN(3000), alphabet)
		sr := search{path: path}
		for range 50 {
			seg := word(1+rng.IntN(6), alphabet)
			lo := rng.IntN(len(path))
			hi := lo + rng.IntN(len(path)-lo+1)
			want := strings.Index(path[lo:hi], seg)
			if want >= 0 {
				want += lo
			}
			if got := sr.index(seg, lo, hi); got != want {
				t.Fatalf("index(%q, %d, %d) in a %d-byte path = %d; want %d", seg, lo, hi, len(path), got, want)
			}
		}
		if sr.idx == nil {
			t.Fatalf("a %d-byte path was searched without its index", len(path))
		}
	}
}

// FuzzSearchIndex is TestSearchIndex on any path (made long) and segment.
func FuzzSearchIndex(f *testing.F) {
	f.Add("/abcabc?x=1", "ca", 3, 100)
	f.Add("/%2F%2f//", "%2", 0, 9)
	f.Fuzz(func(t *testing.T, path, seg string, lo, hi int) {
		for len(path) < indexMinPath {
			path += path + "/"
		}
		if seg == "" || len(path) > 0xFFFF {
			return
		}
		lo, hi = min(max(lo, 0), len(path)), min(max(hi, 0), len(path))
		if lo > hi {
			lo, hi = hi, lo
		}
		want := strings.Index(path[lo:hi], seg)
		if want >= 0 {
			want += lo
		}
		sr := search{path: path}
		if got := sr.index(seg, lo, hi); got != want {
			t.Fatalf("index(%q, %d, %d) = %d; want %d", seg, lo, hi, got, want)
		}
	})
}

// TestBudget: under a budget large enough, every verdict and usage answer
// is the unbounded one, and is reported as reliable; under one too small,
// it is reported as not; a nil budget is unbounded.
func TestBudget(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("User-agent: *\nContent-Usage: /*q=*z train-ai=n\n")
	for i := range 2000 {
		fmt.Fprintf(&b, "Disallow: /*%s%d*z$\nAllow: /*x%d\n", strings.Repeat("q", 1+i%7), i, i)
	}
	r := Parse([]byte(b.String()), WithNormalization())
	g := r.Group("AnyBot")
	long := "/" + strings.Repeat("q1x2", 400) + "?q=5z"
	for _, path := range []string{"/", "/x1", "/qq1az", "/q1999z", long, long + "/q10z"} {
		want, wantU := g.Test(path), g.Usage(path)
		v, ok := g.TestWithin(path, NewBudget(1<<40))
		u, uok := g.UsageWithin(path, NewBudget(1<<40))
		if !ok || !uok || v != want || u != wantU {
			t.Errorf("%q: TestWithin = %+v, %v; UsageWithin = %+v, %v; want %+v, %+v", path, v, ok, u, uok, want, wantU)
		}
		if _, ok := g.TestWithin(path, NewBudget(10)); ok {
			t.Errorf("%q: TestWithin(10 units) reports a reliable verdict; want not", path)
		}
		if v, ok := g.TestWithin(path, nil); !ok || v != want {
			t.Errorf("%q: TestWithin(nil) = %+v, %v; want %+v, true", path, v, ok, want)
		}
	}
	w := NewBudget(10)
	if !w.Spend(10) || w.Exhausted() || w.Spend(1) || !w.Exhausted() || w.Left() >= 0 {
		t.Errorf("a budget of 10: spending 10 then 1 left %d, exhausted %v; want exhausted after the 11th", w.Left(), w.Exhausted())
	}
}
