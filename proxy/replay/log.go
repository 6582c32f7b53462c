package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/usage"
)

// MaxLine bounds one line of an audit log, as the Log writes and verify
// reads it (audit.MaxLine): a longer one is reported and
// skipped, never read whole.
const MaxLine = audit.MaxLine

// msgCheckpoint is the msg of the audit log's signed checkpoint lines,
// which are not records.
const msgCheckpoint = "checkpoint"

// A Finding is one record replay reports: it does not reproduce, it needs
// a copy that is missing, it is not a record, or its tokens differ.
type Finding struct {
	File string
	Line int
	Kind FindingKind
	Said string // what the record says
	Got  string // what replay gives; "" for a missing copy or a bad line
	Err  error  // a missing copy, or why the line is not a record
}

// FindingKind says what a Finding is.
type FindingKind uint8

// The kinds of findings.
const (
	Differs      FindingKind = iota // the decision does not reproduce
	MissingCopy                     // a copy it needs is not in the store, or unreadable
	BadLine                         // not an audit record
	AgentsDiffer                    // the config's [[agents]] give other tokens than the record's
)

// String writes f as replay prints it: file:line, what, and why.
func (f Finding) String() string {
	switch f.Kind {
	case Differs:
		return fmt.Sprintf("%s:%d: does not reproduce: the record says %s; replay gives %s", f.File, f.Line, f.Said, f.Got)
	case MissingCopy:
		return fmt.Sprintf("%s:%d: not replayed: %v", f.File, f.Line, f.Err)
	case AgentsDiffer:
		return fmt.Sprintf("%s:%d: tokens differ: the record obeyed %s; the config's [[agents]] give %s (replayed with the config's)", f.File, f.Line, f.Said, f.Got)
	}
	return fmt.Sprintf("%s:%d: not an audit record: %v", f.File, f.Line, f.Err)
}

// Summary counts what replay found.
type Summary struct {
	Records    int // audit records read (checkpoint lines are not records)
	Reproduced int
	Differ     int
	Missing    int // records not replayed for a copy missing or unreadable
	BadLines   int
	Agents     int            // records whose tokens the config derives otherwise
	Skipped    map[string]int // records not replayable from a copy, by reason
}

// Failed reports whether replay found what makes it fail: a record that
// does not reproduce, a copy missing, or a line that is not a record.
func (s *Summary) Failed() bool { return s.Differ > 0 || s.Missing > 0 || s.BadLines > 0 }

// Replayer replays audit logs on a Decider's copies.
type Replayer struct {
	D *Decider
	// Report gets every finding, as it is found; nil: none are reported.
	Report func(Finding)
}

// Replay re-decides every record of the audit log read from r (named name
// in findings), line by line: the log is never held whole. Batches of
// lines are decided on every CPU at once, and their findings reported in
// the order of their lines. Its counts are added to s. It returns an
// error only when r cannot be read, or ctx ends.
func (p *Replayer) Replay(ctx context.Context, r io.Reader, name string, s *Summary) error {
	workers := max(1, runtime.GOMAXPROCS(0))
	jobs := make(chan *batch)
	order := make(chan *batch, 2*workers) // the batches in the order of their lines
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range jobs {
				b.run(ctx, p.D, name)
			}
		}()
	}
	errc := make(chan error, 1)
	go func() {
		defer close(order)
		defer close(jobs)
		errc <- readBatches(ctx, r, name, func(b *batch) {
			order <- b
			jobs <- b
		})
	}()
	for b := range order {
		<-b.done
		s.add(&b.s)
		for _, f := range b.found {
			if p.Report != nil {
				p.Report(f)
			}
		}
	}
	wg.Wait()
	return <-errc
}

// batchLines is how many lines a batch holds.
const batchLines = 256

// A batch is lines of a log decided together, and what they gave.
type batch struct {
	first int      // the line number of lines[0]
	lines [][]byte // nil for a line too long to read
	s     Summary
	found []Finding
	done  chan struct{} // closed when decided
}

// run decides b's lines.
func (b *batch) run(ctx context.Context, d *Decider, name string) {
	defer close(b.done)
	b.s.Skipped = map[string]int{}
	for i, line := range b.lines {
		if ctx.Err() != nil {
			return
		}
		n := b.first + i
		if line != nil && len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		record(ctx, d, line, line == nil, n, &b.s, func(f Finding) {
			f.File, f.Line = name, n
			b.found = append(b.found, f)
		})
	}
}

