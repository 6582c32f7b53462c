package robots

import (
	"strings"
)

// Usage preferences: the statements sites make about how their content may
// be used, besides whether it may be crawled. robots.txt carries two kinds,
// each in a group (or before the first group, where it applies to every
// group), with an optional path:
//
//	Content-Usage: /news/ train-ai=n, search=y    IETF aipref (a structured-field dictionary)
//	Content-Signal: search=yes, ai-train=no       Cloudflare's content signals
//
// and responses carry them as headers (Content-Usage, Content-Signal, and
// TDMRep's tdm-reservation). The reference parser ignores these lines, and
// so do allow/disallow verdicts here: the statements are read alongside.

// Purpose is what a crawler declares it fetches for, in robotsgate's names.
type Purpose uint8

// The purposes a statement can refuse.
const (
	AITrain Purpose = iota // training AI models: aipref "train-ai", Content-Signal "ai-train"
	AIInput                // using content as AI input (RAG, grounding): aipref "ai-use", Content-Signal "ai-input"
	Search                 // building a search index: "search" in both
	numPurposes
)

// String returns the purpose's name: "ai-train", "ai-input" or "search".
func (p Purpose) String() string {
	switch p {
	case AITrain:
		return "ai-train"
	case AIInput:
		return "ai-input"
	case Search:
		return "search"
	}
	return "unknown"
}

// Purposes returns every purpose, in order.
func Purposes() []Purpose { return []Purpose{AITrain, AIInput, Search} }

// ParsePurpose returns the purpose a name stands for, ignoring ASCII case
// and surrounding spaces.
func ParsePurpose(name string) (Purpose, bool) {
	name = strings.TrimSpace(name)
	for p := range numPurposes {
		if strings.EqualFold(name, p.String()) {
			return p, true
		}
	}
	return 0, false
}

// UsageState is what the statements say about one purpose.
type UsageState uint8

// Usage states.
const (
	Unstated UsageState = iota // no statement names the purpose: no restriction
	Granted                    // the deciding statement allows it ("y", "yes")
	Refused                    // the deciding statement refuses it ("n", "no")
)

// String returns "unstated", "allowed" or "refused".
func (s UsageState) String() string {
	switch s {
	case Granted:
		return "allowed"
	case Refused:
		return "refused"
	}
	return "unstated"
}

// UsageVerdict is the answer for one purpose, with the statement that gave
// it.
type UsageVerdict struct {
	State     UsageState
	Statement string // e.g. "content-usage: /news/ train-ai=n"; "" when unstated
	Line      int    // its line in robots.txt; 0 for a header or when unstated
}

// Usage holds the verdict for every purpose; index it with a Purpose.
type Usage [numPurposes]UsageVerdict

// Refuses returns the first of purposes that u refuses, if any.
func (u *Usage) Refuses(purposes []Purpose) (Purpose, UsageVerdict, bool) {
	for _, p := range purposes {
		if p < numPurposes && u[p].State == Refused {
			return p, u[p], true
		}
	}
	return 0, UsageVerdict{}, false
}

// Combine folds v into u, the most restrictive answer winning: a refusal
// stays (the first one found is kept as evidence), and a grant replaces only
// silence.
func (u *Usage) Combine(v *Usage) {
	for p := range u {
		if v[p].State > u[p].State {
			u[p] = v[p]
		}
	}
}

// Statement is one Content-Usage or Content-Signal line of a robots.txt
// file, as read.
type Statement struct {
	Field string                  // "content-usage" or "content-signal"
	Path  string                  // the path pattern it applies to, as matched; "" for every path
	Value string                  // the preferences as written
	Line  int                     // line in robots.txt
	Group int                     // index of its group in [Robots.Groups]; -1 before any group (applies to every group)
	State [numPurposes]UsageState // what it says of each purpose
	Use   string                  // Content-Signal's "use=" value, read and not enforced
}

// Text returns the statement as the proxy shows it: the field name
// lower-cased, the path, and the preferences as written.
func (s *Statement) Text() string {
	if s.Path == "" {
		return s.Field + ": " + s.Value
	}
	return s.Field + ": " + s.Path + " " + s.Value
}

// usageStmt is a statement held by a parsed file: text views into
// Robots.text and what it says, compactly.
type usageStmt struct {
	text    string // "content-usage: /p train-ai=n", a view of Robots.text
	pattern string // as matched (normalised when the file is); "" for every path
	path    string // as written (escaped)
	value   string
	use     string
	line    int32
	block   int32 // -1: before any group
	signal  bool
	state   [numPurposes]UsageState
}

