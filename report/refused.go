package report

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

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

// refusedOrigin is one origin's part of the refused-URL list, for the
// text and HTML reports: its refused records by class (all of them,
// listed or not), and its entries, most records first.
type refusedOrigin struct {
	Origin    string
	Records   int64 // refused records
	ByClass   [numRefusalClasses]int64
	Entries   []*RefusedURL // the first shown of them
	More      int           // entries not shown
	MoreRecs  int64         // their records, less their count errors
	MoreRange bool          // some of them have a count error: MoreRecs is a lower bound
	Unlisted  int64         // refused records in no listed count less its count error
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
		ro.MoreRecs += e.Count - e.CountError
		ro.MoreRange = ro.MoreRange || e.CountError > 0
	}
	ro.Unlisted = ro.Records - ro.MoreRecs
	for _, e := range ro.Entries {
		ro.Unlisted -= e.Count - e.CountError
	}
	return ro
}

// moreText says what of ro's refusals is not shown: its entries past
// those shown, and its records in no listed count; "" for none.
func (ro *refusedOrigin) moreText() string {
	var parts []string
	if ro.More > 0 {
		atLeast := ""
		if ro.MoreRange {
			atLeast = "at least "
		}
		parts = append(parts, fmt.Sprintf("… and %d more %s (%s%d records)", ro.More, plural(ro.More, "URL", "URLs"), atLeast, ro.MoreRecs))
	}
	if ro.Unlisted > 0 {
		parts = append(parts, fmt.Sprintf("%d %s in no listed count", ro.Unlisted, plural(int(ro.Unlisted), "record", "records")))
	}
	return strings.Join(parts, "; ")
}

// countText is e's count, or when it has an error bound the range of
// its records: "7" or "4–7".
func countText(e *RefusedURL) string {
	if e.CountError == 0 {
		return strconv.FormatInt(e.Count, 10)
	}
	return strconv.FormatInt(e.Count-e.CountError, 10) + "–" + strconv.FormatInt(e.Count, 10)
}

// refusedListed says which refusals -json lists: "every one" while the
// list holds them all.
func (s *Summary) refusedListed() string {
	if s.refused.complete() {
		return "every one"
	}
	return fmt.Sprintf("the %d most refused, as the note says", s.maxRefused())
}

// refusedListNote says what the refused-URL list kept once it could not
// hold every refusal; "" while it holds them all.
func (s *Summary) refusedListNote() string {
	if s.refused.complete() {
		return ""
	}
	left := s.refusedLeftOut()
	return fmt.Sprintf("The list holds %d refusals (a URL with one decision, rule and line): when a new one came, it took the place of the least refused, "+
		"so every URL refused more than %s is listed. A count shown as a range a–b is one that took another's place: "+
		"it was refused between a and b times, and its first time is the first since then. %d refused %s in no listed count.",
		s.maxRefused(), times(s.refused.floor()), left, plural(int(left), "record is", "records are"))
}

// times is "once" or "n times".
func times(n int64) string {
	if n == 1 {
		return "once"
	}
	return strconv.FormatInt(n, 10) + " times"
}

// refusedLeftOut is the refused records in no listed count less its
// error bound: those of refusals the list dropped to make room, and
// those a listed refusal had before it took its place.
func (s *Summary) refusedLeftOut() int64 {
	return sum(s.byClass[:]) - s.refused.certain()
}
