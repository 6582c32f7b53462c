package fetch

import "fmt"

// The cold tier's bytes (cold.go) are kept off the Go heap, in slabs of
// memory mapped from the OS. On the heap, a hundred thousand cold copies
// of a kilobyte would cost twice their size: Go's collector lets the heap
// grow to twice what is live before it collects (GOGC=100), and those
// pages stay resident. In slabs they cost their size: the collector never
// sees them, and a slab is returned to the OS as soon as nothing in it is
// held. Copies are written one after another into the newest slab;
// replacing or forgetting one leaves a hole, and when the holes add up to
// a quarter of what is mapped, the emptiest slab's copies are moved to
// the newest and the slab unmapped.

// slabSize is the size of one slab: 256 copies of a median file. A copy
// larger than a slab gets a slab of its own.
const slabSize = 256 << 10

// blobRef is where a copy's bytes are: n bytes at off in slab. The zero
// blobRef is no bytes.
type blobRef struct {
	slab uint32 // the slab's id
	off  uint32
	n    uint32
}

// slab is one mapping of the arena.
type slab struct {
	id   uint32
	mem  []byte
	used int // bytes written from the start
	live int // bytes of copies still held
	// owners are the states whose copies were written here, with where:
	// a copy since replaced or forgotten is one whose state's ref differs.
	owners []slabOwner
}

type slabOwner struct {
	st  *originState
	off uint32
}

// arena holds the cold tier's bytes. It is guarded by the Cache's mu.
type arena struct {
	slabs  []*slab // by id - base; nil once unmapped
	base   uint32  // id of slabs[0]
	cur    *slab   // where the next copy goes
	mapped int64   // bytes mapped
	live   int64   // bytes of copies held
	moved  int64   // copies compact has moved, for tests
	// alloc maps n bytes, unmap returns them (mmap on Unix, the heap
	// elsewhere); tests replace them to count.
	alloc func(n int) ([]byte, error)
	unmap func([]byte)
}

func newArena() *arena { return &arena{alloc: mapBytes, unmap: unmapBytes} }

// put writes b into the arena as st's copy and returns where it is.
func (a *arena) put(b []byte, st *originState) (blobRef, error) {
	if len(b) == 0 {
		return blobRef{}, nil
	}
	s := a.cur
	if s == nil || s.used+len(b) > len(s.mem) {
		var err error
		if s, err = a.newSlab(max(len(b), slabSize)); err != nil {
			return blobRef{}, err
		}
		if len(b) <= slabSize {
			a.cur = s // an oversized copy's slab takes nothing else
		}
	}
	off := s.used
	copy(s.mem[off:], b)
	s.used += len(b)
	s.live += len(b)
	a.live += int64(len(b))
	s.owners = append(s.owners, slabOwner{st, uint32(off)})
	return blobRef{s.id, uint32(off), uint32(len(b))}, nil
}

func (a *arena) newSlab(size int) (*slab, error) {
	size = (size + 4095) &^ 4095
	mem, err := a.alloc(size)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrColdCopy, err)
	}
	s := &slab{id: a.base + uint32(len(a.slabs)), mem: mem}
	a.slabs = append(a.slabs, s)
	a.mapped += int64(size)
	return s, nil
}

func (a *arena) slab(id uint32) *slab {
	if id < a.base || int(id-a.base) >= len(a.slabs) {
		return nil
	}
	return a.slabs[id-a.base]
}

// bytes returns the bytes at r: valid only until the arena next changes.
func (a *arena) bytes(r blobRef) []byte {
	if r.n == 0 {
		return nil
	}
	s := a.slab(r.slab)
	return s.mem[r.off : r.off+r.n : r.off+r.n]
}

// free gives back the copy at r, unmapping its slab once nothing in it is
// held, and compacts when holes have grown to a quarter of what is
// mapped.
func (a *arena) free(r blobRef) {
	if r.n == 0 {
		return
	}
	s := a.slab(r.slab)
	s.live -= int(r.n)
	a.live -= int64(r.n)
	if s.live == 0 && s != a.cur {
		a.release(s)
	}
	a.compact()
}

// releaseAll unmaps every slab: for a Cache that is gone.
func (a *arena) releaseAll() {
	for _, s := range a.slabs {
		if s != nil {
			a.unmap(s.mem)
		}
	}
	a.slabs, a.cur, a.mapped, a.live = nil, nil, 0, 0
}

func (a *arena) release(s *slab) {
	a.mapped -= int64(len(s.mem))
	a.unmap(s.mem)
	s.mem, s.owners = nil, nil
	a.slabs[s.id-a.base] = nil
	for len(a.slabs) > 0 && a.slabs[0] == nil {
		a.slabs = a.slabs[1:]
		a.base++
	}
}

// compact moves the copies of the emptiest slabs into the newest while
// what is mapped exceeds what is held by more than a quarter (and two
// slabs, the newest and the one being filled). Each move frees at least a
// fifth of a slab: while the bound is exceeded, the slabs but the newest
// are on average less than four fifths full.
func (a *arena) compact() {
	for a.mapped > a.live+a.live/4+2*slabSize {
		var emptiest *slab
		for _, s := range a.slabs {
			if s != nil && s != a.cur && (emptiest == nil || s.live*len(emptiest.mem) < emptiest.live*len(s.mem)) {
				emptiest = s
			}
		}
		if emptiest == nil {
			return
		}
		for _, ow := range emptiest.owners {
			g := ow.st.good
			if g == nil || g.ref.slab != emptiest.id || g.ref.off != ow.off {
				continue // replaced or forgotten since
			}
			old := g.ref
			ref, err := a.put(a.bytes(old), ow.st)
			if err != nil {
				return // no memory to move into: the holes stay
			}
			emptiest.live -= int(old.n)
			a.live -= int64(old.n)
			g.ref = ref
			a.moved++
		}
		a.release(emptiest)
	}
}