const (
	fieldUsage  = "content-usage"
	fieldSignal = "content-signal"
)

// usageLine records a Content-Usage (signal false) or Content-Signal line.
// One before the first group applies to every group: Cloudflare writes
// Content-Signal there, and a site that writes Content-Usage there means
// it as widely (the most restrictive reading).
func (p *parser) usageLine(num int, value []byte, signal bool) {
	field := fieldUsage
	if signal {
		field = fieldSignal
	}
	var path, prefs []byte
	if len(value) > 0 && (value[0] == '/' || value[0] == '*') {
		end := indexBlank(value)
		if end < 0 {
			end = len(value)
		}
		path, prefs = value[:end], trimSpace(value[end:])
	} else {
		prefs = value
	}
	start := p.arena.Len()
	p.arena.WriteString(field)
	p.arena.WriteString(": ")
	pathStart := p.arena.Len()
	writeEscapedPattern(&p.arena, path)
	pathEnd := p.arena.Len()
	if len(path) > 0 {
		p.arena.WriteByte(' ')
	}
	valStart := p.arena.Len()
	p.arena.Write(prefs)
	p.usage = append(p.usage, usageSpan{
		start: uint32(start), pathStart: uint32(pathStart), pathEnd: uint32(pathEnd),
		valStart: uint32(valStart), end: uint32(p.arena.Len()),
		line: int32(num), block: p.cur, signal: signal,
	})
}

// usageSpan is a statement while parsing: offsets into the arena, which
// may still move.
type usageSpan struct {
	start, pathStart, pathEnd, valStart, end uint32
	line, block                              int32
	signal                                   bool
}

// finishUsage turns the parsed statements into usageStmts once r.text is
// final.
func (r *Robots) finishUsage(spans []usageSpan) {
	if len(spans) == 0 {
		return
	}
	r.x.usage = make([]usageStmt, len(spans))
	for i, sp := range spans {
		s := &r.x.usage[i]
		s.text = r.text[sp.start:sp.end]
		s.path = r.text[sp.pathStart:sp.pathEnd]
		s.value = r.text[sp.valStart:sp.end]
		s.line, s.block, s.signal = sp.line, sp.block, sp.signal
		s.pattern = s.path
		if r.norm && s.path != "" {
			s.pattern = normalize(s.path, true)
		}
		if sp.signal {
			s.state, s.use = parseSignal(s.value)
		} else {
			s.state, _ = parseContentUsage(s.value)
		}
	}
}

// Statements returns every Content-Usage and Content-Signal statement of
// the file, in line order.
func (r *Robots) Statements() []Statement {
	if r == nil || len(r.statements()) == 0 {
		return nil
	}
	out := make([]Statement, len(r.x.usage))
	for i := range r.x.usage {
		out[i] = r.x.usage[i].export()
	}
	return out
}

func (s *usageStmt) export() Statement {
	field := fieldUsage
	if s.signal {
		field = fieldSignal
	}
	return Statement{Field: field, Path: s.path, Value: s.value, Line: int(s.line), Group: int(s.block), State: s.state, Use: s.use}
}

// Statements returns the statements that apply to the group's token: those
// of the groups selected and the statements before any group, in
// line order.
func (g Group) Statements() []Statement {
	var out []Statement
	g.eachStatement(func(s *usageStmt) { out = append(out, s.export()) })
	return out
}

// eachStatement calls f for every statement that applies to the group, in
// line order.
func (g Group) eachStatement(f func(*usageStmt)) {
	if g.r == nil {
		return
	}
	// Statements are in line order, so their blocks ascend, as do the
	// group's: one walk over both, never statements × blocks (a hostile
	// file can hold tens of thousands of each).
	stmts, blocks := g.r.statements(), g.blocks
	for i := range stmts {
		s := &stmts[i]
		if s.block < 0 {
			f(s)
			continue
		}
		for len(blocks) > 0 && blocks[0] < s.block {
			blocks = blocks[1:]
		}
		if len(blocks) > 0 && blocks[0] == s.block {
			f(s)
		}
	}
}

