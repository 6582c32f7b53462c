package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// fixture is a store holding copies, and a Decider on it.
type fixture struct {
	dir string
	d   *Decider
}

func newFixture(t testing.TB, cfg *config.Config, copies map[evidence.Copy][]byte) *fixture {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "evidence")
	s, err := evidence.Open(evidence.Options{Dir: dir, NoSweeper: true, QueueLen: len(copies) + 1})
	if err != nil {
		t.Fatal(err)
	}
	for c, body := range copies {
		s.Keep(c, body)
	}
	if err := s.Close(time.Minute); err != nil {
		t.Fatal(err)
	}
	if cfg == nil {
		cfg = config.Default()
	}
	d, err := New(cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{dir: dir, d: d}
}

// record is the audit record of a request for url with ua, decided on c
// at t, as the proxy writes it (RecordOf, its copies named).
func (f *fixture) record(t testing.TB, url, ua string, c evidence.Copy, at time.Time) audit.Record {
	t.Helper()
	req := &policy.Request{Kind: policy.KindCheck, Method: "GET", UserAgent: ua}
	if err := req.SetURL(url); err != nil {
		t.Fatal(err)
	}
	d, err := f.d.Decide(context.Background(), req, []evidence.Copy{c}, at)
	if err != nil {
		t.Fatal(err)
	}
	r := audit.RecordOf(at, d, 200)
	r.Method, r.UserAgent = "GET", ua
	r.Copies = []audit.Copy{{URL: c.URL, SHA256: c.Hex(), Fetched: audit.Time(c.Fetched), Status: c.Status}}
	return r
}

func lines(t testing.TB, recs ...any) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, r := range recs {
		if s, ok := r.(string); ok {
			b.WriteString(s + "\n")
			continue
		}
		j, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(j, '\n'))
	}
	return b.Bytes()
}

func TestReplay(t *testing.T) {
	t.Parallel()
	v1 := []byte("User-agent: *\nDisallow: /private\n")
	v2 := []byte("User-agent: *\nAllow: /private/open\nDisallow: /\n")
	c1 := evidence.Copy{URL: "http://a.example/robots.txt", Sum: evidence.SumOf(v1), Fetched: t0, Status: 200}
	c2 := evidence.Copy{URL: "http://a.example/robots.txt", Sum: evidence.SumOf(v2), Fetched: t0.Add(24 * time.Hour), Status: 200}
	c404 := evidence.Copy{URL: "http://b.example/robots.txt", Fetched: t0, Status: 404}
	f := newFixture(t, nil, map[evidence.Copy][]byte{c1: v1, c2: v2, c404: nil})
	blocked := f.record(t, "http://a.example/private/x", "FooBot/1.0", c1, t0.Add(time.Minute))
	allowedV2 := f.record(t, "http://a.example/private/open", "FooBot/1.0", c2, t0.Add(25*time.Hour))
	none := f.record(t, "http://b.example/anything", "FooBot/1.0", c404, t0)
	if blocked.Decision != policy.ActionDisallowed || allowedV2.Decision != policy.ActionAllowed || none.Decision != policy.ActionAllowed {
		t.Fatalf("fixture decisions %v %v %v; want disallowed allowed allowed", blocked.Decision, allowedV2.Decision, none.Decision)
	}
	edited := blocked
	edited.Decision = policy.ActionAllowed
	wouldBlock := blocked
	wouldBlock.Decision, wouldBlock.Msg = policy.ActionWouldBlock, audit.MsgWouldBlock
	missing := blocked
	missing.Copies = []audit.Copy{{URL: c1.URL, SHA256: strings.Repeat("ab", 32), Fetched: audit.Time(t0), Status: 200}}
	unreachable := audit.Record{Time: audit.Time(t0), Msg: audit.MsgUnreachable, Decision: policy.ActionUnreachable, Copies: []audit.Copy{}}
	agents := blocked
	agents.Agent = []string{"OtherBot"}
	// A client that left while its request was decided or held: its
	// copy is named, but nothing was decided to reproduce.
	left := blocked
	left.Msg, left.Decision, left.Status, left.Reason = audit.MsgClientLeft, policy.ActionClientLeft, 0, "client left while waiting for its turn"
	log := lines(t,
		blocked, allowedV2, none, // 1-3 reproduce
		`{"time":"2026-03-02T10:05:00.000Z","msg":"checkpoint","lines":3,"head":"00","sig":"AA=="}`, // 4: not a record
		edited,     // 5 differs
		wouldBlock, // 6 reproduces
		missing,    // 7 missing copy
		unreachable,
		`{"time":"not a time"}`, // 9 bad
		`garbage`,               // 10 bad
		agents,                  // 11 reproduces, tokens reported
		left,                    // 12 skipped
	)
	var got []string
	p := &Replayer{D: f.d, Report: func(x Finding) { got = append(got, x.String()) }}
	var s Summary
	if err := p.Replay(t.Context(), bytes.NewReader(log), "audit.log", &s); err != nil {
		t.Fatal(err)
	}
	want := Summary{Records: 9, Reproduced: 5, Differ: 1, Missing: 1, BadLines: 2, Agents: 1, Skipped: map[string]int{"client-left": 1, "unreachable": 1}}
	if fmt.Sprint(s) != fmt.Sprint(want) {
		t.Errorf("Summary = %+v; want %+v", s, want)
	}
	for _, w := range []string{
		`audit.log:5: does not reproduce: the record says allowed, rule "disallow: /private" line 2; replay gives disallowed, rule "disallow: /private" line 2`,
		"audit.log:7: not replayed: copy missing from the evidence store: http://a.example/robots.txt",
		"audit.log:9: not an audit record",
		"audit.log:10: not an audit record",
		`audit.log:11: tokens differ: the record obeyed ["OtherBot"]; the config's [[agents]] give ["FooBot"]`,
	} {
		if !strings.Contains(strings.Join(got, "\n"), w) {
			t.Errorf("findings lack %q:\n%s", w, strings.Join(got, "\n"))
		}
	}
	if len(got) != 5 {
		t.Errorf("%d findings; want 5:\n%s", len(got), strings.Join(got, "\n"))
	}
	// The same log gzip-compressed reads the same.
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(log)
	zw.Close()
	r, name, err := Plain(&z, "audit.log.gz")
	if err != nil {
		t.Fatal(err)
	}
	var sz Summary
	if err := (&Replayer{D: f.d}).Replay(t.Context(), r, name, &sz); err != nil || fmt.Sprint(sz) != fmt.Sprint(want) {
		t.Errorf("gzip: Summary = %+v, %v; want %+v", sz, err, want)
	}
}

