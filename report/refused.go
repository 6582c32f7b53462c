package report

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/usage"
	"github.com/robotsgate/robotsgate/usage/source"
)

// A RefusalClass says what became of a refused request: whether it
// reached the site. Blocked records (BlockedDecisions) are NotSent or
// BodyWithheld; price-refused ones are NotPaid.
type RefusalClass uint8

// The refusal classes.
const (
	// NotSent: robotsgate answered and the request never left it:
	// robots.txt disallowed it, or could not be had (unreachable), a
	// [[sites]] rule denied it, its target was private, or a usage
	// statement judged before sending refused a declared purpose
	// (robots.txt's Content-Usage and Content-Signal lines, an RSL licence
	// it names; the site's tdmrep.json for a tunnel-mode CONNECT, which
	// sees no response).
	NotSent RefusalClass = iota
	// BodyWithheld: the request was sent and the site answered, but a
	// usage statement of the answer refused a declared purpose (its
	// headers, its HTML head's meta elements, a head robotsgate could not
	// read, or a tdmrep.json reservation the answer did not lift), and
	// robotsgate withheld the answer's body from the client.
	BodyWithheld
	// NotPaid: the request was sent and the site answered 402 asking for a
	// payment robotsgate does not make (over max_price or the day's
	// budget, or asked twice); nothing was paid.
	NotPaid
	numRefusalClasses
)

// refusalClassNames are the classes' names in the JSON report.
var refusalClassNames = [numRefusalClasses]string{NotSent: "not-sent", BodyWithheld: "body-withheld", NotPaid: "not-paid"}

// String returns the class's name: "not-sent", "body-withheld" or
// "not-paid".
func (c RefusalClass) String() string {
	if c < numRefusalClasses {
		return refusalClassNames[c]
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// short is the class as the text report's column names it.
func (c RefusalClass) short() string {
	return [numRefusalClasses]string{NotSent: "not sent", BodyWithheld: "withheld", NotPaid: "not paid"}[c]
}

// Explain says in a sentence what happened to a request of the class.
func (c RefusalClass) Explain() string {
	switch c {
	case NotSent:
		return "never sent: robotsgate answered for the site (robots.txt, a [[sites]] deny, a private address, robots.txt or a usage file unreachable with no copy held, or a usage statement read before sending: robots.txt's own lines, an RSL licence)"
	case BodyWithheld:
		return "sent, and the site answered: the answer's own headers or HTML meta refused a declared purpose (or did not lift the site's tdmrep.json reservation), so robotsgate withheld its body from the client"
	case NotPaid:
		return "sent, and the site answered 402 asking for a payment robotsgate does not make: nothing was paid"
	}
	return ""
}

// refusalClass returns the class of a record, and whether it is a
// refusal at all: a blocked decision, or price-refused.
func (s *Summary) refusalClass(p *parsed) (RefusalClass, bool) {
	switch {
	case p.action == policy.ActionPriceRefused:
		return NotPaid, true
	case p.action == policy.ActionUsageRefused:
		if s.judgedOnResponse(string(p.rule)) && string(p.method) != "CONNECT" {
			return BodyWithheld, true
		}
		return NotSent, true
	case IsBlocked(p.action):
		return NotSent, true
	}
	return 0, false
}

// judgedOnResponse reports whether a usage rule's source judges the
// response (usage.OnResponse), or holds a reservation for it to lift
// (usage.Reserve): its refusal was made after the request was sent. A
// head robotsgate could not read is the meta source's. A source that
// source.List does not hold (a test's) is taken as judging before
// sending.
func (s *Summary) judgedOnResponse(rule string) bool {
	src, _ := usage.RuleSource(rule, s.usageSources())
	if s.phases == nil {
		s.phases = map[usage.SourceID]usage.Phase{}
		for _, l := range source.List() {
			s.phases[l.Info().ID] = l.Phase()
		}
	}
	ph, ok := s.phases[src.ID]
	return ok && (ph == usage.OnResponse || ph == usage.Reserve)
}

// Defaults for the refused-URL list.
const (
	DefaultMaxRefused = 10_000 // distinct refusals listed
	// MaxURLLen is the longest URL the list keeps, in bytes; longer ones
	// are cut (at a character boundary) and end in "…".
	MaxURLLen = 2048
)

// RefusedURL is one entry of the refused-URL list: the records that
// refused one URL with one decision, rule and line.
type RefusedURL struct {
	URL         string        `json:"url"`
	Origin      string        `json:"origin"`
	Decision    policy.Action `json:"decision"`
	Class       string        `json:"class"` // a RefusalClass's name
	Rule        string        `json:"rule"`
	Line        int           `json:"line"`
	Reason      string        `json:"reason"` // of its latest record
	Count       int64         `json:"count"`
	First       string        `json:"first"` // RFC 3339 UTC with milliseconds
	Last        string        `json:"last"`
	class       RefusalClass
	first, last time.Time
}

// refusedList is the refused URLs, at most a limit of them; the records
// of refusals past it are counted, not listed.
type refusedList struct {
	entries map[string]*RefusedURL // by key: url, decision, rule and line
	key     []byte                 // reused to build keys
	left    int64                  // records of refusals not listed: past the limit
}

// add counts one refused record.
func (l *refusedList) add(p *parsed, class RefusalClass, limit int) {
	url, rule := p.url, p.rule
	if len(url) > MaxURLLen {
		url = []byte(clip(string(url), MaxURLLen))
	}
	if len(rule) > MaxKeyLen {
		rule = []byte(clip(string(rule), MaxKeyLen))
	}
	k := append(l.key[:0], url...)
	k = append(k, 0, byte(p.action), 0)
	k = append(k, rule...)
	k = strconv.AppendInt(append(k, 0), int64(p.line), 10)
	l.key = k
	if e := l.entries[string(k)]; e != nil { // no allocation: the compiler looks up in place
		e.Count++
		if p.time.Before(e.first) {
			e.first = p.time
		}
		if !p.time.Before(e.last) {
			e.last = p.time
			if string(p.reason) != e.Reason {
				e.Reason = clip(string(p.reason), MaxKeyLen)
			}
		}
		return
	}
	if len(l.entries) >= limit {
		l.left++
		return
	}
	if l.entries == nil {
		l.entries = map[string]*RefusedURL{}
	}
	origin := p.origin
	if len(origin) > MaxKeyLen {
		origin = []byte(clip(string(origin), MaxKeyLen))
	}
	l.entries[string(k)] = &RefusedURL{URL: string(url), Origin: string(origin), Decision: p.action, Rule: string(rule), Line: p.line,
		Reason: clip(string(p.reason), MaxKeyLen), Count: 1, class: class, first: p.time, last: p.time}
}

// sorted returns the entries, most records first, then by origin, URL,
// decision, rule and line, with their class and times filled in.
func (l *refusedList) sorted() []*RefusedURL {
	out := make([]*RefusedURL, 0, len(l.entries))
	for _, e := range l.entries {
		e.Class, e.First, e.Last = e.class.String(), stamp(e.first), stamp(e.last)
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *RefusedURL) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Origin, b.Origin), strings.Compare(a.URL, b.URL),
			cmp.Compare(a.Decision, b.Decision), strings.Compare(a.Rule, b.Rule), cmp.Compare(a.Line, b.Line))
	})
	return out
}

