package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/usage"
	"github.com/robotsgate/robotsgate/usage/source"
)

func TestAnswerClass(t *testing.T) {
	t.Parallel()
	tests := []struct {
		decision policy.Action
		method   string
		status   int
		want     string // "" for none
	}{
		{policy.ActionAllowed, "GET", 200, "2xx"},
		{policy.ActionAllowed, "GET", 204, "2xx"},
		{policy.ActionAllowed, "HEAD", 301, "3xx"},
		{policy.ActionAllowed, "GET", 304, "3xx"},
		{policy.ActionAllowed, "GET", 404, "4xx"},
		{policy.ActionAllowed, "GET", 429, "429"},
		{policy.ActionAllowed, "GET", 499, "4xx"},
		{policy.ActionAllowed, "POST", 503, "5xx"},
		{policy.ActionWouldBlock, "GET", 200, "2xx"},
		{policy.ActionWouldBlock, "GET", 429, "429"},
		{policy.ActionWouldBlock, "GET", 502, "5xx"},
		{policy.ActionAllowed, "GET", 101, "1xx"}, // a WebSocket's upgrade, as the metrics count it
		{policy.ActionAllowed, "GET", 0, ""},
		{policy.ActionAllowed, "GET", 99, ""},
		{policy.ActionAllowed, "GET", 600, ""},
		{policy.ActionAllowed, "CONNECT", 200, ""},    // the tunnel's 200
		{policy.ActionWouldBlock, "CONNECT", 200, ""}, // a tunnel-mode CONNECT, only logged
		{policy.ActionPaced, "GET", 429, ""},          // robotsgate's own 429
		{policy.ActionDisallowed, "GET", 403, ""},     // robotsgate's own 403
		{policy.ActionUpstream, "GET", 502, ""},       // no answer from the origin
		{policy.ActionUnreachable, "GET", 503, ""},    // robotsgate's own 503
	}
	for _, tt := range tests {
		got := ""
		if c, ok := answerClass(&parsed{action: tt.decision, method: []byte(tt.method), status: tt.status}); ok {
			got = c.String()
		}
		if got != tt.want {
			t.Errorf("answerClass(%s %s %d) = %q; want %q", tt.decision, tt.method, tt.status, got, tt.want)
		}
	}
}

// reference is what a report of an audit file should say, computed
// from the records as encoding/json decodes them.
type reference struct {
	byOriginDecision, byOriginClass map[string]map[string]int64
	byClass                         map[string]int64
	rules                           [numRuleKinds]map[string]int64
}

