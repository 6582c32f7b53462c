package report

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// TestRefusalClass: each refusal is told by whether it reached the site:
// robots.txt's verdicts and the usage statements judged before sending
// never left; those of the answer itself (and a tdmrep.json reservation
// it did not lift) reached the site, whose body was withheld; a refused
// price reached it too. The lines are the proxy's own (testdata/proxy.jsonl,
// written by the root package's TestReportFromProxy through a real
// proxy), and records of the shapes it writes for what that run does not
// make.
func TestRefusalClass(t *testing.T) {
	t.Parallel()
	fromProxy := map[string]string{} // path → class, from the real run
	s := &Summary{}
	if err := s.ReadFile("testdata/proxy.jsonl"); err != nil {
		t.Fatal(err)
	}
	for _, r := range jsonOf(t, s).RefusedURLs {
		fromProxy[strings.TrimPrefix(strings.TrimPrefix(r.URL, "http://shop.example:8081"), "http://news.example:8082")] = r.Class
	}
	tests := []struct {
		name   string
		path   string // of testdata/proxy.jsonl; "" for rec
		rec    audit.Record
		want   string // the class; "" for no refusal
		reason string
	}{
		{name: "robots.txt disallow", path: "/private/a", want: "not-sent"},
		{name: "robots.txt content-usage", path: "/cu/x", want: "not-sent"},
		{name: "rsl licence", path: "/rsl/x", want: "not-sent"},
		{name: "tdmrep.json, not lifted by the answer", path: "/tdm/x", want: "body-withheld"},
		{name: "response header", path: "/hdr", want: "body-withheld"},
		{name: "html meta", path: "/meta", want: "body-withheld"},
		{name: "price refused", path: "/expensive", want: "not-paid"},
		{name: "another site's robots.txt", path: "/archive/2019/two", want: "not-sent"},
		{name: "html head unreadable", rec: audit.Record{Decision: policy.ActionUsageRefused, Method: "GET", Rule: "html head: unreadable (content-encoding br)"}, want: "body-withheld"},
		{name: "response header not judged", rec: audit.Record{Decision: policy.ActionUsageRefused, Method: "GET", Rule: "response header could not be judged (boom)"}, want: "body-withheld"},
		{name: "content-signal", rec: audit.Record{Decision: policy.ActionUsageRefused, Method: "GET", Rule: "content-signal: ai-train=no"}, want: "not-sent"},
		{name: "tdmrep.json on a tunnel-mode CONNECT: no answer to wait for", rec: audit.Record{Decision: policy.ActionUsageRefused, Method: "CONNECT", URL: "shop.example:443", Rule: "tdmrep.json: / tdm-reservation=1"}, want: "not-sent"},
		{name: "sites deny", rec: audit.Record{Decision: policy.ActionDenied, Method: "GET"}, want: "not-sent"},
		{name: "private", rec: audit.Record{Decision: policy.ActionPrivate, Method: "GET"}, want: "not-sent"},
		{name: "unreachable", rec: audit.Record{Decision: policy.ActionUnreachable, Method: "GET"}, want: "not-sent"},
		{name: "would-block: forwarded", rec: audit.Record{Decision: policy.ActionWouldBlock, Method: "GET", Rule: "response header content-usage: train-ai=n"}},
		{name: "paced: no refusal", rec: audit.Record{Decision: policy.ActionPaced, Method: "GET"}},
		{name: "upstream-error: no refusal", rec: audit.Record{Decision: policy.ActionUpstream, Method: "GET"}},
		{name: "client-left: no refusal, nothing answered", rec: audit.Record{Decision: policy.ActionClientLeft, Msg: audit.MsgClientLeft, Method: "GET", Reason: "client left while waiting for its turn"}},
	}
	for _, tt := range tests {
		got := fromProxy[tt.path]
		if tt.path == "" {
			s := &Summary{}
			tt.rec.Time, tt.rec.Origin = audit.Time(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)), "https://shop.example:443"
			s.Add(&tt.rec)
			r := jsonOf(t, s)
			got = ""
			if len(r.RefusedURLs) == 1 {
				got = r.RefusedURLs[0].Class
			}
			if n := r.ByRefusalClass[tt.want]; tt.want != "" && n != 1 {
				t.Errorf("%s: by_refusal_class %v", tt.name, r.ByRefusalClass)
			}
		}
		if got != tt.want {
			t.Errorf("%s: class %q; want %q", tt.name, got, tt.want)
		}
	}
	r := jsonOf(t, s)
	if want := map[string]int64{"not-sent": 7, "body-withheld": 4, "not-paid": 1}; !maps.Equal(r.ByRefusalClass, want) || r.Blocked != 11 {
		t.Errorf("proxy.jsonl: by_refusal_class %v, blocked %d; want %v and 11 (not-sent and body-withheld)", r.ByRefusalClass, r.Blocked, want)
	}
}

