// Package pace spaces the starts of requests to each host (robotsgate's
// pacing: Crawl-delay, min_interval) and holds hosts whose origins asked
// to be left alone (429, or 503 with Retry-After). It knows nothing of
// policies: a caller says how long a gap and how long a wait.
package pace

import (
	"context"
	"errors"
	"slices"
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

// A Pacer spaces the starts of requests to each host (docs/decision.md step
// 8: scheme and port ignored, the server is what feels the load): one FIFO
// queue per host, where each request is held until its own gap after the
// start before it. A request that would wait longer than max_wait is
// refused at once; one whose client gives up leaves the queue, and those
// behind it move up. No lock is held while a request waits, and a host with
// an empty queue and no recent start is forgotten. At most MaxHosts hosts
// are remembered: past that, a request to a host not remembered is refused
// (paced) until an idle one can be forgotten, never let through without its
// gap.
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
	// turn is held by the request reserving a start with the fleet
	// (Reserve): one at a time per host, so that each is recorded
	// before the next asks, and each is gap after the one before.
	turn chan struct{}
}

type paceWaiter struct {
	gap   time.Duration
	ready chan struct{} // closed when the request may start; nil for a fleet's start
	// fixed is the time of a start the fleet reserved (Record): it keeps
	// its place, the queue's requests keep their gap around it, and
	// nothing here waits for it.
	fixed time.Time
}