func referenceOf(t *testing.T, path string) reference {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ref := reference{byOriginDecision: map[string]map[string]int64{}, byOriginClass: map[string]map[string]int64{},
		byClass: map[string]int64{"1xx": 0, "2xx": 0, "3xx": 0, "4xx": 0, "429": 0, "5xx": 0}}
	for k := range ref.rules {
		ref.rules[k] = map[string]int64{}
	}
	inc := func(m map[string]map[string]int64, k1, k2 string) {
		if m[k1] == nil {
			m[k1] = map[string]int64{}
		}
		m[k1][k2]++
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Origin != "" {
			inc(ref.byOriginDecision, r.Origin, r.Decision.String())
		}
		switch {
		case strings.HasPrefix(r.Rule, "disallow:"):
			ref.rules[ruleDisallow][r.Rule]++
		case strings.HasPrefix(r.Rule, "allow:"):
			ref.rules[ruleAllow][r.Rule]++
		case r.Rule != "":
			ref.rules[ruleUsage][r.Rule]++
		}
		if r.Decision != policy.ActionAllowed && r.Decision != policy.ActionWouldBlock || r.Method == "CONNECT" {
			continue
		}
		class := ""
		switch {
		case r.Status == 429:
			class = "429"
		case r.Status >= 100 && r.Status < 600:
			class = string(rune('0'+r.Status/100)) + "xx"
		default:
			continue
		}
		ref.byClass[class]++
		if r.Origin != "" {
			inc(ref.byOriginClass, r.Origin, class)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ref
}

// reportJSON is the part of WriteJSON's object these tests read.
type reportJSON struct {
	ByDecision       map[string]int64             `json:"by_decision"`
	ByRule           map[string]int64             `json:"by_rule"`
	ByDisallowRule   map[string]int64             `json:"by_disallow_rule"`
	ByAllowRule      map[string]int64             `json:"by_allow_rule"`
	ByUsageRule      map[string]int64             `json:"by_usage_rule"`
	ByOriginDecision map[string]map[string]int64  `json:"by_origin_decision"`
	ByClass          map[string]int64             `json:"by_class"`
	ByOriginClass    map[string]map[string]int64  `json:"by_origin_class"`
	Blocked          int64                        `json:"blocked"`
	ByRefusalClass   map[string]int64             `json:"by_refusal_class"`
	RefusedURLs      []RefusedURL                 `json:"refused_urls"`
	RefusedLeftOut   int64                        `json:"refused_urls_left_out"`
	Spent            map[string]string            `json:"spent"`
	ChargedRequests  map[string]int64             `json:"charged_requests"`
	SpentByOrigin    map[string]map[string]string `json:"spent_by_origin"`
	ChargedNotSummed int64                        `json:"charged_not_summed"`
}

// jsonOf is s's JSON report, decoded.
func jsonOf(t *testing.T, s *Summary) reportJSON {
	t.Helper()
	var out bytes.Buffer
	if err := s.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var got reportJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	return got
}

func equalNested(a, b map[string]map[string]int64) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]int64) bool { return maps.Equal(x, y) })
}

