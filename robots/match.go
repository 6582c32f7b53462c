package robots

import (
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// Verdict is the answer for one path under one group of rules.
type Verdict struct {
	Allowed bool
	Line    int // the deciding rule's line in robots.txt, as the reference's matching_line(); 0 if none matched

	// The deciding rule, which Rule spells out from the rules it is one
	// of: a decision looks up neither its pattern nor its directive, and
	// a cached file keeps no "disallow: " per rule.
	r    *Robots
	rule int32
}

// Rule returns the deciding rule, e.g. "disallow: /private" or "allow:
// /a" (the directive lower-cased, the pattern as escaped; "disallow:" for
// an empty pattern), or "" if none matched. It allocates: call it to
// report a decision, not to make one.
func (v Verdict) Rule() string {
	if v.Line == 0 || v.r == nil {
		return ""
	}
	dir := "disallow:"
	if v.r.rules[v.rule].allow() {
		dir = "allow:"
	}
	pattern := v.r.filePattern(v.rule)
	if pattern == "" {
		return dir
	}
	return dir + " " + pattern
}

// String spells v out for a log or a test: "allowed" when no rule
// matched, else the answer, the line and the rule, e.g. "disallowed by
// line 3, disallow: /private". Two verdicts on the same path by copies of
// one file are equal when their strings are.
func (v Verdict) String() string {
	answer := "disallowed"
	if v.Allowed {
		answer = "allowed"
	}
	if v.Line == 0 {
		return answer
	}
	return answer + " by line " + strconv.Itoa(v.Line) + ", " + v.Rule()
}

// Group is the set of rules that applies to one product token: every group
// of the file that names the token (merged), or else every "*" group, or else
// nothing (everything allowed). The zero Group allows everything.
type Group struct {
	r        *Robots
	blocks   []int32
	specific bool
}

// Group selects the rules that apply to token, compared case-insensitively
// with each user-agent line's value cut at its first byte outside A-Z a-z _ -
// (RFC 9309 section 2.2.1), exactly as the reference does. The token is taken
// verbatim: "FooBot/1.2" or "Foo Bot" name no group and get the "*" rules.
// Selection does not allocate for tokens up to 64 bytes.
func (r *Robots) Group(token string) Group {
	if r == nil {
		return Group{}
	}
	if len(r.keys) > 0 && tokenLen(token) == len(token) {
		keys := r.keys
		lo, hi := 0, len(keys)
		for lo < hi {
			h := int(uint(lo+hi) >> 1)
			if compareFold(r.key(h), token) < 0 {
				lo = h + 1
			} else {
				hi = h
			}
		}
		if lo < len(keys) && compareFold(r.key(lo), token) == 0 {
			k := keys[lo]
			return Group{r: r, blocks: r.groups[k.first:k.last], specific: true}
		}
	}
	return Group{r: r, blocks: r.groups[:r.nGlobal]}
}

// key returns the token of keys[i], as one of its spellings.
func (r *Robots) key(i int) string {
	k := &r.keys[i]
	return view(r.text, k.start, uint16(k.end-k.start)) // a token is part of a line
}

// Specific reports whether some group of the file names the token, so that
// the "*" groups are ignored.
func (g Group) Specific() bool { return g.specific }

// Empty reports whether no group applies: everything is allowed.
func (g Group) Empty() bool { return len(g.blocks) == 0 }

// CrawlDelay returns the largest Crawl-delay, in seconds, among the groups
// selected, and whether there was one. Crawl-delay is not part of RFC 9309;
// it is read, never enforced, by this package.
func (g Group) CrawlDelay() (float64, bool) {
	d := -1.0
	for _, bi := range g.blocks {
		if b := &g.r.blocks[bi]; b.delay != 0 {
			d = max(d, g.r.x.delays[b.delay-1])
		}
	}
	return d, d >= 0
}

// HasCrawlDelay reports whether some group of the file, whichever token it
// names, has a valid Crawl-delay: when it has none, no token's group
// selects one.
func (r *Robots) HasCrawlDelay() bool { return r != nil && r.x != nil && len(r.x.delays) > 0 }

// Lines returns the line of the first user-agent line of each group selected.
func (g Group) Lines() []int {
	out := make([]int, len(g.blocks))
	for i, bi := range g.blocks {
		out[i] = int(g.r.blocks[bi].line)
	}
	return out
}

// DisallowsAll reports whether the group shuts out the whole site: some
// disallow rule matches every path ("/", "/*" or "*") and no allow rule has
// a pattern. A tunnelling proxy, which cannot see paths, refuses only such
// origins.
func (g Group) DisallowsAll() bool {
	all := false
	for _, bi := range g.blocks {
		b := &g.r.blocks[bi]
		for i := b.first; i < b.last; i++ {
			allow, pat := g.r.rules[i].allow(), g.r.filePattern(i)
			switch {
			case allow && pat != "":
				return false
			case !allow && (pat == "/" || pat == "/*" || pat == "*"):
				all = true
			}
		}
	}
	return all
}

// Rules returns the number of allow and disallow rules in the groups selected.
func (g Group) Rules() int {
	n := 0
	for _, bi := range g.blocks {
		b := &g.r.blocks[bi]
		n += int(b.last - b.first)
	}
	return n
}

// Test decides path under the group: the longest matching pattern wins,
// allow wins a tie, an empty pattern never decides (RFC 9309 section 2.2.2).
// The path is taken as given: it is the reference's "path, params and query"
// (see [PathOf]), starting with "/"; for a group of a file parsed with
// [WithNormalization] it must be normalised with [Normalize]. Test does not
// allocate, and runs in time bounded by the sum over candidate rules of
// len(pattern) × len(path).
func (g Group) Test(path string) Verdict { return g.test(path, g.r.scanLimit(), nil) }

// test is Test with blocks of more than scanLimit rules tested by their
// matchers (tests pass -1 to check the matchers against scan), under
// budget w (nil: unbounded).
func (g Group) test(path string, scanLimit int32, w *Budget) Verdict {
	acc := [2]best{noMatch, noMatch}
	sr := search{path: path, w: w}
	for _, bi := range g.blocks {
		b := &g.r.blocks[bi]
		n := b.last - b.first
		if !w.spend(ruleCost * int(min(n, scanLimit+1))) {
			break
		}
		if n <= scanLimit {
			g.r.scan(b, &sr, &acc)
		} else {
			g.r.matcher(bi).test(g.r.text, g.r.rules, &sr, &acc)
		}
	}
	d, a := acc[0], acc[1]
	if d.prio > a.prio {
		return g.r.verdict(d.prio <= 0, d.rule)
	}
	if a.prio < 0 {
		return Verdict{Allowed: true}
	}
	return g.r.verdict(true, a.rule)
}

// verdict returns the Verdict decided by rule i.
func (r *Robots) verdict(allowed bool, i int32) Verdict {
	return Verdict{Allowed: allowed, Line: int(r.rules[i].line), r: r, rule: i}
}

// TestURL decides url for token exactly as the reference's
// OneAgentAllowedByRobots does: the path, params and query are taken from url
// by [PathOf] without any normalisation, and cut at a NUL byte as the
// reference's C string is (for a file parsed with [WithNormalization], the
// path is normalised instead).
func (r *Robots) TestURL(token, url string) Verdict { return r.testURL(token, url, r.scanLimit()) }

func (r *Robots) testURL(token, url string, scanLimit int32) Verdict {
	p := PathOf(url)
	if i := strings.IndexByte(p, 0); i >= 0 {
		p = p[:i]
	}
	if r != nil && r.norm {
		p = Normalize(p)
	}
	return r.Group(token).test(p, scanLimit, nil)
}

// Allowed reports whether token may fetch url; see [Robots.TestURL].
func (r *Robots) Allowed(token, url string) bool {
	return r.TestURL(token, url).Allowed
}

// A best is the highest-priority match so far of one kind (allow or
// disallow): priority is the pattern's length, ties go to the earlier line.
type best struct {
	prio int32 // -1: no match
	rule int32 // index in Robots.rules, which are in line order
}

var noMatch = best{prio: -1}

func (a best) beats(b best) bool {
	return a.prio > b.prio || a.prio == b.prio && a.rule < b.rule
}

// A matcher indexes the rules of one block. Rules that are plain prefixes
// ("/a") or exact paths ("/a$") are indexed by that literal: entries are
// sorted by it, each pointing to its longest prefix among the entries
// before it, so the entries that are prefixes of a path are found with one
// binary search and a walk up that chain. Rules with a "*" after their
// literal prefix are indexed by their key: the rarest byte (in URL paths)
// that they need after the prefix. A path only visits the rules keyed by
// bytes it contains, and each of those passes a filter on all the bytes it
// needs before it is matched.
//
// Entries and wildcard rules hold no strings: their prefixes and rests
// are offsets into Robots.text, where every pattern matched is (as the
// file's or as its normalised form), and lengths of 16 bits, as rules
// hold theirs. A cached file keeps the matchers of the groups it was asked
// about for as long as it is cached.
type matcher struct {
	entries  []entry
	wild     []wildRule  // by key byte, then best first
	needs    [][2]uint64 // needs[i]: the ASCII bytes wild[i] needs after its prefix
	keys     [2]uint64   // the key bytes of wild
	keyStart []int32     // wild[keyStart[n]:keyStart[n+1]] have the n-th key byte in keys
}

// An entry is the best literal pattern of one prefix and kind, in 16
// bytes. A prefix may have up to four, one per kind: the later ones have
// the earlier as parent. The pattern's priority, its length (see best), is
// its rule's, or for the ".../$" that an "allow: .../index.htm…" derives
// (entryDerived), that of the prefix and its "$".
type entry struct {
	start  uint32 // the prefix is Robots.text[start : start+n]
	parent int32  // index of the last entry before it whose prefix is a prefix of its own; -1 if none
	rule   int32  // index in Robots.rules
	n      uint16 // the prefix's length
	kind   entryKind
}

type entryKind uint8

const (
	entryAllow   entryKind = 1 << iota // an allow rule; must be bit 0, the index in the accumulators
	entryExact                         // the pattern is prefix + "$": only the prefix itself matches
	entryDerived                       // the pattern is prefix + "$", derived from the rule's ".../index.htm…"
)

// prio returns the priority of e's pattern.
func (e *entry) prio(rules []rule) int32 {
	if e.kind&entryDerived != 0 {
		return int32(e.n) + 1
	}
	return int32(rules[e.rule].n)
}

// A wildRule is a pattern whose literal prefix is followed by a "*", in 20
// bytes: rest is literal segments separated by "*", the first floating.
type wildRule struct {
	pstart, rstart uint32 // prefix: Robots.text[pstart : pstart+pn]; rest: Robots.text[rstart : rstart+rn]
	rule           int32  // index in Robots.rules
	pn, rn         uint16
	prio           uint16
	kind           wildKind
}

type wildKind uint8

const (
	wildAllow    wildKind = 1 << iota // an allow rule; must be bit 0, the index in the accumulators
	wildAnchored                      // the last segment of rest must end the path
)

type kind uint8

const (
	kindPrefix kind = iota // matches every path that starts with prefix
	kindExact              // matches prefix exactly
	kindWild               // prefix, then rest
)

// A compiled pattern while compile sorts them: prefix and rest are views
// of Robots.text, at pstart and rstart.
type compiled struct {
	prefix, rest   string
	pstart, rstart uint32
	b              best
	kind           kind
	anchored       bool
	allow          bool
}

// classify splits a pattern, without its final "$" if any, into its literal
// prefix and the rest, simplifying what cannot change the answer: repeated
// "*", a trailing "*", and "*$".
func classify(body string, anchored bool) (prefix, rest string, k kind, anch bool) {
	pn, rs, re, k, anch := classifyAt(body, anchored)
	return body[:pn], body[rs:re], k, anch
}

// classifyAt is classify giving where the prefix ends (body[:pn]) and the
// rest is (body[rs:re]) in body.
func classifyAt(body string, anchored bool) (pn, rs, re int, k kind, anch bool) {
	star := strings.IndexByte(body, '*')
	if star < 0 {
		if anchored {
			return len(body), 0, 0, kindExact, false
		}
		return len(body), 0, 0, kindPrefix, false
	}
	rest := body[star:]
	if t := strings.TrimRight(rest, "*"); len(t) < len(rest) {
		rest, anchored = t, false // "…*" and "…*$" match anything after
	}
	re = star + len(rest)
	rest = strings.TrimLeft(rest, "*")
	if rest == "" {
		return star, 0, 0, kindPrefix, false
	}
	return star, re - len(rest), re, kindWild, anchored
}

// derivedIndex returns where the last "/" of pat is when an allow rule
// with pattern pat also allows the path up to it exactly ("/x/index.htm…"
// allows "/x/", as the pattern "/x/$"), or -1.
func derivedIndex(pat string) int {
	if s := strings.LastIndexByte(pat, '/'); s >= 0 && strings.HasPrefix(pat[s:], "/index.htm") {
		return s
	}
	return -1
}

// scanLimit is the most rules a block of r is tested by scan: scanMax,
// or coldScanMax for a cold file.
func (r *Robots) scanLimit() int32 {
	if r.Cold() {
		return coldScanMax
	}
	return scanMax
}

// scanMax is the most rules a block is tested by scan, rule by rule, not
// by a compiled matcher. Most blocks of most files have one rule or a few
// ("User-agent: GPTBot" / "Disallow: /"), and a matcher for them would
// cost more memory than the rules themselves for little speed.
// BenchmarkScanVsMatcher, on the corpus's blocks: up to 2 rules, scan 60
// ns and a matcher 65; up to 4, 48 and 40; 5 to 8, 67 and 46; 9 to 12, 83
// and 50; 13 to 16, 159 and 53. Scanning blocks of 5 to 8 rules saves 41
// bytes per file of the corpus's smaller half (MemSize), 9 to 12 another 27.
const scanMax = 8

// scan tests path against each rule of block b in turn, with exactly the
// matcher's semantics: the same patterns (the derived ".../$" included),
// priorities and ties, so that acc comes out the same. A rule is matched
// only if it would beat the best so far, and most are plain prefixes.
func (r *Robots) scan(b *block, sr *search, acc *[2]best) {
	s := sr.path
	rules := r.rules[b.first:b.last]
	for i := range rules {
		ru := &rules[i]
		idx := b.first + int32(i)
		k := ru.flags & ruleAllow
		// A pattern's priority is its length: most rules are passed over
		// without looking at their pattern.
		if c := (best{prio: int32(ru.n), rule: idx}); c.beats(acc[k]) {
			pat := view(r.text, ru.pat, ru.n)
			var ok bool
			if ru.flags&rulePlain != 0 {
				ok = len(s) >= len(pat) && s[:len(pat)] == pat
			} else {
				body, anchored := strings.CutSuffix(pat, "$")
				ok = sr.matchPattern(body, anchored)
			}
			if ok {
				acc[k] = c
			}
		}
		if ru.flags&ruleIndex != 0 {
			pat := view(r.text, ru.pat, ru.n)
			sl := derivedIndex(pat)
			if c := (best{prio: int32(sl + 2), rule: idx}); c.beats(acc[k]) && sr.matchPattern(pat[:sl+1], true) {
				acc[k] = c
			}
		}
	}
}

// matchPattern reports whether the path matches the pattern body
// (followed by "$" when anchored), as the compiled matcher decides it.
func (sr *search) matchPattern(body string, anchored bool) bool {
	s := sr.path
	prefix, rest, k, anch := classify(body, anchored)
	switch k {
	case kindPrefix:
		return strings.HasPrefix(s, prefix)
	case kindExact:
		return s == prefix
	}
	return strings.HasPrefix(s, prefix) && sr.matchWild(len(prefix), rest, anch)
}

// matcher returns block bi's matcher, compiling it on first use: most
// files name many crawlers, and a proxy asks about a few. The fast path is
// one atomic load and does not allocate.
func (r *Robots) matcher(bi int32) *matcher {
	lazy := r.lazy.Load()
	if lazy == nil {
		// No block needs a matcher: a test is checking one against scan.
		m := r.compile(&r.blocks[bi])
		return &m
	}
	slot := &lazy.slots[bi]
	if m := slot.Load(); m != nil {
		return m
	}
	lazy.mu.Lock()
	defer lazy.mu.Unlock()
	if m := slot.Load(); m != nil {
		return m
	}
	m := r.compile(&r.blocks[bi])
	slot.Store(&m)
	return &m
}

// appendCompiled appends the pattern body (+ "$" when anchored), which is
// r.text[at : at+len(body)], of rule idx.
func appendCompiled(items []compiled, at uint32, body string, anchored bool, ru *rule, idx int32, prio int) []compiled {
	c := compiled{allow: ru.allow(), b: best{prio: int32(prio), rule: idx}}
	pn, rs, re, k, anch := classifyAt(body, anchored)
	c.prefix, c.pstart, c.kind, c.anchored = body[:pn], at, k, anch
	c.rest, c.rstart = body[rs:re], at+uint32(rs)
	return append(items, c)
}

// compile builds a block's matcher.
func (r *Robots) compile(b *block) matcher {
	var m matcher
	items := make([]compiled, 0, b.last-b.first+1)
	nWild := 0
	for idx := b.first; idx < b.last; idx++ {
		ru := &r.rules[idx]
		pat := r.pattern(idx)
		body, anchored := pat, false
		if strings.HasSuffix(pat, "$") {
			body, anchored = pat[:len(pat)-1], true
		}
		items = appendCompiled(items, ru.pat, body, anchored, ru, idx, len(pat))
		// The reference also lets "allow: /x/index.htm…" allow "/x/" exactly,
		// as the pattern "/x/$", when the pattern itself does not match.
		// Matching both is equivalent: the derived pattern is shorter, so it
		// only decides when the original does not match.
		if ru.allow() {
			if s := derivedIndex(pat); s >= 0 {
				items = appendCompiled(items, ru.pat, pat[:s+1], true, ru, idx, s+2)
			}
		}
	}
	for i := range items {
		if items[i].kind == kindWild {
			nWild++
		}
	}

	// Wildcard rules: sorted by key byte, then best first.
	if nWild > 0 {
		wild := make([]wildItem, 0, nWild)
		for i := range items {
			if items[i].kind == kindWild {
				wild = append(wild, wildItem{key: keyByte(items[i].rest), i: int32(i)})
			}
		}
		slices.SortFunc(wild, func(a, b wildItem) int {
			if a.key != b.key {
				return int(a.key) - int(b.key)
			}
			if ba, bb := items[a.i].b, items[b.i].b; ba.beats(bb) {
				return -1
			} else if bb.beats(ba) {
				return 1
			}
			return 0
		})
		m.wild = make([]wildRule, 0, nWild)
		m.needs = make([][2]uint64, 0, nWild)
		m.keyStart = make([]int32, 0, distinctKeys(wild)+1)
		for n, w := range wild {
			c := &items[w.i]
			if m.keys[w.key>>6]&(1<<(w.key&63)) == 0 {
				m.keys[w.key>>6] |= 1 << (w.key & 63)
				m.keyStart = append(m.keyStart, int32(n))
			}
			wr := wildRule{pstart: c.pstart, rstart: c.rstart, rule: c.b.rule,
				pn: uint16(len(c.prefix)), rn: uint16(len(c.rest)), prio: uint16(c.b.prio)}
			if c.allow {
				wr.kind |= wildAllow
			}
			if c.anchored {
				wr.kind |= wildAnchored
			}
			m.wild = append(m.wild, wr)
			m.needs = append(m.needs, byteSet(c.rest))
		}
		m.keyStart = append(m.keyStart, int32(len(wild)))
	}

	// Literal rules: entries sorted by prefix, compared first by their
	// leading eight bytes.
	lit := make([]sortKey, 0, len(items)-nWild)
	for i := range items {
		if items[i].kind != kindWild {
			lit = append(lit, sortKey{head: head8(items[i].prefix), i: int32(i)})
		}
	}
	byPrefix := func(a, b sortKey) int {
		if a.head != b.head {
			if a.head < b.head {
				return -1
			}
			return 1
		}
		if c := strings.Compare(items[a.i].prefix, items[b.i].prefix); c != 0 {
			return c
		}
		return int(items[a.i].entryKind()) - int(items[b.i].entryKind())
	}
	if !slices.IsSortedFunc(lit, byPrefix) {
		slices.SortFunc(lit, byPrefix)
	}
	// One entry per prefix and kind, for the best of its patterns (only
	// that one can decide), exactly sized: a cached file's matchers keep no
	// spare room.
	if n := distinctLiterals(items, lit); n > 0 {
		m.entries = make([]entry, 0, n)
	}
	var stack []int32
	for i := 0; i < len(lit); {
		c := &items[lit[i].i]
		e := entry{start: c.pstart, parent: -1, n: uint16(len(c.prefix)), kind: c.entryKind()}
		b := c.b
		for i++; i < len(lit) && items[lit[i].i].prefix == c.prefix && items[lit[i].i].entryKind() == e.kind; i++ {
			if o := items[lit[i].i].b; o.beats(b) {
				b = o
			}
		}
		e.rule = b.rule
		if b.prio != int32(r.rules[b.rule].n) {
			// Only a derived pattern's priority is not its rule's length,
			// and its prefix is all of it but the "$".
			e.kind |= entryDerived
		}
		for len(stack) > 0 && !strings.HasPrefix(c.prefix, view(r.text, m.entries[stack[len(stack)-1]].start, m.entries[stack[len(stack)-1]].n)) {
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 {
			e.parent = stack[len(stack)-1]
		}
		m.entries = append(m.entries, e)
		stack = append(stack, int32(len(m.entries))-1)
	}
	return m
}

// entryKind returns the kind of the entry of a literal pattern.
func (c *compiled) entryKind() entryKind {
	var k entryKind
	if c.allow {
		k |= entryAllow
	}
	if c.kind == kindExact {
		k |= entryExact
	}
	return k
}

// distinctLiterals counts the distinct prefixes and kinds of the literal
// items, lit sorted by prefix, then kind.
func distinctLiterals(items []compiled, lit []sortKey) int {
	n := 0
	for i := range lit {
		if i == 0 || items[lit[i].i].prefix != items[lit[i-1].i].prefix || items[lit[i].i].entryKind() != items[lit[i-1].i].entryKind() {
			n++
		}
	}
	return n
}

// distinctKeys counts the distinct key bytes of wild, sorted by key.
func distinctKeys(wild []wildItem) int {
	n := 0
	for i := range wild {
		if i == 0 || wild[i].key != wild[i-1].key {
			n++
		}
	}
	return n
}

type sortKey struct {
	head uint64
	i    int32
}

// head8 returns the first eight bytes of s, big-endian, zero-padded: an
// order-preserving key for strings without NUL bytes, as patterns are.
func head8(s string) uint64 {
	var h uint64
	for i := range 8 {
		h <<= 8
		if i < len(s) {
			h |= uint64(s[i])
		}
	}
	return h
}

type wildItem struct {
	key byte
	i   int32
}

// byteSet returns the set of ASCII bytes of s other than "*".
func byteSet(s string) [2]uint64 {
	var set [2]uint64
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '*' && c < 0x80 {
			set[c>>6] |= 1 << (c & 63)
		}
	}
	return set
}

// pathByteRarity[c] ranks ASCII byte c by how rarely it occurs in URL paths
// and queries, from 0 for "/" up; bytes not ranked share the highest rank.
// The order, most common first:
//
//	/eaoistrn-clpmdu.hgbf0w12y3k4v5=6789_?&xjqzCSTAPMBDEIRLNFGOHWUVKYJXQZ%+,;:~!$'()@
const pathByteRarity = "\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51" +
	"\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51\x51" +
	"\x51\x4b\x51\x51\x4c\x45\x26\x4d\x4e\x4f\x51\x46\x47\x09\x10\x00" +
	"\x15\x17\x18\x1a\x1c\x1e\x20\x21\x22\x23\x49\x48\x51\x1f\x51\x25" +
	"\x50\x2e\x31\x2b\x32\x33\x38\x39\x3b\x34\x41\x3f\x36\x30\x37\x3a" +
	"\x2f\x43\x35\x2c\x2d\x3d\x3e\x3c\x42\x40\x44\x51\x51\x51\x51\x24" +
	"\x51\x02\x13\x0a\x0e\x01\x14\x12\x11\x04\x28\x1b\x0b\x0d\x08\x03" +
	"\x0c\x29\x07\x05\x06\x0f\x1d\x16\x27\x19\x2a\x51\x51\x51\x4a\x51"

// keyByte returns the byte of a wildcard rule's rest that paths are least
// likely to contain.
func keyByte(rest string) byte {
	key, rank := byte('*'), -1
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c == '*' || c >= 0x80 {
			continue
		}
		if rk := int(pathByteRarity[c]); rk > rank {
			key, rank = c, rk
		}
	}
	return key
}

