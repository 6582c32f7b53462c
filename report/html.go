package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// HTMLRows is the number of names each table of WriteHTML shows.
const HTMLRows = 100

//go:embed page.html.tmpl
var pageTemplate string

// parsePage parses the page's template, once per WriteHTML (a page is
// written once per report; no package state is kept).
func parsePage() (*template.Template, error) {
	return template.New("page").Parse(pageTemplate)
}

// WriteHTML writes the summary as one self-contained HTML page (inline CSS
// and SVG, no script, no external asset): the totals, a stacked bar chart
// of decisions over time, and the tables with up to HTMLRows names each:
// decisions, origins by decision, the origins' answers by class, the
// refused URLs (HTMLRefusedPerOrigin of each of the HTMLRefusedOrigins
// origins most refused), what each origin was charged, tokens, and
// disallow, allow and usage rules; then what each refusal class means for
// the site. Every name is escaped by html/template.
func (s *Summary) WriteHTML(w io.Writer) error {
	t, err := parsePage()
	if err != nil {
		return fmt.Errorf("parse HTML template: %w", err)
	}
	p := htmlPage{
		Files:     s.files,
		Total:     s.total,
		Blocked:   s.blocked,
		Share:     share(s.blocked, s.total),
		Malformed: s.malformed,
		Skipped:   s.skipped,
		BlockedAs: BlockedNames(),
		Chart:     s.chart(),
		Decisions: htmlTableOf("Decisions", "decision", &s.decisions, s.total),
		Origins:   s.htmlOrigins(),
		Answers:   s.htmlAnswers(),
		Tokens:    htmlTableOf("Tokens", "token", &s.tokens, s.total),
		Rules: []htmlTable{
			htmlTableOf("Disallow rules", "rule", s.rulesOf(ruleDisallow), s.total),
			htmlTableOf("Allow rules", "rule", s.rulesOf(ruleAllow), s.total),
			htmlTableOf("Usage rules", "statement", s.rulesOf(ruleUsage), s.total),
			htmlTableOf("Usage refusals by source", "source", s.usageSourceTable(), s.total),
		},
	}
	p.Rules[0].Note = "robots.txt disallow rules that decided a request: blocked (disallowed), forwarded in report mode (would-block), or overridden by a [[sites]] allow."
	p.Rules[1].Note = "robots.txt allow rules that decided a request: the longest match was an allow."
	p.Rules[2].Note = "Usage statements that refused a declared purpose (usage-refused): from robots.txt, a response header, an HTML page's meta elements, tdmrep.json or an RSL licence."
	p.Rules[3].Note = "The same refusals by where their statement came from."
	s.htmlRefusals(&p)
	if !s.Since.IsZero() {
		p.Since = stamp(s.Since)
	}
	if s.total > 0 {
		p.From, p.To = stamp(s.from), stamp(s.to)
	}
	if err := t.Execute(w, p); err != nil {
		return fmt.Errorf("write HTML report: %w", err)
	}
	return nil
}

// htmlPage is the data of page.html.tmpl.
type htmlPage struct {
	Files                              []string
	Total, Blocked, Malformed, Skipped int64
	Share, BlockedAs, Since, From, To  string
	Chart                              *svgChart // nil when there are no records
	Decisions, Tokens                  htmlTable
	Origins                            htmlCross
	Answers                            htmlAnswers
	Rules                              []htmlTable
	// Refusals: the blocked records by class, the price-refused ones, what
	// each class means, and the refused URLs by origin.
	NotSent, Withheld, NotPaid int64
	Classes                    []htmlRefusalClass // every class, for the footer
	Refused                    []htmlRefusedOrigin
	RefusedPer                 int    // the URLs shown of each origin
	RefusedRest                string // the origins not shown; "" when none
	RefusedListed              string // what -json lists (Summary.refusedListed)
	RefusedNote                string // what the list kept, when not every refusal; "" when every one
	// Spend: totals by currency, and by origin.
	Spent         []money
	SpentByOrigin []originSpend
	NotSummed     string // "" when every charge was summed
}

// htmlRefusalClass is one refusal class, as the page names it.
type htmlRefusalClass struct {
	Name, Color, Explain string
	Count                int64
}

