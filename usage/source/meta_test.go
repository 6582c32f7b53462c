package source

import (
	"bytes"
	"os"
	"slices"
	"testing"
)

func TestHeadUsage(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("testdata/usage/head.html")
	if err != nil {
		t.Fatal(err)
	}
	// The head's meta elements count, not those in a script, a style or
	// the body; the title's markup does not end the head.
	const want = "ai-train=refused(meta tdm-reservation: 1) ai-input=refused(meta tdm-reservation: 1) search=refused(meta gptbot: noindex, nofollow)"
	tests := []struct {
		name     string
		page     []byte
		tokens   []string
		want     string
		wantDone bool
	}{
		{"head.html", page, []string{"GPTBot"}, want, true},
		{"head.html for another crawler", page, []string{"FooBot"}, "ai-train=refused(meta tdm-reservation: 1) ai-input=refused(meta tdm-reservation: 1)", true},
		{"cut in the head", page[:bytes.Index(page, []byte("<style>"))], []string{"GPTBot"}, want, false},
		{"cut in a tag", []byte(`<head><meta name="robots" content="noai"><meta name="GPTBot" con`), []string{"GPTBot"}, "ai-train=refused(meta robots: noai) ai-input=refused(meta robots: noai)", false},
		{"no head element", []byte(`<meta name="robots" content="noai"><p>text`), nil, "ai-train=refused(meta robots: noai) ai-input=refused(meta robots: noai)", true},
		{"text ends the head", []byte("<html>hello<meta name=robots content=noai>"), nil, "", true},
		{"body first", []byte("<body><meta name=robots content=noai>"), nil, "", true},
		{"meta without a name", []byte(`<head><meta http-equiv="X-Robots-Tag" content="noai"></head>`), nil, "", true},
		{"not HTML", []byte("\x00\x01\x02 binary"), nil, "", true},
		// A template's content is inert: it neither ends the head nor
		// states anything, nested templates and "<template/>" too.
		{"template in the head", []byte(`<head><template><div><p>x</p><meta name=robots content=noindex></div></template><meta name=robots content=noai></head>`), nil, "ai-train=refused(meta robots: noai) ai-input=refused(meta robots: noai)", true},
		{"nested templates", []byte(`<head><template><template></template><b>x</b></template><meta name=robots content=noai><body>`), nil, "ai-train=refused(meta robots: noai) ai-input=refused(meta robots: noai)", true},
		{"template not closed", []byte(`<head><template/><meta name=robots content=noai><p>text`), nil, "", false},
		{"empty", nil, nil, "", false},
	}
	for _, tt := range tests {
		u, done := HeadUsage(tt.page, tt.tokens)
		if got := usageString(u); got != tt.want || done != tt.wantDone {
			t.Errorf("%s: HeadUsage = %s, done %v; want %s, done %v", tt.name, got, done, tt.want, tt.wantDone)
		}
	}
}

// FuzzHeadUsage reads any bytes as an HTML page's head: no panic, every
// verdict names a meta element, and reading more of a page whose head has
// ended changes nothing.
func FuzzHeadUsage(f *testing.F) {
	f.Add(readUsageSeed(f, "head.html"), "GPTBot")
	f.Add([]byte(`<meta name=robots content="noai,noindex"><meta name=tdm-reservation content=1>`), "FooBot")
	f.Add([]byte("<head><title><meta name=robots content=noai></title>"), "")
	f.Fuzz(func(t *testing.T, page []byte, token string) {
		u, done := HeadUsage(page, []string{token})
		checkStatements(t, "HeadUsage", u, "meta ")
		if !done {
			return
		}
		more, _ := HeadUsage(append(slices.Clip(page), `<meta name="robots" content="noai, noindex">`...), []string{token})
		if usageString(more) != usageString(u) {
			t.Fatalf("HeadUsage(%q) = %s, done; with a meta element after: %s", page, usageString(u), usageString(more))
		}
	})
}
