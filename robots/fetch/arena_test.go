package fetch

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// copyBytes is the content of state i's copy number v: every copy's bytes
// tell whose they are, so a copy moved to the wrong place is seen.
func copyBytes(i, v, n int) []byte {
	unit := fmt.Sprintf("%d.%d;", i, v)
	return bytes.Repeat([]byte(unit), n/len(unit)+1)[:n]
}

// The arena under churn: copies replaced, forgotten and added at random,
// some larger than a slab. After every step each state's copy reads back
// as it was written, what is counted held is what states hold, and what is
// mapped stays within a quarter more (and two slabs) of it.
func TestArenaChurn(t *testing.T) {
	a := newArena()
	var maps, unmaps int
	a.alloc = func(n int) ([]byte, error) { maps++; return make([]byte, n), nil }
	a.unmap = func([]byte) { unmaps++ }
	const states = 600
	sts := make([]*originState, states)
	want := make([][]byte, states)
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 20_000 {
		i := rng.IntN(states)
		st := sts[i]
		if st == nil {
			st = &originState{}
			sts[i] = st
		}
		if g := st.good; g != nil {
			st.good = nil
			a.free(g.ref)
			want[i] = nil
		}
		if rng.IntN(4) > 0 { // three in four are replaced, one forgotten
			n := 200 + rng.IntN(3000)
			if rng.IntN(500) == 0 {
				n = slabSize + rng.IntN(slabSize) // a copy larger than a slab
			}
			b := copyBytes(i, step, n)
			ref, err := a.put(b, st)
			if err != nil {
				t.Fatal(err)
			}
			st.good = &coldCopy{ref: ref}
			want[i] = b
		}
		var held int64
		for j, st := range sts {
			if st == nil || st.good == nil {
				continue
			}
			held += int64(st.good.ref.n)
			if step%97 == 0 || j == i {
				if got := a.bytes(st.good.ref); !bytes.Equal(got, want[j]) {
					t.Fatalf("step %d: state %d reads %d bytes %.20q; want %d bytes %.20q", step, j, len(got), got, len(want[j]), want[j])
				}
			}
		}
		if held != a.live {
			t.Fatalf("step %d: arena counts %d bytes held; states hold %d", step, a.live, held)
		}
		if a.mapped > a.live+a.live/4+2*slabSize+2*slabSize {
			t.Fatalf("step %d: %d bytes mapped for %d held", step, a.mapped, a.live)
		}
	}
	t.Logf("%d slabs mapped, %d unmapped; %d bytes mapped for %d held", maps, unmaps, a.mapped, a.live)
	if unmaps == 0 {
		t.Error("no slab was ever unmapped")
	}
	a.releaseAll()
	if unmaps != maps {
		t.Errorf("%d slabs mapped, %d unmapped after releaseAll", maps, unmaps)
	}
}
