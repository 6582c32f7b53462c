// Package robots reads robots.txt files and decides whether a path may be
// fetched, giving the same answers as Google's reference parser
// (github.com/google/robotstxt, RobotsMatcher::OneAgentAllowedByRobots), which
// implements RFC 9309 with Google's documented leniencies.
//
// A file is parsed once with [Parse]; [Robots.Group] selects the rules that apply
// to one product token, and [Group.Test] decides a path without allocating.
// Parsing and matching do no I/O and read no clock, and the package imports
// no network, TLS or cache package. Fetching and caching robots.txt files is
// the job of package robots/fetch.
package robots

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// maxLineBytes is how much of one line the reference parser keeps: its line
// buffer holds 2083*8 bytes including the terminating NUL.
const maxLineBytes = 2083*8 - 1

// Robots is a parsed robots.txt file. It is immutable and safe for concurrent
// use. The zero value, like a nil *Robots, is an empty file: it allows all.
//
// A cached file is held for a long time by many origins at once, so the
// representation is compact: the file's strings live in one text, and
// everything else refers to them by offsets, in pointer-free slices of
// small fixed-size records, allocated exactly once each.
type Robots struct {
	blocks []block
	rules  []rule
	// text holds, back to back, each rule's pattern as escaped followed
	// by its normalised form when that differs, the user-agent values as
	// cut, sitemap values, and usage statements.
	text  string
	spans []span // the user-agent values (spans[:nAgents], file order), then the sitemap values
	keys  []agentKey
	// groups lists block indices: groups[:nGlobal] are the blocks with a
	// "*" user-agent line, and each key names groups[first:last].
	groups  []int32
	textCap uint32 // bytes of the allocation that holds text
	size    int32  // bytes parsed
	nGlobal int32
	nAgents int32
	lines   int32  // lines read
	norm    bool   // patterns compiled in normalised form, see WithNormalization
	x       *extra // what few files have; nil when they have none of it

	// cold: from DecodeBinary, not made Hot: blocks of up to coldScanMax
	// rules are scanned. Hot sets it false, once, while others decide.
	cold atomic.Bool
	// lazy is nil while no block needs a matcher; Hot sets it, once,
	// before it clears cold.
	lazy atomic.Pointer[lazyMatchers]
}

// lazyMatchers holds the matchers of a file's blocks, compiled on first
// use, out of line: most cached files need none.
type lazyMatchers struct {
	mu    sync.Mutex                // held while one is compiled
	slots []atomic.Pointer[matcher] // slots[i] is blocks[i]'s matcher, once compiled
}

// extra holds the parts of a file that most files lack, out of line so
// that a file without them does not carry their slice headers.
type extra struct {
	usage  []usageStmt     // Content-Usage and Content-Signal statements, in line order
	normal []normalDisplay // the patterns as escaped of the rules with ruleNormal, in rule order
	delays []float64       // Crawl-delay values, in seconds, in block order (see block.delay)
	// licenses are the values of License lines (RSL: a licence document's
	// URL, for every agent), in file order.
	licenses []span
}

// statements returns the file's usage statements.
func (r *Robots) statements() []usageStmt {
	if r.x == nil {
		return nil
	}
	return r.x.usage
}

// A normalDisplay locates the pattern as escaped of a rule whose
// normalised pattern differs from it: the rule's own span is the pattern
// as matched.
type normalDisplay struct {
	rule int32
	text span
}

// An agentKey is a token that some user-agent line names: text[start:end]
// is one of its spellings, compared with others ignoring ASCII case. Keys
// are sorted by that comparison so that Group finds one by binary search.
type agentKey struct {
	start, end  uint32
	first, last int32 // Robots.groups[first:last] are the blocks that name it
}

// A block is one group as the reference parser sees it: consecutive
// user-agent lines and the rules that follow them, up to the next user-agent
// line that comes after a rule.
type block struct {
	agentStart, agentEnd int32 // Robots.spans[agentStart:agentEnd] are its user-agent values
	first, last          int32 // rules[first:last] belong to this block
	line                 int32 // line of the block's first user-agent line
	delay                int32 // Robots.x.delays[delay-1] is its largest valid Crawl-delay; 0 when none
}

// global reports whether b has a "*" user-agent line: only such a line
// keeps a "*" in its value.
func (r *Robots) global(b *block) bool {
	for _, a := range r.spans[b.agentStart:b.agentEnd] {
		if r.str(a) == "*" {
			return true
		}
	}
	return false
}

