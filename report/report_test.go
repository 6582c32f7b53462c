package report

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/jsonscan"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// writeLog writes g's lines to dir/name: plain, or gzip in members streams.
func writeLog(t *testing.T, dir, name string, g gen, members int) string {
	t.Helper()
	var plain bytes.Buffer
	if _, err := io.Copy(&plain, g.reader()); err != nil {
		t.Fatal(err)
	}
	body := plain.Bytes()
	if members > 0 {
		var gz bytes.Buffer
		lines := bytes.SplitAfter(body, []byte("\n"))
		per := (len(lines) + members - 1) / members
		for m := range members {
			zw := gzip.NewWriter(&gz)
			for _, l := range lines[min(m*per, len(lines)):min((m+1)*per, len(lines))] {
				zw.Write(l)
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
		}
		body = gz.Bytes()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// decisionsOf counts g's records by decision, as the report should.
func decisionsOf(gs ...gen) (byDecision map[string]int64, blocked int64) {
	byDecision = map[string]int64{}
	for _, g := range gs {
		for i := range g.lines {
			byDecision[g.decision(i)]++
			if a, _ := policy.ParseAction(g.decision(i)); IsBlocked(a) {
				blocked++
			}
		}
	}
	return byDecision, blocked
}

// logFile is one audit file a test writes.
type logFile struct {
	name    string
	g       gen
	members int // gzip members; 0: plain
}

func TestReadTotals(t *testing.T) {
	t.Parallel()
	small := gen{lines: 1000, origins: 40, step: time.Second}
	big := gen{lines: 3000, origins: 700, step: 10 * time.Second} // ends last
	tests := []struct {
		name  string
		files []logFile
	}{
		{"plain", []logFile{{"audit.log", big, 0}}},
		{"gzip, no .gz in the name", []logFile{{"audit.log.1", big, 1}}},
		{"gzip, several members", []logFile{{"audit.log.2.gz", big, 3}}},
		{"several files, plain and gzip", []logFile{{"a.log", small, 0}, {"b.log.gz", big, 1}, {"c.log", small, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := &Summary{}
			var gs []gen
			var want int64
			for _, f := range tt.files {
				if err := s.ReadFile(writeLog(t, dir, f.name, f.g, f.members)); err != nil {
					t.Fatal(err)
				}
				gs, want = append(gs, f.g), want+int64(f.g.lines)
			}
			if s.Total() != want {
				t.Errorf("Total() = %d; want %d (the lines written)", s.Total(), want)
			}
			if n, first := s.Malformed(); n != 0 {
				t.Errorf("Malformed() = %d, %q; want 0", n, first)
			}
			wantDecisions, wantBlocked := decisionsOf(gs...)
			if got := s.decisions.all(); !maps.Equal(got, wantDecisions) {
				t.Errorf("by decision = %v; want %v", got, wantDecisions)
			}
			if s.Blocked() != wantBlocked {
				t.Errorf("Blocked() = %d; want %d", s.Blocked(), wantBlocked)
			}
			from, to, ok := s.Range()
			if wantTo := genStart.Add(time.Duration(big.lines-1) * big.step); !ok || !from.Equal(genStart) || !to.Equal(wantTo) {
				t.Errorf("Range() = %v, %v, %v; want %v, %v, true", from, to, ok, genStart, wantTo)
			}
			if len(s.files) != len(tt.files) {
				t.Errorf("files = %q; want %d", s.files, len(tt.files))
			}
		})
	}
}

func TestReadLineEndings(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("testdata/audit.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   []byte
	}{
		{"as written", body},
		{"CRLF", bytes.ReplaceAll(body, []byte("\n"), []byte("\r\n"))},
		{"no final newline", bytes.TrimSuffix(body, []byte("\n"))},
		{"blank lines", bytes.ReplaceAll(body, []byte("\n"), []byte("\n\n  \n"))},
	}
	for _, tt := range tests {
		s := &Summary{}
		if err := s.Read("-", bytes.NewReader(tt.in)); err != nil {
			t.Fatal(err)
		}
		n, first := s.Malformed()
		if tt.name == "blank lines" {
			// A line of spaces is not blank: it is malformed.
			if s.Total() != 10 || n != 10 {
				t.Errorf("%s: Total() = %d, Malformed() = %d; want 10, 10", tt.name, s.Total(), n)
			}
			continue
		}
		if s.Total() != 10 || n != 0 {
			t.Errorf("%s: Total() = %d, Malformed() = %d (%s); want 10, 0", tt.name, s.Total(), n, first)
		}
	}
}

// TestReadCheckpoints: the signed checkpoint lines of a chained log (a
// real one, written by proxy/audit's tests) are counted as checkpoints,
// neither as records nor as malformed; a line that only says it is a
// checkpoint but carries a decision is a record, and one with no time is
// malformed.
func TestReadCheckpoints(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("testdata/chained.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var records, checkpoints int64
	for _, l := range bytes.Split(bytes.TrimSpace(body), []byte("\n")) {
		if bytes.Contains(l, []byte(`"msg":"checkpoint"`)) {
			checkpoints++
		} else {
			records++
		}
	}
	if checkpoints == 0 || records == 0 {
		t.Fatalf("testdata/chained.jsonl: %d checkpoints, %d records; want some of each", checkpoints, records)
	}
	s := &Summary{}
	if err := s.Read("chained.jsonl", bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	if n, first := s.Malformed(); s.Total() != records || s.Checkpoints() != checkpoints || n != 0 {
		t.Errorf("Total %d, Checkpoints %d, Malformed %d (%s); want %d, %d, 0", s.Total(), s.Checkpoints(), n, first, records, checkpoints)
	}
	s = &Summary{}
	odd := `{"time":"2026-11-23T08:41:38.637Z","msg":"checkpoint","decision":"disallowed"}` + "\n" + `{"msg":"checkpoint"}` + "\n"
	if err := s.Read("odd", strings.NewReader(odd)); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Malformed(); s.Total() != 1 || s.Checkpoints() != 0 || n != 1 {
		t.Errorf("odd lines: Total %d, Checkpoints %d, Malformed %d; want 1, 0, 1", s.Total(), s.Checkpoints(), n)
	}
	// With -since, only the checkpoints from then on are counted, as the
	// records are.
	s = &Summary{Since: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}
	if err := s.Read("chained.jsonl", bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	if s.Checkpoints() != 0 || s.Total() != 0 {
		t.Errorf("since 2100: Checkpoints %d, Total %d; want 0, 0", s.Checkpoints(), s.Total())
	}
	var out bytes.Buffer
	s = &Summary{}
	s.Read("chained.jsonl", bytes.NewReader(body))
	if err := s.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("checkpoints %d (signed lines", checkpoints); !strings.Contains(out.String(), want) {
		t.Errorf("text report lacks %q:\n%s", want, out.String())
	}
}

func TestSince(t *testing.T) {
	t.Parallel()
	tests := []struct {
		since       string
		total, skip int64
		from        string
	}{
		{"", 10, 0, "2026-11-23T08:41:38.637Z"},
		{"2026-11-23T10:00:00Z", 6, 4, "2026-11-23T10:03:44.120Z"},
		{"2026-11-23T11:00:00+01:00", 6, 4, "2026-11-23T10:03:44.120Z"},
		{"2026-11-24T08:00:00.000Z", 1, 9, "2026-11-24T08:00:00.000Z"}, // not before: counted
		{"2027-01-01T00:00:00Z", 0, 10, ""},
	}
	for _, tt := range tests {
		s := &Summary{}
		if tt.since != "" {
			var err error
			if s.Since, err = ParseSince(tt.since, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.ReadFile("testdata/audit.jsonl"); err != nil {
			t.Fatal(err)
		}
		from, _, ok := s.Range()
		gotFrom := ""
		if ok {
			gotFrom = stamp(from)
		}
		if s.Total() != tt.total || s.Skipped() != tt.skip || gotFrom != tt.from {
			t.Errorf("since %q: total %d, skipped %d, from %q; want %d, %d, %q", tt.since, s.Total(), s.Skipped(), gotFrom, tt.total, tt.skip, tt.from)
		}
	}
}

func TestParseSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"24h", now.Add(-24 * time.Hour), false},
		{"90m", now.Add(-90 * time.Minute), false},
		{"0s", now, false},
		{"2026-11-20T00:00:00Z", time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC), false},
		{"2026-11-20T00:00:00.5+02:00", time.Date(2026, 11, 19, 22, 0, 0, 5e8, time.UTC), false},
		{"-1h", time.Time{}, true},
		{"7d", time.Time{}, true},
		{"yesterday", time.Time{}, true},
		{"2026-11-20", time.Time{}, true},
		{"", time.Time{}, true},
	}
	for _, tt := range tests {
		got, err := ParseSince(tt.in, now)
		if (err != nil) != tt.wantErr || !got.Equal(tt.want) {
			t.Errorf("ParseSince(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// at is a time in UTC, as an audit record's.
func at(y int, mo time.Month, d, h, mi, s, ns int) audit.Time {
	return audit.Time(time.Date(y, mo, d, h, mi, s, ns, time.UTC))
}

func TestParseRecord(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line    string
		want    audit.Record
		wantErr string // substring; "" for none
	}{
		{`{"time":"2026-11-23T08:41:38.637Z","decision":"disallowed","origin":"http://a.example:80","token":"FooBot","rule":"disallow: /x"}`,
			audit.Record{Time: at(2026, 11, 23, 8, 41, 38, 637e6), Decision: policy.ActionDisallowed, Origin: "http://a.example:80", Token: "FooBot", Rule: "disallow: /x"}, ""},
		{`{"time":"2026-11-23T09:41:38.6+01:00","decision":"allowed","extra":{"a":[1,2.5e3,true,null,"x"]}}`,
			audit.Record{Time: at(2026, 11, 23, 8, 41, 38, 6e8), Decision: policy.ActionAllowed}, ""},
		{`  {"time":"2026-11-23T08:00:00.000Z","decision":"denied","origin":null,"rule":"\u003cb\u003e \"q\" \ud83d\ude00"}  `,
			audit.Record{Time: at(2026, 11, 23, 8, 0, 0, 0), Decision: policy.ActionDenied, Rule: "<b> \"q\" 😀"}, ""},
		{`{"time":"2026-11-23T08:00:00.000Z","decision":"a","decision":"paced","\u0074oken":"T"}`,
			audit.Record{Time: at(2026, 11, 23, 8, 0, 0, 0), Decision: policy.ActionPaced, Token: "T"}, ""},
		{`{"time":"2026-11-23T08:00:00.000Z","decision":"blocked"}`, audit.Record{}, `decision "blocked" is not one robotsgate makes`},
		{`{"Time":"2026-11-23T08:00:00.000Z","decision":"allowed"}`, audit.Record{}, "no time"},
		{`{"time":null,"decision":"allowed"}`, audit.Record{}, "no time"},
		{`{"time":"2026-02-30T08:00:00.000Z","decision":"allowed"}`, audit.Record{}, "not RFC 3339"},
		{`{"time":"2026-11-23T24:00:00.000Z","decision":"allowed"}`, audit.Record{}, "not RFC 3339"},
		{`{"time":"2026-11-23T08:00:00.000Z"}`, audit.Record{}, "no decision"},
		{`{"time":"2026-11-23T08:00:00.000Z","decision":""}`, audit.Record{}, "no decision"},
		{`{"time":"2026-11-23T08:00:00.000Z","decision":"allowed","origin":["x"]}`, audit.Record{}, "origin is not a string"},
		{`{"time":"2026-11-23T08:00:00.000Z","decision":"allowed"} x`, audit.Record{}, "not a JSON object"},
		{`{"time":"2026-11-23T08:00:00.000Z","decision":"allowed",}`, audit.Record{}, "not a JSON object"},
		{`{"time":"2026-11-23T08:00:00.000Z","decision":"allowed","n":01}`, audit.Record{}, "not a JSON object"},
		{`{"time":"2026-11-23T08:00:00.000Z","decision":"allowed","s":"\x"}`, audit.Record{}, "not a JSON object"},
		{"{\"time\":\"2026-11-23T08:00:00.000Z\",\"decision\":\"a\tb\"}", audit.Record{}, "not a JSON object"},
		{`["time","decision"]`, audit.Record{}, "not a JSON object"},
		{`null`, audit.Record{}, "not a JSON object"},
		{`{"a":` + strings.Repeat("[", jsonscan.MaxDepth) + strings.Repeat("]", jsonscan.MaxDepth) + `}`, audit.Record{}, "not a JSON object"},
	}
	for _, tt := range tests {
		got, err := ParseRecord([]byte(tt.line))
		if tt.wantErr != "" {
			if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseRecord(%.60q) error %v; want %q", tt.line, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !time.Time(got.Time).Equal(time.Time(tt.want.Time)) || got.Decision != tt.want.Decision || got.Origin != tt.want.Origin ||
			got.Token != tt.want.Token || got.Rule != tt.want.Rule {
			t.Errorf("ParseRecord(%.60q) = %+v, %v; want %+v", tt.line, got, err, tt.want)
		}
	}
	// The deepest nesting encoding/json accepts is accepted.
	deep := `{"time":"2026-11-23T08:00:00.000Z","decision":"allowed","a":` + strings.Repeat("[", jsonscan.MaxDepth-1) + strings.Repeat("]", jsonscan.MaxDepth-1) + `}`
	if _, err := ParseRecord([]byte(deep)); err != nil || !json.Valid([]byte(deep)) {
		t.Errorf("ParseRecord(nesting %d) = %v; want no error", jsonscan.MaxDepth, err)
	}
}

func TestMalformed(t *testing.T) {
	t.Parallel()
	s := &Summary{}
	if err := s.ReadFile("testdata/malformed.jsonl"); err != nil {
		t.Fatal(err)
	}
	n, first := s.Malformed()
	if s.Total() != 2 || n != 7 {
		t.Errorf("Total() = %d, Malformed() = %d; want 2, 7", s.Total(), n)
	}
	if want := "testdata/malformed.jsonl line 2: not a JSON object"; first != want {
		t.Errorf("first malformed = %q; want %q", first, want)
	}
}

// repeatReader yields n bytes of c.
type repeatReader struct {
	c byte
	n int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	p = p[:min(len(p), r.n)]
	for i := range p {
		p[i] = r.c
	}
	r.n -= len(p)
	return len(p), nil
}

func TestOverlongLine(t *testing.T) {
	t.Parallel()
	const max = 100
	ok := `{"time":"2026-11-23T08:00:00.000Z","decision":"allowed","origin":"` // + padding + `"}`
	exact := ok + strings.Repeat("a", max-len(ok)-2) + `"}`
	tests := []struct {
		name             string
		in               io.Reader
		total, malformed int64
	}{
		{"exactly MaxLine", strings.NewReader(exact + "\n" + exact), 2, 0},
		{"one byte more", strings.NewReader(exact + " \n" + exact + "\n"), 1, 1},
		{"long line between", io.MultiReader(strings.NewReader(exact+"\n"), &repeatReader{'x', 10 << 20}, strings.NewReader("\n"+exact+"\n")), 2, 1},
		{"long line at the end, no newline", io.MultiReader(strings.NewReader(exact+"\n"), &repeatReader{'{', 5000}), 1, 1},
		{"long line of newline-free JSON", io.MultiReader(strings.NewReader(ok), &repeatReader{'a', 1000}, strings.NewReader("\"}\n"+exact)), 1, 1},
	}
	for _, tt := range tests {
		s := &Summary{MaxLine: max}
		if err := s.Read(tt.name, tt.in); err != nil {
			t.Fatal(err)
		}
		n, first := s.Malformed()
		if s.Total() != tt.total || n != tt.malformed {
			t.Errorf("%s: Total() = %d, Malformed() = %d (%s); want %d, %d", tt.name, s.Total(), n, first, tt.total, tt.malformed)
		}
		if n > 0 && !strings.Contains(first, "longer than 100 bytes") {
			t.Errorf("%s: first malformed %q; want \"longer than 100 bytes\"", tt.name, first)
		}
	}
}

// TestOverlongLineMemory reads a 64 MB line and checks that it was never
// held: the bytes allocated stay near the line buffer's size. (Not
// parallel: it reads the process's allocation counter.)
func TestOverlongLineMemory(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := &Summary{MaxLine: 64 << 10}
	if err := s.Read("long", io.MultiReader(&repeatReader{'x', 64 << 20}, strings.NewReader("\n"))); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if n, _ := s.Malformed(); n != 1 {
		t.Errorf("Malformed() = %d; want 1", n)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("reading a 64 MB line allocated %d bytes; want under 4 MB", got)
	}
}

func TestCorruptGzip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeLog(t, dir, "audit.log.gz", gen{lines: 20000, origins: 10, step: time.Second}, 1)
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(body)
	flipped[len(flipped)-6] ^= 0xff // the CRC-32 trailer
	tests := []struct {
		name    string
		body    []byte
		wantErr string
		counted bool // records before the damage are counted
	}{
		{"truncated", body[:len(body)/2], "unexpected EOF", true},
		{"bad checksum", flipped, "checksum", true},
		{"bad header", append([]byte{0x1f, 0x8b, 0xff}, body[3:]...), "gzip", false},
	}
	for _, tt := range tests {
		p := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
		if err := os.WriteFile(p, tt.body, 0o644); err != nil {
			t.Fatal(err)
		}
		s := &Summary{}
		err := s.ReadFile(p)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: ReadFile error %v; want one naming %s and %q", tt.name, err, p, tt.wantErr)
		}
		if (s.Total() > 0) != tt.counted {
			t.Errorf("%s: Total() = %d; want records counted: %v", tt.name, s.Total(), tt.counted)
		}
	}
	if err := (&Summary{}).ReadFile(filepath.Join(dir, "missing.log")); err == nil || !strings.Contains(err.Error(), "missing.log") {
		t.Errorf("ReadFile(missing) = %v; want an error naming the file", err)
	}
}

// TestBounded reads many records with many names and checks that what the
// summary keeps is bounded by its caps, and that nothing is lost: every
// record is in a table, under its name or Other.
func TestBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		g       gen
		maxKeys int
		buckets int
	}{
		{"200k lines, 50k origins, default caps", gen{lines: 200_000, origins: 50_000, step: 250 * time.Millisecond}, 0, 0},
		{"small caps", gen{lines: 50_000, origins: 5_000, step: time.Minute}, 100, 16},
		{"23 years of hours", gen{lines: 200_000, origins: 10, step: time.Hour}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &Summary{MaxKeys: tt.maxKeys, MaxBuckets: tt.buckets}
			if err := s.Read("synthetic", tt.g.reader()); err != nil {
				t.Fatal(err)
			}
			keys, buckets := s.maxKeys(), s.maxBuckets()
			if s.Total() != int64(tt.g.lines) {
				t.Fatalf("Total() = %d; want %d", s.Total(), tt.g.lines)
			}
			if got, want := len(s.origins.counts), min(keys, tt.g.origins); got != want {
				t.Errorf("origins kept: %d; want %d", got, want)
			}
			for name, tb := range map[string]*table{"decision": &s.decisions, "origin": &s.origins, "token": &s.tokens} {
				var sum int64
				for _, n := range tb.all() {
					sum += n
				}
				if len(tb.counts) > keys || sum != s.Total() {
					t.Errorf("%s table: %d names, %d records; want at most %d names, %d records", name, len(tb.counts), sum, keys, s.Total())
				}
			}
			// Each origin's counts by decision live in its row: as many
			// rows as origins kept, each summing to the row's count, and
			// the rest in otherOrigins.
			inRows := sum(s.otherOrigins.decisions[:])
			for name, r := range s.origins.counts {
				if n := sum(r.origin.decisions[:]); n != r.n {
					t.Errorf("origin %q: %d records by decision; want %d", name, n, r.n)
				}
				inRows += r.n
			}
			if inRows != s.Total() || sum(s.otherOrigins.decisions[:]) != s.origins.other {
				t.Errorf("origins by decision hold %d records, %d under Other; want %d, %d", inRows, sum(s.otherOrigins.decisions[:]), s.Total(), s.origins.other)
			}
			if len(s.timeline.buckets) > buckets || s.timeline.hi-s.timeline.lo >= int64(buckets) {
				t.Errorf("timeline: %d buckets over %d; want at most %d", len(s.timeline.buckets), s.timeline.hi-s.timeline.lo+1, buckets)
			}
			var inTime int64
			for _, b := range s.timeline.buckets {
				for _, n := range b {
					inTime += n
				}
			}
			if inTime != s.Total() {
				t.Errorf("timeline holds %d records; want %d", inTime, s.Total())
			}
			_, spans := s.timeline.view()
			if len(spans) > chartMaxBars {
				t.Errorf("chart: %d bars; want at most %d", len(spans), chartMaxBars)
			}
		})
	}
}

func TestKeyClip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	for _, origin := range []string{strings.Repeat("a", 5000), strings.Repeat("é", 3000), strings.Repeat("a", MaxKeyLen)} {
		s := &Summary{}
		s.Add(&audit.Record{Time: audit.Time(at), Decision: policy.ActionAllowed, Origin: origin})
		s.Add(&audit.Record{Time: audit.Time(at), Decision: policy.ActionAllowed, Origin: origin})
		for name, n := range s.origins.all() {
			if len(name) > MaxKeyLen || n != 2 || !strings.HasPrefix(origin, strings.TrimSuffix(name, "…")) {
				t.Errorf("origin of %d bytes kept as %d bytes (%d records); want at most %d bytes, a prefix, 2 records", len(origin), len(name), n, MaxKeyLen)
			}
		}
	}
}

func TestWriteJSON(t *testing.T) {
	t.Parallel()
	full := &Summary{}
	if err := full.ReadFile("testdata/audit.jsonl"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		s    *Summary
		want string
	}{
		{"audit.jsonl", full, `{"total":10,"blocked":5,` +
			`"by_decision":{"allowed":1,"auth-required":1,"denied":1,"disallowed":2,"paced":1,"private-address":1,"unreachable":1,"upstream-error":1,"would-block":1},` +
			`"by_origin":{"http://10.1.2.3:80":1,"http://site.example:80":2,"https://docs.example:443":3,"https://down.example:443":1,"https://gone.example:443":1,"https://intranet.example:443":1},` +
			`"by_token":{"MyBot":5,"OtherBot":2},` +
			`"by_rule":{"allow: /":2,"disallow: /drafts":1,"disallow: /private":2},` +
			`"by_disallow_rule":{"disallow: /drafts":1,"disallow: /private":2},"by_allow_rule":{"allow: /":2},"by_usage_rule":{},"by_usage_source":{"html head unreadable":0,"html meta":0,"response header":0,"robots.txt":0,"rsl licence":0,"tdmrep.json":0},` +
			// auth-required has no origin: in no origin's row.
			`"by_origin_decision":{"http://10.1.2.3:80":{"private-address":1},"http://site.example:80":{"disallowed":2},` +
			`"https://docs.example:443":{"allowed":1,"paced":1,"would-block":1},"https://down.example:443":{"unreachable":1},` +
			`"https://gone.example:443":{"upstream-error":1},"https://intranet.example:443":{"denied":1}},` +
			// The allowed 200 and the would-block 200 reached docs.example;
			// the paced 429 and the upstream-error 502 are robotsgate's.
			`"by_class":{"1xx":0,"2xx":2,"3xx":0,"429":0,"4xx":0,"5xx":0},"by_origin_class":{"https://docs.example:443":{"2xx":2}},` +
			// Every refusal here was robotsgate's own answer: none was sent.
			`"by_refusal_class":{"body-withheld":0,"not-paid":0,"not-sent":5},"refused_urls":[` +
			`{"url":"http://10.1.2.3/admin","origin":"http://10.1.2.3:80","decision":"private-address","class":"not-sent","rule":"","line":0,"reason":"target resolves to a private address","count":1,"count_error":0,"first":"2026-11-23T11:31:00.000Z","last":"2026-11-23T11:31:00.000Z"},` +
			`{"url":"http://site.example/%70rivate/x","origin":"http://site.example:80","decision":"disallowed","class":"not-sent","rule":"disallow: /private","line":2,"reason":"disallowed by robots.txt","count":1,"count_error":0,"first":"2026-11-23T08:41:38.637Z","last":"2026-11-23T08:41:38.637Z"},` +
			`{"url":"http://site.example/private/y","origin":"http://site.example:80","decision":"disallowed","class":"not-sent","rule":"disallow: /private","line":2,"reason":"disallowed by robots.txt","count":1,"count_error":0,"first":"2026-11-23T08:42:01.002Z","last":"2026-11-23T08:42:01.002Z"},` +
			`{"url":"https://down.example/a","origin":"https://down.example:443","decision":"unreachable","class":"not-sent","rule":"","line":0,"reason":"robots.txt unreachable: timeout","count":1,"count_error":0,"first":"2026-11-23T10:03:44.120Z","last":"2026-11-23T10:03:44.120Z"},` +
			`{"url":"https://intranet.example/","origin":"https://intranet.example:443","decision":"denied","class":"not-sent","rule":"","line":0,"reason":"site rule: \"internal only\"","count":1,"count_error":0,"first":"2026-11-23T09:20:00.500Z","last":"2026-11-23T09:20:00.500Z"}],` +
			`"refused_urls_left_out":0,"spent":{},"charged_requests":{},"spent_by_origin":{},"charged_not_summed":0,` +
			`"from":"2026-11-23T08:41:38.637Z","to":"2026-11-24T08:00:00.000Z","malformed":0,"checkpoints":0,"files":["testdata/audit.jsonl"]}`},
		{"empty", &Summary{}, `{"total":0,"blocked":0,"by_decision":{},"by_origin":{},"by_token":{},"by_rule":{},` +
			`"by_disallow_rule":{},"by_allow_rule":{},"by_usage_rule":{},"by_usage_source":{"html head unreadable":0,"html meta":0,"response header":0,"robots.txt":0,"rsl licence":0,"tdmrep.json":0},"by_origin_decision":{},` +
			`"by_class":{"1xx":0,"2xx":0,"3xx":0,"429":0,"4xx":0,"5xx":0},"by_origin_class":{},` +
			`"by_refusal_class":{"body-withheld":0,"not-paid":0,"not-sent":0},"refused_urls":[],"refused_urls_left_out":0,` +
			`"spent":{},"charged_requests":{},"spent_by_origin":{},"charged_not_summed":0,` +
			`"from":null,"to":null,"malformed":0,"checkpoints":0,"files":[]}`},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		if err := tt.s.WriteJSON(&out); err != nil {
			t.Fatal(err)
		}
		var got, compact bytes.Buffer
		if err := json.Compact(&compact, out.Bytes()); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", tt.name, err, out.Bytes())
		}
		got = compact
		if got.String() != tt.want {
			t.Errorf("%s: WriteJSON =\n%s\nwant\n%s", tt.name, got.String(), tt.want)
		}
		var keys map[string]any
		dec := json.NewDecoder(&out)
		if err := dec.Decode(&keys); err != nil || dec.More() {
			t.Errorf("%s: want exactly one JSON object (%v)", tt.name, err)
		}
		want := []string{"blocked", "by_allow_rule", "by_class", "by_decision", "by_disallow_rule", "by_origin", "by_origin_class",
			"by_origin_decision", "by_refusal_class", "by_rule", "by_token", "by_usage_rule", "by_usage_source", "charged_not_summed",
			"charged_requests", "checkpoints", "files", "from", "malformed", "refused_urls", "refused_urls_left_out", "spent",
			"spent_by_origin", "to", "total"}
		if got := slices.Sorted(maps.Keys(keys)); !slices.Equal(got, want) {
			t.Errorf("%s: keys %q; want %q", tt.name, got, want)
		}
	}
}

// TestWriteTextGolden: the text reports of the hand-written logs and of a
// real proxy's (testdata/proxy.jsonl, written by the root package's
// TestReportFromProxy) are their golden files.
func TestWriteTextGolden(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		files  []string
		golden string
	}{
		{[]string{"testdata/audit.jsonl", "testdata/malformed.jsonl"}, "testdata/audit.txt"},
		{[]string{"testdata/proxy.jsonl"}, "testdata/proxy.txt"},
	} {
		s := &Summary{}
		for _, f := range tt.files {
			if err := s.ReadFile(f); err != nil {
				t.Fatal(err)
			}
		}
		var got bytes.Buffer
		if err := s.WriteText(&got); err != nil {
			t.Fatal(err)
		}
		if *update {
			if err := os.WriteFile(tt.golden, got.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(tt.golden)
		if err != nil {
			t.Fatalf("%v (run go test ./report -run TestWriteTextGolden -update)", err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("WriteText differs from %s; got:\n%s", tt.golden, got.Bytes())
		}
	}
}

func TestWriteTextTables(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	s := &Summary{MaxKeys: 30}
	for range 100 {
		s.Add(&audit.Record{Time: audit.Time(at), Decision: policy.ActionDenied, Origin: "https://evil.example\x1b[2J\x1b[31m:443", Token: "Bad\x07Bot"})
	}
	for i := range 40 {
		for range i + 1 {
			s.Add(&audit.Record{Time: audit.Time(at), Decision: policy.ActionDisallowed, Origin: "https://o" + string(rune('A'+i)) + ".example:443"})
		}
	}
	var out bytes.Buffer
	if err := s.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"records    920\n",
		"blocked    920 (100.0%;",
		"\"https://evil.example\\x1b[2J\\x1b[31m:443\"        100   10.9%\n",
		"https://oN.example:443                            14    1.5%\n", // aligned with the longest name
		"… and 10 more (",
		"(other): 385 records (41.8%) under names past the cap",
		`"Bad\aBot"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("WriteText: no %q in\n%s", want, text)
		}
	}
	if strings.ContainsAny(text, "\x1b\x07") {
		t.Errorf("WriteText printed control characters:\n%q", text)
	}
}

// TestParseRecordReadsAuditRecords: a record as audit.Log writes it (its
// JSON tags) is read back by ParseRecord with the members a report counts,
// whatever they hold: the report and the writer share one schema.
func TestParseRecordReadsAuditRecords(t *testing.T) {
	t.Parallel()
	for _, a := range policy.Actions() {
		want := audit.Record{
			Time: at(2026, 11, 25, 9, 30, 0, 123e6), Level: "WARN", Msg: audit.MsgBlocked, Decision: a,
			Origin: "https://xn--bcher-kva.example:443", Token: "Foo_Bot", Rule: "disallow: /<a>&\"b\" (line 3)",
			Agent: []string{"Foo_Bot"}, Purpose: []string{}, URL: "https://xn--bcher-kva.example/a?b=1&c=2",
		}
		line, err := json.Marshal(&want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseRecord(line)
		if err != nil {
			t.Fatalf("ParseRecord(%s): %v", line, err)
		}
		if !time.Time(got.Time).Equal(time.Time(want.Time)) || got.Decision != a || got.Origin != want.Origin || got.Token != want.Token || got.Rule != want.Rule {
			t.Errorf("ParseRecord(%s) = %+v", line, got)
		}
	}
}
