package policy

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/attack"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/robots/lenient"
	"github.com/robotsgate/robotsgate/usage/source"
)

// simpleRobots is a robots.txt of one rule.
const simpleRobots = "User-agent: *\nDisallow: /private\n"

// TestDecideWorkBounded: a request whose decision would take more than
// the work bound (500 KiB of wildcard rules against an 8 KiB path, here
// seconds of CPU before the bound) is refused as a bad request (step 0's
// bound; no rule of the site's decided), not let through; real
// files, with long paths of every byte and their lenient readings, are
// decided in full and exactly as without the bound.
func TestDecideWorkBounded(t *testing.T) {
	t.Parallel()
	rules := robots.Parse([]byte(attack.Robots(fetch.DefaultMaxBytes)), robots.WithNormalization())
	simple := robots.Parse([]byte(simpleRobots), robots.WithNormalization())
	for _, tt := range []struct {
		rules *robots.Robots
		path  string
	}{{rules, attack.Path(MaxTargetBytes)}, {rules, attack.LenientPath(MaxTargetBytes)}, {simple, attack.DotsPath(MaxTargetBytes)}} {
		path := tt.path
		d := &Decision{Agents: Agents{one: "AnyBot"}}
		decideRules(context.Background(), d, tt.rules, path, source.List(), nil)
		if d.Action != ActionBadRequest || !strings.Contains(d.Reason, "work bound") {
			t.Errorf("hostile robots.txt, 8 KiB path %.20q...: %s %q; want bad-request past the work bound", path, d.Action, d.Reason)
		}
		if d.work <= DecideWork {
			t.Errorf("work %d; want it past the bound %d", d.work, DecideWork)
		}
	}

	// A client that leaves stops the work, and is never taken for a
	// block.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d := &Decision{Agents: Agents{one: "AnyBot"}}
	decideRules(ctx, d, rules, "/a;b/%2F/c", source.List(), nil)
	if d.Action != ActionClientLeft || d.Reason != reasonLeft {
		t.Errorf("client gone: %s %q; want client-left, %q", d.Action, d.Reason, reasonLeft)
	}

	// A deadline that ends the work (the decision API's call bound) is
	// not a client that left: the caller is still there to be told the
	// URL was not decided in time.
	ctx, cancel = context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	d = &Decision{Agents: Agents{one: "AnyBot"}}
	decideRules(ctx, d, rules, "/a;b/%2F/c", source.List(), nil)
	if d.Action != ActionOverloaded || d.Reason != reasonOutOfTime {
		t.Errorf("deadline: %s %q; want overloaded, %q", d.Action, d.Reason, reasonOutOfTime)
	}

	files, err := os.ReadDir("../../robots/testdata/corpus")
	if err != nil {
		t.Fatal(err)
	}
	every := ""
	for len(every) < MaxTargetBytes-200 {
		every += "abcdefghijklmnopqrstuvwxyz0123456789-_.~ABCDEFGHIJKLMNOPQRSTUVWXYZ/?=&%20+,;:!$'()@*"
	}
	paths := []string{"/" + every, "/a;b/%2F/" + every, "/search?q=" + every}
	var worst int64
	for _, f := range files {
		body, err := os.ReadFile("../../robots/testdata/corpus/" + f.Name())
		if err != nil || !strings.HasSuffix(f.Name(), ".txt") {
			continue
		}
		rules := robots.Parse(body, robots.WithNormalization())
		for _, tok := range []string{"*", "GPTBot"} {
			for _, path := range paths {
				d := &Decision{Agents: Agents{one: tok}}
				decideRules(context.Background(), d, rules, path, source.List(), nil)
				worst = max(worst, d.work)
				if strings.Contains(d.Reason, "work bound") {
					t.Errorf("%s, %s, a %d-byte path: refused past the work bound (%d); want decided", f.Name(), tok, len(path), d.work)
					continue
				}
				want := rules.Group(tok).Test(robots.Normalize(path))
				for r := range lenient.Readings(path) {
					if !want.Allowed {
						break
					}
					want = rules.Group(tok).Test(r)
				}
				if d.Verdict.Allowed != want.Allowed || d.Verdict.Line != want.Line {
					t.Errorf("%s, %s, a %d-byte path: %+v; want %+v, as decided without the bound", f.Name(), tok, len(path), d.Verdict, want)
				}
			}
		}
	}
	t.Logf("the costliest corpus decision took %d units of the bound's %d", worst, DecideWork)
}

// BenchmarkDecideWorstCase decides the costliest request constructed: an
// 8 KiB path with lenient separators against 500 KiB of wildcard rules
// made to cost the most, refused at the work bound; and, as a baseline in
// the same run, a common request under a real file.
func BenchmarkDecideWorstCase(b *testing.B) {
	hostile := robots.Parse([]byte(attack.Robots(fetch.DefaultMaxBytes)), robots.WithNormalization())
	real, err := os.ReadFile("../../robots/testdata/corpus/istockphoto.com.txt")
	if err != nil {
		b.Fatal(err)
	}
	typical := robots.Parse(real, robots.WithNormalization())
	for _, bc := range []struct {
		name  string
		rules *robots.Robots
		path  string
	}{
		{"hostile-8KiB", hostile, attack.Path(MaxTargetBytes)},
		{"hostile-8KiB-lenient", hostile, attack.LenientPath(MaxTargetBytes)},
		{"simple-8KiB-dots", robots.Parse([]byte(simpleRobots), robots.WithNormalization()), attack.DotsPath(MaxTargetBytes)},
		{"istockphoto-8KiB-every-byte", typical, "/a;b/%2F/" + strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789-_.~/?=&%20+,;:!$", 160)[:MaxTargetBytes-20]},
		{"istockphoto-common", typical, "/photos/mountain-landscape?page=2"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d := &Decision{Agents: Agents{one: "AnyBot"}}
				decideRules(context.Background(), d, bc.rules, bc.path, source.List(), nil)
			}
		})
	}
}
