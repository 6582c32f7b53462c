package report

import (
	"cmp"
	"slices"
	"strings"

	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/usage"
	"github.com/robotsgate/robotsgate/usage/source"
)

// numClasses is the number of answer classes: the classes of the
// origins' own answers to the requests robotsgate let through, as
// audit.ClassOf tells them apart for the metrics and the status page
// (1xx, 2xx, 3xx, 4xx, 429 and 5xx; 429, an origin asking a crawler to
// slow down, apart from the other 4xx).
const numClasses = audit.NumAnswerClasses

// className is the name of answer class i: "2xx", "429"…, the keys of
// by_class and of by_origin_class's objects.
func className(i int) string { return audit.AnswerClass(i).String() }

// originCounts are one origin's records by decision and its answers by
// class.
type originCounts struct {
	decisions [policy.NumActions + 1]int64 // by policy.Action; the last for an Action Add was given that is none of them
	answers   [numClasses]int64
	refused   [numRefusalClasses]int64 // refused records by class
	spent     *spend                   // what it charged; nil until it charged
}

// decisionName is the name of decisions' index i.
func decisionName(i int) string {
	if i < policy.NumActions {
		return policy.Action(i).String()
	}
	return Other
}

// answerClass returns the class of the origin's answer a record carries;
// ok is false when it carries none. Only allowed records (in the log with
// audit.log_allowed) and would-block ones (report mode forwards the
// request) are of requests that reached the origin; their status is what
// the origin answered, classed as the proxy's metrics class it. A
// tunnel-mode CONNECT's 200 is the tunnel's, not an origin's answer, and
// statuses outside 100–599 belong to no class.
func answerClass(p *parsed) (class audit.AnswerClass, ok bool) {
	if p.action != policy.ActionAllowed && p.action != policy.ActionWouldBlock || string(p.method) == "CONNECT" {
		return 0, false
	}
	return audit.ClassOf(p.status)
}

// shownClasses are the answer classes the text and HTML reports show, in
// order: 2xx, 3xx, 4xx, 429 and 5xx always, and 1xx (a WebSocket's 101)
// first when some were counted.
func (s *Summary) shownClasses() []int {
	var cs []int
	for i := range numClasses {
		if audit.AnswerClass(i) != audit.Answer1xx || s.answers[i] > 0 {
			cs = append(cs, i)
		}
	}
	return cs
}

// Rule kinds: the directive a record's rule names. A robots.txt verdict's
// rule is "allow: …" or "disallow: …" (robots.Verdict.Rule); a usage
// refusal's is its statement ("content-usage: train-ai=n", "response
// header tdm-reservation: 1").
const (
	ruleDisallow = iota
	ruleAllow
	ruleUsage
	numRuleKinds
)

// ruleKindOf returns the kind of rule r.
func ruleKindOf(r string) int {
	switch {
	case strings.HasPrefix(r, "disallow:"):
		return ruleDisallow
	case strings.HasPrefix(r, "allow:"):
		return ruleAllow
	}
	return ruleUsage
}

// Usage sources: where a usage refusal's statement came from, read from
// its rule by usage.RuleSource (docs/data-teams.md, "AI-training and TDM
// opt-outs": X-Robots-Gate-Rule) against the sources' declared prefixes
// (Summary.UsageSources), each source counted under its name, and the
// HTML heads robotsgate could not read apart, under headUnreadableName.
const headUnreadableName = "html head unreadable"

// usageSources returns the sources usage refusals are told apart by:
// s.UsageSources, or those of source.List.
func (s *Summary) usageSources() []usage.SourceInfo {
	if s.UsageSources != nil {
		return s.UsageSources
	}
	if s.listSources == nil {
		s.listSources = source.Infos(source.List())
	}
	return s.listSources
}

// usageSourceName returns the name a usage rule's refusals are counted
// under.
func (s *Summary) usageSourceName(rule string) string {
	src, unreadable := usage.RuleSource(rule, s.usageSources())
	if unreadable {
		return headUnreadableName
	}
	return src.Name
}

// usageSourceNames returns the names usage refusals are counted under:
// each source's ("robots.txt", "rsl licence", "tdmrep.json", "response
// header", "html meta" for source.List's), then "html head unreadable".
func (s *Summary) usageSourceNames() []string {
	var out []string
	for _, src := range s.usageSources() {
		out = append(out, src.Name)
	}
	return append(out, headUnreadableName)
}

