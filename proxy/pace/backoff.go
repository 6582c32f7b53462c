package pace

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Back-off defaults (docs/decision.md step 8): a 429 without Retry-After holds its
// host for backoffFirst, doubling while 429s repeat; at most
// backoffMaxHosts hosts are remembered.
const (
	backoffFirst    = 10 * time.Second
	backoffMaxHosts = 100000
)

// Backoffs remembers, per host, until when an origin asked to be sent
// nothing: its 429, or 503 with Retry-After (docs/decision.md step 8, origin
// back-off). The common case, no host backing off, costs one atomic load.
type Backoffs struct {
	now func() time.Time
	n   atomic.Int64 // len(hosts), read without the lock

	mu    sync.Mutex
	hosts map[string]*backoff
}

type backoff struct {
	until  time.Time
	from   time.Time // when the hold ending at until began
	since  time.Time // when the run of holds it belongs to began (see Longest)
	why    string    // the answer, for reasons: "https://a.example:443 answered 429 with Retry-After: 3"
	streak int       // 429s without Retry-After in a row
	held   int       // requests waiting for until
	peak   int       // the most requests waiting for until at once: how long its end takes to release
}

// NewBackoffs returns Backoffs on the clock now.
func NewBackoffs(now func() time.Time) *Backoffs {
	return &Backoffs{now: now, hosts: map[string]*backoff{}}
}

