package proxy

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errPaced is returned by pacer.wait when a request would wait longer than
// max_wait; waitPaced carries how long.
var errPaced = errors.New("paced beyond max_wait")

// pacedError says how long a refused request would have waited, or, with
// full, how long until the pacer can take one more host.
type pacedError struct {
	wait time.Duration
	full bool
}

func (e *pacedError) Error() string {
	if e.full {
		return "pacing the most hosts it remembers; room in " + e.wait.String()
	}
	return "would wait " + e.wait.String() + " for its turn"
}
func (e *pacedError) Unwrap() error { return errPaced }

// pacer spaces the starts of requests to each host (DESIGN step 8: scheme
// and port ignored, the server is what feels the load): one FIFO queue per
// host, where each request is held until its own gap after the start
// before it. A request that would wait longer than max_wait is refused at
// once; one whose client gives up leaves the queue, and those behind it
// move up. No lock is held while a request waits, and a host with an
// empty queue and no recent start is forgotten. At most maxHosts hosts are
// remembered: past that, a request to a host not remembered is refused
// (paced) until an idle one can be forgotten, never let through without
// its gap.
type pacer struct {
	now      func() time.Time
	maxHosts int // paceMaxHosts; tests lower it

	mu    sync.Mutex
	hosts map[string]*paceQueue
	ops   int // acquisitions since the last sweep of idle hosts
	// roomAt, when hosts is full, is the earliest time a sweep can free a
	// place: requests to new hosts before it are refused without a sweep.
	roomAt time.Time

	// started, if set, is called (with mu held) at each start, with the
	// time the pacer recorded: for tests.
	started func(host string, at time.Time)
}

type paceQueue struct {
	lastStart time.Time     // when the last request started
	waiters   []*paceWaiter // in arrival order; waiters[0] is next
	tail      time.Time     // projected start of the last waiter (lastStart when none)
	timer     *time.Timer   // wakes waiters[0]
}

type paceWaiter struct {
	gap   time.Duration
	ready chan struct{} // closed when the request may start
}

// paceSweepEvery is how many acquisitions pass between sweeps of idle
// hosts. An idle host is forgotten max_delay after its last start: no
// gap is longer, so an older start can no longer delay anything.
const paceSweepEvery = 1024

// paceMaxHosts bounds the hosts the pacer remembers (about 115 bytes
// each). Only hosts started within max_delay, or with requests waiting,
// are kept, so it takes more than 3,000 new hosts a second on the default
// 30 s max_delay to fill.
const paceMaxHosts = 100_000

func newPacer(now func() time.Time) *pacer {
	return &pacer{now: now, maxHosts: paceMaxHosts, hosts: map[string]*paceQueue{}}
}

// wait blocks until a request to host may start, gap after the start before
// it, under the limits of the request's own policy (max_wait, max_delay).
// It returns how long it waited, a *pacedError (wrapping errPaced) if the
// wait would exceed max_wait, or ctx's error if the client gave up.
func (p *pacer) wait(ctx context.Context, host string, gap time.Duration, lim *PolitenessConfig) (time.Duration, error) {
	now := p.now()
	p.mu.Lock()
	// Sweep before the lookup: a sweep must never drop the queue this
	// request is about to join.
	if p.ops++; p.ops >= paceSweepEvery {
		p.sweep(now, lim.MaxDelay)
	}
	q := p.hosts[host]
	if q == nil {
		if len(p.hosts) >= p.maxHosts {
			if wait, ok := p.makeRoom(now, lim.MaxDelay); !ok {
				p.mu.Unlock()
				return 0, &pacedError{wait: wait, full: true}
			}
		}
		q = &paceQueue{}
		p.hosts[host] = q
	}
	base := q.tail
	if len(q.waiters) == 0 {
		base = q.lastStart
	}
	start := now
	if !base.IsZero() {
		start = later(now, base.Add(gap))
	}
	if w := start.Sub(now); w > lim.MaxWait {
		p.mu.Unlock()
		return 0, &pacedError{wait: w}
	}
	if len(q.waiters) == 0 && !start.After(now) {
		q.lastStart, q.tail = now, now // nobody ahead, no gap to keep
		if p.started != nil {
			p.started(host, now)
		}
		p.mu.Unlock()
		return 0, nil
	}
	w := &paceWaiter{gap: gap, ready: make(chan struct{})}
	q.waiters = append(q.waiters, w)
	q.tail = start
	if len(q.waiters) == 1 {
		p.schedule(host, q, now)
	}
	p.mu.Unlock()

	select {
	case <-w.ready:
		return p.now().Sub(now), nil
	case <-ctx.Done():
		p.mu.Lock()
		select {
		case <-w.ready: // started meanwhile: the slot is used
			p.mu.Unlock()
			return p.now().Sub(now), nil
		default:
		}
		p.leave(host, q, w)
		p.mu.Unlock()
		return 0, context.Cause(ctx)
	}
}