// TestSpend: charges are summed exactly per currency and per origin, in
// decimal, whatever their number; what is not an amount is counted, not
// summed.
func TestSpend(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		charged   []string // one record each, origins in turn a, b
		n         int      // times over
		spent     map[string]string
		byOrigin  map[string]map[string]string
		requests  map[string]int64
		notSummed int64
	}{
		{"none", nil, 1, map[string]string{}, map[string]map[string]string{}, map[string]int64{}, 0},
		{"0.1 + 0.2 is 0.30, not 0.30000000000000004", []string{"USD 0.1", "USD 0.2"}, 1,
			map[string]string{"USD": "0.30"}, map[string]map[string]string{"https://a.example:443": {"USD": "0.10"}, "https://b.example:443": {"USD": "0.20"}},
			map[string]int64{"USD": 2}, 0},
		{"billionths, many times", []string{"USD 0.000000001", "EUR 0.000000003"}, 1000,
			map[string]string{"USD": "0.000001", "EUR": "0.000003"},
			map[string]map[string]string{"https://a.example:443": {"USD": "0.000001"}, "https://b.example:443": {"EUR": "0.000003"}},
			map[string]int64{"USD": 1000, "EUR": 1000}, 0},
		{"past int64's billionths", []string{"USD 1000000", "usd 999999.999999999"}, 5000,
			map[string]string{"USD": "9999999999.999995"},
			map[string]map[string]string{"https://a.example:443": {"USD": "5000000000.00"}, "https://b.example:443": {"USD": "4999999999.999995"}},
			map[string]int64{"USD": 10000}, 0},
		{"not amounts", []string{"USD", "0.01", "USD -1", "USD 1e3", "USD 2000000", "EUR 1.5"}, 1,
			map[string]string{"EUR": "1.50"}, map[string]map[string]string{"https://b.example:443": {"EUR": "1.50"}},
			map[string]int64{"EUR": 1}, 5},
	}
	for _, tt := range tests {
		s := &Summary{}
		at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
		for range tt.n {
			for i, c := range tt.charged {
				origin := []string{"https://a.example:443", "https://b.example:443"}[i%2]
				s.Add(&audit.Record{Time: audit.Time(at), Decision: policy.ActionAllowed, Origin: origin, Charged: c})
			}
		}
		r := jsonOf(t, s)
		if !maps.Equal(r.Spent, tt.spent) || !maps.Equal(r.ChargedRequests, tt.requests) || r.ChargedNotSummed != tt.notSummed ||
			fmt.Sprint(r.SpentByOrigin) != fmt.Sprint(tt.byOrigin) {
			t.Errorf("%s: spent %v over %v by origin %v, %d not summed; want %v over %v by origin %v, %d", tt.name,
				r.Spent, r.ChargedRequests, r.SpentByOrigin, r.ChargedNotSummed, tt.spent, tt.requests, tt.byOrigin, tt.notSummed)
		}
	}
}

// TestSpendLine: a charged that is not a string is counted as not
// summed; the line is a record all the same.
func TestSpendLine(t *testing.T) {
	t.Parallel()
	s := &Summary{}
	log := `{"time":"2026-11-24T09:00:00.000Z","decision":"allowed","origin":"https://a.example:443","charged":0.01}
{"time":"2026-11-24T09:00:00.000Z","decision":"allowed","origin":"https://a.example:443","charged":"USD 0.01"}
{"time":"2026-11-24T09:00:00.000Z","decision":"allowed","origin":"https://a.example:443","charged":""}
`
	if err := s.Read("log", strings.NewReader(log)); err != nil {
		t.Fatal(err)
	}
	r := jsonOf(t, s)
	if s.Total() != 3 || r.ChargedNotSummed != 1 || r.Spent["USD"] != "0.01" {
		t.Errorf("%d records, %d not summed, spent %v; want 3, 1, USD 0.01", s.Total(), r.ChargedNotSummed, r.Spent)
	}
	var text bytes.Buffer
	s.WriteText(&text)
	if want := "spent      USD 0.01 (1 request); 1 charged values not summed"; !strings.Contains(text.String(), want) {
		t.Errorf("text has no %q:\n%s", want, text.String())
	}
}

