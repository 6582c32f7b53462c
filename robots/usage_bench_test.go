package robots

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkGroupUsage answers a path against a file of 2,000 Content-Usage
// lines and 500 Content-Signal lines, as a hostile or generated file holds
// them: the walk is one pass and allocates nothing.
func BenchmarkGroupUsage(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("User-agent: *\nContent-Usage: train-ai=n\n")
	for i := range 2000 {
		fmt.Fprintf(&sb, "Content-Usage: /section%d/ train-ai=y, search=y\n", i)
		if i%4 == 0 {
			fmt.Fprintf(&sb, "Content-Signal: /section%d/ ai-input=no, use=reference\n", i)
		}
	}
	g := Parse([]byte(sb.String())).Group("bot")
	b.ReportAllocs()
	for b.Loop() {
		u := g.Usage("/section1999/page")
		if u[0].State == 0 {
			b.Fatal("unstated")
		}
	}
}