// TestSpans reads the audit files of testdata that cover a span of time
// each and checks the chart's buckets, the origin × decision table, the
// origins' answers and the rules, in the three formats.
func TestSpans(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file       string
		unit       string
		bars       int
		byClass    map[string]int64
		allowed    bool                        // allowed records present: no note on audit.log_allowed
		cells      map[string]map[string]int64 // some of by_origin_decision
		rules      [numRuleKinds]map[string]int64
		textLines  []string // in WriteText's output
		textOther  string   // the Other row of the origin × decision table; "" for none
		htmlPhrase []string // in WriteHTML's output
	}{
		{
			file: "testdata/span-4m.jsonl", unit: "10 seconds", bars: 24,
			// 61 allowed (one a tunnel-mode CONNECT, left out) and 10 would-block.
			byClass: map[string]int64{"1xx": 0, "2xx": 30, "3xx": 12, "4xx": 6, "429": 6, "5xx": 16},
			allowed: true,
			cells: map[string]map[string]int64{
				"http://blog.example:80":     {"allowed": 10, "disallowed": 10, "usage-refused": 10},
				"https://shop.example:443":   {"allowed": 20, "would-block": 10},
				"https://tunnel.example:443": {"allowed": 1},
			},
			rules: [numRuleKinds]map[string]int64{
				{"disallow: /private": 20, "disallow: /drafts": 10},
				{"allow: /": 30, "allow: /products/": 20},
				{"content-usage: train-ai=n": 10},
			},
			textLines: []string{
				"ORIGIN × DECISION             RECORDS  allowed  disallowed  paced  upstream-error  usage-refused  would-block",
				"http://blog.example:80             30       10          10      0               0             10            0",
				"429             6    8.6%",
				"https://shop.example:443         30     12      0      4      4     10",
				"DISALLOW RULE         RECORDS   SHARE",
				"allow: /products/         20   16.5%",
				"content-usage: train-ai=n         10    8.3%",
			},
			htmlPhrase: []string{"time (UTC) on 2026-11-23, one bar per 10 seconds", "08:01:30", "2026-11-23 08:00:10 UTC: disallowed 2"},
		},
		{
			file: "testdata/span-3d.jsonl", unit: "hour", bars: 72,
			// No allowed records (audit.log_allowed off): would-block ones only.
			byClass: map[string]int64{"1xx": 0, "2xx": 16, "3xx": 8, "4xx": 8, "429": 8, "5xx": 8},
			allowed: false,
			cells: map[string]map[string]int64{
				"https://site00.example:443": {"denied": 4, "disallowed": 9, "paced": 4, "upstream-error": 3, "would-block": 3},
				"https://site29.example:443": {"unreachable": 2},
			},
			rules: [numRuleKinds]map[string]int64{
				{"disallow: /private": 72, "disallow: /cart": 48},
				{"allow: /s/": 24},
				{},
			},
			textLines: []string{
				"no allowed records: the audit log holds allowed requests only with audit.log_allowed = true",
				"USAGE RULE    RECORDS   SHARE\n(none)",
			},
			textOther:  "(other)                            20           6            6       0      0            8               0\n(other): 10 more origins\n",
			htmlPhrase: []string{"time (UTC), one bar per hour", "11-21 12:00", "2026-11-20 04:00 UTC: would-block 2", "2026-11-20 05:00 UTC: unreachable 1", "no allowed records"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			s := &Summary{}
			if err := s.ReadFile(tt.file); err != nil {
				t.Fatal(err)
			}
			ref := referenceOf(t, tt.file)

			// The chart.
			c := s.chart()
			_, spans := s.timeline.view()
			if !strings.HasSuffix(c.XLabel, "one bar per "+tt.unit) || len(spans) != tt.bars {
				t.Errorf("chart: %q, %d bars; want one bar per %s, %d bars", c.XLabel, len(spans), tt.unit, tt.bars)
			}

			// JSON: against the reference, and the spot values above.
			got := jsonOf(t, s)
			if !equalNested(got.ByOriginDecision, ref.byOriginDecision) {
				t.Errorf("by_origin_decision = %v; want %v", got.ByOriginDecision, ref.byOriginDecision)
			}
			for origin, want := range tt.cells {
				if !maps.Equal(got.ByOriginDecision[origin], want) {
					t.Errorf("by_origin_decision[%q] = %v; want %v", origin, got.ByOriginDecision[origin], want)
				}
			}
			if !maps.Equal(got.ByClass, ref.byClass) || !maps.Equal(got.ByClass, tt.byClass) {
				t.Errorf("by_class = %v; want %v (reference %v)", got.ByClass, tt.byClass, ref.byClass)
			}
			if !equalNested(got.ByOriginClass, ref.byOriginClass) {
				t.Errorf("by_origin_class = %v; want %v", got.ByOriginClass, ref.byOriginClass)
			}
			for k, m := range []map[string]int64{got.ByDisallowRule, got.ByAllowRule, got.ByUsageRule} {
				if !maps.Equal(m, ref.rules[k]) || !maps.Equal(m, tt.rules[k]) {
					t.Errorf("rules of kind %d = %v; want %v (reference %v)", k, m, tt.rules[k], ref.rules[k])
				}
			}
			all := map[string]int64{}
			for _, m := range []map[string]int64{got.ByDisallowRule, got.ByAllowRule, got.ByUsageRule} {
				maps.Copy(all, m)
			}
			if !maps.Equal(all, got.ByRule) {
				t.Errorf("by_disallow_rule, by_allow_rule and by_usage_rule = %v; want by_rule %v", all, got.ByRule)
			}

			// Text.
			var text bytes.Buffer
			if err := s.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.textLines {
				if !strings.Contains(text.String(), want) {
					t.Errorf("WriteText: no %q in\n%s", want, text.String())
				}
			}
			if note := strings.Contains(text.String(), "audit.log_allowed = true;"); note == tt.allowed {
				t.Errorf("WriteText: the note on audit.log_allowed shown: %v; want %v", note, !tt.allowed)
			}
			if tt.textOther != "" && !strings.Contains(text.String(), tt.textOther) {
				t.Errorf("WriteText: no %q in\n%s", tt.textOther, text.String())
			}

			// HTML.
			var page bytes.Buffer
			if err := s.WriteHTML(&page); err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.htmlPhrase {
				if !strings.Contains(page.String(), want) {
					t.Errorf("WriteHTML: no %q", want)
				}
			}
		})
	}
}

