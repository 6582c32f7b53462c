package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage"
)

// TDMRep is a site's /.well-known/tdmrep.json (TDM Reservation Protocol,
// W3C Community Group Final Report, 2024): where text and data mining
// rights are reserved. It is immutable and safe for concurrent use.
type TDMRep struct {
	rules []tdmRule
}

// tdmRule is one entry of the file.
type tdmRule struct {
	location string // as written
	pattern  string // as matched: escaped as robots.txt patterns are (and normalised with WithNormalization)
	reserved bool   // tdm-reservation 1
	policy   string // tdm-policy, if any
}

// ErrTDMRep is wrapped by ParseTDMRep's errors: the file is not a TDMRep
// file, and so reserves nothing (the protocol's rule for an error).
var ErrTDMRep = errors.New("not a tdmrep.json file")

// maxTDMRules bounds the entries of a file that are kept: a real file has
// a few.
const maxTDMRules = 10_000

// ParseTDMRep reads a tdmrep.json file: a JSON array of objects, each with
// a "location" (a path pattern, read as robots.txt patterns are: "*" for
// any run of bytes, "$" at the end), a "tdm-reservation" (0 or 1, as a
// number or a string) and an optional "tdm-policy" URL. An entry that lacks
// either of the first two, or holds another value, is skipped, as the
// protocol treats an error: as no reservation. A body that is not a JSON
// array of objects is an error wrapping ErrTDMRep. With WithNormalization,
// locations are normalised as a proxy normalises request paths.
func ParseTDMRep(body []byte, opts ...robots.Option) (*TDMRep, error) {
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTDMRep, err)
	}
	t := &TDMRep{}
	for _, m := range raw {
		if len(t.rules) == maxTDMRules {
			break
		}
		var loc string
		if json.Unmarshal(m["location"], &loc) != nil || loc == "" {
			continue
		}
		reserved, ok := tdmReservation(m["tdm-reservation"])
		if !ok {
			continue
		}
		var policy string
		json.Unmarshal(m["tdm-policy"], &policy) // optional: absent or not a string is none
		t.rules = append(t.rules, tdmRule{location: loc, pattern: robots.Pattern(loc, opts...), reserved: reserved, policy: policy})
	}
	return t, nil
}

// tdmReservation reads a tdm-reservation value: 0 or 1, a number or a
// string.
func tdmReservation(v json.RawMessage) (reserved, ok bool) {
	s := strings.TrimSpace(string(v))
	if u, err := strconv.Unquote(s); err == nil {
		s = strings.TrimSpace(u)
	}
	switch s {
	case "1":
		return true, true
	case "0":
		return false, true
	}
	return false, false
}

// Usage answers for path, a request's path and query (normalised when the
// file was parsed WithNormalization): the entry with the longest location
// that matches it decides, a reservation winning among equally long ones;
// a reservation refuses ai-train and ai-input, and "tdm-reservation": 0
// grants them. The Statement is "tdmrep.json: <location>
// tdm-reservation=<0|1>". A nil TDMRep states nothing.
func (t *TDMRep) Usage(path string) usage.Usage {
	u, _ := t.UsageWithin(path, nil)
	return u
}

// UsageWithin is Usage under budget b: it reports false, with an
// unreliable answer, when b runs out.
func (t *TDMRep) UsageWithin(path string, b *robots.Budget) (usage.Usage, bool) {
	var u usage.Usage
	r := t.decide(path, b)
	if r == nil {
		return u, !b.Exhausted()
	}
	v := usage.Verdict{State: usage.Granted, Statement: "tdmrep.json: " + r.location + " tdm-reservation=0", Source: usage.FromTDMRep}
	if r.reserved {
		v.State, v.Statement = usage.Refused, "tdmrep.json: "+r.location+" tdm-reservation=1"
	}
	u[usage.AITrain], u[usage.AIInput] = v, v
	return u, !b.Exhausted()
}

// UsageEverywhere answers whether the file reserves every path, as a
// tunnelling proxy that cannot see paths must know: ai-train and ai-input
// Refused when an entry's location matches every path ("/", "/*", "*")
// and every entry reserves (the first whole-site entry's statement is the
// evidence); Unstated otherwise.
func (t *TDMRep) UsageEverywhere() usage.Usage {
	var u usage.Usage
	if t == nil {
		return u
	}
	var whole *tdmRule
	for i := range t.rules {
		r := &t.rules[i]
		if !r.reserved {
			return u
		}
		if whole == nil && robots.MatchesEverything(r.pattern) {
			whole = r
		}
	}
	if whole != nil {
		v := usage.Verdict{State: usage.Refused, Statement: "tdmrep.json: " + whole.location + " tdm-reservation=1", Source: usage.FromTDMRep}
		u[usage.AITrain], u[usage.AIInput] = v, v
	}
	return u
}

