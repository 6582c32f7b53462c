package robots

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// The binary form of a parsed file is what a cache keeps of a file it is
// not deciding on often: the file as Parse left it (its text of patterns,
// agents and sitemaps, and its small records), without the matchers, in
// varints that code each record against the one before. It is a third to
// a half of the file's own size before compression, and reading it back
// is a copy, not a parse: a few microseconds for a median file.

// binaryVersion is the first byte of the binary form.
const binaryVersion = 2 // 2: License lines

// coldScanMax is the most rules a block of a cold file (see DecodeBinary)
// is tested by scan: a cold file is decided on once or a few times, and a
// scan of up to this many rules costs less than building the block's
// matcher (BenchmarkScanVsMatcher: ~8 ns a rule).
const coldScanMax = 256

// ErrBinary is wrapped by DecodeBinary's errors: the data is not the
// binary form of a file.
var ErrBinary = errors.New("not a parsed robots.txt")

// AppendBinary appends r's binary form to b (encoding.BinaryAppender).
// DecodeBinary reads it back: a Robots that decides exactly as r.
func (r *Robots) AppendBinary(b []byte) ([]byte, error) {
	if r == nil {
		r = &Robots{}
	}
	b = append(b, binaryVersion)
	var flags byte
	if r.norm {
		flags |= 1
	}
	b = append(b, flags)
	b = appendUints(b, uint64(r.size), uint64(r.lines), uint64(r.nGlobal), uint64(r.nAgents))
	// Every list's length first, so that DecodeBinary allocates once.
	b = appendUints(b, uint64(len(r.text)), uint64(len(r.rules)), uint64(len(r.blocks)), uint64(len(r.spans)),
		uint64(len(r.keys)), uint64(len(r.groups)))
	b = append(b, r.text...)

	// The rules' fields go column by column, each coded against the
	// rule before: patterns follow one another in the text and rules
	// their lines, so two columns are runs of the same byte, which
	// compression takes to almost nothing.
	for i := range r.rules {
		b = binary.AppendUvarint(b, uint64(r.rules[i].n))
	}
	var prev int64
	for i := range r.rules {
		ru := &r.rules[i]
		b = binary.AppendVarint(b, int64(ru.pat)-prev)
		prev = int64(ru.pat) + int64(ru.n)
	}
	prev = 0
	for i := range r.rules {
		b = binary.AppendVarint(b, int64(r.rules[i].line)-prev)
		prev = int64(r.rules[i].line)
	}
	for i := range r.rules {
		b = append(b, byte(r.rules[i].flags&ruleFlagsAll))
	}
	var prevAgent, prevRule, prevBlockLine int64
	for i := range r.blocks {
		bl := &r.blocks[i]
		b = appendInts(b, int64(bl.agentStart)-prevAgent, int64(bl.agentEnd-bl.agentStart),
			int64(bl.first)-prevRule, int64(bl.last-bl.first), int64(bl.line)-prevBlockLine, int64(bl.delay))
		prevAgent, prevRule, prevBlockLine = int64(bl.agentEnd), int64(bl.last), int64(bl.line)
	}
	b = appendSpans(b, r.spans)
	var prevKey, prevGroup int64
	for _, k := range r.keys {
		b = appendInts(b, int64(k.start)-prevKey, int64(k.end-k.start), int64(k.first)-prevGroup, int64(k.last-k.first))
		prevKey, prevGroup = int64(k.end), int64(k.last)
	}
	var prevBlock int64
	for _, g := range r.groups {
		b = appendInts(b, int64(g)-prevBlock)
		prevBlock = int64(g)
	}

	x := r.x
	if x == nil {
		return append(b, 0), nil
	}
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(len(x.delays)))
	for _, d := range x.delays {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(d))
	}
	b = binary.AppendUvarint(b, uint64(len(x.normal)))
	for _, n := range x.normal {
		b = appendInts(b, int64(n.rule), int64(n.text.start), int64(n.text.end-n.text.start))
	}
	b = binary.AppendUvarint(b, uint64(len(x.usage)))
	for i := range x.usage {
		s := &x.usage[i]
		start, ok1 := r.offset(s.text)
		pathStart, ok2 := r.offset(s.path)
		valStart, ok3 := r.offset(s.value)
		if !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("robots: usage statement of line %d is not in the file's text", s.line)
		}
		sig := 0
		if s.signal {
			sig = 1
		}
		b = appendInts(b, int64(start), int64(len(s.text)), int64(pathStart), int64(len(s.path)), int64(valStart),
			int64(s.line), int64(s.block), int64(sig))
	}
	b = binary.AppendUvarint(b, uint64(len(x.licenses)))
	return appendSpans(b, x.licenses), nil
}

