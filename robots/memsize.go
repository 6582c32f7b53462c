package robots

import (
	"math/bits"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"
)

// MemSize returns the bytes of Go heap that r holds once the matcher of
// every group is built: the cost of a cached file. A file used by requests
// builds the matchers of the groups they select, at most all of them, so
// the count is an upper bound on a cached file's heap, not a guess at its
// average. Each allocation of Parse and of the matchers is counted at the
// size Go's allocator gives it (size classes, the header of pointer-holding
// objects above 512 bytes, whole pages above 32 KiB); strings that are
// views of the file's text are not counted twice. TestMemSizeMeasured holds
// it to the heap measured over testdata/corpus.
func (r *Robots) MemSize() int {
	if r == nil {
		return 0
	}
	n := heapSize(int(unsafe.Sizeof(*r)), true)
	n += heapSize(int(r.textCap), false)
	n += heapSize(cap(r.rules)*int(unsafe.Sizeof(rule{})), false)
	n += heapSize(cap(r.blocks)*int(unsafe.Sizeof(block{})), false)
	n += heapSize(cap(r.spans)*int(unsafe.Sizeof(span{})), false)
	n += heapSize(cap(r.keys)*int(unsafe.Sizeof(agentKey{})), false)
	n += heapSize(4*cap(r.groups), false)
	if x := r.x; x != nil {
		n += heapSize(int(unsafe.Sizeof(*x)), true)
		n += heapSize(cap(x.usage)*int(unsafe.Sizeof(usageStmt{})), true)
		for i := range x.usage {
			s := &x.usage[i]
			n += r.owned(s.pattern)
		}
		n += heapSize(cap(x.normal)*int(unsafe.Sizeof(normalDisplay{})), false)
		n += heapSize(8*cap(x.delays), false)
		n += heapSize(cap(x.licenses)*int(unsafe.Sizeof(span{})), false)
	}
	if lazy := r.lazy.Load(); lazy != nil {
		n += heapSize(int(unsafe.Sizeof(*lazy)), true)
		n += heapSize(cap(lazy.slots)*int(unsafe.Sizeof(atomic.Pointer[matcher]{})), true)
	}
	for i := range r.blocks {
		n += r.matcherSize(&r.blocks[i])
	}
	return n
}

// matcherSize is what compile keeps for block b, counted without building
// it: nothing for a block tested by scan, else the matcher, an entry per
// distinct prefix and kind of its literal patterns, and per wildcard
// pattern a wildRule and its byte set.
func (r *Robots) matcherSize(b *block) int {
	if b.last-b.first <= scanMax {
		return 0 // tested by scan
	}
	type literal struct {
		prefix string
		kind   entryKind
	}
	var lits []literal
	nWild := 0
	var keys [2]uint64
	item := func(body string, anchored, allow bool) {
		prefix, rest, k, _ := classify(body, anchored)
		if k == kindWild {
			nWild++
			c := keyByte(rest)
			keys[c>>6&1] |= 1 << (c & 63)
			return
		}
		c := compiled{kind: k, allow: allow}
		lits = append(lits, literal{prefix, c.entryKind()})
	}
	for idx := b.first; idx < b.last; idx++ {
		pat, allow := r.pattern(idx), r.rules[idx].allow()
		body, anchored := strings.CutSuffix(pat, "$")
		item(body, anchored, allow)
		if allow { // the "/x/index.htm" → "/x/$" derivation of compile
			if s := derivedIndex(pat); s >= 0 {
				item(pat[:s+1], true, true)
			}
		}
	}
	// An entry per distinct prefix and kind, as compile makes them.
	slices.SortFunc(lits, func(a, b literal) int {
		if c := strings.Compare(a.prefix, b.prefix); c != 0 {
			return c
		}
		return int(a.kind) - int(b.kind)
	})
	nLit := len(slices.Compact(lits))
	n := heapSize(int(unsafe.Sizeof(matcher{})), true)
	n += heapSize(nLit*int(unsafe.Sizeof(entry{})), false)
	if nWild > 0 {
		nKeys := bits.OnesCount64(keys[0]) + bits.OnesCount64(keys[1])
		n += heapSize(nWild*int(unsafe.Sizeof(wildRule{})), false)
		n += heapSize(nWild*int(unsafe.Sizeof([2]uint64{})), false)
		n += heapSize((nKeys+1)*4, false)
	}
	return n
}

// owned returns the heap size of s when s has its own allocation, 0 when
// it is empty or a view of r.text.
func (r *Robots) owned(s string) int {
	if s == "" {
		return 0
	}
	if len(r.text) > 0 {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		t := uintptr(unsafe.Pointer(unsafe.StringData(r.text)))
		if p >= t && p < t+uintptr(len(r.text)) {
			return 0
		}
	}
	return heapSize(len(s), false)
}

// sizeClasses are the object sizes of Go's allocator up to 32 KiB, as
// internal/runtime/gc.SizeClassToSize lists them (Go 1.26). Should they
// change, TestMemSizeMeasured says so.
var sizeClasses = [...]int{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224,
	240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280,
	1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784,
	6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760,
	24576, 27264, 28672, 32768}

// heapSize returns the bytes Go's allocator takes for an object of n
// bytes: tiny pointer-free objects share 16-byte blocks, small ones take
// their size class (plus an 8-byte header above 512 bytes when they hold
// pointers), large ones whole 8 KiB pages.
func heapSize(n int, pointers bool) int {
	switch {
	case n <= 0:
		return 0
	case !pointers && n < 16:
		return n
	case pointers && n > 512:
		n += 8
	}
	if n > sizeClasses[len(sizeClasses)-1] {
		return (n + 8191) &^ 8191
	}
	i, _ := slices.BinarySearch(sizeClasses[:], n)
	return sizeClasses[i]
}
