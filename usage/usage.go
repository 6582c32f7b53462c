// Package usage holds what robotsgate knows of the statements sites make
// about how their content may be used, besides whether it may be crawled
// (docs/decision.md step 7b; docs/data-teams.md, "AI-training and TDM
// opt-outs"): the purposes a crawler declares, the verdict for each with
// the statement that gave it and the typed source it came from, and the
// readers of the values those statements are written in (structured-field
// dictionaries, Content-Usage, Content-Signal, tdm-reservation, robots
// directives). It needs neither the robots.txt matcher nor an HTML parser:
// the robots package reads robots.txt's own statements with it, and the
// sources (package usage/source) read the rest.
package usage

import "strings"

// Purpose is what a crawler declares it fetches for, in robotsgate's names.
type Purpose uint8

// The purposes a statement can refuse.
const (
	AITrain     Purpose = iota // training AI models: aipref "train-ai", Content-Signal "ai-train"
	AIInput                    // using content as AI input (RAG, grounding): aipref "ai-use", Content-Signal "ai-input"
	Search                     // building a search index: "search" in both
	NumPurposes                // the number of purposes, all of them below it
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
	for p := range NumPurposes {
		if strings.EqualFold(name, p.String()) {
			return p, true
		}
	}
	return 0, false
}

// State is what the statements say about one purpose.
type State uint8

// Usage states.
const (
	Unstated State = iota // no statement names the purpose: no restriction
	Granted               // the deciding statement allows it ("y", "yes")
	Refused               // the deciding statement refuses it ("n", "no")
)

// String returns "unstated", "allowed" or "refused".
func (s State) String() string {
	switch s {
	case Granted:
		return "allowed"
	case Refused:
		return "refused"
	}
	return "unstated"
}

// States is what one statement says of each purpose; index it with a
// Purpose.
type States [NumPurposes]State

// Verdict is the answer for one purpose, with the statement that gave it
// and the source that statement came from.
type Verdict struct {
	State     State
	Statement string   // e.g. "content-usage: /news/ train-ai=n"; "" when unstated
	Line      int      // its line in robots.txt; 0 for any other source, or when unstated
	Source    SourceID // where the statement came from; FromRobotsTxt (the zero value) when unstated
}

// Usage holds the verdict for every purpose; index it with a Purpose.
type Usage [NumPurposes]Verdict

// Refuses returns the first of purposes that u refuses, if any.
func (u *Usage) Refuses(purposes []Purpose) (Purpose, Verdict, bool) {
	for _, p := range purposes {
		if p < NumPurposes && u[p].State == Refused {
			return p, u[p], true
		}
	}
	return 0, Verdict{}, false
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

// Of returns the Usage that states, for each purpose st names, that
// state, by statement from source.
func Of(st States, statement string, source SourceID) Usage {
	var u Usage
	for p, s := range st {
		if s != Unstated {
			u[p] = Verdict{State: s, Statement: statement, Source: source}
		}
	}
	return u
}

// RefuseAI returns a Usage that refuses ai-train and ai-input by
// statement, from source: what robotsgate concludes of a statement that
// could refuse them and cannot be read.
func RefuseAI(statement string, source SourceID) Usage {
	var u Usage
	v := Verdict{State: Refused, Statement: statement, Source: source}
	u[AITrain], u[AIInput] = v, v
	return u
}
