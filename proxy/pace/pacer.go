// Package pace spaces the starts of requests to each host (robotsgate's
// pacing: Crawl-delay, min_interval) and holds hosts whose origins asked
// to be left alone (429, or 503 with Retry-After). It knows nothing of
// policies: a caller says how long a gap and how long a wait.
package pace

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrTooLong is wrapped by the WaitError of a request that would wait
// longer than its max_wait.
var ErrTooLong = errors.New("paced beyond max_wait")

// A WaitError says how long a refused request would have waited, or,
// with Full, how long until the Pacer can take one more host.
type WaitError struct {
	Wait time.Duration
	Full bool
}

func (e *WaitError) Error() string {
	if e.Full {
		return "pacing the most hosts it remembers; room in " + e.Wait.String()
	}
	return "would wait " + e.Wait.String() + " for its turn"
}

// Unwrap returns ErrTooLong.
func (e *WaitError) Unwrap() error { return ErrTooLong }

// Limits bound one wait: a request's policy's [politeness] max_wait, and
// max_delay, the longest gap, after which a host's last start can no
// longer delay anything (so it is forgotten).
type Limits struct {
	MaxWait, MaxDelay time.Duration
}

// A Pacer spaces the starts of requests to each host (DESIGN step 8: scheme
// and port ignored, the server is what feels the load): one FIFO queue per
// host, where each request is held until its own gap after the start
// before it. A request that would wait longer than max_wait is refused at
// once; one whose client gives up leaves the queue, and those behind it
// move up. No lock is held while a request waits, and a host with an
// empty queue and no recent start is forgotten. At most maxHosts hosts are
// remembered: past that, a request to a host not remembered is refused
// (paced) until an idle one can be forgotten, never let through without
// its gap.
type Pacer struct {
	now func() time.Time
	// MaxHosts bounds the hosts remembered: DefaultMaxHosts, unless set
	// before the first Wait.
	MaxHosts int
	// Started, if set before the first Wait, is called at each start
	// (under the Pacer's lock) with the time recorded: for tests.
	Started func(host string, at time.Time)

	mu    sync.Mutex
	hosts map[string]*paceQueue
	ops   int // acquisitions since the last sweep of idle hosts
	// roomAt, when hosts is full, is the earliest time a sweep can free a
	// place: requests to new hosts before it are refused without a sweep.
	roomAt time.Time
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

// DefaultMaxHosts bounds the hosts a Pacer remembers (about 115 bytes
// each). Only hosts started within max_delay, or with requests waiting,
// are kept, so it takes more than 3,000 new hosts a second on the default
// 30 s max_delay to fill.
const DefaultMaxHosts = 100_000

// NewPacer returns a Pacer on the clock now.
func NewPacer(now func() time.Time) *Pacer {
	return &Pacer{now: now, MaxHosts: DefaultMaxHosts, hosts: map[string]*paceQueue{}}
}

// Wait blocks until a request to host may start, gap after the start before
// it, under the limits of the request's own policy. It returns how long it
// waited, a *WaitError (wrapping ErrTooLong) if the wait would exceed
// lim.MaxWait, or ctx's error if the client gave up.
func (p *Pacer) Wait(ctx context.Context, host string, gap time.Duration, lim Limits) (time.Duration, error) {
	now := p.now()
	p.mu.Lock()
	// Sweep before the lookup: a sweep must never drop the queue this
	// request is about to join.
	if p.ops++; p.ops >= paceSweepEvery {
		p.sweep(now, lim.MaxDelay)
	}
	q := p.hosts[host]
	if q == nil {
		if len(p.hosts) >= p.MaxHosts {
			if wait, ok := p.makeRoom(now, lim.MaxDelay); !ok {
				p.mu.Unlock()
				return 0, &WaitError{Wait: wait, Full: true}
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
		return 0, &WaitError{Wait: w}
	}
	if len(q.waiters) == 0 && !start.After(now) {
		q.lastStart, q.tail = now, now // nobody ahead, no gap to keep
		if p.Started != nil {
			p.Started(host, now)
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
func (p *Pacer) schedule(host string, q *paceQueue, now time.Time) {
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
func (p *Pacer) release(host string, q *paceQueue, head *paceWaiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(q.waiters) == 0 || q.waiters[0] != head {
		return // left, or released already
	}
	now := p.now()
	q.lastStart = now
	if p.Started != nil {
		p.Started(host, now)
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
func (p *Pacer) leave(host string, q *paceQueue, w *paceWaiter) {
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
func (p *Pacer) sweep(now time.Time, maxDelay time.Duration) {
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
func (p *Pacer) makeRoom(now time.Time, maxDelay time.Duration) (time.Duration, bool) {
	if now.Before(p.roomAt) {
		return p.roomAt.Sub(now), false
	}
	p.sweep(now, maxDelay)
	if len(p.hosts) < p.MaxHosts {
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

// Waiting returns how many requests wait for their turn on host.
func (p *Pacer) Waiting(host string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q := p.hosts[host]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// WaitingHosts returns how many requests wait for their turn, for each
// host that has some: one look, under one lock, for a status page.
func (p *Pacer) WaitingHosts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for h, q := range p.hosts {
		if len(q.waiters) > 0 {
			out[h] = len(q.waiters)
		}
	}
	return out
}

// Hosts is the number of hosts remembered.
func (p *Pacer) Hosts() int {
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
