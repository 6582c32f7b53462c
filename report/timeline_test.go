package report

import (
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// chartMaxBars is the most bars a chart may have: the ladder grows at
// most six-fold from one width to the next, so the coarsest width with
// at least chartMinBars bars has fewer than 6 × (chartMinBars - 1) + 2.
const chartMaxBars = 120

func TestLadder(t *testing.T) {
	t.Parallel()
	for i := 1; i < len(ladder); i++ {
		if ladder[i]%ladder[i-1] != 0 || ladder[i]/ladder[i-1] > 6 {
			t.Errorf("ladder[%d] = %d after %d; want a multiple, at most 6 times", i, ladder[i], ladder[i-1])
		}
		if day%ladder[i] != 0 {
			t.Errorf("ladder[%d] = %d does not divide a day", i, ladder[i])
		}
	}
	if got := coarser(day); got != 2*day {
		t.Errorf("coarser(day) = %d; want %d", got, 2*day)
	}
}

func TestChartWidth(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		span time.Duration
		unit string
		bars int
	}{
		{0, "second", 1},
		{19 * time.Second, "second", 20},
		{4 * time.Minute, "10 seconds", 25}, // a 4-minute crawl
		{4*time.Minute - time.Second, "10 seconds", 24},
		{10 * time.Minute, "30 seconds", 21},
		{time.Hour, "minute", 61},
		{90 * time.Minute, "minute", 91}, // 5 minutes would be 19 bars
		{2 * time.Hour, "5 minutes", 25},
		{47 * time.Hour, "hour", 48},
		{72*time.Hour - time.Second, "hour", 72}, // 3 days
		{7*24*time.Hour - time.Hour, "6 hours", 28},
		{30 * 24 * time.Hour, "day", 31},
		{199 * 24 * time.Hour, "8 days", 26},
		{20 * 365 * 24 * time.Hour, "256 days", 29},
	}
	for _, tt := range tests {
		s := &Summary{}
		s.Add(&audit.Record{Time: audit.Time(start), Decision: policy.ActionAllowed})
		s.Add(&audit.Record{Time: audit.Time(start.Add(tt.span)), Decision: policy.ActionDisallowed})
		c := s.chart()
		_, spans := s.timeline.view()
		if !strings.HasSuffix(c.XLabel, "one bar per "+tt.unit) || len(spans) != tt.bars {
			t.Errorf("span %v: %q, %d bars; want one bar per %s, %d bars", tt.span, c.XLabel, len(spans), tt.unit, tt.bars)
		}
	}
	if c := (&Summary{}).chart(); c != nil {
		t.Errorf("chart of no records = %+v; want nil", c)
	}
}

// TestChartBars: whatever the span past 19 seconds, wherever it starts,
// the chart has from chartMinBars to chartMaxBars bars, and every record
// is in one.
func TestChartBars(t *testing.T) {
	t.Parallel()
	starts := []time.Time{
		time.Date(2026, 11, 23, 8, 41, 38, 637e6, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC),
	}
	for _, start := range starts {
		for span := 19 * time.Second; span < 40*365*24*time.Hour; span += span * 3 / 20 {
			s := &Summary{}
			for i := range 11 {
				s.Add(&audit.Record{Time: audit.Time(start.Add(span * time.Duration(i) / 10)), Decision: policy.ActionAllowed})
			}
			_, spans := s.timeline.view()
			var n int64
			for _, sp := range spans {
				n += sp.counts[0]
			}
			if len(spans) < chartMinBars || len(spans) > chartMaxBars || n != 11 {
				t.Errorf("start %v, span %v: %d bars holding %d records; want %d to %d bars, 11 records",
					start, span, len(spans), n, chartMinBars, chartMaxBars)
			}
		}
	}
}

func TestXTicks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		start time.Time
		width int64
		n     int
		want  []string
	}{
		{time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC), 10, 24,
			[]string{"08:00:00", "08:00:30", "08:01:00", "08:01:30", "08:02:00", "08:02:30", "08:03:00", "08:03:30", "08:04:00"}},
		{time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC), hour, 72,
			[]string{"11-20 00:00", "11-20 12:00", "11-21 00:00", "11-21 12:00", "11-22 00:00", "11-22 12:00", "11-23 00:00"}},
		// Not on a round time: the first bar's start is labelled too,
		// when there is room before the first round time.
		{time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC), hour, 25,
			[]string{"11-23 08:00", "11-23 12:00", "11-23 18:00", "11-24 00:00", "11-24 06:00"}},
	}
	for _, tt := range tests {
		layout := axisOf(tt.width, tt.width < hour).tick
		var got []string
		prev := -1.0
		for _, tk := range xTicks(tt.start, tt.width, tt.n, 64, 744, 274, layout) {
			got = append(got, tk.Label)
			if tk.X < 64 || tk.X > 744 || tk.X <= prev {
				t.Errorf("%v, %d × %ds: tick %q at x %v", tt.start, tt.n, tt.width, tk.Label, tk.X)
			}
			prev = tk.X
		}
		if strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("%v, %d × %ds: ticks %q; want %q", tt.start, tt.n, tt.width, got, tt.want)
		}
	}
}