// offset returns where s, a view of r.text, starts in it.
func (r *Robots) offset(s string) (uint32, bool) {
	if s == "" {
		return 0, true
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	t := uintptr(unsafe.Pointer(unsafe.StringData(r.text)))
	if len(r.text) == 0 || p < t || p+uintptr(len(s)) > t+uintptr(len(r.text)) {
		return 0, false
	}
	return uint32(p - t), true
}

func appendUints(b []byte, vs ...uint64) []byte {
	for _, v := range vs {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

func appendInts(b []byte, vs ...int64) []byte {
	for _, v := range vs {
		b = binary.AppendVarint(b, v)
	}
	return b
}

func appendSpans(b []byte, spans []span) []byte {
	var prev int64
	for _, s := range spans {
		b = appendInts(b, int64(s.start)-prev, int64(s.end-s.start))
		prev = int64(s.end)
	}
	return b
}

// DecodeBinary reads the binary form AppendBinary writes, checking every
// offset and index in it: data that is not such a form is an error
// wrapping ErrBinary, never a Robots that could panic. The Robots it
// returns decides exactly as the one encoded, and is cold: it tests
// blocks of up to coldScanMax rules by scan, building no matcher for
// them, which is what a file decided on once should cost. [Robots.Hot]
// makes it ready to be decided on many times.
func DecodeBinary(data []byte) (*Robots, error) {
	r := new(Robots)
	if err := r.UnmarshalBinary(data); err != nil {
		return nil, err
	}
	return r, nil
}

// UnmarshalBinary is DecodeBinary into r (encoding.BinaryUnmarshaler), for
// a caller that allocates r with what it keeps beside it. r must not be in
// use: what it held is replaced. Nothing of data is kept. On error r is
// left empty.
func (r *Robots) UnmarshalBinary(data []byte) error {
	r.reset()
	if err := r.unmarshal(data); err != nil {
		r.reset()
		return err
	}
	return nil
}

// reset empties r.
func (r *Robots) reset() {
	r.blocks, r.rules, r.text, r.spans, r.keys, r.groups = nil, nil, "", nil, nil, nil
	r.textCap, r.size, r.nGlobal, r.nAgents, r.lines, r.norm, r.x = 0, 0, 0, 0, 0, false, nil
	r.cold.Store(false)
	r.lazy.Store(nil)
}

func (r *Robots) unmarshal(data []byte) error {
	d := decoder{b: data}
	if d.byte() != binaryVersion {
		return fmt.Errorf("%w: version", ErrBinary)
	}
	flags := d.byte()
	r.norm = flags&1 != 0
	r.cold.Store(true)
	r.size, r.lines, r.nGlobal, r.nAgents = d.int32(), d.int32(), d.int32(), d.int32()
	nText, nRules, nBlocks, nSpans, nKeys, nGroups := d.uint(), d.uint(), d.uint(), d.uint(), d.uint(), d.uint()
	// Each record takes at least this many bytes of the form: lengths the
	// rest of the data cannot hold are refused before anything is
	// allocated for them.
	if max(nText, nRules, nBlocks, nSpans, nKeys, nGroups) >= 1<<32 || // and so no sum below overflows
		nText+4*nRules+6*nBlocks+2*nSpans+4*nKeys+nGroups > uint64(d.left()) {
		d.fail("lengths past the data")
		nText, nRules, nBlocks, nSpans, nKeys, nGroups = 0, 0, 0, 0, 0, 0
	}
	// One allocation holds the text and every list (all made of 4-byte
	// fields, with no pointers): a cold file is read back once per
	// decision, and its allocations were a third of the cost.
	words := recordWords[rule](nRules) + recordWords[block](nBlocks) + recordWords[span](nSpans) +
		recordWords[agentKey](nKeys) + recordWords[int32](nGroups) + (nText+3)/4
	mem := make([]uint32, words)
	r.rules, r.blocks = carve[rule](&mem, nRules), carve[block](&mem, nBlocks)
	r.spans, r.keys, r.groups = carve[span](&mem, nSpans), carve[agentKey](&mem, nKeys), carve[int32](&mem, nGroups)
	if nText > 0 {
		text := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(mem))), nText)
		copy(text, d.bytes(int(nText)))
		r.text, r.textCap = unsafe.String(&text[0], len(text)), uint32(nText) // never written again
	}

	// The records' varints are read a column (or a list of records) at a
	// time, in one tight loop, into scratch: on the stack for a median
	// file, else one allocation for the longest list.
	var stack [256]uint64
	scratch := stack[:]
	if n := max(nRules, 6*nBlocks, 2*nSpans, 4*nKeys, nGroups); n > uint64(len(scratch)) {
		scratch = make([]uint64, n)
	}
	for i, v := range d.uvarints(scratch[:nRules]) {
		if v > math.MaxUint16 {
			d.fail("value out of range")
		}
		r.rules[i].n = uint16(v)
	}
	var pat int64
	for i, v := range d.uvarints(scratch[:nRules]) {
		ru := &r.rules[i]
		pat += unzigzag(v)
		ru.pat = d.u32(pat)
		pat += int64(ru.n)
	}
	var line int64
	for i, v := range d.uvarints(scratch[:nRules]) {
		line += unzigzag(v)
		r.rules[i].line = d.i32(line)
	}
	for i, c := range d.bytes(int(nRules)) {
		if r.rules[i].flags = ruleFlags(c); c&^byte(ruleFlagsAll) != 0 {
			d.fail("rule flags out of range")
		}
	}
	var agent, rule, bline int64
	vs := d.uvarints(scratch[:6*nBlocks])
	for i := range r.blocks {
		bl, v := &r.blocks[i], vs[6*i:6*i+6]
		agent += unzigzag(v[0])
		bl.agentStart = d.i32(agent)
		agent += unzigzag(v[1])
		bl.agentEnd = d.i32(agent)
		rule += unzigzag(v[2])
		bl.first = d.i32(rule)
		rule += unzigzag(v[3])
		bl.last = d.i32(rule)
		bline += unzigzag(v[4])
		bl.line, bl.delay = d.i32(bline), d.i32(unzigzag(v[5]))
	}
	var prev int64
	vs = d.uvarints(scratch[:2*nSpans])
	for i := range r.spans {
		prev += unzigzag(vs[2*i])
		start := d.u32(prev)
		prev += unzigzag(vs[2*i+1])
		r.spans[i] = span{start, d.u32(prev)}
	}
	var start, group int64
	vs = d.uvarints(scratch[:4*nKeys])
	for i := range r.keys {
		k, v := &r.keys[i], vs[4*i:4*i+4]
		start += unzigzag(v[0])
		k.start = d.u32(start)
		start += unzigzag(v[1])
		k.end = d.u32(start)
		group += unzigzag(v[2])
		k.first = d.i32(group)
		group += unzigzag(v[3])
		k.last = d.i32(group)
	}
	var g int64
	for i, v := range d.uvarints(scratch[:nGroups]) {
		g += unzigzag(v)
		r.groups[i] = d.i32(g)
	}
	var usage []usageSpan
	if d.byte() == 1 {
		r.x = &extra{}
		if n := d.count(8); n > 0 {
			r.x.delays = make([]float64, n)
			for i := range r.x.delays {
				r.x.delays[i] = math.Float64frombits(binary.LittleEndian.Uint64(d.bytes(8)))
			}
		}
		if n := d.count(3); n > 0 {
			r.x.normal = make([]normalDisplay, n)
			for i := range r.x.normal {
				nd := &r.x.normal[i]
				nd.rule = d.i32(d.int())
				start := d.int()
				nd.text = span{d.u32(start), d.u32(start + d.int())}
			}
		}
		if n := d.count(8); n > 0 {
			usage = make([]usageSpan, n)
			for i := range usage {
				u := &usage[i]
				start := d.int()
				u.start, u.end = d.u32(start), d.u32(start+d.int())
				pathStart := d.int()
				u.pathStart, u.pathEnd = d.u32(pathStart), d.u32(pathStart+d.int())
				u.valStart = d.u32(d.int())
				u.line, u.block, u.signal = d.i32(d.int()), d.i32(d.int()), d.int() == 1
			}
		}
		if n := d.count(2); n > 0 {
			r.x.licenses = make([]span, n)
			var prev int64
			for i := range r.x.licenses {
				prev += d.int()
				start := d.u32(prev)
				prev += d.int()
				r.x.licenses[i] = span{start, d.u32(prev)}
			}
		}
	}
	if d.err == nil && d.left() > 0 {
		d.fail("trailing bytes")
	}
	if d.err == nil {
		d.err = r.check(usage)
	}
	if d.err != nil {
		return fmt.Errorf("%w: %v", ErrBinary, d.err)
	}
	r.finishUsage(usage)
	r.makeLazy(coldScanMax)
	return nil
}

