package report

import "time"

const (
	minute = int64(time.Minute / time.Second)
	hour   = int64(time.Hour / time.Second)
	day    = 24 * hour

	// maxSeries is the number of decisions the timeline tells apart: the
	// first ones seen (the proxy has 13); later ones share one series.
	maxSeries = 15
)

// ladder is the bucket widths, in seconds, finest first. Each is a
// multiple of the one before, so buckets merge exactly when widened, and
// each up to a day divides a day, so buckets align on UTC midnight. Past
// the last, widths double: 2, 4, 8… days, aligned on the Unix epoch.
var ladder = [...]int64{1, 5, 10, 30, minute, 5 * minute, 15 * minute, hour, 6 * hour, day}

// coarser returns the width after w (a width of the ladder, or past it).
func coarser(w int64) int64 {
	for _, l := range ladder {
		if l > w {
			return l
		}
	}
	return 2 * w
}

// timeline counts records per time bucket and decision. Buckets start a
// second wide; when the records span more than the bucket limit, they are
// widened along the ladder, merging their counts.
type timeline struct {
	width   int64                           // seconds; 0 until the first record
	buckets map[int64]*[maxSeries + 1]int64 // by bucket index: Unix time / width
	lo, hi  int64                           // the lowest and highest index held
	series  []string                        // decision of each series; maxSeries is "(other)"
}

// add counts one record at t for decision, keeping at most limit buckets.
func (tl *timeline) add(t time.Time, decision []byte, limit int) {
	sec := t.Unix()
	if tl.width == 0 {
		tl.width = ladder[0]
		tl.buckets = make(map[int64]*[maxSeries + 1]int64)
		tl.lo, tl.hi = floorDiv(sec, tl.width), floorDiv(sec, tl.width)
	}
	i := floorDiv(sec, tl.width)
	tl.lo, tl.hi = min(tl.lo, i), max(tl.hi, i)
	for tl.hi-tl.lo >= int64(limit) && tl.hi-tl.lo > 0 {
		tl.widen()
		i = floorDiv(sec, tl.width)
	}
	b := tl.buckets[i]
	if b == nil {
		b = new([maxSeries + 1]int64)
		tl.buckets[i] = b
	}
	b[tl.seriesOf(decision)]++
}

// widen moves the buckets to the next width of the ladder, merging them.
func (tl *timeline) widen() {
	f := coarser(tl.width) / tl.width
	tl.width *= f
	merged := make(map[int64]*[maxSeries + 1]int64, len(tl.buckets)/int(f)+1)
	for i, b := range tl.buckets {
		j := floorDiv(i, f)
		m := merged[j]
		if m == nil {
			merged[j] = b
			continue
		}
		for k := range m {
			m[k] += b[k]
		}
	}
	tl.buckets = merged
	tl.lo, tl.hi = floorDiv(tl.lo, f), floorDiv(tl.hi, f)
}

// seriesOf returns the series index of decision, adding it if there is room.
func (tl *timeline) seriesOf(decision []byte) int {
	if string(decision) == Other {
		return maxSeries
	}
	for i, d := range tl.series {
		if d == string(decision) {
			return i
		}
	}
	if len(tl.series) < maxSeries {
		tl.series = append(tl.series, string(decision))
		return len(tl.series) - 1
	}
	return maxSeries
}

// bucketSpan is a run of time and its count per series, for the chart.
type bucketSpan struct {
	start  time.Time
	counts [maxSeries + 1]int64
}

// chartMinBars is the fewest bars view draws when the records span
// enough time: it takes the coarsest width of the ladder that still gives
// this many. Widths along the ladder grow at most six-fold, so the chart
// has from 20 to about 120 bars (a 4-minute run: 25 bars of 10 seconds;
// an hour: 61 of a minute; 3 days: 73 of an hour).
const chartMinBars = 20

// view returns the timeline as consecutive buckets for a chart: the
// coarsest width of the ladder (no finer than the buckets kept) that
// gives at least chartMinBars buckets over the time covered, or the
// finest when none does. It returns the width chosen.
func (tl *timeline) view() (width int64, spans []bucketSpan) {
	if tl.width == 0 {
		return 0, nil
	}
	lo, hi := tl.lo*tl.width, (tl.hi+1)*tl.width-1 // seconds covered
	bars := func(w int64) int64 { return floorDiv(hi, w) - floorDiv(lo, w) + 1 }
	width = tl.width
	for bars(coarser(width)) >= chartMinBars {
		width = coarser(width)
	}
	first, last := floorDiv(lo, width), floorDiv(hi, width)
	spans = make([]bucketSpan, last-first+1)
	for i := range spans {
		spans[i].start = time.Unix((first+int64(i))*width, 0).UTC()
	}
	for i, b := range tl.buckets {
		s := &spans[floorDiv(i*tl.width, width)-first]
		for k, n := range b {
			s.counts[k] += n
		}
	}
	return width, spans
}

// floorDiv is a / b rounded down (b > 0), for times before 1970 too.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
