package usage

import (
	"fmt"
	"strings"
)

// SourceID names where a statement came from: robots.txt's own lines, a
// response's headers, an HTML page's meta elements, the site's
// tdmrep.json, an RSL licence. Each source of package usage/source has
// one (its SourceInfo), and each Verdict carries its source's.
type SourceID uint8

// The sources robotsgate reads, as this package names them. The order
// is neither the order policy runs them (usage/source.List's) nor the
// report's (which counts refusals under names, by each source's
// SourceInfo): FromRobotsTxt must stay zero, a Verdict's Source when
// unstated; the others' values mean nothing beyond being distinct. A
// source added without a constant here (one a test adds) takes an ID at
// or above NumSources that no other source of its list has.
const (
	FromRobotsTxt SourceID = iota // robots.txt's Content-Usage and Content-Signal lines
	FromHeader                    // a response's headers: Content-Usage, Content-Signal, Tdm-Reservation, X-Robots-Tag
	FromMeta                      // an HTML page's head: its <meta> elements
	FromTDMRep                    // the site's /.well-known/tdmrep.json
	FromRSL                       // an RSL licence its robots.txt names on a License line
	NumSources                    // the number of sources this package names, all of them below it
)

// SourceInfo is what a source declares of itself (usage/source's
// Source.Info), for those that read its statements back from their text
// alone, as the audit log records them (the report).
type SourceInfo struct {
	ID SourceID // what its verdicts carry
	// Name is what reports count its refusals under: "robots.txt".
	Name string
	// Prefix is how the rules of its statements start (policy's
	// Refusal.Rule, the audit's rule): by it a rule read back is told to
	// be its (RuleSource). "" for robots.txt's, whose rules are any that
	// no other source's prefix starts.
	Prefix string
}

// sourceInfo is what the usage package declares of the sources it names,
// which they return as their SourceInfo.
var sourceInfo = [NumSources]SourceInfo{
	FromRobotsTxt: {FromRobotsTxt, "robots.txt", ""}, // content-usage: …, content-signal: …
	FromHeader:    {FromHeader, "response header", "response header "},
	FromMeta:      {FromMeta, "html meta", "meta "},
	FromTDMRep:    {FromTDMRep, "tdmrep.json", "tdmrep.json: "},
	FromRSL:       {FromRSL, "rsl licence", "rsl "},
}

// Info returns what this package declares of s (a source it names); for
// one it does not name, its ID and String as its name, with no prefix.
func (s SourceID) Info() SourceInfo {
	if s < NumSources {
		return sourceInfo[s]
	}
	return SourceInfo{ID: s, Name: s.String()}
}

// headUnreadable starts the statement of an HTML head that could not be
// read (UnreadableHead): a statement of the meta source.
const headUnreadable = "html head: "

// UnreadableHead is what robotsgate concludes of an HTML head it could not
// read (the proxy's head reader), why saying why: every purpose refused,
// by the statement "html head: unreadable (<why>)", from the meta source
// (RuleSource reads it back as unreadable).
func UnreadableHead(why string) Usage {
	var u Usage
	v := Verdict{State: Refused, Statement: headUnreadable + "unreadable (" + why + ")", Source: FromMeta}
	for p := range u {
		u[p] = v
	}
	return u
}

// Unjudged is what robotsgate concludes of a source that could not be
// judged (err, its Judge's error): every purpose refused, by the
// statement "<its prefix>could not be judged (<err>)", from the source,
// so that RuleSource reads it back as the source's.
func Unjudged(src SourceInfo, err error) Usage {
	var u Usage
	v := Verdict{State: Refused, Statement: src.Prefix + "could not be judged (" + err.Error() + ")", Source: src.ID}
	for p := range u {
		u[p] = v
	}
	return u
}

// String returns the source's name: "robots.txt", "response header",
// "html meta", "tdmrep.json" or "rsl licence"; "source(N)" for one this
// package does not name (a source added by a test).
func (s SourceID) String() string {
	if s < NumSources {
		return sourceInfo[s].Name
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}

// Sources returns every source this package names, in order.
func Sources() []SourceID {
	out := make([]SourceID, NumSources)
	for i := range out {
		out[i] = SourceID(i)
	}
	return out
}

// RuleSource says which of sources a usage rule came from, read from its
// text alone, as the audit log records it (X-Robots-Gate-Rule's value
// less the line: "content-usage: train-ai=n", "response header
// tdm-reservation: 1", "meta robots: noai", "tdmrep.json: /
// tdm-reservation=1", "rsl https://…: prohibits usage all"): the source
// whose Prefix is the longest that starts it. unreadable reports a
// statement robotsgate made of an HTML head it could not read ("html
// head: unreadable (…)"), which the meta source answers. A text no
// source's prefix starts is robots.txt's, FromRobotsTxt.Info() if sources
// does not hold it.
func RuleSource(rule string, sources []SourceInfo) (src SourceInfo, unreadable bool) {
	if strings.HasPrefix(rule, headUnreadable) {
		return find(sources, FromMeta), true
	}
	found := false
	for _, s := range sources {
		if strings.HasPrefix(rule, s.Prefix) && (!found || len(s.Prefix) > len(src.Prefix)) {
			src, found = s, true
		}
	}
	if !found {
		return FromRobotsTxt.Info(), false
	}
	return src, false
}

// find returns the SourceInfo of sources with ID id, or id.Info().
func find(sources []SourceInfo, id SourceID) SourceInfo {
	for _, s := range sources {
		if s.ID == id {
			return s
		}
	}
	return id.Info()
}

// Phase says when a source judges a request.
type Phase uint8

// The phases, in the order policy runs them for a request: with the
// rules, then before the request is sent (BeforeSend and Reserve, in
// usage/source.List's order), then on the response.
const (
	// WithRules: judged beside robots.txt's rules (docs/decision.md step
	// 7), token by token under the rules' own work bound, whatever they
	// decide (the verdicts are the decision's evidence); a refusal refuses
	// a request the rules allow (robots.txt's Content-Usage and
	// Content-Signal lines).
	WithRules Phase = iota
	// BeforeSend: judged before the request is sent, once robots.txt
	// allowed it; a refusal refuses it (RSL licences).
	BeforeSend
	// Reserve: judged before the request is sent, and a refusal held for
	// the response, which may lift it by stating a reservation of its own
	// (tdmrep.json: a response's tdm-reservation overrides the file's).
	// What sees no response (check, a tunnel-mode CONNECT) refuses on it.
	Reserve
	// OnResponse: judged on the response (its headers, its HTML head); a
	// refusal withholds its body.
	OnResponse
)

// String returns "with-rules", "before-send", "reserve" or "on-response".
func (ph Phase) String() string {
	switch ph {
	case WithRules:
		return "with-rules"
	case BeforeSend:
		return "before-send"
	case Reserve:
		return "reserve"
	case OnResponse:
		return "on-response"
	}
	return fmt.Sprintf("phase(%d)", uint8(ph))
}
