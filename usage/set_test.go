package usage

import (
	"slices"
	"testing"
)

// TestParseSet reads purpose names as a request declares them.
func TestParseSet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		values []string
		want   []string
		err    string
	}{
		{nil, []string{}, ""},
		{[]string{"ai-train, search"}, []string{"ai-train", "search"}, ""},
		{[]string{" Search ", "AI-INPUT", ",,"}, []string{"ai-input", "search"}, ""},
		{[]string{"ai-train", "ai-train"}, []string{"ai-train"}, ""},
		{[]string{"ai-train, gossip"}, nil, `"gossip" is not a purpose: known purposes are ai-train, ai-input, search`},
		{[]string{"ai-use"}, nil, `"ai-use" is not a purpose: known purposes are ai-train, ai-input, search (aipref's "ai-use" is robotsgate's ai-input)`},
		{[]string{"search, Train-AI"}, nil, `"Train-AI" is not a purpose: known purposes are ai-train, ai-input, search (aipref's "train-ai" is robotsgate's ai-train)`},
	}
	for _, tt := range tests {
		got, err := ParseSet(tt.values)
		switch {
		case tt.err != "" && (err == nil || err.Error() != tt.err):
			t.Errorf("ParseSet(%q) error = %v; want %q", tt.values, err, tt.err)
		case tt.err == "" && (err != nil || !slices.Equal(got.Names(), tt.want)):
			t.Errorf("ParseSet(%q) = %q, %v; want %q", tt.values, got.Names(), err, tt.want)
		}
	}
	if s, _ := ParseSet([]string{"search"}); !s.Has(Search) || s.Has(AITrain) || !slices.Equal(s.List(), []Purpose{Search}) {
		t.Errorf("ParseSet(search) = %v", s.List())
	}
}
