package policy

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage"
	"github.com/robotsgate/robotsgate/usage/source"
)

// fromOptOut is the SourceID of optOutSource: one the usage package does
// not name, as a source added after it would have; it needs no constant
// there, only an ID no other source of the list has.
const fromOptOut = usage.NumSources

// optOutSource is a new usage source, as one is added: this type (in a
// file of usage/source, where it would go) and a line in source.List. It
// reads a made-up response header, "AI-Opt-Out: <purpose>, …", which
// refuses the purposes it names. Its Info declares the name the report
// counts its refusals under and the prefix its statements start with
// (report's TestNewSourceCounted counts one).
type optOutSource struct{}

func (optOutSource) Info() usage.SourceInfo {
	return usage.SourceInfo{ID: fromOptOut, Name: "ai opt-out", Prefix: "ai-opt-out: "}
}

func (optOutSource) Phase() usage.Phase { return usage.OnResponse }

func (optOutSource) Judge(_ context.Context, in *source.Input) (usage.Usage, error) {
	var u usage.Usage
	for _, v := range in.Header["Ai-Opt-Out"] {
		for name := range strings.SplitSeq(v, ",") {
			if p, ok := usage.ParsePurpose(name); ok {
				u[p] = usage.Verdict{State: usage.Refused, Statement: "ai-opt-out: " + v, Source: fromOptOut}
			}
		}
	}
	return u, nil
}

// pathOptOutSource is a new usage source judged before the request is
// sent: it refuses ai-train on every path under /no-training/.
type pathOptOutSource struct{}

func (pathOptOutSource) Info() usage.SourceInfo {
	return usage.SourceInfo{ID: fromOptOut + 1, Name: "path opt-out", Prefix: "path opt-out: "}
}

func (pathOptOutSource) Phase() usage.Phase { return usage.BeforeSend }

func (pathOptOutSource) Judge(_ context.Context, in *source.Input) (usage.Usage, error) {
	var u usage.Usage
	for _, p := range in.Paths {
		if strings.HasPrefix(p, "/no-training/") {
			u[usage.AITrain] = usage.Verdict{State: usage.Refused, Statement: "path opt-out: /no-training/", Source: fromOptOut + 1}
		}
	}
	return u, nil
}

// failingSource is a usage source that could not be judged (its Judge
// returns err) at phase, after stating nothing.
type failingSource struct {
	id    usage.SourceID
	phase usage.Phase
	err   error
}

func (f failingSource) Info() usage.SourceInfo {
	return usage.SourceInfo{ID: f.id, Name: "failing " + f.phase.String(), Prefix: "failing " + f.phase.String() + ": "}
}

func (f failingSource) Phase() usage.Phase { return f.phase }

func (f failingSource) Judge(context.Context, *source.Input) (usage.Usage, error) {
	return usage.Usage{}, f.err
}

