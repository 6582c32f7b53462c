package usage

import "strings"

// The values statements are written in, which robots.txt lines and
// response headers share: Content-Usage (an aipref structured-field
// dictionary), Content-Signal, and TDMRep's tdm-reservation.

const (
	fieldUsage  = "content-usage"
	fieldSignal = "content-signal"
)

// HeaderUsage reads the usage preferences of one response header: name is
// Content-Usage (an aipref structured-field dictionary), Content-Signal, or
// TDM-Reservation (TDMRep: "1" refuses ai-train and ai-input, "0" allows
// them), compared case-insensitively; values are the header's field lines.
// Each line is read on its own and the answers combine as statements do,
// most restrictive first: a refusal on any line refuses, whatever another
// line grants. Any other name, or a line that does not parse, states
// nothing. Each verdict's Statement is "<name lower-case>: <values joined
// by ", ">", and its Source FromHeader.
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
	var st States
	for _, v := range values {
		var line States
		switch field {
		case fieldUsage:
			line, _ = ParseContentUsage(v)
		case fieldSignal:
			line, _ = ParseContentSignal(v)
		default:
			line = ParseTDMReservation(v)
		}
		for p := range st {
			st[p] = max(st[p], line[p])
		}
	}
	return Of(st, field+": "+strings.Join(values, ", "), FromHeader)
}

// ParseTDMReservation reads a tdm-reservation field line: "1" reserves
// text and data mining rights (refusing ai-train and ai-input), "0" does
// not. A list ("1, 0") reserves if any member does; a member is read up to
// its first byte that is not a digit, so "1 ;" reads as "1".
func ParseTDMReservation(v string) (st States) {
	for member := range strings.SplitSeq(v, ",") {
		member = strings.TrimSpace(member)
		n := 0
		for n < len(member) && member[n] >= '0' && member[n] <= '9' {
			n++
		}
		var s State
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

// ParseContentUsage reads an aipref preference expression, a
// structured-field dictionary (RFC 9651): "train-ai=n, search=y". Keys
// name the three flat categories of the IETF aipref vocabulary
// (draft-ietf-aipref-vocab-08): train-ai (as ai-train), ai-use (as
// ai-input) and search; there is no hierarchy and no default, so a
// category the expression does not name is unstated, and search states
// only what it names. Every other key is ignored, as the vocabulary says
// of unknown keys, the earlier drafts' train-genai and bots included. A
// value other than the token y or n is ignored, as are parameters; a key
// given twice keeps its refusal (any n wins, where a structured field
// would keep the last); a dictionary that does not parse states nothing,
// and ok is false.
func ParseContentUsage(value string) (st States, ok bool) {
	ok = parseDictionary(value, func(key string, tok string) {
		var v State
		switch tok {
		case "y":
			v = Granted
		case "n":
			v = Refused
		default:
			return
		}
		if p, known := vocabCategory(key); known {
			st[p] = max(st[p], v)
		}
	})
	if !ok {
		return States{}, false
	}
	return st, true
}

// vocabCategory returns the purpose an aipref vocabulary key stands for.
func vocabCategory(key string) (Purpose, bool) {
	switch key {
	case "train-ai":
		return AITrain, true
	case "ai-use":
		return AIInput, true
	case "search":
		return Search, true
	}
	return 0, false
}

// ParseContentSignal reads Content-Signal preferences: "key=yes|no"
// separated by commas (or semicolons, as some sites write them), keys search, ai-input
// and ai-train, names and values compared case-insensitively and values
// quoted or not; and use=, Cloudflare's content-use level (see
// ContentUse). Members that do not read are skipped: Content-Signal is not
// a structured field. A key given twice keeps its most restrictive value,
// use= its narrowest level. use= states nothing of any purpose: a line
// that refuses one refuses it whatever its use= says.
func ParseContentSignal(value string) (st States, use ContentUse) {
	for member := range strings.FieldsFuncSeq(value, func(r rune) bool { return r == ',' || r == ';' }) {
		k, v, found := strings.Cut(member, "=")
		if !found {
			continue
		}
		k, v = strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `"`)
		if strings.EqualFold(k, "use") {
			if u, ok := ParseContentUse(v); ok && (use == UseUnstated || u < use) {
				use = u
			}
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

// ContentUse is Content-Signal's use= value: how much of the content a
// use the site allows may keep and reproduce, narrowest first. It
// qualifies an allowance and never makes one: robotsgate shows it and
// enforces no purpose by it.
type ContentUse uint8

// Content-use levels.
const (
	UseUnstated  ContentUse = iota // no use=, or one that is not a level below
	UseImmediate                   // "immediate": interact with the content, store and reuse none of it
	UseReference                   // "reference": index, excerpt and link back
	UseFull                        // "full": summarise and reproduce
)

// String returns the level's name as sites write it ("" when unstated).
func (u ContentUse) String() string {
	switch u {
	case UseImmediate:
		return "immediate"
	case UseReference:
		return "reference"
	case UseFull:
		return "full"
	}
	return ""
}

// ParseContentUse reads a use= value, ignoring ASCII case and
// surrounding spaces.
func ParseContentUse(v string) (ContentUse, bool) {
	v = strings.TrimSpace(v)
	for _, u := range [...]ContentUse{UseImmediate, UseReference, UseFull} {
		if strings.EqualFold(v, u.String()) {
			return u, true
		}
	}
	return UseUnstated, false
}