// crawlDelay returns b's Crawl-delay in seconds, or -1.
func (r *Robots) crawlDelay(b *block) float64 {
	if b.delay == 0 {
		return -1
	}
	return r.x.delays[b.delay-1]
}

// A rule is one allow or disallow line, in 12 bytes: there is one for
// nearly every line of a cached file.
type rule struct {
	// pat is where the pattern as matched starts in Robots.text. Without
	// ruleNormal, it is also the pattern as escaped; with it, that is in
	// Robots.x.normal.
	pat  uint32
	line int32
	// n is the pattern's length: a line holds at most 16,663 bytes
	// (maxLineBytes), which escaping or normalising at most triples.
	n     uint16
	flags ruleFlags
}

// ruleFlags say what kind of rule it is and what scan needs to know of
// the pattern it is matched by, found once by Parse, so that scan tests
// most rules with one HasPrefix.
type ruleFlags uint8

const (
	ruleAllow  ruleFlags = 1 << iota // an allow rule, else disallow; must be bit 0, the index in the accumulators
	ruleNormal                       // the pattern matched is the normalised form, which differs from the file's
	rulePlain                        // the pattern has no "*" and no final "$": a plain prefix
	ruleIndex                        // an allow pattern ".../index.htm…": it also allows ".../" exactly (see compile)

	// ruleFlagsAll are the flags a rule can have. The binary form keeps
	// them: flags that do not fit a rule's pattern (only a forged form has
	// them) make it decide otherwise, never read out of bounds.
	ruleFlagsAll = ruleAllow | ruleNormal | rulePlain | ruleIndex
)

// allow reports whether ru is an allow rule.
func (ru *rule) allow() bool { return ru.flags&ruleAllow != 0 }

// Option changes how [Parse] compiles a file.
type Option func(*options)

type options struct{ normalize bool }

// WithNormalization compiles every pattern in the form [Normalize] gives to
// request targets, so that paths passed to [Group.Test] must be normalised the
// same way. This is the proxy's matching; without it matching is exactly the
// reference's, where URLs are taken as given.
func WithNormalization() Option { return func(o *options) { o.normalize = true } }

// Parse reads a robots.txt body. It never fails: lines the reference parser
// ignores are ignored, and the whole body is read (size limits belong to the
// fetcher). Allow and disallow patterns are percent-escaped as the reference
// escapes them (bytes ≥ 0x80 encoded, existing escapes upper-cased).
func Parse(body []byte, opts ...Option) *Robots {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	p := parser{
		r:   &Robots{size: int32(min(len(body), math.MaxInt32)), norm: o.normalize},
		cur: -1,
	}
	// Escaping can only grow non-ASCII bytes; the rule texts otherwise fit in
	// about the body's size.
	p.arena.Grow(len(body) + 64)
	// Most lines of most files are rules: start with room for one per line.
	p.r.rules = make([]rule, 0, bytes.Count(body, []byte{'\n'})+1)
	p.run(body)
	return p.finish()
}

type parser struct {
	r        *Robots
	cur      int32 // current block, -1 before the first user-agent line
	ruleHit  bool  // a rule followed the current block's user-agent lines
	nul      bool  // the body has a NUL byte: lines are cut at it
	arena    strings.Builder
	sitemaps []span // sitemap values, in arena
	licenses []span // License values, in arena
	usage    []usageSpan
	normal   []normalDisplay
	delays   []float64
}

// A span is text[start:end] of a Robots (or of the parser's arena).
type span struct{ start, end uint32 }

func (r *Robots) str(s span) string { return r.text[s.start:s.end] }

var utf8BOM = [3]byte{0xEF, 0xBB, 0xBF}

func (p *parser) run(body []byte) {
	// The reference skips a (possibly partial) UTF-8 byte order mark: leading
	// bytes while they match it, stopping at the first that does not.
	i := 0
	for i < len(body) && i < len(utf8BOM) && body[i] == utf8BOM[i] {
		i++
	}
	p.nul = bytes.IndexByte(body, 0) >= 0 // one look, not one a line
	line := 0
	lastCR := false
	// Next line end of each kind at or after i (len(body) when none), found
	// lazily so that files with only CR, or only LF, stay linear.
	nextLF, nextCR := -1, -1
	for {
		if nextLF < i {
			nextLF = indexFrom(body, i, '\n')
		}
		if nextCR < i {
			nextCR = indexFrom(body, i, '\r')
		}
		end := min(nextLF, nextCR)
		if end == len(body) { // the last line, with no line end
			line++
			p.line(line, body[i:])
			break
		}
		ch := body[end]
		// An LF right after a CR ends nothing: it is the second half of CRLF.
		if !(end == i && lastCR && ch == '\n') {
			line++
			p.line(line, body[i:end])
		}
		lastCR = ch == '\r'
		i = end + 1
	}
	p.r.lines = int32(line)
}

