package robots

import "strings"

// A search is one path being tested against rules: the path, the work
// budget (nil: unbounded) and what is worked out about the path once, when
// a wildcard rule first needs it: the set of its bytes (for a filter) and,
// for a long path, where each byte occurs (for finding segments).
type search struct {
	path string
	w    *Budget
	pm   struct {
		done bool
		m    [2]uint64
	}
	idx *pathIndex // nil until a long path's segments are searched
}

// indexMinPath is the shortest path whose segments are found through a
// pathIndex rather than strings.Index. Below it a scan of the path costs
// less than building the index; above it, a file with hundreds of wildcard
// rules (istockphoto.com has 970) costs a scan of the path per rule.
const indexMinPath = 512

// A pathIndex lists where each byte occurs in a path: pos[start[c]:
// start[c+1]] are the positions of byte c, ascending; and which pairs of
// bytes occur next to each other in it. A segment is then looked for only
// when each of its pairs occurs (most segments of a real file fail that
// at once), and only where its rarest byte is, which for a real path is a
// few places, not every one.
type pathIndex struct {
	start [257]uint16
	pos   []uint16
	pairs [pairBits / 64]uint64 // bit pairBit(a, b): "ab" may occur
}

// pairBits is the size of a pathIndex's set of pairs: a hash of 65,536
// pairs into 8,192 bits, a filter that lets a pair through now and then
// that the path does not have (a few hundred pairs of a real path set a
// few percent of it).
const pairBits = 8192

// pairBit is the bit of the pair "ab".
func pairBit(a, b byte) uint { return (uint(a)*0x9E + uint(b)) & (pairBits - 1) }

// newPathIndex indexes path (at most 65,535 bytes), by a counting sort.
func newPathIndex(path string) *pathIndex {
	x := &pathIndex{pos: make([]uint16, len(path))}
	for i := 1; i < len(path); i++ {
		bit := pairBit(path[i-1], path[i])
		x.pairs[bit>>6] |= 1 << (bit & 63)
	}
	var count [256]uint16
	for i := 0; i < len(path); i++ {
		count[path[i]]++
	}
	n := uint16(0)
	for c := range 256 {
		x.start[c] = n
		n += count[c]
	}
	x.start[256] = n
	next := x.start
	for i := 0; i < len(path); i++ {
		c := path[i]
		x.pos[next[c]] = uint16(i)
		next[c]++
	}
	return x
}

// hasPairs reports whether every pair of adjacent bytes of seg may occur
// in the path: false means seg does not.
func (x *pathIndex) hasPairs(seg string) bool {
	for i := 1; i < len(seg); i++ {
		if bit := pairBit(seg[i-1], seg[i]); x.pairs[bit>>6]&(1<<(bit&63)) == 0 {
			return false
		}
	}
	return true
}

// index returns where seg first occurs in path[lo:hi], as an index into
// path, or -1. The work it does is charged to the budget: the bytes a scan
// of path[lo:hi] looks at, or, through the path's index, those of seg at
// each place where its rarest byte occurs. Once the budget is spent it
// returns -1 without looking.
func (sr *search) index(seg string, lo, hi int) int {
	if hi-lo < len(seg) {
		return -1
	}
	if sr.idx == nil && len(sr.path) >= indexMinPath && len(sr.path) <= 0xFFFF {
		if !sr.w.spend(3 * len(sr.path)) {
			return -1
		}
		sr.idx = newPathIndex(sr.path)
	}
	x := sr.idx
	if x == nil {
		if !sr.w.spend(hi - lo + len(seg)) {
			return -1
		}
		if k := strings.Index(sr.path[lo:hi], seg); k >= 0 {
			return lo + k
		}
		return -1
	}
	if !sr.w.spend(ruleCost+2*len(seg)) || !x.hasPairs(seg) {
		return -1
	}
	// The byte of seg that occurs least in the path.
	at, fewest := 0, x.start[int(seg[0])+1]-x.start[seg[0]]
	for i := 1; i < len(seg) && fewest > 0; i++ {
		c := seg[i]
		if n := x.start[int(c)+1] - x.start[c]; n < fewest {
			at, fewest = i, n
		}
	}
	c := seg[at]
	list := x.pos[x.start[c]:x.start[int(c)+1]]
	// The first occurrence that leaves room for seg's bytes before it.
	from := lo + at
	i, j := 0, len(list)
	for i < j {
		h := int(uint(i+j) >> 1)
		if int(list[h]) < from {
			i = h + 1
		} else {
			j = h
		}
	}
	for ; i < len(list); i++ {
		start := int(list[i]) - at
		if start+len(seg) > hi {
			return -1
		}
		// A compare of strings stops at their first difference, a word
		// at a time: an eighth of seg is about what it costs.
		if !sr.w.spend(ruleCost + len(seg)>>3) {
			return -1
		}
		if sr.path[start:start+len(seg)] == seg {
			return start
		}
	}
	return -1
}