// TestDecideMissingAndCorrupt: a copy removed from the store, or corrupted
// in it, is an error naming it and the store, never a verdict.
func TestDecideMissingAndCorrupt(t *testing.T) {
	t.Parallel()
	body := []byte("User-agent: *\nDisallow: /\n")
	c := evidence.Copy{URL: "http://a.example/robots.txt", Sum: evidence.SumOf(body), Fetched: t0, Status: 200}
	f := newFixture(t, nil, map[evidence.Copy][]byte{c: body})
	req := &policy.Request{Kind: policy.KindCheck, Agents: []string{"FooBot"}}
	if err := req.SetURL("http://a.example/x"); err != nil {
		t.Fatal(err)
	}
	p := evidence.ObjectPath(f.dir, c.Sum)
	if err := os.WriteFile(p, []byte("not gzip"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.Decide(t.Context(), req, []evidence.Copy{c}, t0); !errors.Is(err, evidence.ErrCorrupt) || !strings.Contains(err.Error(), p) {
		t.Errorf("Decide on a corrupted copy: %v; want ErrCorrupt naming %s", err, p)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	_, err := f.d.Decide(t.Context(), req, []evidence.Copy{c}, t0)
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), c.Hex()) || !strings.Contains(err.Error(), f.dir) {
		t.Errorf("Decide on a removed copy: %v; want ErrMissing naming %s and %s", err, c.Hex(), f.dir)
	}
}

// FuzzReplay: any bytes as an audit log are replayed without a panic, and
// every line is counted once: as a record (reproduced, differing, missing
// its copy, skipped or bad) or a line that is not one.
func FuzzReplay(f *testing.F) {
	b, err := os.ReadFile("testdata/audit.log")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, l := range bytes.Split(b, []byte("\n")) {
		f.Add(l)
	}
	body := []byte("User-agent: *\nDisallow: /private\n")
	c := evidence.Copy{URL: "http://a.example/robots.txt", Sum: evidence.SumOf(body), Fetched: t0, Status: 200}
	fx := newFixture(f, nil, map[evidence.Copy][]byte{c: body})
	f.Fuzz(func(t *testing.T, log []byte) {
		var s Summary
		var findings int
		p := &Replayer{D: fx.d, Report: func(Finding) { findings++ }}
		if err := p.Replay(context.Background(), bytes.NewReader(log), "fuzz", &s); err != nil {
			t.Fatalf("Replay of memory: %v", err)
		}
		skipped := 0
		for _, n := range s.Skipped {
			skipped += n
		}
		decided := s.Reproduced + s.Differ + s.Missing + skipped
		if decided > s.Records || findings < s.Differ+s.Missing+s.BadLines {
			t.Fatalf("Summary %+v with %d findings does not add up", s, findings)
		}
	})
}

// TestReplayEdgeLines: an empty file (a log just rotated) holds no line,
// an empty line is skipped, and a file whose only line is too long holds
// that one bad line, not a second one after it.
func TestReplayEdgeLines(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, nil)
	long := strings.Repeat("x", 2<<20)
	tests := []struct {
		name   string
		log    string
		bad    []int // the lines reported
		failed bool
	}{
		{"empty", "", nil, false},
		{"one empty line", "\n", nil, false},
		{"empty lines", "\n\n\n", nil, false},
		{"a long line", long + "\n", []int{1}, true},
		{"a long line, no newline", long, []int{1}, true},
		{"an empty line, then a long one", "\n" + long + "\n", []int{2}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			if err := os.WriteFile(path, []byte(tt.log), 0o600); err != nil {
				t.Fatal(err)
			}
			r, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var got []int
			p := &Replayer{D: f.d, Report: func(x Finding) { got = append(got, x.Line) }}
			var s Summary
			if err := p.Replay(t.Context(), r, path, &s); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.bad) || s.Failed() != tt.failed || s.BadLines != len(tt.bad) {
				t.Errorf("lines reported %v, %d bad, failed %v; want %v, %d, %v", got, s.BadLines, s.Failed(), tt.bad, len(tt.bad), tt.failed)
			}
		})
	}
}