// TestNewSource: a source added to the list is run by policy at its phase,
// and its refusal reaches the decision, X-Robots-Gate-Rule and the audit's
// rule with its typed source, its rule starting with the prefix its Info
// declares (by which the report counts it under its name). A source that
// could not be judged refuses, at every phase.
func TestNewSource(t *testing.T) {
	t.Parallel()
	p, err := Compile(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	p.sources = append(source.List(), optOutSource{}, pathOptOutSource{}) // the one line a new source adds
	w := tableEnv(t, p)                                                   // no usage files: the file sources state nothing
	decide := func(target string) *Decision {
		t.Helper()
		d := &Decision{}
		r := Request{Kind: KindPlain, Scheme: "http", Authority: "example.com", Target: target, UserAgent: "FooBot/1.0", Purposes: []string{"ai-train, search"}}
		p.Decide(t.Context(), w, &r, d)
		return d
	}

	// On the response: allowed before, refused by the new header after.
	d := decide("/page")
	if d.Action != ActionAllowed {
		t.Fatalf("before the response: %s (%s); want allowed", d.Action, d.Reason)
	}
	if p.JudgeResponse(t.Context(), d, http.Header{"Ai-Opt-Out": {"search"}}, nil) != true {
		t.Fatal("JudgeResponse with AI-Opt-Out: search = false; want refused")
	}
	if d.Action != ActionUsageRefused || d.Refusal.Source != fromOptOut || d.Refusal.Purpose != usage.Search ||
		d.Refusal.Rule() != "ai-opt-out: search" || d.RuleHeader() != "ai-opt-out: search" {
		t.Errorf("refused by the new source: %s, %+v, rule %q; want usage-refused by source %v, rule %q",
			d.Action, d.Refusal, d.RuleHeader(), fromOptOut, "ai-opt-out: search")
	}
	if d.Reason != "usage refused: search is refused for this response: ai-opt-out: search; its body was withheld" {
		t.Errorf("reason %q", d.Reason)
	}
	// A response that says nothing of it goes through.
	if d := decide("/page"); p.JudgeResponse(t.Context(), d, http.Header{"Ai-Opt-Out": {"nothing"}}, nil) || d.Action != ActionAllowed {
		t.Errorf("AI-Opt-Out naming no purpose: %s; want allowed", d.Action)
	}

	// Before the request is sent.
	d = decide("/no-training/x")
	if d.Action != ActionUsageRefused || d.Refusal.Source != fromOptOut+1 || d.Refusal.Purpose != usage.AITrain ||
		d.RuleHeader() != "path opt-out: /no-training/" {
		t.Errorf("refused before sending: %s (%s), %+v; want usage-refused by source %v", d.Action, d.Reason, d.Refusal, fromOptOut+1)
	}
	if d.Usage[usage.AITrain].Source != fromOptOut+1 {
		t.Errorf("Usage[ai-train] = %+v; want the new source's verdict", d.Usage[usage.AITrain])
	}

	if got := d.Refusal.Rule(); !strings.HasPrefix(got, pathOptOutSource{}.Info().Prefix) {
		t.Errorf("rule %q; want it to start with the source's prefix %q", got, pathOptOutSource{}.Info().Prefix)
	}
}

// TestNewSourceUnjudged: a source that could not be judged (its Judge's
// error) refuses at every phase: beside the rules and before the request
// is sent, as an unreachable file or a bad request (decideRules,
// judgeBeforeSend); on the response, every declared purpose, by a
// statement that names the source, as an unreadable head does.
func TestNewSourceUnjudged(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	unreachable := &source.FileError{What: "opt-out.txt", Why: "connection refused"}
	tunnel := config.Default()
	tunnel.TLS.Mode = "tunnel"
	tests := []struct {
		name   string
		cfg    *config.Config
		src    failingSource
		req    Request
		action Action
		reason string
	}{
		{"with rules", config.Default(), failingSource{fromOptOut, usage.WithRules, boom},
			Request{Kind: KindPlain, Scheme: "http", Authority: "example.com", Target: "/page"},
			ActionBadRequest, "bad request: judge failing with-rules: boom"},
		{"with rules, a file unreachable", config.Default(), failingSource{fromOptOut, usage.WithRules, unreachable},
			Request{Kind: KindPlain, Scheme: "http", Authority: "example.com", Target: "/page"},
			ActionUnreachable, "opt-out.txt unreachable and no copy held: refusing the purposes it could refuse (connection refused)"},
		{"with rules, disallowed by them", config.Default(), failingSource{fromOptOut, usage.WithRules, boom},
			Request{Kind: KindPlain, Scheme: "http", Authority: "closed.example", Target: "/page"},
			ActionDisallowed, reasonDisallowed},
		{"with rules, tunnel mode", tunnel, failingSource{fromOptOut, usage.WithRules, boom},
			Request{Kind: KindConnect, Scheme: "https", Authority: "example.com:443", Target: "/"},
			ActionBadRequest, "bad request: judge failing with-rules: boom"},
		{"before send", config.Default(), failingSource{fromOptOut, usage.BeforeSend, boom},
			Request{Kind: KindPlain, Scheme: "http", Authority: "example.com", Target: "/page"},
			ActionBadRequest, "bad request: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Compile(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			p.sources = append(source.List(), tt.src)
			r := tt.req
			r.UserAgent, r.Purposes = "FooBot/1.0", []string{"ai-train, search"}
			d := &Decision{}
			p.Decide(t.Context(), tableEnv(t, p), &r, d)
			if d.Action != tt.action || d.Reason != tt.reason {
				t.Errorf("%s (%s); want %s (%s)", d.Action, d.Reason, tt.action, tt.reason)
			}
			// Declaring no purpose, nothing is refused by it.
			r.Purposes = nil
			d = &Decision{}
			if p.Decide(t.Context(), tableEnv(t, p), &r, d); tt.action != ActionDisallowed && d.Action != ActionAllowed {
				t.Errorf("no purposes declared: %s (%s); want allowed", d.Action, d.Reason)
			}
		})
	}

	// On the response.
	p, err := Compile(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	src := failingSource{fromOptOut, usage.OnResponse, boom}
	p.sources = append(source.List(), src)
	w := tableEnv(t, p)
	d := &Decision{}
	r := Request{Kind: KindPlain, Scheme: "http", Authority: "example.com", Target: "/page", UserAgent: "FooBot/1.0", Purposes: []string{"search, ai-train"}}
	p.Decide(t.Context(), w, &r, d)
	if d.Action != ActionAllowed {
		t.Fatalf("before the response: %s (%s); want allowed", d.Action, d.Reason)
	}
	if !p.JudgeResponse(t.Context(), d, http.Header{}, nil) {
		t.Fatal("JudgeResponse with a source that could not be judged = false; want refused")
	}
	const rule = "failing on-response: could not be judged (boom)"
	if d.Action != ActionUsageRefused || d.Refusal.Source != fromOptOut || d.Refusal.Purpose != usage.AITrain ||
		d.Refusal.Rule() != rule || d.RuleHeader() != rule {
		t.Errorf("%s, %+v, rule %q; want usage-refused by source %v, rule %q", d.Action, d.Refusal, d.RuleHeader(), fromOptOut, rule)
	}
	if got, _ := usage.RuleSource(d.Refusal.Rule(), source.Infos(p.sources)); got.ID != fromOptOut {
		t.Errorf("RuleSource(%q) = %+v; want the failing source", d.Refusal.Rule(), got)
	}
	// A statement of a source before it still answers.
	d = &Decision{}
	p.Decide(t.Context(), w, &r, d)
	if p.JudgeResponse(t.Context(), d, http.Header{"Content-Usage": {"train-ai=n"}}, nil); d.Refusal.Source != usage.FromHeader {
		t.Errorf("refused by %v (%+v); want the response header, judged first", d.Refusal.Source, d.Refusal)
	}
}

// TestUnknownFileKind: a usage source asking fetch.Files for a kind of
// file it does not hold (a kind mistyped, or not registered) refuses as an
// unreachable file does, never letting the request through unjudged.
func TestUnknownFileKind(t *testing.T) {
	t.Parallel()
	p, err := Compile(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	w := tableEnv(t, p)
	w.Files = fetch.NewFiles(fetch.FilesOptions{Fetcher: fetch.NewFetcher(fetch.FetcherOptions{})}) // no kinds
	r := Request{Kind: KindPlain, Scheme: "http", Authority: "example.com", Target: "/page", UserAgent: "FooBot/1.0", Purposes: []string{"ai-train"}}
	d := &Decision{}
	p.Decide(t.Context(), w, &r, d)
	const want = `tdmrep.json unreachable and no copy held: refusing the purposes it could refuse (get tdmrep.json file http://example.com/.well-known/tdmrep.json: no such kind of file held)`
	if d.Action != ActionUnreachable || d.Reason != want || d.Unfetched != "tdmrep.json" {
		t.Errorf("%s (%s), unfetched %q; want unreachable (%s)", d.Action, d.Reason, d.Unfetched, want)
	}
}