// indexFrom returns the index of the first c in b at or after i, or len(b).
func indexFrom(b []byte, i int, c byte) int {
	if j := bytes.IndexByte(b[i:], c); j >= 0 {
		return i + j
	}
	return len(b)
}

// line handles one line as the reference's GetKeyAndValueFrom and
// ParseAndEmitLine do.
func (p *parser) line(num int, b []byte) {
	if len(b) > maxLineBytes {
		b = b[:maxLineBytes]
	}
	if p.nul { // the reference works on C strings
		if i := bytes.IndexByte(b, 0); i >= 0 {
			b = b[:i]
		}
	}
	key, value, ok := splitLine(b)
	if !ok {
		return
	}
	switch keyKind(key) {
	case keyUserAgent:
		p.userAgent(num, value)
	case keyAllow:
		p.rule(num, value, true)
	case keyDisallow:
		p.rule(num, value, false)
	case keySitemap:
		start := p.arena.Len()
		p.arena.Write(value)
		p.sitemaps = append(p.sitemaps, span{uint32(start), uint32(p.arena.Len())})
	case keyLicense:
		start := p.arena.Len()
		p.arena.Write(value)
		p.licenses = append(p.licenses, span{uint32(start), uint32(p.arena.Len())})
	case keyCrawlDelay:
		p.crawlDelay(value)
	case keyContentUsage:
		p.usageLine(num, value, false)
	case keyContentSignal:
		p.usageLine(num, value, true)
	}
}

// splitLine finds the key and value of a line: "key: value", or, with no
// colon, exactly two whitespace-separated fields ("disallow /x").
func splitLine(b []byte) (key, value []byte, ok bool) {
	if i := bytes.IndexByte(b, '#'); i >= 0 {
		b = b[:i]
	}
	b = trimSpace(b)
	sep := bytes.IndexByte(b, ':')
	if sep < 0 {
		sep = indexBlank(b)
		if sep < 0 {
			return nil, nil, false
		}
		val := sep
		for val < len(b) && (b[val] == ' ' || b[val] == '\t') {
			val++
		}
		if indexBlank(b[val:]) >= 0 {
			return nil, nil, false
		}
	}
	key = trimSpace(b[:sep])
	if len(key) == 0 {
		return nil, nil, false
	}
	return key, trimSpace(b[sep+1:]), true
}

func indexBlank(b []byte) int {
	for i, c := range b {
		if c == ' ' || c == '\t' {
			return i
		}
	}
	return -1
}