// TestCurrencyCap: charges in more currencies than MaxCurrencies are
// counted, not summed: a hostile log cannot grow the totals.
func TestCurrencyCap(t *testing.T) {
	t.Parallel()
	s := &Summary{}
	for i := range MaxCurrencies + 5 {
		cur := string(rune('A'+i/26)) + string(rune('A'+i%26)) + "X"
		s.Add(&audit.Record{Time: audit.Time(time.Unix(0, 0)), Decision: policy.ActionAllowed, Origin: "https://a.example:443", Charged: cur + " 1"})
	}
	if r := jsonOf(t, s); len(r.Spent) != MaxCurrencies || r.ChargedNotSummed != 5 {
		t.Errorf("%d currencies summed, %d not summed; want %d, 5", len(r.Spent), r.ChargedNotSummed, MaxCurrencies)
	}
}

// refusal is one refused record of TestRefusedList's streams.
type refusal struct{ url, rule string }

// repeated is n records of r.
func repeated(r refusal, n int) []refusal { return slices.Repeat([]refusal{r}, n) }

// oneOffs is n records, each a URL refused once.
func oneOffs(prefix string, n int) []refusal {
	out := make([]refusal, n)
	for i := range out {
		out[i] = refusal{fmt.Sprintf("https://a.example/%s%d", prefix, i), "disallow: /"}
	}
	return out
}

// TestRefusedList: the refused-URL list holds every refusal with its
// exact count and times while it can; past MaxRefused it keeps the most
// refused by Space-Saving: whatever the order of the records (the
// heaviest last included), every URL refused more times than the list's
// smallest count (itself at most the refused records over MaxRefused) is
// listed, each count is at most its count_error above the URL's records,
// an entry that never took another's place has its exact count and first
// time, every listed entry its last, and refused_urls_left_out is the
// records in no listed count less its error.
func TestRefusedList(t *testing.T) {
	t.Parallel()
	heavy, other := refusal{"https://a.example/heavy", "disallow: /"}, refusal{"https://a.example/other", "disallow: /"}
	tests := []struct {
		name     string
		max      int // MaxRefused; 0 for the default
		stream   []refusal
		complete bool      // every refusal listed, exact
		listed   []refusal // that must be listed
	}{
		{name: "fewer than the limit: every one, exact", max: 4, complete: true, listed: []refusal{heavy, other, {heavy.url, "disallow: /h"}},
			stream: slices.Concat(repeated(heavy, 3), repeated(other, 1), repeated(refusal{heavy.url, "disallow: /h"}, 2), repeated(heavy, 1))},
		{name: "the old list's miss: 30,000 one-offs first, the most refused last", max: 0, listed: []refusal{heavy},
			stream: slices.Concat(oneOffs("once", 3*DefaultMaxRefused), repeated(heavy, 5))},
		{name: "the most refused first, then one-offs: kept, exact", max: 10, listed: []refusal{heavy},
			stream: slices.Concat(repeated(heavy, 5), oneOffs("once", 30))},
		{name: "two among one-offs, interleaved", max: 8, listed: []refusal{heavy, other},
			stream: func() []refusal {
				var out []refusal
				for i := range 300 {
					switch {
					case i%3 == 0:
						out = append(out, heavy)
					case i%5 == 0:
						out = append(out, other)
					default:
						out = append(out, refusal{fmt.Sprintf("https://a.example/once%d", i), "disallow: /"})
					}
				}
				return out
			}()},
		{name: "nine URLs in turn over eight entries: no count leaves its bounds", max: 8,
			stream: slices.Repeat(oneOffs("turn", 9), 40)},
	}
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &Summary{MaxRefused: tt.max}
			type truth struct {
				n           int64
				first, last string
			}
			want := map[refusal]*truth{}
			for i, r := range tt.stream {
				when := at.Add(time.Duration(i) * time.Second)
				s.Add(&audit.Record{Time: audit.Time(when), Decision: policy.ActionDisallowed, Origin: "https://a.example:443",
					Method: "GET", URL: r.url, Rule: r.rule, Line: 1, Reason: "disallowed by robots.txt"})
				if want[r] == nil {
					want[r] = &truth{first: stamp(when)}
				}
				want[r].n++
				want[r].last = stamp(when)
			}
			got := jsonOf(t, s)
			limit := cmp.Or(tt.max, DefaultMaxRefused)
			if len(got.RefusedURLs) > limit {
				t.Fatalf("%d entries; want at most %d", len(got.RefusedURLs), limit)
			}
			floor, certain := int64(0), int64(0)
			listed := map[refusal]RefusedURL{}
			for i, e := range got.RefusedURLs {
				listed[refusal{e.URL, e.Rule}] = e
				w := want[refusal{e.URL, e.Rule}]
				switch {
				case w == nil || e.Count-e.CountError > w.n || e.Count < w.n:
					t.Errorf("%s: count %d (error %d); it was refused %v times", e.URL, e.Count, e.CountError, w)
				case e.CountError == 0 && (e.Count != w.n || e.First != w.first):
					t.Errorf("%s: count %d, first %s, error 0; want exact: %d, %s", e.URL, e.Count, e.First, w.n, w.first)
				case e.Last != w.last:
					t.Errorf("%s: last %s; want %s", e.URL, e.Last, w.last)
				}
				if i == 0 || e.Count < floor {
					floor = e.Count
				}
				certain += e.Count - e.CountError
			}
			if tt.complete {
				floor = 0
				if len(got.RefusedURLs) != len(want) {
					t.Errorf("%d entries; want every one of %d", len(got.RefusedURLs), len(want))
				}
			}
			if floor > int64(len(tt.stream)/limit) {
				t.Errorf("the smallest count %d is over the records over the limit, %d/%d", floor, len(tt.stream), limit)
			}
			for r, w := range want {
				if _, ok := listed[r]; w.n > floor && !ok {
					t.Errorf("%s (%s) refused %d times, more than the smallest count %d: not listed", r.url, r.rule, w.n, floor)
				}
			}
			for _, r := range tt.listed {
				if _, ok := listed[r]; !ok {
					t.Errorf("%s (%s) not listed", r.url, r.rule)
				}
			}
			if left := int64(len(tt.stream)) - certain; got.RefusedLeftOut != left {
				t.Errorf("refused_urls_left_out %d; want %d", got.RefusedLeftOut, left)
			}
			if tt.complete && got.RefusedLeftOut != 0 {
				t.Errorf("refused_urls_left_out %d; want 0", got.RefusedLeftOut)
			}
		})
	}
}