// mask returns the set of ASCII bytes of the path, computed once per test
// and only when a rule with a "*" is reached.
func (sr *search) mask() *[2]uint64 {
	if pm := &sr.pm; !pm.done {
		s := sr.path
		pm.done = true
		// A superset of the path's ASCII bytes is enough for a filter: bytes
		// ≥ 0x80 (never in a pattern) may set a bit of an ASCII byte.
		var lo, hi uint64
		for i := 0; i < len(s); i++ {
			c := s[i]
			bit := uint64(1) << (c & 63)
			sel := -uint64(c >> 6 & 1) // all ones for 64..127 (and 192..255)
			lo |= bit &^ sel
			hi |= bit & sel
		}
		pm.m = [2]uint64{lo, hi}
	}
	return &sr.pm.m
}

func (m *matcher) test(text string, rules []rule, sr *search, acc *[2]best) {
	s := sr.path
	es := m.entries
	lo, hi := 0, len(es)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if e := &es[h]; view(text, e.start, e.n) <= s {
			lo = h + 1
		} else {
			hi = h
		}
	}
	// Every entry that is a prefix of s is a prefix of es[i] no longer than
	// the common prefix of es[i] and s, so it is on es[i]'s parent chain.
	if i := lo - 1; i >= 0 {
		common := commonPrefixLen(view(text, es[i].start, es[i].n), s)
		for i >= 0 {
			e := &es[i]
			i = int(e.parent)
			if int(e.n) > common || e.kind&entryExact != 0 && int(e.n) != len(s) {
				continue
			}
			k := e.kind & entryAllow
			if b := (best{prio: e.prio(rules), rule: e.rule}); b.beats(acc[k]) {
				acc[k] = b
			}
		}
	}
	if len(m.wild) == 0 {
		return
	}
	have := sr.mask()
	for h := range 2 {
		keys := m.keys[h] & have[h]
		for keys != 0 {
			bit := keys & -keys
			keys ^= bit
			// The rules of this key start at the rank of its bit among the keys.
			n := bits.OnesCount64(m.keys[h] & (bit - 1))
			if h == 1 {
				n += bits.OnesCount64(m.keys[0])
			}
			m.testWild(text, sr, int(m.keyStart[n]), int(m.keyStart[n+1]), have, acc)
		}
	}
}