// Usage answers, for each purpose, what the statements that apply to the
// group say about path (a request target as given to [Group.Test]). Each
// kind of statement decides on its own, as allow and disallow rules do: of
// the statements that match path and state the purpose, the one with the
// longest path pattern decides (a statement with no path matches every path
// with length 0), and among equally long ones a refusal wins. Then any
// refusal, from either kind, refuses (the most restrictive answer wins); a
// grant answers only when nothing refuses. A statement that does not state
// a purpose leaves it to the shorter ones. Usage does not allocate.
func (g Group) Usage(path string) Usage { return g.usage(path, nil) }

// usage is Usage under budget w.
func (g Group) usage(path string, w *Budget) Usage {
	type pick struct {
		prio int
		s    *usageStmt
	}
	var best [2][numPurposes]pick // by kind: [0] Content-Usage, [1] Content-Signal
	for k := range best {
		for p := range best[k] {
			best[k][p].prio = -1
		}
	}
	sr := search{path: path, w: w}
	g.eachStatement(func(s *usageStmt) {
		if !w.spend(ruleCost+len(s.pattern)) || !sr.patternMatches(s.pattern) {
			return
		}
		kind := 0
		if s.signal {
			kind = 1
		}
		prio := len(s.pattern)
		for p, st := range s.state {
			b := &best[kind][p]
			if st == Unstated || prio < b.prio {
				continue
			}
			if prio > b.prio || st == Refused && b.s.state[p] != Refused {
				*b = pick{prio, s}
			}
		}
	})
	var u Usage
	for k := range best {
		for p, b := range best[k] {
			if b.s == nil {
				continue
			}
			v := UsageVerdict{State: b.s.state[p], Statement: b.s.text, Line: int(b.s.line)}
			if v.State > u[p].State {
				u[p] = v
			}
		}
	}
	return u
}

// UsageEverywhere answers, for each purpose, whether the group refuses it
// on every path, as a tunnelling proxy that cannot see paths must know:
// Refused where, for either kind of statement, one matching every path
// ("", "/", "/*" or "*") refuses it and no longer statement of that kind
// grants it; Unstated otherwise.
func (g Group) UsageEverywhere() Usage {
	var u Usage
	for p := range u {
		for _, signal := range [2]bool{false, true} {
			var refusal *usageStmt
			g.eachStatement(func(s *usageStmt) {
				if s.signal == signal && s.state[p] == Refused && matchesEverything(s.pattern) &&
					(refusal == nil || len(s.pattern) > len(refusal.pattern)) {
					refusal = s
				}
			})
			if refusal == nil {
				continue
			}
			granted := false
			g.eachStatement(func(s *usageStmt) {
				granted = granted || s.signal == signal && s.state[p] == Granted && len(s.pattern) > len(refusal.pattern)
			})
			if !granted {
				u[p] = UsageVerdict{State: Refused, Statement: refusal.text, Line: int(refusal.line)}
				break
			}
		}
	}
	return u
}

// matchesEverything reports whether a path pattern matches every path.
func matchesEverything(pattern string) bool {
	return pattern == "" || pattern == "/" || pattern == "/*" || pattern == "*"
}

// patternMatches reports whether a robots.txt path pattern matches the
// path: a prefix, "*" for any run of bytes, "$" at the end for the path's
// end. An empty pattern matches every path.
func (sr *search) patternMatches(pattern string) bool {
	path := sr.path
	anchored := strings.HasSuffix(pattern, "$")
	if anchored {
		pattern = pattern[:len(pattern)-1]
	}
	star := strings.IndexByte(pattern, '*')
	if star < 0 {
		if anchored {
			return path == pattern
		}
		return strings.HasPrefix(path, pattern)
	}
	prefix := pattern[:star]
	return strings.HasPrefix(path, prefix) && sr.matchWild(len(prefix), pattern[star+1:], anchored)
}