// TestRefusedListTexts: text and HTML say exactly what the list holds:
// every refusal while it can, with counts; past MaxRefused, that it keeps
// the most refused (every URL refused more than its smallest count), the
// range of a count that took another's place, and the records in no
// listed count.
func TestRefusedListTexts(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	s := &Summary{MaxRefused: 4}
	add := func(i int, url string, a policy.Action, rule string, line int) {
		s.Add(&audit.Record{Time: audit.Time(at.Add(time.Duration(i) * time.Minute)), Decision: a, Origin: "https://a.example:443",
			Method: "GET", URL: url, Rule: rule, Line: line})
	}
	add(3, "https://a.example/x", policy.ActionDisallowed, "disallow: /x", 2)
	add(1, "https://a.example/x", policy.ActionDisallowed, "disallow: /x", 2)
	add(2, "https://a.example/x", policy.ActionDisallowed, "disallow: /x", 2)
	add(4, "https://a.example/x", policy.ActionDisallowed, "disallow: /", 5) // the file changed: another entry
	add(5, "https://a.example/y", policy.ActionUsageRefused, "meta robots: noai", 0)
	add(6, "https://a.example/z", policy.ActionDenied, "", 0)
	add(9, "https://a.example/x", policy.ActionDisallowed, "disallow: /x", 2) // listed already: counted
	add(10, "https://a.example/ok", policy.ActionAllowed, "", 0)
	texts := func() (string, string) {
		var text, page bytes.Buffer
		if err := s.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteHTML(&page); err != nil {
			t.Fatal(err)
		}
		return text.String(), page.String()
	}
	r := jsonOf(t, s)
	want := RefusedURL{URL: "https://a.example/x", Origin: "https://a.example:443", Decision: policy.ActionDisallowed, Class: "not-sent",
		Rule: "disallow: /x", Line: 2, Count: 4, First: "2026-11-24T09:01:00.000Z", Last: "2026-11-24T09:09:00.000Z"}
	if len(r.RefusedURLs) != 4 || r.RefusedURLs[0] != want || r.RefusedLeftOut != 0 {
		t.Fatalf("%d entries, %d left out; want 4 and 0, the first %+v: %+v", len(r.RefusedURLs), r.RefusedLeftOut, want, r.RefusedURLs)
	}
	text, page := texts()
	mustHold(t, "text", text,
		"REFUSED URLS (by origin, the 5 most refused of each; -json lists every one)\n",
		"https://a.example:443  7 refused: 6 not sent, 1 withheld\n",
		"       4  not sent  disallowed     https://a.example/x  [disallow: /x, line 2]\n",
		"       1  withheld  usage-refused  https://a.example/y  [meta robots: noai]\n")
	if strings.Contains(text, "no listed count") || strings.Contains(page, "no listed count") || !strings.Contains(page, "lists every one") {
		t.Errorf("a list that holds every refusal says otherwise:\n%s", text)
	}

	add(7, "https://a.example/past", policy.ActionDenied, "", 0) // the list is full: it takes the place of one refused once
	add(8, "https://a.example/past", policy.ActionDenied, "", 0)
	r = jsonOf(t, s)
	if len(r.RefusedURLs) != 4 || r.RefusedURLs[1].URL != "https://a.example/past" || r.RefusedURLs[1].Count != 3 || r.RefusedURLs[1].CountError != 1 ||
		r.RefusedURLs[1].First != "2026-11-24T09:07:00.000Z" || r.RefusedLeftOut != 1 {
		t.Fatalf("%d entries, %d left out; want 4 and 1, the second /past counted 3 with error 1, first 09:07: %+v", len(r.RefusedURLs), r.RefusedLeftOut, r.RefusedURLs)
	}
	text, page = texts()
	mustHold(t, "text", text,
		"-json lists the 4 most refused, as the note says)\n",
		"The list holds 4 refusals (a URL with one decision, rule and line): when a new one came, it took the place of the least refused, so every URL refused more than once is listed.",
		"     2–3  not sent  denied         https://a.example/past\n",
		"  1 record in no listed count\n")
	mustHold(t, "the page", page, "lists the 4 most refused, as the note says", "<td class=\"n\">2–3</td>", "≤ 2026-11-24T09:07:00.000Z",
		"1 record in no listed count", "1 refused record is in no listed count.")
}

