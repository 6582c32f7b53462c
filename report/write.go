package report

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/robotsgate/robotsgate/proxy/policy"
)

// TextRows is the number of names each table of WriteText shows; the rest
// are summed in a "… and K more" line.
const TextRows = 20

// textNameWidth is the widest a name column of WriteText is padded to;
// longer names push their own row's counts right.
const textNameWidth = 60

// entry is one row of a table.
type entry struct {
	Name  string
	Count int64
}

// sorted returns the table's names by count, most first, then by name.
// Other is not among them.
func (t *table) sorted() []entry {
	es := make([]entry, 0, len(t.counts))
	for name, r := range t.counts {
		es = append(es, entry{name, r.n})
	}
	slices.SortFunc(es, func(a, b entry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return es
}

// all returns the table as a map of name to count, Other included when
// it counted anything (added to a name "(other)" if one was seen).
func (t *table) all() map[string]int64 {
	m := make(map[string]int64, len(t.counts)+1)
	for name, r := range t.counts {
		m[name] = r.n
	}
	if t.other > 0 {
		m[Other] += t.other
	}
	return m
}

// stamp formats a record time as the audit log does: RFC 3339, UTC,
// milliseconds.
func stamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// share formats n as a percentage of total.
func share(n, total int64) string {
	if total == 0 {
		return "0.0%"
	}
	return strconv.FormatFloat(100*float64(n)/float64(total), 'f', 1, 64) + "%"
}

// WriteText writes the summary for people: the files, time range, totals
// (blocked by refusal class, and what sites charged), and tables with the
// TextRows largest counts: by decision, by origin, by origin and decision,
// the origins' answers by class (overall and by origin), by token, and by
// rule, disallow, allow and usage rules apart; then the refused URLs (the
// TextRefusedPerOrigin most refused of the TextRefusedOrigins origins most
// refused, what each refusal class means, and counts of the rest) and
// what each origin was charged.
// Names are printed as they are unless they hold control or other
// unprintable characters, in which case they are quoted with Go escapes,
// so that a hostile origin cannot drive the terminal.
func (s *Summary) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	row := func(k, v string) { fmt.Fprintf(bw, "%-10s %s\n", k, v) }
	files := make([]string, len(s.files))
	for i, f := range s.files {
		files[i] = printable(f)
	}
	row("files", strings.Join(files, " "))
	if s.total > 0 {
		row("from", stamp(s.from))
		row("to", stamp(s.to))
	} else {
		row("from", "-")
		row("to", "-")
	}
	row("records", strconv.FormatInt(s.total, 10))
	row("blocked", fmt.Sprintf("%d (%s; %s)", s.blocked, share(s.blocked, s.total), BlockedNames()))
	if s.blocked > 0 {
		row("", fmt.Sprintf("%d not sent: never left robotsgate", s.byClass[NotSent]))
		row("", fmt.Sprintf("%d withheld: sent, the site answered, its body withheld (usage refused by the answer itself)", s.byClass[BodyWithheld]))
	}
	if n := s.byClass[NotPaid]; n > 0 {
		row("not paid", fmt.Sprintf("%d (price-refused: sent, the site answered 402; nothing paid)", n))
	}
	if len(s.currencies) > 0 || s.notSummed > 0 {
		row("spent", moneyText(s.moneyOf(&s.spent))+s.notSummedNote())
	}
	row("malformed", lines(s.malformed)+" skipped")
	if s.checkpoints > 0 {
		row("checkpoints", fmt.Sprintf("%d (signed lines of the chain, not records: robotsgate audit verify checks them)", s.checkpoints))
	}
	if !s.Since.IsZero() {
		row("since", fmt.Sprintf("%s (%d earlier records skipped)", stamp(s.Since), s.skipped))
	}
	fmt.Fprintln(bw)
	writeTable(bw, "DECISION", &s.decisions, s.total)
	fmt.Fprintln(bw)
	writeTable(bw, "ORIGIN", &s.origins, s.total)
	fmt.Fprintln(bw)
	writeCross(bw, "ORIGIN × DECISION", "RECORDS", s.originDecisions(TextRows))
	fmt.Fprintln(bw)
	s.writeAnswers(bw)
	fmt.Fprintln(bw)
	writeTable(bw, "TOKEN", &s.tokens, s.total)
	for _, t := range []struct {
		title string
		kind  int
	}{
		{"DISALLOW RULE", ruleDisallow},
		{"ALLOW RULE", ruleAllow},
		{"USAGE RULE", ruleUsage},
	} {
		fmt.Fprintln(bw)
		writeTable(bw, t.title, s.rulesOf(t.kind), s.total)
	}
	fmt.Fprintln(bw)
	writeTable(bw, "USAGE SOURCE", s.usageSourceTable(), s.total)
	fmt.Fprintln(bw)
	s.writeRefused(bw)
	if len(s.currencies) > 0 || s.notSummed > 0 {
		fmt.Fprintln(bw)
		s.writeSpend(bw)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write text report: %w", err)
	}
	return nil
}

// writeTable writes one aligned table: name, records, share of total.
func writeTable(w io.Writer, title string, t *table, total int64) {
	es := t.sorted()
	shown := es[:min(len(es), TextRows)]
	width := utf8.RuneCountInString(title)
	names := make([]string, len(shown))
	for i, e := range shown {
		names[i] = printable(e.Name)
		width = max(width, min(utf8.RuneCountInString(names[i]), textNameWidth))
	}
	line := func(name, count, share string) {
		pad := max(width-utf8.RuneCountInString(name), 0)
		fmt.Fprintf(w, "%s%s  %9s  %6s\n", name, strings.Repeat(" ", pad), count, share)
	}
	line(title, "RECORDS", "SHARE")
	if len(es) == 0 && t.other == 0 {
		fmt.Fprintln(w, "(none)")
		return
	}
	for i, e := range shown {
		line(names[i], strconv.FormatInt(e.Count, 10), share(e.Count, total))
	}
	if rest := es[len(shown):]; len(rest) > 0 {
		var n int64
		for _, e := range rest {
			n += e.Count
		}
		fmt.Fprintf(w, "… and %d more (%d records, %s)\n", len(rest), n, share(n, total))
	}
	if t.other > 0 {
		fmt.Fprintf(w, "%s: %d records (%s) under names past the cap of distinct names\n", Other, t.other, share(t.other, total))
	}
}

// writeCross writes an origin table with counts by column: name, total,
// one count per column, and the rest summed in an Other row.
func writeCross(w io.Writer, title, totalColumn string, t crossTable) {
	rows := t.Rows
	if t.Rest != nil {
		rows = append(slices.Clip(rows), *t.Rest)
	}
	width := utf8.RuneCountInString(title)
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = printable(r.Name)
		width = max(width, min(utf8.RuneCountInString(names[i]), textNameWidth))
	}
	widths := make([]int, len(t.Columns))
	for j, c := range t.Columns {
		widths[j] = max(len(c), 5)
	}
	line := func(name, total string, counts []string) {
		pad := max(width-utf8.RuneCountInString(name), 0)
		fmt.Fprintf(w, "%s%s  %9s", name, strings.Repeat(" ", pad), total)
		for j, c := range counts {
			fmt.Fprintf(w, "  %*s", widths[j], c)
		}
		fmt.Fprintln(w)
	}
	line(title, totalColumn, t.Columns)
	if len(rows) == 0 {
		fmt.Fprintln(w, "(none)")
		return
	}
	counts := make([]string, len(t.Columns))
	for i, r := range rows {
		for j, n := range r.Counts {
			counts[j] = strconv.FormatInt(n, 10)
		}
		line(names[i], strconv.FormatInt(r.Total, 10), counts)
	}
	if t.Rest != nil {
		fmt.Fprintf(w, "%s: %s\n", Other, restNote(t))
	}
}