// HeaderUsage reads the usage preferences of one response header: name is
// Content-Usage (an aipref structured-field dictionary), Content-Signal, or
// TDM-Reservation (TDMRep: "1" refuses ai-train and ai-input, "0" allows
// them), compared case-insensitively; values are the header's field lines.
// Each line is read on its own and the answers combine as statements do,
// most restrictive first: a refusal on any line refuses, whatever another
// line grants. Any other name, or a line that does not parse, states
// nothing. Each verdict's Statement is "<name lower-case>: <values joined
// by ", ">".
func HeaderUsage(name string, values []string) Usage {
	var u Usage
	var field string
	switch {
	case len(values) == 0:
		return u
	case strings.EqualFold(name, fieldUsage):
		field = fieldUsage
	case strings.EqualFold(name, fieldSignal):
		field = fieldSignal
	case strings.EqualFold(name, "tdm-reservation"):
		field = "tdm-reservation"
	default:
		return u
	}
	var st [numPurposes]UsageState
	for _, v := range values {
		var line [numPurposes]UsageState
		switch field {
		case fieldUsage:
			line, _ = parseContentUsage(v)
		case fieldSignal:
			line, _ = parseSignal(v)
		default:
			line = parseTDMReservation(v)
		}
		for p := range st {
			st[p] = max(st[p], line[p])
		}
	}
	text := field + ": " + strings.Join(values, ", ")
	for p, s := range st {
		if s != Unstated {
			u[p] = UsageVerdict{State: s, Statement: text}
		}
	}
	return u
}

// parseTDMReservation reads a tdm-reservation field line: "1" reserves
// text and data mining rights (refusing ai-train and ai-input), "0" does
// not. A list ("1, 0") reserves if any member does; a member is read up to
// its first byte that is not a digit, so "1 ;" reads as "1".
func parseTDMReservation(v string) (st [numPurposes]UsageState) {
	for member := range strings.SplitSeq(v, ",") {
		member = strings.TrimSpace(member)
		n := 0
		for n < len(member) && member[n] >= '0' && member[n] <= '9' {
			n++
		}
		var s UsageState
		switch member[:n] {
		case "1":
			s = Refused
		case "0":
			s = Granted
		default:
			continue
		}
		st[AITrain], st[AIInput] = max(st[AITrain], s), max(st[AIInput], s)
	}
	return st
}

// parseContentUsage reads an aipref preference list, a structured-field
// dictionary (RFC 9651): "train-ai=n, search=y". Keys name categories of
// the IETF aipref vocabulary (draft-ietf-aipref-vocab-07: train-ai and
// search), and, read leniently, those of its earlier drafts: train-genai
// (a part of training, read as train-ai: a crawler that trains cannot
// show it trains no generative model), ai-use (as ai-input), and bots
// (automated processing, every purpose, which a category of its own
// overrides, as the vocabulary nests them); other keys are ignored. A
// value other than the token y or n is ignored; a key given twice keeps
// its most restrictive value; a dictionary that does not parse states
// nothing, and ok is false.
func parseContentUsage(value string) (st [numPurposes]UsageState, ok bool) {
	var all UsageState // bots=: every purpose, where no category of its own says otherwise
	ok = parseDictionary(value, func(key string, tok string) {
		var v UsageState
		switch tok {
		case "y":
			v = Granted
		case "n":
			v = Refused
		default:
			return
		}
		// A key given twice keeps its most restrictive value (where a
		// structured field would keep the last): a site that writes both
		// "n" and "y" has refused.
		switch key {
		case "train-ai", "train-genai":
			st[AITrain] = max(st[AITrain], v)
		case "ai-use":
			st[AIInput] = max(st[AIInput], v)
		case "search":
			st[Search] = max(st[Search], v)
		case "bots":
			all = max(all, v)
		}
	})
	if !ok {
		return [numPurposes]UsageState{}, false
	}
	for p := range st {
		if st[p] == Unstated {
			st[p] = all
		}
	}
	return st, true
}

// parseSignal reads Content-Signal preferences: "key=yes|no" separated by
// commas (or semicolons, as some sites write them), keys search, ai-input
// and ai-train, names and values compared case-insensitively and values
// quoted or not; and use=, returned as written. Members that do not read
// are skipped: Content-Signal is not a structured field. A key given twice
// keeps its most restrictive value.
func parseSignal(value string) (st [numPurposes]UsageState, use string) {
	for member := range strings.FieldsFuncSeq(value, func(r rune) bool { return r == ',' || r == ';' }) {
		k, v, found := strings.Cut(member, "=")
		if !found {
			continue
		}
		k, v = strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"`)
		if strings.EqualFold(k, "use") {
			use = v
			continue
		}
		var p Purpose
		switch {
		case strings.EqualFold(k, "ai-train"):
			p = AITrain
		case strings.EqualFold(k, "ai-input"):
			p = AIInput
		case strings.EqualFold(k, "search"):
			p = Search
		default:
			continue
		}
		switch {
		case strings.EqualFold(v, "yes"):
			st[p] = max(st[p], Granted)
		case strings.EqualFold(v, "no"):
			st[p] = Refused
		}
	}
	return st, use
}
