// Package report summarises robotsgate audit logs (docs/data-teams.md, "Audit log"):
// counts by decision, origin, token and rule (allow and disallow rules
// apart), each origin's records by decision, the origins' own answers by
// status class, the refusals by whether they reached the site
// (RefusalClass) and the URLs refused, what sites charged (exact sums per
// currency and origin), the time range, and decisions over time, as text,
// JSON or a self-contained HTML page.
//
// A Summary reads any number of audit files, plain or gzip, one line at a
// time. Its memory is bounded whatever the input's size: a line longer than
// MaxLine is skipped without being held whole, each table keeps at most
// MaxKeys names (the rest are counted under "(other)") of at most
// MaxKeyLen bytes each, an origin's counts by decision and by answer live
// in its row of the origin table (so they are bounded with it), and the
// timeline keeps at most MaxBuckets buckets, widening them along a ladder
// (1s, 5s, 10s, 30s, 1m, 5m, 15m, 1h, 6h, 1d, then 2, 4, 8… days) as the
// time range grows. The refused-URL list keeps at most MaxRefused
// entries (URLs cut at MaxURLLen), the most refused by Space-Saving once
// there are more, and charges are summed in at most MaxCurrencies
// currencies.
//
// Audit files are untrusted input: origins, tokens and rules come from
// requests and robots.txt files. Malformed lines are counted, never fatal;
// every writer escapes what it prints.
package report

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/robotsgate/robotsgate/internal/jsonscan"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/usage"
)

// Defaults for the zero values of Summary's limits.
const (
	DefaultMaxLine    = 1 << 20 // bytes in one audit line, newline excluded
	DefaultMaxKeys    = 10_000  // distinct names kept per table
	DefaultMaxBuckets = 2048    // time buckets kept for the chart
)

// MaxKeyLen is the longest name a table keeps, in bytes; longer origins,
// tokens and rules are cut (at a character boundary) and end in "…".
const MaxKeyLen = 512

// Other is the name under which a table counts the records whose name
// arrived after the table held MaxKeys names.
const Other = "(other)"

// BlockedDecisions are the decisions a report counts as blocked: the
// client got robotsgate's answer, not the site's content, because of the
// target's robots.txt (disallowed, or unreachable rules with no usable
// copy), a [[sites]] deny, a usage preference, or a private address. All
// of them but some usage refusals were never sent; a usage refusal made
// on the site's answer (its headers, its HTML meta, a tdmrep.json
// reservation it did not lift) reached the site, and only the answer's
// body was withheld (RefusalClass tells them apart). Throttling (paced),
// client errors (auth-required, bad-request, misdirected), overload,
// upstream failures and price-refused are not blocks, and neither are
// would-block (report mode: forwarded), client-left (nothing answered)
// and allowed.
var BlockedDecisions = []policy.Action{
	policy.ActionDisallowed, policy.ActionDenied, policy.ActionUsageRefused, policy.ActionPrivate, policy.ActionUnreachable,
}

// IsBlocked reports whether a is one of BlockedDecisions.
func IsBlocked(a policy.Action) bool { return slices.Contains(BlockedDecisions, a) }

// BlockedNames lists BlockedDecisions' names, comma-separated.
func BlockedNames() string {
	names := make([]string, len(BlockedDecisions))
	for i, a := range BlockedDecisions {
		names[i] = a.String()
	}
	return strings.Join(names, ", ")
}

// ErrMalformed is wrapped by ParseRecord's errors: the line is not an audit
// record.
var ErrMalformed = errors.New("malformed audit line")

// errCheckpoint is parseLine's error for a checkpoint line of the audit
// chain (docs/auditors.md): signed by robotsgate, not a record, and not
// malformed either.
var errCheckpoint = errors.New("a checkpoint, not a record")