// restNote says what a cross table's Other row sums.
func restNote(t crossTable) string {
	var parts []string
	if t.More > 0 {
		parts = append(parts, fmt.Sprintf("%d more %s", t.More, plural(t.More, "origin", "origins")))
	}
	if t.Capped > 0 {
		parts = append(parts, fmt.Sprintf("%d records under origins past the cap of distinct names", t.Capped))
	}
	return strings.Join(parts, ", and ")
}

// plural is one or many for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// writeAnswers writes the origins' answers by class, overall and by
// origin, and says what they are made of.
func (s *Summary) writeAnswers(w io.Writer) {
	answered := sum(s.answers[:])
	fmt.Fprintf(w, "%-6s  %9s  %6s\n", "ANSWER", "RECORDS", "SHARE")
	for _, i := range s.shownClasses() {
		fmt.Fprintf(w, "%-6s  %9d  %6s\n", className(i), s.answers[i], share(s.answers[i], answered))
	}
	fmt.Fprintln(w, answersNote)
	if note := s.allowedNote(); note != "" {
		fmt.Fprintln(w, note)
	}
	fmt.Fprintln(w)
	writeCross(w, "ORIGIN × ANSWER", "ANSWERS", s.originAnswers(TextRows))
}

// answersNote says what the answers are.
const answersNote = "(the status the origin answered, on allowed and would-block records, whose answers their clients got; the refusals withheld and not paid reached it too: see REFUSED URLS)"

