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
	for name, n := range t.counts {
		es = append(es, entry{name, *n})
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
	for name, n := range t.counts {
		m[name] = *n
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

// WriteText writes the summary for people: the files, time range, totals,
// and one table per decision, origin, token and rule with the TextRows
// largest counts. Names are printed as they are unless they hold control
// or other unprintable characters, in which case they are quoted with Go
// escapes, so that a hostile origin cannot drive the terminal.
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
	row("malformed", lines(s.malformed)+" skipped")
	if !s.Since.IsZero() {
		row("since", fmt.Sprintf("%s (%d earlier records skipped)", stamp(s.Since), s.skipped))
	}
	for _, t := range []struct {
		title string
		t     *table
	}{
		{"DECISION", &s.decisions},
		{"ORIGIN", &s.origins},
		{"TOKEN", &s.tokens},
		{"RULE", &s.rules},
	} {
		fmt.Fprintln(bw)
		writeTable(bw, t.title, t.t, s.total)
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
	Total      int64            `json:"total"`
	Blocked    int64            `json:"blocked"`
	ByDecision map[string]int64 `json:"by_decision"`
	ByOrigin   map[string]int64 `json:"by_origin"`
	ByToken    map[string]int64 `json:"by_token"`
	ByRule     map[string]int64 `json:"by_rule"`
	From       *string          `json:"from"`
	To         *string          `json:"to"`
	Malformed  int64            `json:"malformed"`
	Files      []string         `json:"files"`
}

// WriteJSON writes the summary as one JSON object: total, blocked,
// by_decision, by_origin, by_token, by_rule (each an object of name to
// count, every name kept, Other for the rest), from and to (the time range
// as RFC 3339 UTC with milliseconds, null when no record was counted),
// malformed (lines skipped) and files (as named to Read).
func (s *Summary) WriteJSON(w io.Writer) error {
	out := jsonSummary{
		Total:      s.total,
		Blocked:    s.blocked,
		ByDecision: s.decisions.all(),
		ByOrigin:   s.origins.all(),
		ByToken:    s.tokens.all(),
		ByRule:     s.rules.all(),
		Malformed:  s.malformed,
		Files:      s.files,
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
