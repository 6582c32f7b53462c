package usage

import (
	"errors"
	"testing"
)

// TestRuleSource reads each source back from its rules' text, as the
// audit log records them.
func TestRuleSource(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rule       string
		want       SourceID
		unreadable bool
	}{
		{"content-usage: train-ai=n", FromRobotsTxt, false},
		{"content-signal: /x ai-train=no", FromRobotsTxt, false},
		{"response header tdm-reservation: 1", FromHeader, false},
		{"response header x-robots-tag: gptbot: noai", FromHeader, false},
		{"meta robots: noai", FromMeta, false},
		{UnreadableHead("content-encoding br")[AITrain].Statement, FromMeta, true},
		{"tdmrep.json: / tdm-reservation=1", FromTDMRep, false},
		{"tdmrep.json: unreadable (longer than robots.max_bytes)", FromTDMRep, false},
		{"rsl https://a.example/license.xml: prohibits usage all", FromRSL, false},
		{"", FromRobotsTxt, false},
		// A source this package does not name, declaring its own prefix.
		{"ai-opt-out: search", NumSources, false},
		{Unjudged(SourceInfo{ID: NumSources, Name: "ai opt-out", Prefix: "ai-opt-out: "}, errors.New("x"))[Search].Statement, NumSources, false},
		{Unjudged(FromRSL.Info(), errors.New("x"))[Search].Statement, FromRSL, false},
	}
	infos := []SourceInfo{{ID: NumSources, Name: "ai opt-out", Prefix: "ai-opt-out: "}}
	for _, s := range Sources() {
		infos = append(infos, s.Info())
	}
	for _, tt := range tests {
		if got, unreadable := RuleSource(tt.rule, infos); got.ID != tt.want || unreadable != tt.unreadable {
			t.Errorf("RuleSource(%q) = %v, %v; want %v, %v", tt.rule, got, unreadable, tt.want, tt.unreadable)
		}
	}
	for _, s := range Sources() {
		if s.String() == "" || s.String() == SourceID(200).String() {
			t.Errorf("source %d has no name: %q", s, s)
		}
		if i := s.Info(); i.ID != s || i.Name != s.String() || (i.Prefix == "") != (s == FromRobotsTxt) {
			t.Errorf("%v.Info() = %+v", s, i)
		}
	}
	if got := SourceID(200).String(); got != "source(200)" {
		t.Errorf("SourceID(200) = %q; want source(200)", got)
	}
	if got := SourceID(200).Info(); got != (SourceInfo{ID: 200, Name: "source(200)"}) {
		t.Errorf("SourceID(200).Info() = %+v", got)
	}
}

// TestUnreadableHead: every purpose refused, by one statement, from the
// meta source.
func TestUnreadableHead(t *testing.T) {
	t.Parallel()
	u := UnreadableHead("the replacement encoding")
	for _, p := range Purposes() {
		if v := u[p]; v.State != Refused || v.Source != FromMeta || v.Statement != "html head: unreadable (the replacement encoding)" {
			t.Errorf("UnreadableHead[%s] = %+v", p, v)
		}
	}
}