// check verifies that every offset and index of r, and of the usage
// statements to be made from spans, is within what it refers to, as Parse
// makes them: what the matching code relies on.
func (r *Robots) check(usage []usageSpan) error {
	text := uint32(len(r.text))
	inText := func(start, end uint32) bool { return start <= end && end <= text }
	if r.size < 0 || r.lines < 0 || r.nAgents < 0 || int(r.nAgents) > len(r.spans) || r.nGlobal < 0 || int(r.nGlobal) > len(r.groups) {
		return errors.New("counts out of range")
	}
	nNormal := 0
	for i := range r.rules {
		ru := &r.rules[i]
		if !inText(ru.pat, ru.pat+uint32(ru.n)) || ru.line < 0 {
			return fmt.Errorf("rule %d out of range", i)
		}
		if ru.flags&ruleNormal != 0 {
			nNormal++
		}
	}
	for i := range r.spans {
		if s := r.spans[i]; !inText(s.start, s.end) {
			return fmt.Errorf("span %d out of range", i)
		}
	}
	nDelays := 0
	if r.x != nil {
		nDelays = len(r.x.delays)
	}
	// Blocks take the rules and the agents in turn, as Parse makes them:
	// no rule is visited twice in one decision.
	var agents, rules int32
	for i := range r.blocks {
		b := &r.blocks[i]
		if b.agentStart != agents || b.agentStart > b.agentEnd || b.agentEnd > r.nAgents || b.first < rules || b.first > b.last ||
			int(b.last) > len(r.rules) || b.line < 0 || b.delay < 0 || int(b.delay) > nDelays {
			return fmt.Errorf("block %d out of range", i)
		}
		agents, rules = b.agentEnd, b.last
	}
	// The global blocks, then each key's, each list in block order with
	// no block twice.
	inOrder := func(gs []int32) bool {
		for i, g := range gs {
			if g < 0 || int(g) >= len(r.blocks) || i > 0 && g <= gs[i-1] {
				return false
			}
		}
		return true
	}
	if !inOrder(r.groups[:r.nGlobal]) {
		return errors.New("global groups out of range")
	}
	next := r.nGlobal
	for i, k := range r.keys {
		if !inText(k.start, k.end) || k.first != next || k.first > k.last || int(k.last) > len(r.groups) || !inOrder(r.groups[k.first:k.last]) {
			return fmt.Errorf("agent key %d out of range", i)
		}
		next = k.last
	}
	if int(next) != len(r.groups) {
		return errors.New("groups no key names")
	}
	if r.x == nil {
		if nNormal > 0 || len(usage) > 0 {
			return errors.New("extra records missing")
		}
		return nil
	}
	// filePattern finds a normalised rule's escaped form by binary search:
	// the records name each such rule once, in rule order.
	if len(r.x.normal) != nNormal {
		return errors.New("normalised rules and their records differ")
	}
	for i, n := range r.x.normal {
		if n.rule < 0 || int(n.rule) >= len(r.rules) || r.rules[n.rule].flags&ruleNormal == 0 ||
			i > 0 && n.rule <= r.x.normal[i-1].rule || !inText(n.text.start, n.text.end) {
			return fmt.Errorf("normalised rule record %d out of range", i)
		}
	}
	for i, u := range usage {
		if !inText(u.start, u.end) || !inText(u.pathStart, u.pathEnd) || !inText(u.valStart, u.end) ||
			u.block < -1 || int(u.block) >= len(r.blocks) || u.line < 0 {
			return fmt.Errorf("usage statement %d out of range", i)
		}
	}
	for i, s := range r.x.licenses {
		if !inText(s.start, s.end) {
			return fmt.Errorf("license %d out of range", i)
		}
	}
	return nil
}