// ParseRecord decodes the members of one audit line (JSON, as audit.Log
// writes it) that a report counts: time, decision, origin, token, rule,
// method, status, url, line, reason and charged. It fails, with an error wrapping
// ErrMalformed, when the line is not one JSON object, has no RFC 3339
// "time", or no "decision" that names one of robotsgate's decisions, or
// when one of time, decision, origin, token and rule is neither a string
// nor null. The others are read leniently: a method, url, reason or
// charged that is not a string is "", a status that is not a JSON integer from 100 to
// 999 is 0, and a line that is not a JSON integer from 0 to 2^31-1 is 0.
// Member names match exactly, and the last of repeated names wins.
func ParseRecord(line []byte) (audit.Record, error) {
	p, err := parseLine(new(jsonscan.Scanner), line)
	if err != nil {
		return audit.Record{}, err
	}
	return audit.Record{Time: audit.Time(p.time), Decision: p.action, Origin: string(p.origin), Token: string(p.token), Rule: string(p.rule),
		Method: string(p.method), Status: p.status, URL: string(p.url), Line: p.line, Reason: string(p.reason), Charged: string(p.charged)}, nil
}

// parsed is a decoded audit line whose names may still point into the line:
// Read counts a line without a copy for names its tables already hold.
type parsed struct {
	time                          time.Time
	action                        policy.Action
	decision, origin, token, rule []byte // decision: action's name
	method, url, reason, charged  []byte
	chargedBad                    bool // a charged that is neither a string nor null
	status                        int  // 0: none (see statusOf)
	line                          int  // 0: none (see lineOf)
}