// TestOriginTablesBounded: with more origins than the cap, the origin ×
// decision and answer tables keep the cap's origins and sum the rest under
// Other, in the three formats, losing no record.
func TestOriginTablesBounded(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	s := &Summary{MaxKeys: 10}
	for i := range 50 {
		origin := "https://o" + strings.Repeat("x", i) + ".example:443"
		for range i + 1 {
			s.Add(&audit.Record{Time: audit.Time(at), Decision: policy.ActionAllowed, Origin: origin, Method: "GET", Status: 200})
			s.Add(&audit.Record{Time: audit.Time(at), Decision: policy.ActionDisallowed, Origin: origin, Status: 403, Rule: "disallow: /"})
		}
	}
	if len(s.origins.counts) != 10 {
		t.Fatalf("%d origins kept; want 10", len(s.origins.counts))
	}
	got := jsonOf(t, s)
	const total = 50 * 51 / 2 // records of each decision
	var decisions, answers int64
	for _, m := range got.ByOriginDecision {
		decisions += m["allowed"] + m["disallowed"]
	}
	for _, m := range got.ByOriginClass {
		answers += m["2xx"]
	}
	if len(got.ByOriginDecision) != 11 || decisions != 2*total || answers != total || got.ByClass["2xx"] != total {
		t.Errorf("by_origin_decision: %d origins, %d records; by_origin_class: %d answers, by_class %v; want 11, %d, %d, %d",
			len(got.ByOriginDecision), decisions, answers, got.ByClass, 2*total, total, total)
	}
	if want := (map[string]int64{"allowed": total - 55, "disallowed": total - 55}); !maps.Equal(got.ByOriginDecision[Other], want) {
		t.Errorf("by_origin_decision[%q] = %v; want %v", Other, got.ByOriginDecision[Other], want)
	}

	tab := s.originDecisions(3)
	var sumRows int64
	for _, r := range append(tab.Rows, *tab.Rest) {
		sumRows += r.Total
	}
	if len(tab.Rows) != 3 || tab.More != 7 || tab.Capped != 2*(total-55) || sumRows != 2*total {
		t.Errorf("originDecisions(3): %d rows, %d more, %d capped, %d records; want 3, 7, %d, %d",
			len(tab.Rows), tab.More, tab.Capped, sumRows, 2*(total-55), 2*total)
	}
	var text bytes.Buffer
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if want := "(other): " + strconv.Itoa(2*(total-55)) + " records under origins past the cap of distinct names\n"; !strings.Contains(text.String(), want) {
		t.Errorf("WriteText: no %q in\n%s", want, text.String())
	}
}

// TestAnswers1xx: a WebSocket's 101 is counted as 1xx, as the metrics
// count it, and the text and HTML reports show 1xx only when some were
// counted; JSON always has it.
func TestAnswers1xx(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	for _, ws := range []bool{false, true} {
		s := &Summary{}
		s.Add(&audit.Record{Time: audit.Time(at), Decision: policy.ActionAllowed, Origin: "https://a.example:443", Method: "GET", Status: 200})
		if ws {
			s.Add(&audit.Record{Time: audit.Time(at), Decision: policy.ActionAllowed, Origin: "https://a.example:443", Method: "GET", Status: 101})
		}
		var text, page, out bytes.Buffer
		if err := errors.Join(s.WriteText(&text), s.WriteHTML(&page), s.WriteJSON(&out)); err != nil {
			t.Fatal(err)
		}
		var got reportJSON
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		want1xx := map[bool]int64{false: 0, true: 1}[ws]
		if n, ok := got.ByClass["1xx"]; !ok || n != want1xx || got.ByOriginClass["https://a.example:443"]["1xx"] != want1xx {
			t.Errorf("WebSocket %v: by_class %v, by_origin_class %v; want 1xx %d", ws, got.ByClass, got.ByOriginClass, want1xx)
		}
		for format, b := range map[string]*bytes.Buffer{"text": &text, "HTML": &page} {
			if shown := strings.Contains(b.String(), "1xx</") || strings.Contains(b.String(), "\n1xx "); shown != ws {
				t.Errorf("WebSocket %v: 1xx in the %s report: %v; want %v", ws, format, shown, ws)
			}
		}
		if want := "ORIGIN × ANSWER          ANSWERS    2xx    3xx"; !ws && !strings.Contains(text.String(), want) {
			t.Errorf("no %q in\n%s", want, text.String())
		}
		if want := "ORIGIN × ANSWER          ANSWERS    1xx    2xx    3xx"; ws && !strings.Contains(text.String(), want) {
			t.Errorf("no %q in\n%s", want, text.String())
		}
	}
}

