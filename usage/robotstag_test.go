package usage

import (
	"strings"
	"testing"
)

// usageString spells u out for a test: "ai-train=refused(statement) …".
func usageString(u Usage) string {
	var b strings.Builder
	for p := range NumPurposes {
		if u[p].State == Unstated {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p.String() + "=" + u[p].State.String() + "(" + u[p].Statement + ")")
	}
	return b.String()
}

func TestRobotsTagUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		values []string
		tokens []string
		image  bool
		want   string
	}{
		{[]string{"noai"}, nil, false, "ai-train=refused(x-robots-tag: noai) ai-input=refused(x-robots-tag: noai)"},
		{[]string{"NoIndex, nofollow"}, []string{"FooBot"}, false, "search=refused(x-robots-tag: noindex, nofollow)"},
		{[]string{"none"}, nil, false, "search=refused(x-robots-tag: none)"},
		{[]string{"noimageai"}, nil, false, ""},
		{[]string{"noimageai"}, nil, true, "ai-train=refused(x-robots-tag: noimageai) ai-input=refused(x-robots-tag: noimageai)"},
		// Scoped to a crawler: only when it is obeyed.
		{[]string{"GPTBot: noai"}, []string{"FooBot"}, false, ""},
		{[]string{"GPTBot: noai"}, []string{"FooBot", "gptbot"}, false, "ai-train=refused(x-robots-tag: gptbot: noai) ai-input=refused(x-robots-tag: gptbot: noai)"},
		// A run per crawler in one line; directives after a name are its.
		{[]string{"googlebot: nofollow, FooBot: noindex, noai"}, []string{"FooBot"}, false,
			"ai-train=refused(x-robots-tag: googlebot: nofollow, foobot: noindex, noai) ai-input=refused(x-robots-tag: googlebot: nofollow, foobot: noindex, noai) search=refused(x-robots-tag: googlebot: nofollow, foobot: noindex, noai)"},
		{[]string{"FooBot: noindex, otherbot: noai"}, []string{"FooBot"}, false, "search=refused(x-robots-tag: foobot: noindex, otherbot: noai)"},
		// Valued directives are not crawler names.
		{[]string{"unavailable_after: 25 Jun 2030 15:00:00 PST, noai"}, nil, false,
			"ai-train=refused(x-robots-tag: unavailable_after: 25 jun 2030 15:00:00 pst, noai) ai-input=refused(x-robots-tag: unavailable_after: 25 jun 2030 15:00:00 pst, noai)"},
		{[]string{"max-snippet: 20", "max-image-preview: large"}, nil, false, ""},
		// Lines combine: a refusal on any line refuses.
		{[]string{"all", "noai"}, nil, false, "ai-train=refused(x-robots-tag: noai) ai-input=refused(x-robots-tag: noai)"},
		{[]string{"noai-ish, no ai, noaix"}, nil, false, ""},
		{nil, nil, false, ""},
	}
	for _, tt := range tests {
		if got := usageString(RobotsTagUsage(tt.values, tt.tokens, tt.image)); got != tt.want {
			t.Errorf("RobotsTagUsage(%q, %q, %v) = %s; want %s", tt.values, tt.tokens, tt.image, got, tt.want)
		}
	}
}

func TestMetaUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, content string
		tokens        []string
		want          string
	}{
		{"robots", "noai, noimageai", nil, "ai-train=refused(meta robots: noai, noimageai) ai-input=refused(meta robots: noai, noimageai)"},
		{"ROBOTS", "NOINDEX", nil, "search=refused(meta robots: noindex)"},
		{"GPTBot", "noai", []string{"gptbot"}, "ai-train=refused(meta gptbot: noai) ai-input=refused(meta gptbot: noai)"},
		{"GPTBot", "noai", []string{"FooBot"}, ""},
		{"tdm-reservation", "1", nil, "ai-train=refused(meta tdm-reservation: 1) ai-input=refused(meta tdm-reservation: 1)"},
		{"tdm-reservation", "0", nil, "ai-train=allowed(meta tdm-reservation: 0) ai-input=allowed(meta tdm-reservation: 0)"},
		{"tdm-reservation", "yes", nil, ""},
		{"description", "noai", nil, ""},
	}
	for _, tt := range tests {
		if got := usageString(MetaUsage(tt.name, tt.content, tt.tokens)); got != tt.want {
			t.Errorf("MetaUsage(%q, %q, %q) = %s; want %s", tt.name, tt.content, tt.tokens, got, tt.want)
		}
	}
}

// checkStatements fails t when a verdict of u states something with no
// statement, or a statement that does not start with prefix.
func checkStatements(t *testing.T, what string, u Usage, prefix string) {
	t.Helper()
	for p, v := range u {
		if v.State != Unstated && !strings.HasPrefix(v.Statement, prefix) || v.State == Unstated && v.Statement != "" {
			t.Fatalf("%s[%s] = %+v; want a statement starting %q", what, Purpose(p), v, prefix)
		}
	}
}

// FuzzRobotsTag reads X-Robots-Tag values: no panic; every verdict names
// its header; a refusal of search needs noindex or none, of AI purposes
// noai or noimageai, somewhere in the value; and for a value with no
// crawler named, every crawler gets the same answer.
func FuzzRobotsTag(f *testing.F) {
	for _, v := range []string{"noai", "GPTBot: noai, otherbot: noindex", "unavailable_after: 25 Jun 2030 15:00:00 PST, none", "noimageai", "max-snippet: -1, NOINDEX"} {
		f.Add(v, "GPTBot", true)
	}
	f.Fuzz(func(t *testing.T, value, token string, image bool) {
		u := RobotsTagUsage([]string{value}, []string{token}, image)
		checkStatements(t, "RobotsTagUsage", u, "x-robots-tag: ")
		low := strings.ToLower(value)
		if u[Search].State == Refused && !strings.Contains(low, "noindex") && !strings.Contains(low, "none") ||
			u[AITrain].State == Refused && !strings.Contains(low, "noai") && !strings.Contains(low, "noimageai") {
			t.Fatalf("RobotsTagUsage(%q) = %s: a refusal no directive states", value, usageString(u))
		}
		if !strings.Contains(value, ":") && usageString(u) != usageString(RobotsTagUsage([]string{value}, nil, image)) {
			t.Fatalf("RobotsTagUsage(%q) depends on the crawler, with none named", value)
		}
	})
}