// htmlRefusedOrigin is one origin's refused URLs.
type htmlRefusedOrigin struct {
	Origin  string
	Summary string // its refused records by class
	Entries []htmlRefused
	More    string // the URLs not shown; "" when none
}

// htmlRefused is one refused URL of the page.
type htmlRefused struct {
	*RefusedURL
	ClassName, Color string
	Records          string // its count, or the range of it (countText)
	Since            bool   // First is the earliest since it took another's place
}

// HTMLRefusedOrigins and HTMLRefusedPerOrigin bound WriteHTML's refused-URL
// list: the origins shown, and the URLs shown of each.
const (
	HTMLRefusedOrigins   = 50
	HTMLRefusedPerOrigin = 10
)

// refusalColors are the refusal classes' colours.
var refusalColors = [numRefusalClasses]string{NotSent: "#d32f2f", BodyWithheld: "#ef6c00", NotPaid: "#6a1b9a"}

// htmlRefusals fills p's refusals and spend.
func (s *Summary) htmlRefusals(p *htmlPage) {
	p.NotSent, p.Withheld, p.NotPaid = s.byClass[NotSent], s.byClass[BodyWithheld], s.byClass[NotPaid]
	for c := range numRefusalClasses {
		p.Classes = append(p.Classes, htmlRefusalClass{Name: c.short(), Color: refusalColors[c], Explain: c.Explain(), Count: s.byClass[c]})
	}
	p.RefusedPer, p.RefusedListed, p.RefusedNote = HTMLRefusedPerOrigin, s.refusedListed(), s.refusedListNote()
	origins, rest, restRecords := s.refusedByOrigin(HTMLRefusedOrigins, HTMLRefusedPerOrigin)
	for _, o := range origins {
		ho := htmlRefusedOrigin{Origin: o.Origin, Summary: classCounts(o.Records, o.ByClass)}
		for _, e := range o.Entries {
			ho.Entries = append(ho.Entries, htmlRefused{e, e.class.short(), refusalColors[e.class], countText(e), e.CountError > 0})
		}
		ho.More = o.moreText()
		p.Refused = append(p.Refused, ho)
	}
	if rest > 0 {
		p.RefusedRest = fmt.Sprintf("… and %d more %s (%d refused records).", rest, plural(rest, "origin", "origins"), restRecords)
	}
	p.Spent = s.moneyOf(&s.spent)
	p.SpentByOrigin = s.spendByOrigin()
	p.SpentByOrigin = p.SpentByOrigin[:min(len(p.SpentByOrigin), HTMLRows)]
	if s.notSummed > 0 {
		p.NotSummed = strings.TrimPrefix(s.notSummedNote(), "; ")
	}
}

// htmlTable is one table of the page.
type htmlTable struct {
	Title, Column string
	Rows          []htmlRow
	More          int    // names not shown
	MoreRecords   string // their records and share
	Other         string // records counted under Other, "" if none
	Note          string // what the table holds, "" for none
}

type htmlRow struct {
	Name  string
	Count int64
	Share string
}

func htmlTableOf(title, column string, t *table, total int64) htmlTable {
	es := t.sorted()
	ht := htmlTable{Title: title, Column: column}
	for _, e := range es[:min(len(es), HTMLRows)] {
		ht.Rows = append(ht.Rows, htmlRow{e.Name, e.Count, share(e.Count, total)})
	}
	if rest := es[len(ht.Rows):]; len(rest) > 0 {
		var n int64
		for _, e := range rest {
			n += e.Count
		}
		ht.More, ht.MoreRecords = len(rest), fmt.Sprintf("%d records, %s", n, share(n, total))
	}
	if t.other > 0 {
		ht.Other = fmt.Sprintf("%d records, %s", t.other, share(t.other, total))
	}
	return ht
}

// htmlCross is an origin table with counts by column.
type htmlCross struct {
	Column, TotalColumn string // the name and total columns' headings
	Columns             []htmlColumn
	Rows                []htmlCrossRow // the Other row last, if any
	Rest                string         // what the Other row sums; "" when there is none
}

type htmlColumn struct {
	Name, Color string
}

type htmlCrossRow struct {
	Name   string
	Other  bool // the row sums the rest
	Total  int64
	Share  string // of Total in the table's total
	Counts []htmlCount
	Mix    []htmlMix // the counts as a stacked bar
}