// parseLine is ParseRecord without the copies.
func parseLine(s *jsonscan.Scanner, line []byte) (parsed, error) {
	var f recordFields
	if !scanRecord(s, line, &f) {
		return parsed{}, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	if name := f.bad(); name != "" {
		return parsed{}, fmt.Errorf("%w: %s is not a string", ErrMalformed, name)
	}
	if !f.time.set {
		return parsed{}, fmt.Errorf("%w: no time", ErrMalformed)
	}
	ts := f.time.bytes()
	t, ok := parseStamp(ts)
	if !ok {
		var err error
		if t, err = time.Parse(time.RFC3339Nano, string(ts)); err != nil {
			return parsed{}, fmt.Errorf("%w: time %q is not RFC 3339", ErrMalformed, clip(string(ts), 40))
		}
	}
	if !f.decision.set && string(f.msg.bytes()) == "checkpoint" {
		return parsed{time: t}, errCheckpoint
	}
	p := parsed{time: t, decision: f.decision.bytes(), origin: f.origin.bytes(), token: f.token.bytes(), rule: f.rule.bytes(),
		method: f.method.bytes(), url: f.url.bytes(), reason: f.reason.bytes(), charged: f.charged.bytes(), chargedBad: f.charged.bad,
		status: statusOf(f.status.raw), line: lineOf(f.line.raw)}
	if len(p.decision) == 0 {
		return parsed{}, fmt.Errorf("%w: no decision", ErrMalformed)
	}
	if p.action, ok = actionOf(p.decision); !ok {
		return parsed{}, fmt.Errorf("%w: decision %q is not one robotsgate makes", ErrMalformed, clip(string(p.decision), 40))
	}
	return p, nil
}

// actionOf returns the action named b, without an allocation.
func actionOf(b []byte) (policy.Action, bool) {
	for _, a := range policy.Actions() {
		if string(b) == a.String() {
			return a, true
		}
	}
	return 0, false
}

// statusOf returns the status whose JSON number text is raw: a plain
// integer from 100 to 999, as strconv.Atoi reads it; 0 for anything else
// (a fraction, an exponent, a sign, another size).
func statusOf(raw []byte) int {
	if len(raw) != 3 || raw[0] < '1' {
		return 0
	}
	n, _ := digitsOf(raw)
	return n
}

// lineOf returns the line whose JSON number text is raw: a plain integer
// from 0 to 2^31-1; 0 for anything else (a fraction, an exponent, a
// sign, a larger number).
func lineOf(raw []byte) int {
	if len(raw) > 10 {
		return 0
	}
	if n, ok := digitsOf(raw); ok && n <= math.MaxInt32 {
		return n
	}
	return 0
}

// digitsOf reads raw, at most 18 ASCII digits, as a number; ok is false
// (and n 0) when raw is empty or holds anything else.
func digitsOf(raw []byte) (n int, ok bool) {
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, len(raw) > 0
}

// parseStamp reads the audit log's own time format,
// 2006-01-02T15:04:05.000Z, without the generality (and the allocation) of
// time.Parse, with the same result; ok is false for anything else.
func parseStamp(b []byte) (t time.Time, ok bool) {
	const layout = "dddd-dd-ddTdd:dd:dd.dddZ"
	if len(b) != len(layout) {
		return time.Time{}, false
	}
	for i := range len(layout) {
		if layout[i] == 'd' && (b[i] < '0' || b[i] > '9') || layout[i] != 'd' && b[i] != layout[i] {
			return time.Time{}, false
		}
	}
	num := func(i, n int) int {
		v := 0
		for _, c := range b[i : i+n] {
			v = v*10 + int(c-'0')
		}
		return v
	}
	year, month, day := num(0, 4), num(5, 2), num(8, 2)
	hh, mm, ss, ms := num(11, 2), num(14, 2), num(17, 2), num(20, 3)
	if month < 1 || month > 12 || day < 1 || hh > 23 || mm > 59 || ss > 59 {
		return time.Time{}, false
	}
	t = time.Date(year, time.Month(month), day, hh, mm, ss, ms*int(time.Millisecond), time.UTC)
	if t.Day() != day { // past the month's end: time.Parse refuses it too
		return time.Time{}, false
	}
	return t, true
}

// Summary accumulates audit records. Its zero value is ready to use; set
// the fields before the first Add or Read. A Summary is not safe for
// concurrent use.
type Summary struct {
	// Since: records whose time is before it are skipped (counted only as
	// skipped). Zero: none are.
	Since time.Time
	// MaxLine is the longest line Read decodes, in bytes, newline excluded;
	// a longer one is malformed and skipped without being held in memory.
	// Zero: DefaultMaxLine.
	MaxLine int
	// MaxKeys is the most distinct names each table keeps; records with
	// other names are counted under Other. Zero: DefaultMaxKeys.
	MaxKeys int
	// MaxBuckets is the most time buckets the timeline keeps: past it the
	// buckets are widened. Zero: DefaultMaxBuckets.
	MaxBuckets int
	// UsageSources are the usage sources whose refusals are told apart,
	// by the prefixes of their rules (usage.RuleSource), and counted under
	// their names. Nil: those of source.List.
	UsageSources []usage.SourceInfo
	// MaxRefused is the most refusals the refused-URL list keeps (each a
	// URL refused with one decision, rule and line). Past it, a new one
	// takes the place of the least refused, whose count it carries as its
	// error bound (RefusedURL.CountError), so that every URL refused more
	// often than the smallest count listed is listed. Zero:
	// DefaultMaxRefused.
	MaxRefused int

	total, blocked, malformed, skipped int64
	checkpoints                        int64  // the chain's signed lines: not records
	firstMalformed                     string // "FILE line N: reason"
	from, to                           time.Time
	files                              []string

	decisions, origins, tokens, rules table               // origins' rows carry an originCounts
	otherOrigins                      originCounts        // of the records counted under Other in origins
	answers                           [numClasses]int64   // the origins' answers by class, all origins
	otherRules                        [numRuleKinds]int64 // the records counted under Other in rules, by kind
	bySource                          map[string]int64    // usage rules, by the name of where their statement came from (usageSourceName)
	listSources                       []usage.SourceInfo  // source.List's, when UsageSources is nil
	timeline                          timeline
	scan                              jsonscan.Scanner // reused by Read

	byClass [numRefusalClasses]int64       // refused records by class
	refused refusedList                    // the refused URLs
	phases  map[usage.SourceID]usage.Phase // of source.List's sources, by ID

	currencies []string // charged, in the order first seen; at most MaxCurrencies
	spent      spend    // all charges, by currency
	notSummed  int64    // records whose charged was not summed (see charge)
	scratch    big.Int  // reused by charge
}

// Add counts one record (its time, decision, origin, token, rule, method,
// status, url, line, reason and charged), unless it is before s.Since.
func (s *Summary) Add(r *audit.Record) {
	s.count(parsed{time: time.Time(r.Time), action: r.Decision, decision: []byte(r.Decision.String()), origin: []byte(r.Origin),
		token: []byte(r.Token), rule: []byte(r.Rule), method: []byte(r.Method), url: []byte(r.URL), reason: []byte(r.Reason), charged: []byte(r.Charged),
		status: r.Status, line: r.Line})
}

// count counts one decoded record, unless it is before s.Since.
func (s *Summary) count(p parsed) {
	if !s.Since.IsZero() && p.time.Before(s.Since) {
		s.skipped++
		return
	}
	if s.total == 0 || p.time.Before(s.from) {
		s.from = p.time
	}
	if s.total == 0 || p.time.After(s.to) {
		s.to = p.time
	}
	s.total++
	if IsBlocked(p.action) {
		s.blocked++
	}
	limit := s.maxKeys()
	decision := p.decision
	if s.decisions.add(p.decision, limit, false) == nil {
		decision = []byte(Other)
	}
	class, answered := answerClass(&p)
	if answered {
		s.answers[class]++
	}
	oc := s.originCounts(p.origin, limit)
	if oc != nil {
		oc.decisions[min(int(p.action), policy.NumActions)]++
		if answered {
			oc.answers[class]++
		}
	}
	if len(p.charged) > 0 || p.chargedBad {
		s.charge(&p, oc)
	}
	if rc, ok := s.refusalClass(&p); ok {
		s.byClass[rc]++
		if oc != nil {
			oc.refused[rc]++
		}
		s.refused.add(&p, rc, s.maxRefused())
	}
	s.tokens.add(p.token, limit, false)
	if s.rules.add(p.rule, limit, false) == nil && len(p.rule) > 0 {
		s.otherRules[ruleKindOf(string(p.rule))]++
	}
	if len(p.rule) > 0 && ruleKindOf(string(p.rule)) == ruleUsage {
		if s.bySource == nil {
			s.bySource = map[string]int64{}
		}
		s.bySource[s.usageSourceName(string(p.rule))]++
	}
	s.timeline.add(p.time, decision, s.maxBuckets())
}

// originCounts counts a record of origin in the origin table and returns
// where its counts by decision and answer go: the origin's row, or
// otherOrigins when it was counted under Other; nil for no origin.
func (s *Summary) originCounts(origin []byte, limit int) *originCounts {
	if r := s.origins.add(origin, limit, true); r != nil {
		return r.origin
	}
	if len(origin) == 0 {
		return nil
	}
	return &s.otherOrigins
}

// Read counts every record of one audit file read from r, gzip-compressed
// or not (told by its first bytes, whatever its name), one line at a time.
// name identifies the file in errors, in notes on malformed lines and in
// the report. Malformed lines are counted, not returned; the error is for
// a failed read or a corrupt gzip stream, and the records before it stay
// counted.
func (s *Summary) Read(name string, r io.Reader) error {
	s.files = append(s.files, name)
	limit := s.MaxLine
	if limit <= 0 {
		limit = DefaultMaxLine
	}
	br := bufio.NewReaderSize(r, limit+1)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		name += " (gzip)"
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, limit+1)
		if err := s.readLines(name, br, limit); err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		return nil
	}
	if err := s.readLines(name, br, limit); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