// schedule arms the timer for the head of q. p.mu is held.
func (p *pacer) schedule(host string, q *paceQueue, now time.Time) {
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	if len(q.waiters) == 0 {
		return
	}
	head := q.waiters[0]
	start := now
	if !q.lastStart.IsZero() {
		start = later(now, q.lastStart.Add(head.gap))
	}
	q.timer = time.AfterFunc(start.Sub(now), func() { p.release(host, q, head) })
}

// release lets head start, then schedules the next waiter.
func (p *pacer) release(host string, q *paceQueue, head *paceWaiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(q.waiters) == 0 || q.waiters[0] != head {
		return // left, or released already
	}
	now := p.now()
	q.lastStart = now
	if p.started != nil {
		p.started(host, now)
	}
	q.waiters[0] = nil
	q.waiters = q.waiters[1:]
	close(head.ready)
	q.timer = nil
	if len(q.waiters) == 0 {
		q.tail = now
	}
	p.schedule(host, q, now)
}

// leave takes w out of q; those behind it move up. p.mu is held.
func (p *pacer) leave(host string, q *paceQueue, w *paceWaiter) {
	for i, x := range q.waiters {
		if x != w {
			continue
		}
		q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
		now := p.now()
		// The projected tail is recomputed from the last start.
		t := q.lastStart
		for _, x := range q.waiters {
			if t.IsZero() {
				t = now
			} else {
				t = later(now, t.Add(x.gap))
			}
		}
		if len(q.waiters) == 0 {
			t = q.lastStart
		}
		q.tail = t
		if i == 0 {
			p.schedule(host, q, now)
		}
		return
	}
}

// sweep forgets hosts with no waiters whose last start can no longer
// delay a request. p.mu is held.
func (p *pacer) sweep(now time.Time, maxDelay time.Duration) {
	p.ops = 0
	for host, q := range p.hosts {
		if len(q.waiters) == 0 && now.Sub(q.lastStart) > maxDelay {
			delete(p.hosts, host)
		}
	}
}

// makeRoom forgets idle hosts to make room for one more; if none can be
// forgotten yet, it reports how long until one can. Forgetting a host that
// started within max_delay could let its next request start early, so
// none is. p.mu is held.
func (p *pacer) makeRoom(now time.Time, maxDelay time.Duration) (time.Duration, bool) {
	if now.Before(p.roomAt) {
		return p.roomAt.Sub(now), false
	}
	p.sweep(now, maxDelay)
	if len(p.hosts) < p.maxHosts {
		return 0, true
	}
	// A host is forgotten once it is idle max_delay after its last start:
	// when its projected tail, the start of its last waiter, is past.
	var first time.Time
	for _, q := range p.hosts {
		if at := q.tail.Add(maxDelay + 1); first.IsZero() || at.Before(first) {
			first = at
		}
	}
	p.roomAt = later(first, now.Add(time.Millisecond))
	return p.roomAt.Sub(now), false
}

// size is the number of hosts remembered.
func (p *pacer) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.hosts)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// paceGap returns a request's gap after the previous start to its origin
// (DESIGN step 8): its site's min_interval if set, else min_interval, or
// the largest Crawl-delay of its tokens' groups if larger (with
// crawl_delay on, and not for a site allow), at most max_delay; 0 when
// pacing is off.
func paceGap(cfg *Config, d *Decision) time.Duration {
	pc := cfg.Politeness
	base := pc.MinInterval
	if d.Site != nil && d.Site.MinInterval > 0 {
		base = d.Site.MinInterval
	}
	gap := base
	if pc.CrawlDelay && d.HasDelay && d.CrawlDelay > 0 && !(d.Site != nil && d.Site.Policy == "allow") {
		gap = max(gap, time.Duration(d.CrawlDelay*float64(time.Second)))
	}
	return min(gap, pc.MaxDelay)
}

// pacingActive reports whether cfg paces any request.
func pacingActive(cfg *Config) bool {
	if cfg.Politeness.CrawlDelay || cfg.Politeness.MinInterval > 0 {
		return true
	}
	for _, s := range cfg.Sites {
		if s.MinInterval > 0 {
			return true
		}
	}
	return false
}