type htmlCount struct {
	N    int64
	Zero bool
}

// htmlMix is one part of a row's stacked bar: its width in percent.
type htmlMix struct {
	Width string
	Color string
	Title string
}

// htmlCrossOf lays out t, whose rows total total, with the columns'
// colours.
func htmlCrossOf(column, totalColumn string, t crossTable, colors []string, total int64) htmlCross {
	h := htmlCross{Column: column, TotalColumn: totalColumn}
	for j, c := range t.Columns {
		h.Columns = append(h.Columns, htmlColumn{c, colors[j]})
	}
	rows := t.Rows
	if t.Rest != nil {
		rows = append(slices.Clip(rows), *t.Rest)
		h.Rest = restNote(t)
	}
	for i, r := range rows {
		hr := htmlCrossRow{Name: r.Name, Other: t.Rest != nil && i == len(rows)-1, Total: r.Total, Share: share(r.Total, total)}
		for j, n := range r.Counts {
			hr.Counts = append(hr.Counts, htmlCount{n, n == 0})
			if n > 0 && r.Total > 0 {
				hr.Mix = append(hr.Mix, htmlMix{
					Width: strconv.FormatFloat(100*float64(n)/float64(r.Total), 'f', 2, 64) + "%",
					Color: colors[j],
					Title: fmt.Sprintf("%s %d (%s)", t.Columns[j], n, share(n, r.Total)),
				})
			}
		}
		h.Rows = append(h.Rows, hr)
	}
	return h
}

// htmlOrigins is the origins table: records by origin and decision.
func (s *Summary) htmlOrigins() htmlCross {
	t := s.originDecisions(HTMLRows)
	colors := make([]string, len(t.Columns))
	for j, name := range t.Columns {
		colors[j] = decisionColor(name, j)
	}
	return htmlCrossOf("origin", "records", t, colors, s.total)
}

// classColors are the answer classes' colours, by audit.AnswerClass.
var classColors = [numClasses]string{"#00897b", "#43a047", "#1e88e5", "#ef6c00", "#8e24aa", "#d32f2f"}

// htmlAnswers is the origins' answers: by class and by origin.
type htmlAnswers struct {
	Total    int64
	Classes  []htmlClass
	Origins  htmlCross
	Note     string // when no allowed record was counted
	Explains string
}

type htmlClass struct {
	Name, Color, Share string
	Count              int64
}

func (s *Summary) htmlAnswers() htmlAnswers {
	total := sum(s.answers[:])
	a := htmlAnswers{Total: total, Note: s.allowedNote()}
	var colors []string
	for _, i := range s.shownClasses() {
		a.Classes = append(a.Classes, htmlClass{className(i), classColors[i], share(s.answers[i], total), s.answers[i]})
		colors = append(colors, classColors[i])
	}
	a.Origins = htmlCrossOf("origin", "answers", s.originAnswers(HTMLRows), colors, total)
	return a
}

// decisionColor is the chart's colour for decision, the jth of the extra
// decisions when it is not one of the proxy's.
func decisionColor(name string, j int) string {
	if name == Other {
		return otherColor
	}
	for _, dc := range decisionColors {
		if dc.name == name {
			return dc.color
		}
	}
	return extraColors[j%len(extraColors)]
}

// svgChart is the laid-out chart: every coordinate in viewBox units.
type svgChart struct {
	Width, Height                      float64
	Left, Top, Right, Bottom           float64 // the plot area
	TickEnd                            float64 // where the x axis' tick marks end
	XLabel, YLabel                     string
	XLabelX, XLabelY, YLabelX, YLabelY float64
	Bars                               []svgRect
	XTicks, YTicks                     []svgTick
	Legend                             []svgLegend
	Summary                            string // for screen readers
}

type svgRect struct {
	X, Y, W, H float64
	Color      string
	Title      string
}

type svgTick struct {
	X, Y  float64
	Label string
}

type svgLegend struct {
	X, Y  float64
	Color string
	Name  string
}

