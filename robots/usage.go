package robots

import (
	"strings"

	"github.com/robotsgate/robotsgate/usage"
)

// Usage preferences: the statements sites make about how their content may
// be used, besides whether it may be crawled. robots.txt carries two kinds,
// each in a group (or before the first group, where it applies to every
// group), with an optional path:
//
//	Content-Usage: /news/ train-ai=n, search=y    IETF aipref (a structured-field dictionary)
//	Content-Signal: search=yes, ai-train=no       Cloudflare's content signals
//
// read with package usage, which also holds the verdicts (usage.Usage).
// The reference parser ignores these lines, and so do allow/disallow
// verdicts here: the statements are read alongside.

// Statement is one Content-Usage or Content-Signal line of a robots.txt
// file, as read.
type Statement struct {
	Field string       // "content-usage" or "content-signal"
	Path  string       // the path pattern it applies to, as matched; "" for every path
	Value string       // the preferences as written
	Line  int          // line in robots.txt
	Group int          // index of its group in [Robots.Groups]; -1 before any group (applies to every group)
	State usage.States // what it says of each purpose
	Use   string       // Content-Signal's use= level ("immediate", "reference", "full"; "" for none), shown and not enforced
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
	use     usage.ContentUse
	line    int32
	block   int32 // -1: before any group
	signal  bool
	// invalid: a Content-Usage line that is no rule at all: its value is
	// not a dictionary, or states none of the vocabulary's categories
	// (only unknown keys, such as the older drafts' bots or train-genai,
	// or none), so that it never lifts a shorter line's refusal.
	invalid bool
	state   usage.States
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
	// attach-05: a Content-Usage path starts with "/", and a value that
	// starts with anything else is all preferences; Content-Signal paths
	// may start with "*" too, as robotsgate has read them.
	var path, prefs []byte
	if len(value) > 0 && (value[0] == '/' || signal && value[0] == '*') {
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

// statesAny reports whether st states some purpose.
func statesAny(st *usage.States) bool {
	for _, x := range st {
		if x != usage.Unstated {
			return true
		}
	}
	return false
}

// usageSpan is a statement while parsing: offsets into the arena, which
// may still move.
type usageSpan struct {
	start, pathStart, pathEnd, valStart, end uint32
	line, block                              int32
	signal                                   bool
}

// finishUsage turns the parsed statements into r.x.usage (usageStmt
// values) once r.text is final.
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
			s.state, s.use = usage.ParseContentSignal(s.value)
		} else {
			var ok bool
			s.state, ok = usage.ParseContentUsage(s.value)
			s.invalid = !ok || !statesAny(&s.state)
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
	return Statement{Field: field, Path: s.path, Value: s.value, Line: int(s.line), Group: int(s.block), State: s.state, Use: s.use.String()}
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
// kind of statement decides on its own, as allow and disallow rules do.
// Content-Usage lines follow draft-ietf-aipref-attach-05: the lines with
// the longest path pattern that matches path decide (a line with no path
// matches every path with length 0), their preference expressions
// combining as draft-ietf-aipref-vocab-08 combines expressions (any n
// wins); a purpose they do not state is unstated, whatever a shorter line
// says; a line whose value is not a structured-field dictionary is no
// rule at all, so a typo never lifts a shorter line's refusal.
// Content-Signal lines decide purpose by purpose: of those that match
// path and state the purpose, the longest decides, and among equally long
// ones a refusal wins; one that does not state a purpose leaves it to the
// shorter ones. Then any refusal, from either kind, refuses (the most
// restrictive answer wins); a grant answers only when nothing refuses.
// Usage does not allocate.
func (g Group) Usage(path string) usage.Usage { return g.usage(path, nil) }

// usage is Usage under budget w.
func (g Group) usage(path string, w *Budget) usage.Usage {
	type pick struct {
		prio int
		s    *usageStmt
	}
	var signal [usage.NumPurposes]pick // Content-Signal, purpose by purpose
	for p := range signal {
		signal[p].prio = -1
	}
	var cu [usage.NumPurposes]*usageStmt // Content-Usage: the longest lines' deciding one
	cuPrio := -1
	sr := search{path: path, w: w}
	g.eachStatement(func(s *usageStmt) {
		if !w.spend(ruleCost+len(s.pattern)) || !sr.patternMatches(s.pattern) {
			return
		}
		prio := len(s.pattern)
		if !s.signal {
			if s.invalid || prio < cuPrio {
				return
			}
			if prio > cuPrio {
				cuPrio, cu = prio, [usage.NumPurposes]*usageStmt{}
			}
			for p, st := range s.state {
				if st != usage.Unstated && (cu[p] == nil || st > cu[p].state[p]) {
					cu[p] = s
				}
			}
			return
		}
		for p, st := range s.state {
			b := &signal[p]
			if st == usage.Unstated || prio < b.prio {
				continue
			}
			if prio > b.prio || st == usage.Refused && b.s.state[p] != usage.Refused {
				*b = pick{prio, s}
			}
		}
	})
	var u usage.Usage
	for p := range u {
		for _, s := range [2]*usageStmt{cu[p], signal[p].s} {
			if s == nil {
				continue
			}
			v := usage.Verdict{State: s.state[p], Statement: s.text, Line: int(s.line), Source: usage.FromRobotsTxt}
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
// could answer otherwise on some path: for Content-Usage, no longer line
// that does not refuse it (the longest lines decide every purpose), for
// Content-Signal, no longer line that grants it. Unstated otherwise.
func (g Group) UsageEverywhere() usage.Usage {
	var u usage.Usage
	for p := range u {
		for _, signal := range [2]bool{false, true} {
			var refusal *usageStmt
			g.eachStatement(func(s *usageStmt) {
				if s.signal == signal && s.state[p] == usage.Refused && matchesEverything(s.pattern) &&
					(refusal == nil || len(s.pattern) > len(refusal.pattern)) {
					refusal = s
				}
			})
			if refusal == nil {
				continue
			}
			lifted := false
			g.eachStatement(func(s *usageStmt) {
				if s.signal != signal || s.invalid || len(s.pattern) <= len(refusal.pattern) {
					return
				}
				lifted = lifted || signal && s.state[p] == usage.Granted || !signal && s.state[p] != usage.Refused
			})
			if !lifted {
				u[p] = usage.Verdict{State: usage.Refused, Statement: refusal.text, Line: int(refusal.line), Source: usage.FromRobotsTxt}
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

// Pattern returns value, a path pattern written in a file besides
// robots.txt (a tdmrep.json location, the path of an RSL content url), as
// robots.txt's own patterns are held: escaped as the parser escapes them,
// and normalised WithNormalization, as a proxy normalises request paths.
func Pattern(value string, opts ...Option) string {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	var b strings.Builder
	writeEscapedPattern(&b, []byte(value))
	if o.normalize {
		return normalize(b.String(), true)
	}
	return b.String()
}

// A PathMatcher matches path patterns, as robots.txt's Content-Usage
// lines are matched, against one path, under a budget: what the sources
// of other files need of the matcher (usage/source).
type PathMatcher struct{ sr search }

// NewPathMatcher returns a PathMatcher for path, spending its work from b
// (nil: unbounded).
func NewPathMatcher(path string, b *Budget) *PathMatcher {
	return &PathMatcher{sr: search{path: path, w: b}}
}

// Matches reports whether pattern (as Pattern returns it: a prefix, "*"
// for any run of bytes, "$" at the end for the path's end; "" matches
// every path) matches the path.
func (m *PathMatcher) Matches(pattern string) bool { return m.sr.patternMatches(pattern) }

// MatchesEverything reports whether a path pattern matches every path:
// "", "/", "/*" or "*".
func MatchesEverything(pattern string) bool { return matchesEverything(pattern) }