func (m *matcher) testWild(text string, sr *search, from, to int, have *[2]uint64, acc *[2]best) {
	if !sr.w.spend(ruleCost * (to - from)) {
		return
	}
	s := sr.path
	for j := from; j < to; j++ {
		if n := &m.needs[j]; n[0]&^have[0]|n[1]&^have[1] != 0 {
			continue
		}
		wr := &m.wild[j]
		k := wr.kind & wildAllow
		if b := (best{prio: int32(wr.prio), rule: wr.rule}); b.beats(acc[k]) && len(s) >= int(wr.pn) &&
			s[:wr.pn] == view(text, wr.pstart, wr.pn) &&
			sr.matchWild(int(wr.pn), view(text, wr.rstart, wr.rn), wr.kind&wildAnchored != 0) {
			acc[k] = b
		}
	}
}

// view returns text[start : start+n] without checking the bounds, which
// compile took from views of text: the matchers' hot loops slice the text
// at every step. An empty view is "", so that no pointer is made to the
// end of text's allocation.
func view(text string, start uint32, n uint16) string {
	if n == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(unsafe.StringData(text)), start)), n)
}

func commonPrefixLen(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// matchWild reports whether the path from lo on matches "*" + rest (+ "$"
// when anchored), where rest is literal segments separated by "*". Taking
// each segment at its earliest position is exact for such patterns, so no
// backtracking is needed, and each segment is looked for only after where
// the one before it ended (see search.index for the cost).
func (sr *search) matchWild(lo int, rest string, anchored bool) bool {
	hi := len(sr.path)
	if anchored {
		j := strings.LastIndexByte(rest, '*')
		last := rest[j+1:]
		if hi-lo < len(last) || sr.path[hi-len(last):] != last {
			return false
		}
		hi -= len(last)
		if j < 0 {
			return true
		}
		rest = rest[:j]
	}
	for rest != "" {
		seg := rest
		if j := strings.IndexByte(rest, '*'); j >= 0 {
			seg, rest = rest[:j], rest[j+1:]
		} else {
			rest = ""
		}
		if seg == "" {
			continue
		}
		k := sr.index(seg, lo, hi)
		if k < 0 {
			return false
		}
		lo = k + len(seg)
	}
	return true
}

// GroupInfo describes one group of a file as written: its user-agent lines
// and how many rules follow them.
type GroupInfo struct {
	Agents     []string // the user-agent values, cut as matched ("*" for the global group)
	Line       int      // line of the first user-agent line
	Rules      int      // allow and disallow rules
	CrawlDelay float64  // seconds; -1 if none
}

// Groups describes every group of the file, in order.
func (r *Robots) Groups() []GroupInfo {
	if r == nil {
		return nil
	}
	out := make([]GroupInfo, len(r.blocks))
	agents := make([]string, r.nAgents)
	for i, a := range r.spans[:r.nAgents] {
		agents[i] = r.str(a)
	}
	for i := range r.blocks {
		b := &r.blocks[i]
		out[i] = GroupInfo{
			Agents:     agents[b.agentStart:b.agentEnd:b.agentEnd],
			Line:       int(b.line),
			Rules:      int(b.last - b.first),
			CrawlDelay: r.crawlDelay(b),
		}
	}
	return out
}