// allowedNote is a note when no allowed record was counted: the audit log
// holds them only with audit.log_allowed.
func (s *Summary) allowedNote() string {
	if s.total == 0 {
		return ""
	}
	if r := s.decisions.counts[policy.ActionAllowed.String()]; r != nil && r.n > 0 {
		return ""
	}
	return "no allowed records: the audit log holds allowed requests only with audit.log_allowed = true; set it to see the origins' answers to them"
}

// Text report's refused-URL list: the origins shown, and the URLs shown of
// each.
const (
	TextRefusedOrigins   = 10
	TextRefusedPerOrigin = 5
)

// writeRefused writes the refused URLs by origin: the classes present,
// what each means, then for each origin its refused records by class and
// its most refused URLs.
func (s *Summary) writeRefused(w io.Writer) {
	fmt.Fprintf(w, "REFUSED URLS (by origin, the %d most refused of each; -json lists %s)\n", TextRefusedPerOrigin, s.refusedListed())
	if sum(s.byClass[:]) == 0 {
		fmt.Fprintln(w, "(none)")
		return
	}
	if note := s.refusedListNote(); note != "" {
		fmt.Fprintln(w, note)
	}
	for c := range numRefusalClasses {
		if s.byClass[c] > 0 {
			fmt.Fprintf(w, "%-8s  %s\n", c.short(), c.Explain())
		}
	}
	origins, restOrigins, restRecords := s.refusedByOrigin(TextRefusedOrigins, TextRefusedPerOrigin)
	for _, o := range origins {
		fmt.Fprintf(w, "\n%s  %s\n", printable(o.Origin), classCounts(o.Records, o.ByClass))
		dw := 0
		for _, e := range o.Entries {
			dw = max(dw, len(e.Decision.String()))
		}
		for _, e := range o.Entries {
			fmt.Fprintf(w, "  %6s  %-8s  %-*s  %s%s\n", countText(e), e.class.short(), dw, e.Decision, printable(orDash(e.URL)), ruleNote(e))
		}
		if more := o.moreText(); more != "" {
			fmt.Fprintln(w, "  "+more)
		}
	}
	if restOrigins > 0 {
		fmt.Fprintf(w, "\n… and %d more %s (%d refused records)\n", restOrigins, plural(restOrigins, "origin", "origins"), restRecords)
	}
}

// classCounts is an origin's refused records, by class: "3 refused: 2 not
// sent, 1 withheld".
func classCounts(total int64, byClass [numRefusalClasses]int64) string {
	var parts []string
	for c, n := range byClass {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, RefusalClass(c).short()))
		}
	}
	return fmt.Sprintf("%d refused: %s", total, strings.Join(parts, ", "))
}

// ruleNote is a refusal's rule and line in brackets, or its reason in
// parentheses when it has no rule (a [[sites]] deny, a price refused);
// "" for neither.
func ruleNote(e *RefusedURL) string {
	switch {
	case e.Rule == "" && e.Reason != "":
		return "  (" + printable(e.Reason) + ")"
	case e.Rule == "":
		return ""
	case e.Line > 0:
		return fmt.Sprintf("  [%s, line %d]", printable(e.Rule), e.Line)
	}
	return "  [" + printable(e.Rule) + "]"
}