// Policy returns the tdm-policy URL of the entry that decides for path, if
// it names one.
func (t *TDMRep) Policy(path string) string {
	if r := t.decide(path, nil); r != nil {
		return r.policy
	}
	return ""
}

// decide returns the entry that decides for path, under budget b; nil if
// none matches (or t is nil).
func (t *TDMRep) decide(path string, b *robots.Budget) *tdmRule {
	if t == nil {
		return nil
	}
	var best *tdmRule
	sr := robots.NewPathMatcher(path, b)
	for i := range t.rules {
		r := &t.rules[i]
		if best != nil && (len(r.pattern) < len(best.pattern) || len(r.pattern) == len(best.pattern) && !r.reserved) {
			continue
		}
		if !b.SpendPattern(r.pattern) {
			return best
		}
		if sr.Matches(r.pattern) {
			best = r
		}
	}
	return best
}

// Len returns the number of entries kept.
func (t *TDMRep) Len() int {
	if t == nil {
		return 0
	}
	return len(t.rules)
}

// tdmrepSource is the site's /.well-known/tdmrep.json, read for a request
// that declares ai-train or ai-input, the purposes it can refuse. Fetched
// before the request is sent, its reservation is held for the response,
// which lifts it by stating a tdm-reservation of its own (Lifts). A file
// that cannot be read reserves nothing, as the protocol reads an error;
// but one robotsgate cut at robots.max_bytes is no error of the site's, a
// statement robotsgate could not read: it reserves every path.
type tdmrepSource struct{}

// Info declares the source (usage.FromTDMRep.Info).
func (tdmrepSource) Info() usage.SourceInfo { return usage.FromTDMRep.Info() }

func (tdmrepSource) Phase() usage.Phase { return usage.Reserve }

func (tdmrepSource) FileKind(opts ...robots.Option) fetch.FileKind {
	return fetch.FileKind{
		Name: KindTDMRep, Accept: "application/json, */*;q=0.5",
		Parse: func(_ string, body []byte) (any, error) { return ParseTDMRep(body, opts...) },
		URLs:  func(o fetch.Origin, _ []string) []string { return []string{TDMRepURL(o)} },
	}
}

// Judge answers, for a path, the reservation of the first of in.Paths
// that the file reserves for a declared purpose (nothing if none does),
// or, Everywhere, what it reserves on every path.
func (tdmrepSource) Judge(ctx context.Context, in *Input) (usage.Usage, error) {
	var u usage.Usage
	if in.Files == nil || !slices.Contains(in.Purposes, usage.AITrain) && !slices.Contains(in.Purposes, usage.AIInput) {
		return u, nil
	}
	doc, err := in.Files.Get(ctx, KindTDMRep, TDMRepURL(in.Origin))
	if fe := unanswered("tdmrep.json", doc, err); fe != nil {
		return u, fe
	}
	switch {
	case doc.Outcome == fetch.Fetched && doc.ParseErr != nil && doc.Truncated:
		return usage.RefuseAI("tdmrep.json: unreadable (longer than robots.max_bytes)", usage.FromTDMRep), nil
	case !doc.Good():
		return u, nil
	}
	t := doc.Value.(*TDMRep)
	if in.Everywhere {
		return t.UsageEverywhere(), nil
	}
	for _, path := range in.Paths {
		pu, ok := t.UsageWithin(path, in.Budget)
		if !ok {
			return u, &CostError{What: "the site's tdmrep.json"}
		}
		if _, _, refused := pu.Refuses(in.Purposes); refused {
			return pu, nil
		}
	}
	return u, nil
}

// Lifts reports whether the response states its own tdm-reservation: in a
// header, or a meta element of its head.
func (tdmrepSource) Lifts(in *Input) bool {
	return len(in.Header["Tdm-Reservation"]) > 0 ||
		in.Head != nil && strings.HasPrefix(in.Head[usage.AITrain].Statement, "meta tdm-reservation")
}