// Hold returns until when host is to be sent nothing, and why; a zero
// time when it may be sent to now.
func (b *Backoffs) Hold(host string) (time.Time, string) {
	if b.n.Load() == 0 {
		return time.Time{}, ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.hosts[host]; e != nil && e.until.After(b.now()) {
		return e.until, e.why
	}
	return time.Time{}, ""
}

// Holding adds delta (1 when a request starts waiting for host's hold to
// end, -1 when it stops) to the requests Held counts.
func (b *Backoffs) Holding(host string, delta int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.hosts[host]; e != nil {
		e.held = max(e.held+delta, 0)
		e.peak = max(e.peak, e.held)
	}
}

// Releasing reports whether host's hold has ended so recently that the
// requests it held are still being released, gap apart: from its end for
// gap times the most it held at once. A request to host then keeps that
// gap too, rather than going out beside them as a burst.
func (b *Backoffs) Releasing(host string, gap time.Duration) bool {
	if b.n.Load() == 0 {
		return false
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.hosts[host]
	return e != nil && e.peak > 0 && !now.Before(e.until) && now.Before(e.until.Add(time.Duration(e.peak)*gap))
}

// A Hold is one host's back-off as a status page shows it.
type Hold struct {
	Until time.Time // when it ends; zero if it has ended
	Why   string    // what the origin answered
	Held  int       // requests waiting for it to end
}

// Holds returns the hosts held now, or with requests still waiting for
// their hold: one look, under one lock, for a status page.
func (b *Backoffs) Holds() map[string]Hold {
	out := map[string]Hold{}
	if b.n.Load() == 0 {
		return out
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for h, e := range b.hosts {
		if e.until.After(now) {
			out[h] = Hold{Until: e.until, Why: e.why, Held: e.held}
		} else if e.held > 0 {
			out[h] = Hold{Held: e.held}
		}
	}
	return out
}

// Held returns how many requests wait for host's hold to end.
func (b *Backoffs) Held(host string) int {
	if b.n.Load() == 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.hosts[host]; e != nil {
		return e.held
	}
	return 0
}

// Observe records the answer of an origin (named in reasons by origin,
// "https://a.example:443", called only then) on host to a forwarded
// request: a 429, or a
// 503 with Retry-After, holds host for the time it asked (an HTTP date or
// seconds), at most limit; a 429 without Retry-After for 10 s, doubling
// while 429s repeat. Any other answer ends a run of 429s. It reports the
// hold it set, if any.
func (b *Backoffs) Observe(host string, origin func() string, status int, retryAfter string, limit time.Duration) (time.Duration, bool) {
	if status != http.StatusTooManyRequests && !(status == http.StatusServiceUnavailable && retryAfter != "") {
		if b.n.Load() > 0 {
			b.mu.Lock()
			if e := b.hosts[host]; e != nil {
				e.streak = 0
			}
			b.mu.Unlock()
		}
		return 0, false
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.entry(host, now, limit)
	wait, ok := ParseRetryAfter(retryAfter, now)
	why := fmt.Sprintf("%s answered %d with Retry-After: %s", origin(), status, retryAfter)
	if !ok {
		wait, why = backoffFirst<<min(e.streak, 16), fmt.Sprintf("%s answered %d without Retry-After", origin(), status)
		e.streak++
	}
	wait = min(wait, limit)
	if e.extend(now, now.Add(wait), why) {
		e.peak = 0 // a new hold: the last one's releases are over
	}
	return wait, wait > 0
}

// extend holds e until until, for why, if that is later than its hold,
// and reports whether this began a new hold (none was in force). A new
// hold continues the run of holds the last one belonged to when it begins
// no later after that one's end than that one lasted (the host was
// answered at most half the time), and begins a run otherwise. b.mu is
// held.
func (e *backoff) extend(now, until time.Time, why string) bool {
	if !until.After(e.until) {
		return false
	}
	fresh := !e.until.After(now)
	if fresh {
		if !e.continues(now) {
			e.since = now
		}
		e.from = now
	}
	e.until, e.why = until, why
	return fresh
}

// continues reports whether a hold beginning at now would continue e's
// run: e has been held, and now is no later after its last hold's end
// than that hold lasted. b.mu is held.
func (e *backoff) continues(now time.Time) bool {
	return !e.until.IsZero() && !now.After(e.until.Add(e.until.Sub(e.from)))
}

// Longest returns how long the oldest run of holds that can still
// continue has lasted: from when the first hold of a host's run began to
// now while it is held, or to its last hold's end in a gap. A hold that
// begins no later after the last one's end than that one lasted
// continues its run, so a host counts while it is held and, after each
// hold, for as long again; it reads 0 when no host's run can continue.
// Read in a gap, it neither drops to 0 (a run's gaps do not reset an
// alert's for) nor counts the gap before a next hold begins (one long
// hold reads its length, not twice it). Hosts that take turns in short
// holds keep it at one hold's length; one site that keeps asking for a
// pause makes it grow. It looks at every host under the lock: for a
// scrape, never a request.
func (b *Backoffs) Longest() time.Duration {
	if b.n.Load() == 0 {
		return 0
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var longest time.Duration
	for _, e := range b.hosts {
		if e.continues(now) {
			longest = max(longest, minTime(now, e.until).Sub(e.since))
		}
	}
	return longest
}

// entry returns host's entry, making it (and room for it) if need be.
// b.mu is held.
func (b *Backoffs) entry(host string, now time.Time, limit time.Duration) *backoff {
	e := b.hosts[host]
	if e == nil {
		if len(b.hosts) >= backoffMaxHosts {
			b.sweep(now, limit)
		}
		e = &backoff{}
		b.hosts[host] = e
		b.n.Store(int64(len(b.hosts)))
	}
	return e
}

// Apply holds host until until (at most limit from now), as another
// instance of the fleet asked: it saw the origin's answer.
func (b *Backoffs) Apply(host string, until time.Time, why string, limit time.Duration) {
	now := b.now()
	until = minTime(until, now.Add(limit))
	if !until.After(now) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.entry(host, now, limit).extend(now, until, why+" (seen by another instance)")
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// sweep makes room in a full table, down to nine tenths, forgetting first
// what changes no answer: holds that ended longer than limit ago (their
// run of 429s is over too); then holds that have ended (a later 429 starts
// again at 10 s instead of doubling); and only then, when more than
// nine tenths of backoffMaxHosts hosts are held at once, the holds that end
// soonest, rather than growing without bound. b.mu is held.
func (b *Backoffs) sweep(now time.Time, limit time.Duration) {
	room := backoffMaxHosts - backoffMaxHosts/10
	for h, e := range b.hosts {
		if now.Sub(e.until) > limit && e.held == 0 {
			delete(b.hosts, h)
		}
	}
	for h, e := range b.hosts {
		if len(b.hosts) < room {
			return
		}
		if !e.until.After(now) {
			delete(b.hosts, h)
		}
	}
	if len(b.hosts) < room {
		return
	}
	type held struct {
		host  string
		until time.Time
	}
	all := make([]held, 0, len(b.hosts))
	for h, e := range b.hosts {
		all = append(all, held{h, e.until})
	}
	slices.SortFunc(all, func(x, y held) int { return x.until.Compare(y.until) })
	for _, x := range all[:len(all)-room+1] {
		delete(b.hosts, x.host)
	}
}

// ParseRetryAfter reads a Retry-After value: seconds, or an HTTP date
// (RFC 9110 section 10.2.3); false when there is none or it is malformed.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		return time.Duration(min(s, int64(24*time.Hour/time.Second))) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