// orDash is s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// notSummedNote says how many charges were not summed; "" when none.
func (s *Summary) notSummedNote() string {
	if s.notSummed == 0 {
		return ""
	}
	return fmt.Sprintf("; %d charged values not summed (not an amount, or past %d currencies)", s.notSummed, MaxCurrencies)
}

// writeSpend writes what each origin charged.
func (s *Summary) writeSpend(w io.Writer) {
	rows := s.spendByOrigin()
	width := utf8.RuneCountInString("SPENT BY ORIGIN")
	for _, r := range rows[:min(len(rows), TextRows)] {
		width = max(width, min(utf8.RuneCountInString(printable(r.Origin)), textNameWidth))
	}
	fmt.Fprintf(w, "%-*s  %s\n", width, "SPENT BY ORIGIN", "SPENT")
	if len(rows) == 0 {
		fmt.Fprintln(w, "(none)")
	}
	for _, r := range rows[:min(len(rows), TextRows)] {
		name := printable(r.Origin)
		fmt.Fprintf(w, "%s%s  %s\n", name, strings.Repeat(" ", max(width-utf8.RuneCountInString(name), 0)), moneyText(r.Money))
	}
	if rest := rows[min(len(rows), TextRows):]; len(rest) > 0 {
		fmt.Fprintf(w, "… and %d more %s\n", len(rest), plural(len(rest), "origin", "origins"))
	}
}

// lines is "1 line" or "n lines".
func lines(n int64) string {
	if n == 1 {
		return "1 line"
	}
	return strconv.FormatInt(n, 10) + " lines"
}

// printable returns s, or s quoted with Go escapes when it is not valid
// UTF-8 or holds a character that is not printable.
func printable(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.QuoteToGraphic(s)
}

// jsonSummary is the object WriteJSON writes.
type jsonSummary struct {
	Total            int64                        `json:"total"`
	Blocked          int64                        `json:"blocked"`
	ByDecision       map[string]int64             `json:"by_decision"`
	ByOrigin         map[string]int64             `json:"by_origin"`
	ByToken          map[string]int64             `json:"by_token"`
	ByRule           map[string]int64             `json:"by_rule"`
	ByDisallowRule   map[string]int64             `json:"by_disallow_rule"`
	ByAllowRule      map[string]int64             `json:"by_allow_rule"`
	ByUsageRule      map[string]int64             `json:"by_usage_rule"`
	ByUsageSource    map[string]int64             `json:"by_usage_source"`
	ByOriginDecision map[string]map[string]int64  `json:"by_origin_decision"`
	ByClass          map[string]int64             `json:"by_class"`
	ByOriginClass    map[string]map[string]int64  `json:"by_origin_class"`
	ByRefusalClass   map[string]int64             `json:"by_refusal_class"`
	RefusedURLs      []*RefusedURL                `json:"refused_urls"`
	RefusedLeftOut   int64                        `json:"refused_urls_left_out"`
	Spent            map[string]string            `json:"spent"`
	ChargedRequests  map[string]int64             `json:"charged_requests"`
	SpentByOrigin    map[string]map[string]string `json:"spent_by_origin"`
	ChargedNotSummed int64                        `json:"charged_not_summed"`
	From             *string                      `json:"from"`
	To               *string                      `json:"to"`
	Malformed        int64                        `json:"malformed"`
	Checkpoints      int64                        `json:"checkpoints"`
	Files            []string                     `json:"files"`
}