// TestRefusedPerOrigin: text shows the TextRefusedPerOrigin most refused
// URLs of each of the TextRefusedOrigins origins most refused, and counts
// the rest.
func TestRefusedPerOrigin(t *testing.T) {
	t.Parallel()
	s := &Summary{}
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	for o := range TextRefusedOrigins + 2 {
		for u := range TextRefusedPerOrigin + 3 {
			for range 1 + u%2 + (TextRefusedOrigins+2-o)*10 {
				s.Add(&audit.Record{Time: audit.Time(at), Decision: policy.ActionDisallowed, Origin: fmt.Sprintf("https://s%02d.example:443", o),
					URL: fmt.Sprintf("https://s%02d.example/p%d", o, u), Rule: "disallow: /", Line: 1})
			}
		}
	}
	var text bytes.Buffer
	if err := s.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	got := text.String()[strings.Index(text.String(), "REFUSED URLS"):]
	if n := strings.Count(got, "  not sent  disallowed"); n != TextRefusedOrigins*TextRefusedPerOrigin {
		t.Errorf("%d URLs shown; want %d:\n%s", n, TextRefusedOrigins*TextRefusedPerOrigin, got)
	}
	for _, want := range []string{"  … and 3 more URLs (", "… and 2 more origins (", "https://s00.example:443  "} {
		if !strings.Contains(got, want) {
			t.Errorf("text has no %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "https://s11.example:443  ") {
		t.Errorf("the least refused origin is shown:\n%s", got)
	}
}

// TestClientLeftNotBlocked: a client that left is counted under its own
// decision, never as blocked or paced, and names no refused URL.
func TestClientLeftNotBlocked(t *testing.T) {
	t.Parallel()
	s := &Summary{}
	at := audit.Time(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	for _, reason := range []string{"client left while waiting for its turn", "client left while the request was being decided"} {
		s.Add(&audit.Record{Time: at, Msg: audit.MsgClientLeft, Decision: policy.ActionClientLeft, Origin: "http://a.example:80", Method: "GET",
			URL: "http://a.example/x", Reason: reason})
	}
	r := jsonOf(t, s)
	if r.Blocked != 0 || r.ByDecision["client-left"] != 2 || len(r.ByDecision) != 1 || len(r.RefusedURLs) != 0 {
		t.Errorf("blocked %d, by_decision %v, %d refused URLs; want 0, client-left 2 alone, none", r.Blocked, r.ByDecision, len(r.RefusedURLs))
	}
	if IsBlocked(policy.ActionClientLeft) {
		t.Error("client-left is one of BlockedDecisions")
	}
}

// mustHold fails t for each of wants that got, named name, does not hold.
func mustHold(t *testing.T, name, got string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("%s has no %q:\n%s", name, want, got)
		}
	}
}
