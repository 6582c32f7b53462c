package proxy

import (
	"cmp"
	_ "embed"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robotsgate/robotsgate/cluster"
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

// statusBoard keeps what /status shows besides the cache: decision counts
// per origin since start, bounded (past maxStatusOrigins the least recently
// seen tenth is dropped at once), and the last non-allow audit records.
// Counting a request takes no lock: a lookup in a sync.Map and atomic adds.
type statusBoard struct {
	started time.Time
	now     func() time.Time

	origins sync.Map     // fetch.Origin → *originCounts
	n       atomic.Int64 // entries in origins

	mu     sync.Mutex                     // inserting into origins; the ring
	recent [recentRecords]json.RawMessage // a ring
	next   int                            // where the next record goes
	filled bool                           // the ring has wrapped
}

type originCounts struct {
	origin   fetch.Origin
	lastSeen atomic.Int64             // Unix nanoseconds
	counts   [numActions]atomic.Int64 // by actionIndex
}

func newStatusBoard(now func() time.Time) *statusBoard {
	return &statusBoard{started: now(), now: now}
}

// count adds one decision for an origin.
func (b *statusBoard) count(o fetch.Origin, decision string) {
	if o.IsZero() {
		return
	}
	i := actionIndex(decision)
	if i < 0 {
		return
	}
	v, ok := b.origins.Load(o)
	if !ok {
		v = b.insert(o)
	}
	oc := v.(*originCounts)
	oc.lastSeen.Store(b.now().UnixNano())
	oc.counts[i].Add(1)
}

// insert adds o, dropping the least recently seen tenth first when the
// board is full.
func (b *statusBoard) insert(o fetch.Origin) any {
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

// remember keeps one non-allow audit record.
func (b *statusBoard) remember(rec json.RawMessage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recent[b.next] = rec
	b.next = (b.next + 1) % recentRecords
	b.filled = b.filled || b.next == 0
}

// statusCounts is one origin's counts as /status.json shows them.
type statusCounts struct {
	origin   fetch.Origin
	lastSeen int64
	counts   map[string]int64
}

// snapshot copies the counts (most recently seen origin first) and the
// recent records (oldest first).
func (b *statusBoard) snapshot() ([]statusCounts, []json.RawMessage) {
	var origins []statusCounts
	b.origins.Range(func(_, v any) bool {
		oc := v.(*originCounts)
		sc := statusCounts{origin: oc.origin, lastSeen: oc.lastSeen.Load(), counts: map[string]int64{}}
		for i := range oc.counts {
			if n := oc.counts[i].Load(); n > 0 {
				sc.counts[actions()[i]] = n
			}
		}
		origins = append(origins, sc)
		return true
	})
	slices.SortFunc(origins, func(a, b statusCounts) int { return cmp.Compare(b.lastSeen, a.lastSeen) })
	b.mu.Lock()
	defer b.mu.Unlock()
	var recent []json.RawMessage
	if b.filled {
		recent = append(recent, b.recent[b.next:]...)
	}
	recent = append(recent, b.recent[:b.next]...)
	return origins, recent
}

// statusJSON is GET /status.json (DESIGN "Operator surface").
type statusJSON struct {
	Started time.Time         `json:"started"`
	Now     time.Time         `json:"now"`
	Mode    string            `json:"mode"`
	Origins []originJSON      `json:"origins"`
	Recent  []json.RawMessage `json:"recent"`
	Cluster *cluster.Status   `json:"cluster"` // the fleet's Redis; null without [cluster]
}

type originJSON struct {
	Origin    string           `json:"origin"`
	State     string           `json:"state"` // fetched, unavailable, unreachable, or "" when nothing is cached
	Status    int              `json:"status"`
	FetchedAt *time.Time       `json:"fetched_at"`
	ExpiresAt *time.Time       `json:"expires_at"`
	LastError string           `json:"last_error"`
	Decisions map[string]int64 `json:"decisions"`
}

// serveStatus answers GET /status.json, or the page that shows it.
func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "robotsgate: GET only", http.StatusMethodNotAllowed)
		return
	}
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
	counts, recent := s.status.snapshot()
	out := statusJSON{Started: s.status.started.UTC(), Now: s.opts.Now().UTC(), Mode: s.pol.Load().cfg.Mode, Origins: make([]originJSON, 0, len(counts)), Recent: recent}
	if out.Recent == nil {
		out.Recent = []json.RawMessage{}
	}
	if s.cluster != nil {
		st := s.cluster.Status()
		out.Cluster = &st
	}
	for _, oc := range counts {
		oj := originJSON{Origin: oc.origin.String(), Decisions: oc.counts}
		if a, ok := s.cache.Peek(oc.origin); ok {
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
	slices.SortStableFunc(out.Origins, func(a, b originJSON) int { return total(b.Decisions) - total(a.Decisions) })
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