// ReadFile opens the audit file at path and reads it as Read does.
func (s *Summary) ReadFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("audit file: %w", err)
	}
	defer f.Close()
	return s.Read(path, f)
}

// readLines decodes br line by line; br's buffer holds limit+1 bytes.
func (s *Summary) readLines(name string, br *bufio.Reader, limit int) error {
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			s.malformedLine(name, n, fmt.Sprintf("longer than %d bytes", limit))
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			continue
		}
		if err != nil && err != io.EOF {
			return err
		}
		s.line(name, n, line)
		if err == io.EOF {
			return nil
		}
	}
}

// line counts one line; blank lines are not records and are ignored.
func (s *Summary) line(name string, n int, line []byte) {
	for len(line) > 0 && (line[len(line)-1] == '\n' || line[len(line)-1] == '\r') {
		line = line[:len(line)-1]
	}
	if len(line) == 0 {
		return
	}
	p, err := parseLine(&s.scan, line)
	if err == errCheckpoint {
		if s.Since.IsZero() || !p.time.Before(s.Since) {
			s.checkpoints++
		}
		return
	}
	if err != nil {
		s.malformedLine(name, n, strings.TrimPrefix(err.Error(), ErrMalformed.Error()+": "))
		return
	}
	s.count(p)
}

func (s *Summary) malformedLine(name string, n int, why string) {
	s.malformed++
	if s.firstMalformed == "" {
		s.firstMalformed = fmt.Sprintf("%s line %d: %s", name, n, why)
	}
}