// after returns when x may start after a start at t (zero: none).
func (x *paceWaiter) after(t, now time.Time) time.Time {
	switch {
	case !x.fixed.IsZero():
		return x.fixed
	case t.IsZero():
		return now
	}
	return later(now, t.Add(x.gap))
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
	// A host the fleet paces (Reserve) takes its start here in turn with
	// the fleet's reservations, so that each knows of the other: one paced
	// here while Redis fails is never placed beside a slot Redis is giving.
	p.mu.Lock()
	var turn chan struct{}
	if q := p.hosts[host]; q != nil {
		turn = q.turn
	}
	p.mu.Unlock()
	if turn != nil {
		select {
		case turn <- struct{}{}:
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
		defer func() {
			if turn != nil {
				<-turn
			}
		}()
	}
	now := p.now()
	p.mu.Lock()
	q, wait := p.queue(host, now, lim.MaxDelay)
	if q == nil {
		p.mu.Unlock()
		return 0, &WaitError{Wait: wait, Full: true}
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
	if turn != nil { // its place is taken: the fleet's next may ask
		<-turn
		turn = nil
	}

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

// queue returns host's queue, made if need be; nil, with how long until
// there is room, when the Pacer is full. p.mu is held.
func (p *Pacer) queue(host string, now time.Time, maxDelay time.Duration) (*paceQueue, time.Duration) {
	// Sweep before the lookup: a sweep must never drop the queue this
	// request is about to join.
	if p.ops++; p.ops >= paceSweepEvery {
		p.sweep(now, maxDelay)
	}
	q := p.hosts[host]
	if q == nil {
		if len(p.hosts) >= p.MaxHosts {
			if wait, ok := p.makeRoom(now, maxDelay); !ok {
				return nil, wait
			}
		}
		q = &paceQueue{}
		p.hosts[host] = q
	}
	return q, 0
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
	start := head.after(q.lastStart, now)
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
	if head.ready == nil { // the fleet's start: its request has its own timer
		q.lastStart = later(q.lastStart, head.fixed)
	} else {
		q.lastStart = now
		if p.Started != nil {
			p.Started(host, now)
		}
		close(head.ready)
	}
	q.waiters[0] = nil
	q.waiters = q.waiters[1:]
	q.timer = nil
	if len(q.waiters) == 0 {
		q.tail = q.lastStart
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
		q.retail(now)
		if i == 0 {
			p.schedule(host, q, now)
		}
		return
	}
}

// retail recomputes q's projected tail from its last start.
func (q *paceQueue) retail(now time.Time) {
	t := q.lastStart
	for _, x := range q.waiters {
		t = x.after(t, now)
	}
	q.tail = t
}

// Next returns how long a request to host with gap, arriving now, would
// wait for its turn here: behind this Pacer's last start to host and
// the requests queued for it. A fleet reserves no start earlier than
// that, so that an instance's own starts keep their gap whether Redis
// reserved them or, while Redis was away, this Pacer did.
func (p *Pacer) Next(host string, gap time.Duration) time.Duration {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.hosts[host]
	if q == nil {
		return 0
	}
	base := q.tail
	if len(q.waiters) == 0 {
		base = q.lastStart
	}
	if base.IsZero() {
		return 0
	}
	return max(base.Add(gap).Sub(now), 0)
}

// Record notes a start to host, with gap before it, that the fleet
// reserved for at (no sooner than Next said): should this Pacer pace
// alone (Redis away), its requests to host keep their gap around it.
// It returns when the start may be: at, unless a request this Pacer
// started meanwhile (paced alone as Redis went away) is less than gap
// before it, then gap after that one. Requests queued here that would
// start within gap before it move behind it. maxDelay is as in Limits.
// When the Pacer is full, nothing is recorded.
func (p *Pacer) Record(host string, at time.Time, gap, maxDelay time.Duration) time.Time {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	q, _ := p.queue(host, now, maxDelay)
	if q == nil {
		return at
	}
	if !q.lastStart.IsZero() {
		at = later(at, q.lastStart.Add(gap))
	}
	if p.Started != nil {
		p.Started(host, at)
	}
	if !at.After(now) {
		q.lastStart = at
		q.retail(now)
		if len(q.waiters) > 0 {
			p.schedule(host, q, now)
		}
		return at
	}
	// Its place: behind the queued requests that start gap before it.
	i, t := 0, q.lastStart
	for ; i < len(q.waiters); i++ {
		if t = q.waiters[i].after(t, now); t.After(at.Add(-gap)) {
			break
		}
	}
	q.waiters = slices.Insert(q.waiters, i, &paceWaiter{gap: gap, fixed: at})
	q.retail(now)
	if i == 0 {
		p.schedule(host, q, now)
	}
	return at
}

// Reserve holds the turn to reserve a start to host with the fleet:
// reserve runs with Next's wait for gap, and returns the start the fleet
// reserved (ok), which is recorded (Record) before the next request to
// host may ask. It returns when the request may start, and reserve's
// error, or ctx's if the client left while another reserved.
func (p *Pacer) Reserve(ctx context.Context, host string, gap, maxDelay time.Duration, reserve func(local time.Duration) (time.Time, bool, error)) (time.Time, bool, error) {
	p.mu.Lock()
	q, _ := p.queue(host, p.now(), maxDelay)
	if q == nil { // full: no turn to keep, nor starts to record
		p.mu.Unlock()
		return reserve(0)
	}
	if q.turn == nil {
		q.turn = make(chan struct{}, 1)
	}
	turn := q.turn
	p.mu.Unlock()
	select {
	case turn <- struct{}{}:
	case <-ctx.Done():
		return time.Time{}, false, context.Cause(ctx)
	}
	defer func() { <-turn }()
	at, ok, err := reserve(p.Next(host, gap))
	if err != nil || !ok {
		return at, ok, err
	}
	return p.Record(host, at, gap, maxDelay), true, nil
}

// sweep forgets hosts with no waiters whose last start can no longer
// delay a request. p.mu is held.
func (p *Pacer) sweep(now time.Time, maxDelay time.Duration) {
	p.ops = 0
	for host, q := range p.hosts {
		if len(q.waiters) == 0 && now.Sub(q.lastStart) > maxDelay && len(q.turn) == 0 {
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
		return q.waiting()
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
		if n := q.waiting(); n > 0 {
			out[h] = n
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

// waiting returns how many requests wait in q (the fleet's starts are
// not requests of this Pacer's).
func (q *paceQueue) waiting() int {
	n := 0
	for _, x := range q.waiters {
		if x.ready != nil {
			n++
		}
	}
	return n
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
