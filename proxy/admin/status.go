package admin

import (
	"cmp"
	_ "embed"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/pace"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// Bounds of what the status page keeps.
const (
	maxStatusOrigins = 10_000 // origins with counts; past it the least recently seen is dropped
	recentRecords    = 100    // the last non-allow audit records
)

// statusPage is the HTML page of GET /status: a table and a script that
// reads /status.json.
//
//go:embed status.html
var statusPage []byte

// Board keeps what /status shows besides the cache: decision counts
// per origin since start, bounded (past maxStatusOrigins the least recently
// seen tenth is dropped at once), and the last non-allow audit records.
// Counting a request takes no lock: a lookup in a sync.Map and atomic adds.
type Board struct {
	started time.Time
	now     func() time.Time

	origins sync.Map     // fetch.Origin → *originCounts
	n       atomic.Int64 // entries in origins

	mu     sync.Mutex                  // inserting into origins; the ring
	recent [recentRecords]audit.Record // a ring
	next   int                         // where the next record goes
	filled bool                        // the ring has wrapped
}

type originCounts struct {
	origin   fetch.Origin
	lastSeen atomic.Int64                         // Unix nanoseconds
	counts   [policy.NumActions]atomic.Int64      // by Action
	answers  [audit.NumAnswerClasses]atomic.Int64 // the origin's own answers, by class
	// The pacing interval of the last paced request (nanoseconds, +1:
	// 0 is none), and the Crawl-delay of the last robots.txt decision
	// (float bits, +1: 0 is none).
	gap, crawlDelay atomic.Uint64
}

// NewBoard returns an empty board, started now.
func NewBoard(now func() time.Time) *Board {
	return &Board{started: now(), now: now}
}

// Count adds one decision for its origin, with its pacing interval and
// Crawl-delay, and, when answered, the class of the origin's own answer.
func (b *Board) Count(d *policy.Decision, class audit.AnswerClass, answered bool) {
	o, a := d.Origin, d.Action
	if o.IsZero() || int(a) >= policy.NumActions {
		return
	}
	v, ok := b.origins.Load(o)
	if !ok {
		v = b.insert(o)
	}
	oc := v.(*originCounts)
	oc.lastSeen.Store(b.now().UnixNano())
	oc.counts[a].Add(1)
	if answered {
		oc.answers[class].Add(1)
	}
	// Stored only when they change: a busy origin's requests would
	// otherwise all write the same shared words.
	if v := uint64(d.Gap) + 1; d.Paced && oc.gap.Load() != v {
		oc.gap.Store(v)
	}
	if v := math.Float64bits(d.CrawlDelay) + 1; d.HasDelay && oc.crawlDelay.Load() != v {
		oc.crawlDelay.Store(v)
	}
}

// insert adds o, dropping the least recently seen tenth first when the
// board is full.
func (b *Board) insert(o fetch.Origin) any {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.origins.Load(o); ok {
		return v
	}
	if b.n.Load() >= maxStatusOrigins {
		var seen []int64
		b.origins.Range(func(_, v any) bool {
			seen = append(seen, v.(*originCounts).lastSeen.Load())
			return true
		})
		slices.Sort(seen)
		cut := seen[len(seen)/10]
		b.origins.Range(func(k, v any) bool {
			if v.(*originCounts).lastSeen.Load() <= cut {
				b.origins.Delete(k)
				b.n.Add(-1)
			}
			return true
		})
	}
	oc := &originCounts{origin: o}
	oc.lastSeen.Store(b.now().UnixNano())
	b.origins.Store(o, oc)
	b.n.Add(1)
	return oc
}

// Remember keeps one non-allow audit record, of the last recentRecords.
func (b *Board) Remember(rec *audit.Record) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recent[b.next] = *rec
	b.next = (b.next + 1) % recentRecords
	b.filled = b.filled || b.next == 0
}

// statusCounts is one origin's counts as /status.json shows them.
type statusCounts struct {
	origin     fetch.Origin
	lastSeen   int64
	counts     map[string]int64
	answers    map[string]int64
	interval   *float64 // seconds
	crawlDelay *float64
}

// snapshot copies the counts (most recently seen origin first) and the
// recent records (oldest first).
func (b *Board) snapshot() ([]statusCounts, []audit.Record) {
	var origins []statusCounts
	b.origins.Range(func(_, v any) bool {
		oc := v.(*originCounts)
		sc := statusCounts{origin: oc.origin, lastSeen: oc.lastSeen.Load(), counts: map[string]int64{}, answers: map[string]int64{}}
		for i := range oc.counts {
			if n := oc.counts[i].Load(); n > 0 {
				sc.counts[policy.Action(i).String()] = n
			}
		}
		for i := range oc.answers {
			if n := oc.answers[i].Load(); n > 0 {
				sc.answers[audit.AnswerClass(i).String()] = n
			}
		}
		if g := oc.gap.Load(); g > 0 {
			s := time.Duration(g - 1).Seconds()
			sc.interval = &s
		}
		if cd := oc.crawlDelay.Load(); cd > 0 {
			s := math.Float64frombits(cd - 1)
			sc.crawlDelay = &s
		}
		origins = append(origins, sc)
		return true
	})
	slices.SortFunc(origins, func(a, b statusCounts) int { return cmp.Compare(b.lastSeen, a.lastSeen) })
	b.mu.Lock()
	defer b.mu.Unlock()
	recent := []audit.Record{}
	if b.filled {
		recent = append(recent, b.recent[b.next:]...)
	}
	recent = append(recent, b.recent[:b.next]...)
	return origins, recent
}