// Hot makes r ready to be decided on many times, and returns it: from
// then on its blocks of more than scanMax rules build their matchers on
// first use and keep them (those it built while cold are kept). It may be
// called while r is being decided on: a decision under way gives the same
// answer either way. A file from Parse is hot already.
func (r *Robots) Hot() *Robots {
	if r == nil || !r.cold.Load() {
		return r
	}
	r.makeLazy(scanMax) // before cold is cleared: a hot decision needs the room
	r.cold.Store(false)
	return r
}

// Cold reports whether r decides by scan where a hot file would build a
// matcher (see DecodeBinary).
func (r *Robots) Cold() bool { return r != nil && r.cold.Load() }

// decoder reads the binary form, remembering the first problem: every
// read after it returns zero values. It reads b from i on: an index,
// rather than a slice cut down at each read, is one word to keep in a
// register through the decoding loops.
type decoder struct {
	b   []byte
	i   int
	err error
}

// left is how many bytes are still to be read.
func (d *decoder) left() int { return len(d.b) - d.i }

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = errors.New(why)
	}
	d.b, d.i = nil, 0
}

func (d *decoder) byte() byte {
	if d.i >= len(d.b) {
		d.fail("short")
		return 0
	}
	c := d.b[d.i]
	d.i++
	return c
}