// Total is the number of records counted.
func (s *Summary) Total() int64 { return s.total }

// Blocked is the number of records counted whose decision IsBlocked.
func (s *Summary) Blocked() int64 { return s.blocked }

// Skipped is the number of records skipped for being before Since.
func (s *Summary) Skipped() int64 { return s.skipped }

// Checkpoints is the number of checkpoint lines read (the audit chain's
// signed lines, docs/auditors.md): neither records nor malformed.
func (s *Summary) Checkpoints() int64 { return s.checkpoints }

// Malformed is the number of lines that were not audit records, and where
// the first of them was ("FILE line N: reason"; "" if none).
func (s *Summary) Malformed() (n int64, first string) { return s.malformed, s.firstMalformed }

// Range is the time of the earliest and the latest record counted; ok is
// false when none was.
func (s *Summary) Range() (from, to time.Time, ok bool) { return s.from, s.to, s.total > 0 }

func (s *Summary) maxKeys() int {
	if s.MaxKeys <= 0 {
		return DefaultMaxKeys
	}
	return s.MaxKeys
}

func (s *Summary) maxBuckets() int {
	if s.MaxBuckets <= 0 {
		return DefaultMaxBuckets
	}
	return s.MaxBuckets
}

// table counts records by one name, keeping at most a limit of names.
type table struct {
	counts map[string]*row // a pointer: counting a known name copies nothing
	other  int64           // records whose name came after the table was full
}

// row is one name's count in a table.
type row struct {
	n      int64
	origin *originCounts // the origin table's rows only; nil in the others
}

// originRow is a row of the origin table with its counts, allocated at once.
type originRow struct {
	row
	counts originCounts
}

// add counts name and returns its row, with an originCounts when withOrigin
// (on the row's creation: a table is always added to with the same
// withOrigin). It returns nil when name is "" (not counted), and when the
// table was full and the record was counted under Other.
func (t *table) add(name []byte, limit int, withOrigin bool) *row {
	if len(name) == 0 {
		return nil
	}
	if len(name) > MaxKeyLen {
		name = []byte(clip(string(name), MaxKeyLen))
	}
	if r := t.counts[string(name)]; r != nil {
		r.n++
		return r
	}
	if len(t.counts) >= limit {
		t.other++
		return nil
	}
	if t.counts == nil {
		t.counts = make(map[string]*row)
	}
	var r *row
	if withOrigin {
		o := &originRow{row: row{n: 1}}
		o.origin = &o.counts
		r = &o.row
	} else {
		r = &row{n: 1}
	}
	t.counts[string(name)] = r
	return r
}

// clip cuts s to at most n bytes at a character boundary, marking the cut
// with "…".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// ParseSince reads a -since value: an RFC 3339 time, or a Go duration
// ("24h", "90m") meaning that long before now.
func ParseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("since %q: neither an RFC 3339 time (2026-11-23T08:00:00Z) nor a duration (24h)", v)
	}
	if d < 0 {
		return time.Time{}, fmt.Errorf("since %q: a negative duration", v)
	}
	return now.Add(-d), nil
}