// maxRefused is the limit of the refused-URL list.
func (s *Summary) maxRefused() int {
	if s.MaxRefused <= 0 {
		return DefaultMaxRefused
	}
	return s.MaxRefused
}

// refusedOrigin is one origin's part of the refused-URL list, for the
// text and HTML reports: its refused records by class (all of them,
// listed or not), and its entries, most records first.
type refusedOrigin struct {
	Origin   string
	Records  int64 // refused records
	ByClass  [numRefusalClasses]int64
	Entries  []*RefusedURL // the first shown of them
	More     int           // entries not shown
	MoreRecs int64         // their records
	Unlisted int64         // records refused but not listed (past the list's limit)
}

// refusedByOrigin groups the refused-URL list by origin: at most origins
// origins, the most refused records first, each with at most perOrigin
// entries; the origins counted under Other and the records with no origin
// (a bad request has none) are one row named Other. restOrigins and
// restRecords are the rows left out and their refused records.
func (s *Summary) refusedByOrigin(origins, perOrigin int) (out []refusedOrigin, restOrigins int, restRecords int64) {
	byOrigin := map[string][]*RefusedURL{}
	var rest []*RefusedURL // of origins with no row
	for _, e := range s.refused.sorted() {
		if s.origins.counts[e.Origin] != nil {
			byOrigin[e.Origin] = append(byOrigin[e.Origin], e)
		} else {
			rest = append(rest, e)
		}
	}
	var all []refusedOrigin
	left := s.byClass
	for name, r := range s.origins.counts {
		if ro := refusedOriginOf(name, r.origin.refused, byOrigin[name], perOrigin); ro.Records > 0 {
			all = append(all, ro)
			for c, n := range ro.ByClass {
				left[c] -= n
			}
		}
	}
	if ro := refusedOriginOf(Other, left, rest, perOrigin); ro.Records > 0 {
		all = append(all, ro)
	}
	slices.SortFunc(all, func(a, b refusedOrigin) int {
		return cmp.Or(cmp.Compare(b.Records, a.Records), strings.Compare(a.Origin, b.Origin))
	})
	out = all[:min(len(all), origins)]
	for _, o := range all[len(out):] {
		restOrigins++
		restRecords += o.Records
	}
	return out, restOrigins, restRecords
}

// refusedOriginOf makes the refused-URL row of one origin.
func refusedOriginOf(name string, byClass [numRefusalClasses]int64, entries []*RefusedURL, perOrigin int) refusedOrigin {
	ro := refusedOrigin{Origin: name, ByClass: byClass, Records: sum(byClass[:])}
	shown := entries[:min(len(entries), perOrigin)]
	ro.Entries = shown
	for _, e := range entries[len(shown):] {
		ro.More++
		ro.MoreRecs += e.Count
	}
	ro.Unlisted = ro.Records - ro.listed()
	return ro
}

// listed is the records of ro's entries, shown or not.
func (ro *refusedOrigin) listed() int64 {
	n := ro.MoreRecs
	for _, e := range ro.Entries {
		n += e.Count
	}
	return n
}