// Status is GET /status.json (docs/operations.md, "The status page: GET
// /status and GET /status.json").
type Status struct {
	Started time.Time       `json:"started"`
	Now     time.Time       `json:"now"`
	Mode    string          `json:"mode"`
	Origins []OriginStatus  `json:"origins"`
	Recent  []audit.Record  `json:"recent"`
	Cluster *cluster.Status `json:"cluster"` // the fleet's Redis; null without [cluster]
	// Held is how many requests wait now, for their turn or for a
	// back-off, and BackingOff how many hosts are held by their origins'
	// back-off: each host once, however many of its origins are listed.
	Held       int `json:"held"`
	BackingOff int `json:"backing_off"`
}

// OriginStatus is one origin of a Status: its cached robots.txt, the
// decisions made for it and its own answers since start, and what holds
// its requests now.
type OriginStatus struct {
	Origin    string           `json:"origin"`
	State     string           `json:"state"` // fetched, unavailable, unreachable, or "" when nothing is cached
	Status    int              `json:"status"`
	FetchedAt *time.Time       `json:"fetched_at"`
	ExpiresAt *time.Time       `json:"expires_at"`
	LastError string           `json:"last_error"`
	Decisions map[string]int64 `json:"decisions"`
	// Answers are the origin's own answers to the requests forwarded to
	// it, by class: "2xx", "3xx", "4xx", "429", "5xx" (and "1xx").
	Answers map[string]int64 `json:"answers"`
	// CrawlDelay is what its robots.txt's groups for the last request's
	// tokens say (seconds); Interval the pacing interval last applied to
	// its host (Crawl-delay or min_interval, at most max_delay, at least
	// 1 s after a back-off). Null when none.
	CrawlDelay *float64 `json:"crawl_delay"`
	Interval   *float64 `json:"pacing_interval"`
	// BackoffUntil is when its host's back-off (its own 429, or 503 with
	// Retry-After) ends, null when none is in force; BackoffReason says
	// what the origin answered.
	BackoffUntil  *time.Time `json:"backoff_until"`
	BackoffReason string     `json:"backoff_reason"`
	// Held is how many requests to its host wait now: for their turn or
	// for the back-off to end. Pacing and back-off are per host: an
	// origin shows its host's, as the host's other origins do.
	Held int `json:"held"`
}

// serveStatus answers GET /status.json, or the page that shows it.
func (h *Handler) serveStatus(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Path == "/status" {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		// The page runs its own inline script and reads /status.json; it
		// loads nothing else and may not be framed.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		w.Write(statusPage)
		return
	}
	counts, recent := h.o.Board.snapshot()
	p, _ := h.o.Snapshot()
	out := Status{Started: h.o.Board.started.UTC(), Now: h.o.Now().UTC(), Mode: p.Mode().String(), Origins: make([]OriginStatus, 0, len(counts)), Recent: recent}
	if h.o.Cluster != nil {
		st := h.o.Cluster.Status()
		out.Cluster = &st
	}
	var holds map[string]pace.Hold
	if h.o.Holds != nil {
		holds = h.o.Holds()
	}
	for _, hold := range holds {
		out.Held += hold.Held
		if !hold.Until.IsZero() {
			out.BackingOff++
		}
	}
	for _, oc := range counts {
		oj := OriginStatus{Origin: oc.origin.String(), Decisions: oc.counts, Answers: oc.answers, CrawlDelay: oc.crawlDelay, Interval: oc.interval}
		if hold, ok := holds[oc.origin.Host]; ok {
			if !hold.Until.IsZero() {
				u := hold.Until.UTC()
				oj.BackoffUntil, oj.BackoffReason = &u, hold.Why
			}
			oj.Held = hold.Held
		}
		if a, ok := h.o.Cache.Peek(oc.origin); ok {
			oj.LastError = a.LastError
			if e := a.Entry; e != nil {
				oj.State, oj.Status = string(e.Outcome), e.Status
				at, exp := e.FetchedAt.UTC(), e.Expires.UTC()
				oj.FetchedAt, oj.ExpiresAt = &at, &exp
			} else {
				oj.State, oj.Status = string(fetch.Unreachable), a.LastStatus
			}
		}
		out.Origins = append(out.Origins, oj)
	}
	slices.SortStableFunc(out.Origins, func(a, b OriginStatus) int { return total(b.Decisions) - total(a.Decisions) })
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

func total(m map[string]int64) int {
	n := int64(0)
	for _, v := range m {
		n += v
	}
	return int(min(n, 1<<31-1))
}
