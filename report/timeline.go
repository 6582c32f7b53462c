package report

import "time"

const (
	hour = int64(time.Hour / time.Second)
	day  = 24 * hour

	// maxSeries is the number of decisions the timeline tells apart: the
	// first ones seen (the proxy has 13); later ones share one series.
	maxSeries = 15
)

// timeline counts records per time bucket and decision. Buckets start an
// hour wide; when the records span more than the bucket limit, they are
// widened to a day, then 2, 4, 8… days, each width a multiple of the one
// before, so counts merge exactly. Buckets are aligned on UTC midnight.
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
		tl.width = hour
		tl.buckets = make(map[int64]*[maxSeries + 1]int64)
		tl.lo, tl.hi = floorDiv(sec, hour), floorDiv(sec, hour)
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

// widen doubles the bucket width (an hour becomes a day), merging buckets.
func (tl *timeline) widen() {
	f := int64(2)
	if tl.width == hour {
		f = day / hour
	}
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

// view returns the timeline as consecutive buckets for a chart of at most
// about maxBars bars: hours when it spans up to 7 days, else days, or
// wider buckets when days would be too many. It returns the width chosen.
func (tl *timeline) view(maxBars int) (width int64, spans []bucketSpan) {
	if tl.width == 0 {
		return 0, nil
	}
	lo, hi := tl.lo*tl.width, (tl.hi+1)*tl.width-1 // seconds covered
	width = hour
	if hi-lo >= 7*day {
		width = day
		for floorDiv(hi, width)-floorDiv(lo, width) >= int64(maxBars) {
			width *= 2
		}
	}
	width = max(width, tl.width)
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
