package fetch

import "unsafe"

// heapSlack is how many bytes of heap in use the cache answers for per
// byte it holds live. Go's collector lets the heap grow to twice the live
// data before it collects (GOGC=100, the default), and a cache's
// long-lived objects, scattered among the short-lived ones of fetches and
// requests, keep nearly every span they share in use after a collection.
// Measured at 60,000 origins and MaxBytes 64 MiB, heap in use came to
// 1.25 times the live bytes for the files of the corpus in turn (1.4 to
// 1.5 before files took their compact form, which allocates less around
// them), and up to 2.4 for small files (the part above 2 is the slack
// around the rest of the process's live heap: docs/performance.md's fixed
// overhead). MaxBytes bounds heap in use, so the live bytes are held to
// half of it.
const heapSlack = 2

// stateOverhead is the heap an origin's state takes besides its good
// copy and its failure marks: the originState (its own LRU links), its
// slot in the states map, its copy's owner entry in the arena, and a host
// name of typical length. Maps are
// counted at the load they average between growths; TestCacheCostMeasured
// holds the whole to the heap.
const stateOverhead = int64(0 +
	(unsafe.Sizeof(originState{})+15)&^15 + // the state, rounded to its size class
	40 + // states map slot: key and state pointer, and control byte
	16 + // its copy's entry in its slab's owners (arena.go)
	32) // the host name

// hotOverhead is the heap an entry of the hot tier takes besides the
// entry: its slots in ristretto (store, and the admission policy's key
// and cost).
const hotOverhead = 90 + 30

// coldSize returns the heap a cold copy holds: itself and what its entry
// has besides (its rules' bytes are in the arena, counted apart).
func coldSize(g *coldCopy) int {
	n := allocSize(int(unsafe.Sizeof(*g)))
	if g.more != nil {
		n += allocSize(int(unsafe.Sizeof(*g.more))) + allocSize(len(g.more.url)) + allocSize(len(g.more.note))
	}
	return n
}

// failureSize returns the heap that failure marks f hold (nil: none).
func failureSize(f *Failure) int64 {
	if f == nil {
		return 0
	}
	return int64(allocSize(int(unsafe.Sizeof(*f))) + allocSize(len(f.LastError)) + allocSize(len(f.LastKind)))
}

// entrySize returns the heap an entry holds: the Entry, its URL and note,
// and its rules with every matcher built (robots.Robots.MemSize): a file
// used by requests builds the matchers of the groups they select, at most
// all, so the count bounds what the entry can come to hold.
func entrySize(e *Entry) int {
	return allocSize(int(unsafe.Sizeof(*e))) + allocSize(len(e.URL)) + allocSize(len(e.Note)) + e.Rules.MemSize()
}

// allocSize is the heap Go's allocator takes for n bytes, at most: a size
// class, which for objects of this size is at most an eighth larger.
func allocSize(n int) int {
	switch {
	case n <= 0:
		return 0
	case n <= 128:
		return (n + 15) &^ 15
	}
	return n + n/8
}