// decisionColors are the chart's colours for the proxy's decisions; the
// order is the stacking order, blocks at the bottom.
var decisionColors = []struct{ name, color string }{
	{"disallowed", "#d32f2f"},
	{"denied", "#8e24aa"},
	{"usage-refused", "#c2185b"},
	{"private-address", "#6d4c41"},
	{"unreachable", "#ef6c00"},
	{"would-block", "#f9a825"},
	{"paced", "#1e88e5"},
	{"upstream-error", "#546e7a"},
	{"auth-required", "#00897b"},
	{"bad-request", "#9e9d24"},
	{"misdirected", "#5c6bc0"},
	{"overloaded", "#283593"},
	{"shutting-down", "#00acc1"},
	{"client-left", "#bdbdbd"},
	{"price-refused", "#6a1b9a"},
	{"allowed", "#43a047"},
}

// extraColors colour decisions the proxy does not make, in turn.
var extraColors = []string{"#7cb342", "#ab47bc", "#8d6e63", "#26a69a", "#ec407a"}

const otherColor = "#9e9e9e"

// chart lays out the timeline as a stacked bar chart, or returns nil when
// there is nothing to draw.
func (s *Summary) chart() *svgChart {
	width, spans := s.timeline.view()
	if len(spans) == 0 {
		return nil
	}
	// The series present, in stacking order, with their colours.
	type series struct {
		index       int
		name, color string
	}
	var order []series
	present := func(i int) bool {
		for _, sp := range spans {
			if sp.counts[i] > 0 {
				return true
			}
		}
		return false
	}
	used := map[int]bool{}
	for _, dc := range decisionColors {
		if i := slices.Index(s.timeline.series, dc.name); i >= 0 && present(i) {
			order = append(order, series{i, dc.name, dc.color})
			used[i] = true
		}
	}
	extra := 0
	for i, name := range s.timeline.series {
		if !used[i] && present(i) {
			color := otherColor
			if name != Other {
				color = extraColors[extra%len(extraColors)]
				extra++
			}
			order = append(order, series{i, name, color})
		}
	}
	if present(maxSeries) {
		order = append(order, series{maxSeries, Other, otherColor})
	}

	// Right leaves room for half of the last x label, which is centred on
	// its tick.
	c := &svgChart{Width: 800, Left: 64, Top: 16, Right: 744, Bottom: 256, TickEnd: 261}
	var top int64
	for _, sp := range spans {
		var n int64
		for _, k := range sp.counts {
			n += k
		}
		top = max(top, n)
	}
	step := niceStep(float64(top) / 4)
	yMax := step * math.Ceil(float64(top)/step)
	for v := 0.0; v <= yMax+step/2; v += step {
		c.YTicks = append(c.YTicks, svgTick{X: c.Left - 6, Y: round1(c.Bottom - v/yMax*(c.Bottom-c.Top)), Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}

	slot := (c.Right - c.Left) / float64(len(spans))
	gap := 0.0
	if slot > 4 {
		gap = min(slot*0.15, 6)
	}
	start, end := spans[0].start, spans[len(spans)-1].start.Add(time.Duration(width)*time.Second)
	oneDay := width < day && start.Truncate(24*time.Hour).Equal(end.Add(-time.Second).Truncate(24*time.Hour))
	ax := axisOf(width, oneDay)
	for i, sp := range spans {
		x := c.Left + float64(i)*slot + gap/2
		y := c.Bottom
		when := sp.start.Format(ax.title)
		if width >= day {
			when = sp.start.Format("2006-01-02")
			if width > day {
				when += " – " + sp.start.Add(time.Duration(width-day)*time.Second).Format("2006-01-02")
			}
		}
		for _, se := range order {
			n := sp.counts[se.index]
			if n == 0 {
				continue
			}
			h := float64(n) / yMax * (c.Bottom - c.Top)
			y -= h
			c.Bars = append(c.Bars, svgRect{X: round1(x), Y: round1(y), W: round1(slot - gap), H: round1(h), Color: se.color,
				Title: fmt.Sprintf("%s: %s %d", when, se.name, n)})
		}
	}
	c.XTicks = xTicks(start, width, len(spans), c.Left, c.Right, c.Bottom+18, ax.tick)
	c.XLabel = "time (UTC), one bar per " + ax.unit
	if oneDay {
		c.XLabel = "time (UTC) on " + start.Format("2006-01-02") + ", one bar per " + ax.unit
	}
	c.XLabelX, c.XLabelY = (c.Left+c.Right)/2, c.Bottom+40
	c.YLabel = "records"
	c.YLabelX, c.YLabelY = 16, (c.Top+c.Bottom)/2

	// The legend, wrapped in rows under the axis label.
	x, y := c.Left, c.Bottom+64
	for _, se := range order {
		w := 28 + 7.5*float64(len([]rune(se.name)))
		if x+w > c.Right && x > c.Left {
			x, y = c.Left, y+22
		}
		c.Legend = append(c.Legend, svgLegend{X: round1(x), Y: round1(y), Color: se.color, Name: se.name})
		x += w + 12
	}
	c.Height = y + 16
	c.Summary = fmt.Sprintf("Stacked bar chart: records per %s by decision, %d bars, at most %d records in one bar.", ax.unit, len(spans), top)
	return c
}

// axis is how a chart of one bucket width names its times.
type axis struct {
	unit  string // "10 seconds", "hour", "2 days"
	tick  string // time layout of the x axis' labels
	title string // time layout of a bar's start, in its tooltip
}

// axisOf returns the axis of a chart of buckets width seconds wide;
// oneDay: all of them fall on one UTC day, which the labels then leave
// out.
func axisOf(width int64, oneDay bool) axis {
	var a axis
	switch {
	case width < minute:
		a = axis{unit: "seconds", tick: "01-02 15:04:05", title: "2006-01-02 15:04:05 UTC"}
		if width == 1 {
			a.unit = "second"
		} else {
			a.unit = fmt.Sprintf("%d seconds", width)
		}
	case width < hour:
		a = axis{unit: fmt.Sprintf("%d minutes", width/minute), tick: "01-02 15:04", title: "2006-01-02 15:04 UTC"}
		if width == minute {
			a.unit = "minute"
		}
	case width < day:
		a = axis{unit: fmt.Sprintf("%d hours", width/hour), tick: "01-02 15:04", title: "2006-01-02 15:04 UTC"}
		if width == hour {
			a.unit = "hour"
		}
	default:
		a = axis{unit: fmt.Sprintf("%d days", width/day), tick: "2006-01-02", title: "2006-01-02"}
		if width == day {
			a.unit = "day"
		}
	}
	if oneDay {
		a.tick = a.tick[len("01-02 "):]
	}
	return a
}

// tickSteps are the spaces between x labels, in seconds, that a chart
// picks from: round times, the finest that leaves room between labels.
var tickSteps = []int64{1, 2, 5, 10, 15, 30, minute, 2 * minute, 5 * minute, 10 * minute, 15 * minute, 30 * minute,
	hour, 2 * hour, 3 * hour, 6 * hour, 12 * hour, day, 2 * day, 7 * day, 14 * day}

// xTicks places labels in layout on the boundaries of bars width seconds
// wide, the first starting at start, n of them between left and right:
// at round times (a multiple of a step of tickSteps, or of the width past
// them), far enough apart for the labels not to touch, and at the first
// bar's start too when there is room before the first round time.
func xTicks(start time.Time, width int64, n int, left, right, y float64, layout string) []svgTick {
	slot := (right - left) / float64(n)
	room := 7.5*float64(len(layout)) + 24 // px a label needs
	first, last := start.Unix(), start.Unix()+int64(n)*width
	step := int64(0)
	for _, st := range tickSteps {
		if st%width == 0 && float64(st/width)*slot >= room {
			step = st
			break
		}
	}
	if step == 0 {
		step = width
		for float64(step/width)*slot < room {
			step *= 2
		}
	}
	xOf := func(t int64) float64 { return left + float64(t-first)/float64(width)*slot }
	var ticks []svgTick
	t0 := (floorDiv(first-1, step) + 1) * step // the first round time at or after first
	if xOf(t0)-left >= room {
		ticks = append(ticks, svgTick{X: round1(left), Y: y, Label: start.Format(layout)})
	}
	for t := t0; t <= last; t += step {
		ticks = append(ticks, svgTick{X: round1(xOf(t)), Y: y, Label: time.Unix(t, 0).UTC().Format(layout)})
	}
	return ticks
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten, at least 1.
func niceStep(x float64) float64 {
	if x <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }
