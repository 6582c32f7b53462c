package usage

import (
	"errors"
	"fmt"
	"strings"
)

// Set is a set of purposes: those a request declares (docs/data-teams.md,
// "AI-training and TDM opt-outs").
type Set uint8

// Has reports whether p is in the set.
func (ps Set) Has(p Purpose) bool { return ps&(1<<p) != 0 }

// List returns the purposes in the set, in Purposes order.
func (ps Set) List() []Purpose {
	var out []Purpose
	for _, p := range Purposes() {
		if ps.Has(p) {
			out = append(out, p)
		}
	}
	return out
}

// Names returns the names of the purposes in the set; an empty, non-nil
// slice for none.
func (ps Set) Names() []string {
	out := []string{}
	for _, p := range ps.List() {
		out = append(out, p.String())
	}
	return out
}

// KnownPurposes names every purpose, for error messages.
func KnownPurposes() string {
	var names []string
	for _, p := range Purposes() {
		names = append(names, p.String())
	}
	return strings.Join(names, ", ")
}

// NotAPurpose says that name is not a purpose, naming the known ones, and
// the purpose it stands for when it is an aipref vocabulary name
// (train-ai, ai-use), which robots.txt lines and headers use but a
// declared purpose does not.
func NotAPurpose(name string) string {
	name = strings.TrimSpace(name)
	msg := fmt.Sprintf("%q is not a purpose: known purposes are %s", name, KnownPurposes())
	if p, ok := vocabCategory(strings.ToLower(name)); ok && !strings.EqualFold(name, p.String()) {
		msg += fmt.Sprintf(" (aipref's %q is robotsgate's %s)", strings.ToLower(name), p)
	}
	return msg
}

// ParseSet reads purpose names: each value a comma-separated list, as
// X-Robots-Gate-Purpose or check -purpose give them. Empty items are
// skipped; an unknown name is an error naming the known ones.
func ParseSet(values []string) (Set, error) {
	var ps Set
	for _, v := range values {
		for name := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(name) == "" {
				continue
			}
			p, ok := ParsePurpose(name)
			if !ok {
				return 0, errors.New(NotAPurpose(name))
			}
			ps |= 1 << p
		}
	}
	return ps, nil
}