// isSpace is C's isspace in the C locale, as absl::ascii_isspace.
func isSpace(c byte) bool {
	return c == ' ' || (c >= '\t' && c <= '\r')
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

type keyType uint8

const (
	keyUnknown keyType = iota
	keyUserAgent
	keyAllow
	keyDisallow
	keySitemap
	keyCrawlDelay
	keyContentUsage
	keyContentSignal
	keyLicense
)

// keyKind classifies a field name as the reference does: by case-insensitive
// prefix, with the misspellings it accepts. Crawl-delay, unknown to the
// reference's matcher, is recognised the same way; Content-Usage and
// Content-Signal (usage statements, see usage.go) and License (RSL) by
// their whole names.
func keyKind(k []byte) keyType {
	switch lower(k[0]) { // the first letter tells which names to try
	case 'u':
		if hasPrefixFold(k, "user-agent") || hasPrefixFold(k, "useragent") || hasPrefixFold(k, "user agent") {
			return keyUserAgent
		}
	case 'a':
		if hasPrefixFold(k, "allow") {
			return keyAllow
		}
	case 'd':
		if hasPrefixFold(k, "disallow") || hasPrefixFold(k, "dissallow") || hasPrefixFold(k, "dissalow") ||
			hasPrefixFold(k, "disalow") || hasPrefixFold(k, "diasllow") || hasPrefixFold(k, "disallaw") {
			return keyDisallow
		}
	case 's':
		if hasPrefixFold(k, "sitemap") || hasPrefixFold(k, "site-map") {
			return keySitemap
		}
	case 'l':
		if len(k) == len("license") && hasPrefixFold(k, "license") {
			return keyLicense
		}
	case 'c':
		switch {
		case hasPrefixFold(k, "crawl-delay"):
			return keyCrawlDelay
		case len(k) == len(fieldUsage) && hasPrefixFold(k, fieldUsage):
			return keyContentUsage
		case len(k) == len(fieldSignal) && hasPrefixFold(k, fieldSignal):
			return keyContentSignal
		}
	}
	return keyUnknown
}

// hasPrefixFold reports whether b starts with prefix, ignoring ASCII case.
// prefix must be lower-case.
func hasPrefixFold(b []byte, prefix string) bool {
	if len(b) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c, p := b[i], prefix[i]
		if 'a' <= p && p <= 'z' {
			c |= 0x20 // a letter's two cases; no other byte folds onto it
		}
		if c != p {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func (p *parser) userAgent(num int, value []byte) {
	r := p.r
	if p.cur < 0 || p.ruleHit {
		r.blocks = append(r.blocks, block{
			agentStart: int32(len(r.spans)),
			first:      int32(len(r.rules)),
			last:       int32(len(r.rules)),
			line:       int32(num),
		})
		p.cur = int32(len(r.blocks) - 1)
		p.ruleHit = false
	}
	b := &r.blocks[p.cur]
	// "*" alone, or followed by whitespace, opens the global group; any other
	// value is cut at the first byte outside A-Z a-z _ - (so "*Bot" is "").
	if len(value) > 0 && value[0] == '*' && (len(value) == 1 || isSpace(value[1])) {
		value = value[:1]
	} else {
		value = value[:tokenLen(value)]
	}
	start := p.arena.Len()
	p.arena.Write(value)
	r.spans = append(r.spans, span{uint32(start), uint32(p.arena.Len())})
	b.agentEnd = int32(len(r.spans))
}

func (p *parser) rule(num int, value []byte, allow bool) {
	if p.cur < 0 {
		return // rules before the first user-agent line belong to no group
	}
	p.ruleHit = true
	r := p.r
	patStart := p.arena.Len()
	writeEscapedPattern(&p.arena, value)
	ru := rule{pat: uint32(patStart), line: int32(num)}
	if allow {
		ru.flags |= ruleAllow
	}
	// A view of the builder's buffer, inspected and not kept.
	pat := p.arena.String()[patStart:]
	if r.norm {
		if n := normalize(pat, true); n != pat {
			// In rule order, as filePattern's binary search needs.
			p.normal = append(p.normal, normalDisplay{int32(len(r.rules)), span{uint32(patStart), uint32(p.arena.Len())}})
			ru.pat = uint32(p.arena.Len())
			p.arena.WriteString(n)
			pat = n
			ru.flags |= ruleNormal
		}
	}
	ru.n = uint16(len(pat))
	ru.flags |= patternFlags(pat, allow)
	r.rules = append(r.rules, ru)
	r.blocks[p.cur].last = int32(len(r.rules))
}

// patternFlags returns the flags of a rule matched by pat.
func patternFlags(pat string, allow bool) ruleFlags {
	var f ruleFlags
	if strings.IndexByte(pat, '*') < 0 && !strings.HasSuffix(pat, "$") {
		f |= rulePlain
	}
	if allow && derivedIndex(pat) >= 0 {
		f |= ruleIndex
	}
	return f
}

func (p *parser) crawlDelay(value []byte) {
	if p.cur < 0 {
		return
	}
	// Crawl-delay is not part of RFC 9309; the common reading is seconds,
	// fractions allowed. Anything else is ignored.
	d, err := strconv.ParseFloat(string(value), 64)
	if err != nil || d < 0 || d != d || d > 1e9 {
		return
	}
	switch b := &p.r.blocks[p.cur]; {
	case b.delay == 0:
		p.delays = append(p.delays, d)
		b.delay = int32(len(p.delays))
	case d > p.delays[b.delay-1]:
		p.delays[b.delay-1] = d
	}
}

const hexDigits = "0123456789ABCDEF"

// writeEscapedPattern writes v escaped as the reference's MaybeEscapePattern
// does: "%xx" escapes upper-cased, bytes with the high bit set
// percent-encoded.
func writeEscapedPattern(w *strings.Builder, v []byte) {
	start := 0
	for i := plainPrefix(v); i < len(v); i++ {
		c := v[i]
		if c != '%' && c < 0x80 {
			continue
		}
		w.Write(v[start:i])
		if c == '%' && i+2 < len(v) && isHex(v[i+1]) && isHex(v[i+2]) {
			w.WriteByte('%')
			w.WriteByte(upper(v[i+1]))
			w.WriteByte(upper(v[i+2]))
			i += 2
		} else if c == '%' {
			w.WriteByte('%')
		} else {
			w.WriteByte('%')
			w.WriteByte(hexDigits[c>>4])
			w.WriteByte(hexDigits[c&15])
		}
		start = i + 1
	}
	w.Write(v[start:])
}

// plainPrefix returns how many bytes v starts with that escaping keeps
// as they are (ASCII, not '%'), eight at a time: most patterns are all
// such bytes.
func plainPrefix(v []byte) int {
	const ones, highs, percents = 0x0101010101010101, 0x8080808080808080, 0x2525252525252525
	i := 0
	for ; i+8 <= len(v); i += 8 {
		w := binary.LittleEndian.Uint64(v[i:])
		x := w ^ percents // a zero byte where v has '%'
		if (w|(x-ones)&^x)&highs != 0 {
			break // a byte ≥ 0x80 or a '%' in these eight: the loop finds it
		}
	}
	return i
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

func (p *parser) finish() *Robots {
	r := p.r
	// Parsed files live long in caches: keep no spare room beyond an eighth.
	r.rules, r.blocks = tight(r.rules), tight(r.blocks)
	if len(p.normal) > 0 || len(p.delays) > 0 || len(p.usage) > 0 || len(p.licenses) > 0 {
		r.x = &extra{normal: tight(p.normal), delays: tight(p.delays), licenses: tight(p.licenses)}
	}
	r.text, r.textCap = p.arena.String(), uint32(p.arena.Cap())
	if int(r.textCap) > len(r.text)+len(r.text)/8 {
		r.text, r.textCap = strings.Clone(r.text), uint32(len(r.text))
	}
	r.nAgents = int32(len(r.spans))
	r.spans = tight(append(r.spans, p.sitemaps...))
	r.finishUsage(p.usage)
	r.index()
	return r
}

// tight returns s, or a copy of it without the spare room append left
// when that is more than an eighth (slices.Clip would keep the memory).
func tight[S ~[]E, E any](s S) S {
	if cap(s) > len(s)+len(s)/8 {
		return slices.Clone(s)
	}
	return s
}

// index builds the agent keys and the lists of blocks they name, each
// allocated at its exact size, and makes room for the matchers. Names are
// grouped by token (ASCII case folded) through a hash table, in block
// order, and only the distinct tokens are sorted: a file names a few
// dozen agents, however many groups repeat them. Small files do it in
// arrays on the stack.
func (r *Robots) index() {
	nNames, nGlobal := 0, 0
	for i := range r.blocks {
		b := &r.blocks[i]
		if r.global(b) {
			nGlobal++
		}
		nNames += int(b.agentEnd - b.agentStart)
	}
	type token struct {
		name      int32 // its first name, an index of r.spans
		lastBlock int32 // the last block counted for it
		n         int32 // blocks that name it
		pos       int32 // where its blocks go in r.groups
	}
	var smallTable [64]int32
	var smallOf [32]int32
	var smallTokens [16]token
	table := smallTable[:]
	if size := 1 << bits.Len(uint(2*nNames)); size > len(table) {
		table = make([]int32, size)
	}
	for i := range table {
		table[i] = -1
	}
	of := smallOf[:0] // each name's token in block order; -1 for a "*"
	tokens := smallTokens[:0]
	for i := range r.blocks {
		b := &r.blocks[i]
		for a := b.agentStart; a < b.agentEnd; a++ {
			name := r.str(r.spans[a])
			if name == "*" { // only a global line keeps a "*"
				of = append(of, -1)
				continue
			}
			mask := uint64(len(table) - 1)
			slot := foldHash(name) & mask
			for table[slot] >= 0 && compareFold(r.str(r.spans[tokens[table[slot]].name]), name) != 0 {
				slot = (slot + 1) & mask
			}
			if table[slot] < 0 {
				table[slot] = int32(len(tokens))
				tokens = append(tokens, token{name: a, lastBlock: -1})
			}
			t := &tokens[table[slot]]
			if t.lastBlock != int32(i) {
				t.lastBlock = int32(i)
				t.n++
			}
			of = append(of, table[slot])
		}
	}
	var smallOrder [16]int32
	order := smallOrder[:0]
	for t := range tokens {
		order = append(order, int32(t))
	}
	slices.SortFunc(order, func(x, y int32) int {
		return compareFold(r.str(r.spans[tokens[x].name]), r.str(r.spans[tokens[y].name]))
	})
	nGroups := int32(nGlobal)
	if len(tokens) > 0 {
		r.keys = make([]agentKey, 0, len(tokens))
	}
	for _, t := range order {
		tk := &tokens[t]
		a := r.spans[tk.name]
		tk.pos, tk.lastBlock = nGroups, -1
		r.keys = append(r.keys, agentKey{start: a.start, end: a.end, first: nGroups, last: nGroups + tk.n})
		nGroups += tk.n
	}
	if nGroups > 0 {
		r.groups = make([]int32, nGroups)
	}
	g := 0
	for i := range r.blocks {
		if r.global(&r.blocks[i]) {
			r.groups[g] = int32(i)
			g++
		}
	}
	n := 0
	for i := range r.blocks {
		b := &r.blocks[i]
		for range b.agentEnd - b.agentStart {
			if t := of[n]; t >= 0 && tokens[t].lastBlock != int32(i) {
				tk := &tokens[t]
				tk.lastBlock = int32(i)
				r.groups[tk.pos] = int32(i)
				tk.pos++
			}
			n++
		}
	}
	r.nGlobal = int32(nGlobal)
	r.makeLazy(scanMax)
}

// makeLazy makes room for the matchers of r's blocks, if it has none yet
// and some block has more rules than scanLimit: slots for every block,
// only when one needs a matcher. Of two calls at once, one makes the room
// and both see it.
func (r *Robots) makeLazy(scanLimit int32) {
	if r.lazy.Load() != nil {
		return
	}
	for i := range r.blocks {
		if b := &r.blocks[i]; b.last-b.first > scanLimit {
			r.lazy.CompareAndSwap(nil, newLazyMatchers(len(r.blocks)))
			return
		}
	}
}

// foldHash hashes s as if lower-cased (ASCII): FNV-1a.
func foldHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(lower(s[i]))) * 1099511628211
	}
	return h
}

// newLazyMatchers returns room for the matchers of n blocks.
func newLazyMatchers(n int) *lazyMatchers {
	return &lazyMatchers{slots: make([]atomic.Pointer[matcher], n)}
}

// compareFold compares a and b as if both were lower-cased (ASCII).
func compareFold(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if x, y := lower(a[i]), lower(b[i]); x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return len(a) - len(b)
}

// Licenses returns the values of the file's License lines (RSL 1.0: the
// URL of a licence document that applies to every agent), in order.
func (r *Robots) Licenses() []string {
	if r == nil || r.x == nil || len(r.x.licenses) == 0 {
		return nil
	}
	out := make([]string, len(r.x.licenses))
	for i, s := range r.x.licenses {
		out[i] = r.str(s)
	}
	return out
}

// Sitemaps returns the values of the file's sitemap lines, in order.
func (r *Robots) Sitemaps() []string {
	if r == nil || len(r.spans) == int(r.nAgents) {
		return nil
	}
	out := make([]string, 0, len(r.spans)-int(r.nAgents))
	for _, s := range r.spans[r.nAgents:] {
		out = append(out, r.str(s))
	}
	return out
}

// Size returns the number of bytes that were parsed.
func (r *Robots) Size() int {
	if r == nil {
		return 0
	}
	return int(r.size)
}

// pattern returns the form of rule i's pattern that is matched.
func (r *Robots) pattern(i int32) string {
	ru := &r.rules[i]
	return r.text[ru.pat : ru.pat+uint32(ru.n)]
}

// filePattern returns rule i's pattern as escaped, not normalised.
func (r *Robots) filePattern(i int32) string {
	if r.rules[i].flags&ruleNormal == 0 {
		return r.pattern(i)
	}
	k, _ := slices.BinarySearchFunc(r.x.normal, i, func(n normalDisplay, i int32) int { return int(n.rule - i) })
	return r.str(r.x.normal[k].text)
}