func (d *decoder) bytes(n int) []byte {
	if n < 0 || n > d.left() {
		d.fail("short")
		return make([]byte, max(n, 0)) // zeros, never read: d.err is set
	}
	p := d.b[d.i : d.i+n]
	d.i += n
	return p
}

// uint reads an unsigned varint. Its one-byte case, most values (deltas
// of small numbers), is small enough to be inlined into the loops.
func (d *decoder) uint() uint64 {
	if i := d.i; uint(i) < uint(len(d.b)) && d.b[i] < 0x80 {
		d.i = i + 1
		return uint64(d.b[i])
	}
	return d.uvarint()
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b[d.i:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.i += n
	return v
}

// uvarints reads len(dst) unsigned varints into dst, and returns it:
// the lists of records, in a loop that takes each one-byte varint (most
// of them: deltas of small numbers) without a call. After a problem dst
// holds zeros.
func (d *decoder) uvarints(dst []uint64) []uint64 {
	b, i := d.b, d.i
	for k := range dst {
		if i < len(b) && b[i] < 0x80 {
			dst[k] = uint64(b[i])
			i++
			continue
		}
		v, n := binary.Uvarint(b[i:])
		if n <= 0 {
			d.fail("bad varint")
			clear(dst)
			return dst
		}
		dst[k] = v
		i += n
	}
	d.i = i
	return dst
}

// int reads a signed varint (zig-zag, as binary.AppendVarint writes).
func (d *decoder) int() int64 { return unzigzag(d.uint()) }

// unzigzag is the signed value of a zig-zag varint.
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// uintMax reads an unsigned varint of at most hi.
func (d *decoder) uintMax(hi uint64) uint64 {
	v := d.uint()
	if v > hi {
		d.fail("value out of range")
		return 0
	}
	return v
}

// count reads the length of a list whose records take at least min bytes
// each: one the rest of the data cannot hold is an error, before anything
// is allocated for it.
func (d *decoder) count(min int) int {
	n := d.uint()
	if n > uint64(d.left()/min) {
		d.fail("count past the data")
		return 0
	}
	return int(n)
}

func (d *decoder) int32() int32 { return d.i32(int64(d.uintMax(math.MaxInt32))) }

// i32 narrows v, failing when it does not fit.
func (d *decoder) i32(v int64) int32 {
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("value out of range")
		return 0
	}
	return int32(v)
}

// u32 narrows v, failing when it does not fit.
func (d *decoder) u32(v int64) uint32 {
	if v < 0 || v > math.MaxUint32 {
		d.fail("value out of range")
		return 0
	}
	return uint32(v)
}

// recordWords is how many 4-byte words n records of type T take.
func recordWords[T any](n uint64) uint64 { return n * uint64(unsafe.Sizeof(*new(T))) / 4 }

// carve returns the first n records of type T of *mem, which it advances
// past them. T must be made of 4-byte fields with no pointers (the
// constants below check the sizes): the records live in a []uint32, which
// the collector does not scan.
func carve[T any](mem *[]uint32, n uint64) []T {
	if n == 0 {
		return nil
	}
	s := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(*mem))), n)
	*mem = (*mem)[recordWords[T](n):]
	return s
}

// Every record type carve makes is a whole number of 4-byte words, aligned
// to at most 4 (a constant below 0 does not compile).
const (
	_ = 0 - (unsafe.Sizeof(rule{})%4 + unsafe.Alignof(rule{})/8)
	_ = 0 - (unsafe.Sizeof(block{})%4 + unsafe.Alignof(block{})/8)
	_ = 0 - (unsafe.Sizeof(span{})%4 + unsafe.Alignof(span{})/8)
	_ = 0 - (unsafe.Sizeof(agentKey{})%4 + unsafe.Alignof(agentKey{})/8)
)