// usageSourceTable returns the usage refusals counted by source, as a
// table.
func (s *Summary) usageSourceTable() *table {
	t := &table{counts: map[string]*row{}}
	for name, n := range s.bySource {
		if n > 0 {
			t.counts[name] = &row{n: n}
		}
	}
	return t
}

// rulesOf returns the rule table's rules of one kind, as a table of its
// own whose Other counts the records of that kind counted under Other.
func (s *Summary) rulesOf(kind int) *table {
	t := &table{counts: map[string]*row{}, other: s.otherRules[kind]}
	for name, r := range s.rules.counts {
		if ruleKindOf(name) == kind {
			t.counts[name] = r
		}
	}
	return t
}

// crossRow is one row of an origin table with counts: an origin, or Other
// for the rows summed.
type crossRow struct {
	Name   string
	Total  int64 // records, or answers in an answer table
	Counts []int64
}

// crossTable is an origin table with counts by some columns (decisions,
// or answer classes): the largest rows, and the rest summed.
type crossTable struct {
	Columns []string
	Rows    []crossRow
	Rest    *crossRow // the origins not in Rows and those counted under Other; nil if none
	More    int       // origins summed in Rest (those counted under Other aside)
	Capped  int64     // records of Rest counted under Other, past the cap of distinct names
}

// originDecisions returns the origin × decision table: the rows origins
// rows most records first, the columns the decisions present in the
// order of the decision table (most records first).
func (s *Summary) originDecisions(rows int) crossTable {
	var columns []int
	var present [policy.NumActions + 1]bool
	for _, r := range s.origins.counts {
		for i, n := range r.origin.decisions {
			present[i] = present[i] || n > 0
		}
	}
	for i, n := range s.otherOrigins.decisions {
		present[i] = present[i] || n > 0
	}
	for _, e := range s.decisions.sorted() {
		if a, ok := policy.ParseAction(e.Name); ok && present[a] {
			columns = append(columns, int(a))
			present[a] = false
		}
	}
	for i, p := range present { // decisions past the decision table's cap
		if p {
			columns = append(columns, i)
		}
	}
	t := crossTable{}
	for _, i := range columns {
		t.Columns = append(t.Columns, decisionName(i))
	}
	pick := func(oc *originCounts) []int64 {
		out := make([]int64, len(columns))
		for j, i := range columns {
			out[j] = oc.decisions[i]
		}
		return out
	}
	s.fillCross(&t, rows, func(r *row) int64 { return r.n }, s.origins.other, pick)
	return t
}

// originAnswers returns the origin × answer class table: the rows origins
// with answers, most answers first, the columns shownClasses.
func (s *Summary) originAnswers(rows int) crossTable {
	columns := s.shownClasses()
	t := crossTable{}
	for _, i := range columns {
		t.Columns = append(t.Columns, className(i))
	}
	pick := func(oc *originCounts) []int64 {
		out := make([]int64, len(columns))
		for j, i := range columns {
			out[j] = oc.answers[i]
		}
		return out
	}
	s.fillCross(&t, rows, func(r *row) int64 { return sum(r.origin.answers[:]) }, sum(s.otherOrigins.answers[:]), pick)
	return t
}

// fillCross fills t with the rows origins whose total (by total) is
// largest, then by name, and sums the rest, with the records of
// otherOrigins (capped of them) in Rest.
func (s *Summary) fillCross(t *crossTable, rows int, total func(*row) int64, capped int64, pick func(*originCounts) []int64) {
	type named struct {
		name  string
		total int64
		r     *row
	}
	all := make([]named, 0, len(s.origins.counts))
	for name, r := range s.origins.counts {
		if n := total(r); n > 0 {
			all = append(all, named{name, n, r})
		}
	}
	slices.SortFunc(all, func(a, b named) int {
		if c := cmp.Compare(b.total, a.total); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	for _, e := range all[:min(len(all), rows)] {
		t.Rows = append(t.Rows, crossRow{Name: e.name, Total: e.total, Counts: pick(e.r.origin)})
	}
	rest := all[len(t.Rows):]
	if len(rest) == 0 && capped == 0 {
		return
	}
	r := &crossRow{Name: Other, Total: capped, Counts: pick(&s.otherOrigins)}
	for _, e := range rest {
		r.Total += e.total
		for j, n := range pick(e.r.origin) {
			r.Counts[j] += n
		}
	}
	t.Rest, t.More, t.Capped = r, len(rest), capped
}

// sum adds ns.
func sum(ns []int64) int64 {
	var n int64
	for _, x := range ns {
		n += x
	}
	return n
}