// TestUsageSources: usage refusals are counted by where their statement
// came from, told by how the rule starts; allow and disallow rules are not.
func TestUsageSources(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	s := &Summary{}
	for rule, n := range map[string]int{
		"content-usage: /train/ train-ai=n":                      3,
		"content-signal: ai-train=no":                            1,
		"response header x-robots-tag: gptbot: noai":             2,
		"meta robots: noai":                                      4,
		"html head: unreadable (content-encoding br)":            1,
		"tdmrep.json: / tdm-reservation=1":                       5,
		"rsl https://a.example/license.xml: prohibits usage all": 6,
		"disallow: /private":                                     7,
	} {
		for range n {
			s.Add(&audit.Record{Time: audit.Time(at), Decision: policy.ActionUsageRefused, Origin: "https://a.example:443", Rule: rule})
		}
	}
	var out bytes.Buffer
	if err := s.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var got struct {
		BySource map[string]int64 `json:"by_usage_source"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"robots.txt": 4, "response header": 2, "html meta": 4, "html head unreadable": 1, "tdmrep.json": 5, "rsl licence": 6}
	if !maps.Equal(got.BySource, want) {
		t.Errorf("by_usage_source = %v; want %v", got.BySource, want)
	}
	var text bytes.Buffer
	s.WriteText(&text)
	if !strings.Contains(text.String(), "rsl licence") || !strings.Contains(text.String(), "USAGE SOURCE") {
		t.Errorf("WriteText has no usage sources:\n%s", text.String())
	}
}

// TestNewSourceCounted: a usage source added to the list (as policy's
// TestNewSource adds one) has its refusals counted under the name its
// Info declares, told by the prefix it declares, with no constant, table
// row or code of its own in package usage or here.
func TestNewSourceCounted(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	optOut := usage.SourceInfo{ID: usage.NumSources, Name: "ai opt-out", Prefix: "ai-opt-out: "}
	s := &Summary{UsageSources: append(source.Infos(source.List()), optOut)}
	for _, rule := range []string{
		"ai-opt-out: search",
		"ai-opt-out: could not be judged (boom)", // usage.Unjudged's statement
		"content-usage: train-ai=n",
		"meta robots: noai",
	} {
		s.Add(&audit.Record{Time: audit.Time(at), Decision: policy.ActionUsageRefused, Origin: "https://a.example:443", Rule: rule})
	}
	var out bytes.Buffer
	if err := s.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var got struct {
		BySource map[string]int64 `json:"by_usage_source"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"ai opt-out": 2, "robots.txt": 1, "response header": 0, "html meta": 1, "html head unreadable": 0, "tdmrep.json": 0, "rsl licence": 0}
	if !maps.Equal(got.BySource, want) {
		t.Errorf("by_usage_source = %v; want %v", got.BySource, want)
	}
	var text bytes.Buffer
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "ai opt-out") {
		t.Errorf("WriteText does not count the new source:\n%s", text.String())
	}
}