// readBatches reads r's lines into batches and hands each to send.
func readBatches(ctx context.Context, r io.Reader, name string, send func(*batch)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	b := &batch{first: 1, done: make(chan struct{})}
	var buf []byte
	for n := 1; ; n++ {
		line, long, err := readLine(br, buf[:0])
		buf = line
		switch {
		case err == io.EOF && !long && len(line) == 0:
			// nothing after the last newline (or an empty file): no line
		case long:
			b.lines = append(b.lines, nil)
		default:
			// never nil, which marks a line too long: bytes.Clone of an
			// empty line may return nil
			b.lines = append(b.lines, append(make([]byte, 0, len(line)), line...))
		}
		if len(b.lines) == batchLines || err != nil {
			send(b)
			b = &batch{first: n + 1, done: make(chan struct{})}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		if err := ctx.Err(); err != nil {
			send(b)
			return err
		}
	}
}

// add adds o's counts to s.
func (s *Summary) add(o *Summary) {
	s.Records += o.Records
	s.Reproduced += o.Reproduced
	s.Differ += o.Differ
	s.Missing += o.Missing
	s.BadLines += o.BadLines
	s.Agents += o.Agents
	if s.Skipped == nil {
		s.Skipped = map[string]int{}
	}
	for k, v := range o.Skipped {
		s.Skipped[k] += v
	}
}

// readLine reads one line into buf without its newline, at most MaxLine
// bytes of it: long reports a longer one, whose rest is skipped.
func readLine(br *bufio.Reader, buf []byte) (line []byte, long bool, err error) {
	line = buf
	for {
		frag, err := br.ReadSlice('\n')
		if !long {
			if len(line)+len(frag) > MaxLine+1 {
				long, line = true, buf[:0]
			} else {
				line = append(line, frag...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), long, err
	}
}

// record replays one line (long: one too long to read), counting it in s
// and handing report what it finds.
func record(ctx context.Context, d *Decider, line []byte, long bool, n int, s *Summary, report func(Finding)) {
	var rec audit.Record
	err := fmt.Errorf("longer than %d bytes", MaxLine)
	if !long {
		err = json.Unmarshal(line, &rec)
	}
	switch {
	case err != nil:
		s.BadLines++
		report(Finding{Kind: BadLine, Err: err})
		return
	case rec.Msg == msgCheckpoint:
		return
	}
	s.Records++
	copies, err := copiesOf(rec.Copies)
	if err == nil && rec.Time == (audit.Time{}) {
		err = errors.New("no time")
	}
	if err != nil {
		s.BadLines++
		report(Finding{Kind: BadLine, Err: err})
		return
	}
	if why := unreplayable(&rec); why != "" {
		s.Skipped[why]++
		return
	}
	req, err := requestOf(&rec)
	if err != nil {
		s.BadLines++
		report(Finding{Kind: BadLine, Err: err})
		return
	}
	dec, err := d.Decide(ctx, req, copies, time.Time(rec.Time))
	if err != nil {
		s.Missing++
		report(Finding{Kind: MissingCopy, Err: err})
		return
	}
	if got := dec.Agents.Slice(); !slices.Equal(got, rec.Agent) {
		s.Agents++
		report(Finding{Kind: AgentsDiffer, Said: fmt.Sprintf("%q", rec.Agent), Got: fmt.Sprintf("%q", got)})
	}
	rule, ruleLine := audit.RuleOf(dec)
	if liftedByResponse(&rec, dec, rule) {
		s.Skipped["reservation the response may have lifted"]++
		return
	}
	if reproduces(rec.Decision, dec.Action) && rule == rec.Rule && ruleLine == rec.Line {
		s.Reproduced++
		return
	}
	s.Differ++
	report(Finding{Kind: Differs, Said: describe(rec.Decision, rec.Rule, rec.Line),
		Got: describe(dec.Action, rule, ruleLine) + " (" + dec.Reason + "; copy sha256 " + orNone(rec.Copies[0].SHA256) + ")"})
}

// unreplayable says why a record cannot be re-decided from a copy; "" when
// it can. Records of decisions made without a copy (unreachable, refused,
// [[sites]] overrides), CONNECTs (decided on the whole origin or not by
// robots.txt at all), refusals by a response's headers or an HTML page's
// meta (what they read was not kept), and actions robots.txt does not
// decide are skipped.
func unreplayable(r *audit.Record) string {
	switch r.Msg {
	case audit.MsgUnreachable, audit.MsgRefused, audit.MsgOverride:
		return string(r.Msg)
	}
	if r.Method == "CONNECT" {
		return "connect"
	}
	switch r.Decision {
	case policy.ActionAllowed, policy.ActionDisallowed, policy.ActionWouldBlock, policy.ActionPaced:
	case policy.ActionUsageRefused:
		src, unreadable := usage.RuleSource(r.Rule, sourceInfos())
		if unreadable || src.ID == usage.FromHeader || src.ID == usage.FromMeta {
			return "response usage"
		}
	default:
		return r.Decision.String()
	}
	if len(r.Copies) == 0 {
		return "no copy named"
	}
	return ""
}

// liftedByResponse reports whether a record allowed what replay refuses
// by a tdmrep.json reservation: the origin's response lifts a reservation
// when it says tdm-reservation: 0, and responses are not kept, so the
// record cannot be checked from the copies.
func liftedByResponse(r *audit.Record, d *policy.Decision, rule string) bool {
	if r.Decision != policy.ActionAllowed || d.Action != policy.ActionUsageRefused {
		return false
	}
	src, _ := usage.RuleSource(rule, sourceInfos())
	return src.ID == usage.FromTDMRep
}

// sourceInfos are the usage sources' infos, which tell a refusal's source
// from its rule.
func sourceInfos() []usage.SourceInfo {
	var out []usage.SourceInfo
	for _, id := range usage.Sources() {
		out = append(out, id.Info())
	}
	return out
}

// reproduces reports whether a replayed action is the one a record says:
// a would-block was a refusal that report mode let through, a paced
// request one robots.txt allowed.
func reproduces(said, got policy.Action) bool {
	switch said {
	case policy.ActionWouldBlock:
		return got == policy.ActionDisallowed || got == policy.ActionUsageRefused
	case policy.ActionPaced:
		return got == policy.ActionAllowed
	}
	return said == got
}

// describe writes a decision as replay's findings show it.
func describe(a policy.Action, rule string, line int) string {
	if rule == "" && line == 0 {
		return a.String() + ", no rule"
	}
	return fmt.Sprintf("%s, rule %q line %d", a, rule, line)
}

func orNone(s string) string {
	if s == "" {
		return "none (no body)"
	}
	return s
}

// copiesOf reads a record's copies.
func copiesOf(cs []audit.Copy) ([]evidence.Copy, error) {
	out := make([]evidence.Copy, len(cs))
	for i, c := range cs {
		out[i] = evidence.Copy{URL: c.URL, Fetched: time.Time(c.Fetched), Status: c.Status}
		if c.SHA256 == "" {
			continue
		}
		if len(c.SHA256) != 64 {
			return nil, fmt.Errorf("copies[%d]: sha256 %q is not 64 hex digits", i, c.SHA256)
		}
		if _, err := hex.Decode(out[i].Sum[:], []byte(c.SHA256)); err != nil {
			return nil, fmt.Errorf("copies[%d]: sha256 %q: %v", i, c.SHA256, err)
		}
	}
	return out, nil
}

// requestOf is the request a record describes, to decide again: its URL
// (or origin and path), client, user, User-Agent and purposes, its tokens
// left for the policy's [[agents]] to derive.
func requestOf(r *audit.Record) (*policy.Request, error) {
	req := &policy.Request{Kind: policy.KindCheck, Method: r.Method, UserAgent: r.UserAgent, User: r.User, Purposes: r.Purpose}
	u := r.URL
	if u == "" {
		u = r.Origin + r.Path
	}
	if err := req.SetURL(u); err != nil {
		return nil, fmt.Errorf("url: %v", err)
	}
	if r.Client != "" {
		a, err := netip.ParseAddr(r.Client)
		if err != nil {
			return nil, fmt.Errorf("client %q: %v", r.Client, err)
		}
		req.Client = a
	}
	return req, nil
}

// Plain returns an audit log read from r as plain text: decompressed when
// it is gzip (rotated logs often are), as is otherwise. name gains
// " (gzip)" for a compressed one.
func Plain(r io.Reader, name string) (io.Reader, string, error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(2)
	if !bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		return br, name, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, name, fmt.Errorf("read %s: %w", name, err)
	}
	return zr, name + " (gzip)", nil
}
