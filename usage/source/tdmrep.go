package source

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/robotsgate/robotsgate/robots"
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
