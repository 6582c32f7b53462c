package usage

import (
	"fmt"
	"strings"
)

// SourceID names where a statement came from: robots.txt's own lines, a
// response's headers, an HTML page's meta elements, the site's
// tdmrep.json, an RSL licence. Each source of package usage/source has
// one, and each Verdict carries its source's.
type SourceID uint8

// The sources robotsgate reads, in the order policy runs them (see
// usage/source.List).
const (
	FromRobotsTxt SourceID = iota // robots.txt's Content-Usage and Content-Signal lines
	FromHeader                    // a response's headers: Content-Usage, Content-Signal, Tdm-Reservation, X-Robots-Tag
	FromMeta                      // an HTML page's head: its <meta> elements
	FromTDMRep                    // the site's /.well-known/tdmrep.json
	FromRSL                       // an RSL licence its robots.txt names on a License line
	NumSources                    // the number of sources this package names, all of them below it
)

// sourceInfo is what the usage package knows of each of its sources: its
// name (what reports count refusals under) and how its statements start
// (how a rule read back from an audit log, which records only the text,
// is told to be its).
var sourceInfo = [NumSources]struct{ name, prefix string }{
	FromRobotsTxt: {"robots.txt", ""}, // content-usage: …, content-signal: …
	FromHeader:    {"response header", "response header "},
	FromMeta:      {"html meta", "meta "},
	FromTDMRep:    {"tdmrep.json", "tdmrep.json: "},
	FromRSL:       {"rsl licence", "rsl "},
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

// String returns the source's name: "robots.txt", "response header",
// "html meta", "tdmrep.json" or "rsl licence"; "source(N)" for one this
// package does not name (a source added by a test).
func (s SourceID) String() string {
	if s < NumSources {
		return sourceInfo[s].name
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

// RuleSource says which source a usage rule came from, read from its text
// alone, as the audit log records it (X-Robots-Gate-Rule's value less the
// line: "content-usage: train-ai=n", "response header tdm-reservation: 1",
// "meta robots: noai", "tdmrep.json: / tdm-reservation=1", "rsl
// https://…: prohibits usage all"); unreadable reports a statement
// robotsgate made of an HTML head it could not read ("html head:
// unreadable (…)"), which the meta source answers. A text no other source's
// statements start as is robots.txt's.
func RuleSource(rule string) (source SourceID, unreadable bool) {
	for s := NumSources - 1; s > FromRobotsTxt; s-- {
		if s == FromMeta && strings.HasPrefix(rule, headUnreadable) {
			return FromMeta, true
		}
		if strings.HasPrefix(rule, sourceInfo[s].prefix) {
			return s, false
		}
	}
	return FromRobotsTxt, false
}

// Phase says when a source judges a request.
type Phase uint8

// The phases.
const (
	// BeforeSend: judged before the request is sent, once robots.txt
	// allowed it; a refusal refuses it (RSL licences).
	BeforeSend Phase = iota
	// WithRules: judged beside robots.txt's rules (docs/decision.md step
	// 7), token by token under the rules' own work bound, whatever they
	// decide (the verdicts are the decision's evidence); a refusal refuses
	// a request the rules allow (robots.txt's Content-Usage and
	// Content-Signal lines).
	WithRules
	// Reserve: judged before the request is sent, and a refusal held for
	// the response, which may lift it by stating a reservation of its own
	// (tdmrep.json: a response's tdm-reservation overrides the file's).
	// What sees no response (check, a tunnel-mode CONNECT) refuses on it.
	Reserve
	// OnResponse: judged on the response (its headers, its HTML head); a
	// refusal withholds its body.
	OnResponse
)

// String returns "before-send", "with-rules", "reserve" or "on-response".
func (ph Phase) String() string {
	switch ph {
	case BeforeSend:
		return "before-send"
	case WithRules:
		return "with-rules"
	case Reserve:
		return "reserve"
	case OnResponse:
		return "on-response"
	}
	return fmt.Sprintf("phase(%d)", uint8(ph))
}