// WriteJSON writes the summary as one JSON object: total, blocked,
// by_decision, by_origin, by_token, by_rule (each an object of name to
// count, every name kept, Other for the rest); by_disallow_rule,
// by_allow_rule and by_usage_rule, by_rule split by the rule's directive
// ("disallow: …", "allow: …", anything else: a usage statement);
// by_usage_source (the usage rules by where their statement came from:
// robots.txt, response header, html meta, html head unreadable,
// tdmrep.json, rsl licence; each always present);
// by_origin_decision (origin to an object of decision to count, for the
// origins of by_origin, Other for the rest); by_class (the origins'
// answers: 1xx, 2xx, 3xx, 4xx, 429 and 5xx, each always present) and
// by_origin_class (origin to an object of class to count, for the origins
// with answers); by_refusal_class (the refused records by RefusalClass,
// each always present), refused_urls (every RefusedURL the list kept,
// most records first: every refusal while it holds at most MaxRefused,
// then those kept by Space-Saving, each with its count_error) and
// refused_urls_left_out (the refused records in no listed count less its
// count_error: 0 while the list holds every refusal); spent (currency to the decimal sum charged), charged_requests
// (currency to the records charged), spent_by_origin (origin to an object
// of currency to sum; Other for the origins counted under it) and
// charged_not_summed; from and to (the time range as RFC 3339 UTC with
// milliseconds, null when no record was counted), malformed (lines
// skipped) and files (as named to Read). Zero counts are left out of the
// per-origin objects.
func (s *Summary) WriteJSON(w io.Writer) error {
	out := jsonSummary{
		Total:            s.total,
		Blocked:          s.blocked,
		ByDecision:       s.decisions.all(),
		ByOrigin:         s.origins.all(),
		ByToken:          s.tokens.all(),
		ByRule:           s.rules.all(),
		ByDisallowRule:   s.rulesOf(ruleDisallow).all(),
		ByAllowRule:      s.rulesOf(ruleAllow).all(),
		ByUsageRule:      s.rulesOf(ruleUsage).all(),
		ByUsageSource:    map[string]int64{},
		ByOriginDecision: map[string]map[string]int64{},
		ByClass:          map[string]int64{},
		ByOriginClass:    map[string]map[string]int64{},
		Malformed:        s.malformed,
		Checkpoints:      s.checkpoints,
		Files:            s.files,
	}
	s.jsonRefusals(&out)
	for i, n := range s.answers {
		out.ByClass[className(i)] = n
	}
	for _, name := range s.usageSourceNames() {
		out.ByUsageSource[name] = s.bySource[name]
	}
	add := func(name string, oc *originCounts) {
		if m := nonZero(oc.decisions[:], decisionName); m != nil {
			out.ByOriginDecision[name] = m
		}
		if m := nonZero(oc.answers[:], className); m != nil {
			out.ByOriginClass[name] = m
		}
	}
	for name, r := range s.origins.counts {
		add(name, r.origin)
	}
	if s.origins.other > 0 {
		// Merged into a name "(other)" if one was seen, as all does.
		if r := s.origins.counts[Other]; r != nil {
			merged := *r.origin
			for i, n := range s.otherOrigins.decisions {
				merged.decisions[i] += n
			}
			for i, n := range s.otherOrigins.answers {
				merged.answers[i] += n
			}
			add(Other, &merged)
		} else {
			add(Other, &s.otherOrigins)
		}
	}
	if out.Files == nil {
		out.Files = []string{}
	}
	if s.total > 0 {
		from, to := stamp(s.from), stamp(s.to)
		out.From, out.To = &from, &to
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("write JSON report: %w", err)
	}
	return nil
}

// jsonRefusals fills out's refusals and spend.
func (s *Summary) jsonRefusals(out *jsonSummary) {
	out.ByRefusalClass = map[string]int64{}
	for c, n := range s.byClass {
		out.ByRefusalClass[RefusalClass(c).String()] = n
	}
	out.RefusedURLs, out.RefusedLeftOut = s.refused.sorted(), s.refusedLeftOut()
	out.Spent, out.ChargedRequests, out.ChargedNotSummed = map[string]string{}, map[string]int64{}, s.notSummed
	for _, m := range s.moneyOf(&s.spent) {
		out.Spent[m.Currency], out.ChargedRequests[m.Currency] = m.Amount, m.Requests
	}
	out.SpentByOrigin = map[string]map[string]string{}
	for _, o := range s.spendByOrigin() {
		m := map[string]string{}
		for _, x := range o.Money {
			m[x.Currency] = x.Amount
		}
		out.SpentByOrigin[o.Origin] = m
	}
}

// nonZero returns counts' non-zero entries by name, or nil if there are none.
func nonZero(counts []int64, name func(int) string) map[string]int64 {
	var m map[string]int64
	for i, n := range counts {
		if n > 0 {
			if m == nil {
				m = map[string]int64{}
			}
			m[name(i)] += n
		}
	}
	return m
}
