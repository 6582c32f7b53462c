package pay

import (
	"container/list"
	"strings"
	"sync"
)

// MaxRecent bounds how many places of origins a Recent remembers (and
// how many origins it keeps from offers): past it, the one least recently
// charged or asked of is forgotten (it is then asked a price again, as
// before it first charged).
const MaxRecent = 4096

// Recent remembers, within the current UTC day, the places of origins
// that charged (Place: a section and a kind of request; docs/identity.md,
// "crawler-max-price"), and the origins offered nothing more (an answer
// to an offer lost); at most max of each, least recently used forgotten
// first; a new day forgets them all. It is safe for concurrent use.
type Recent struct {
	max int

	mu      sync.Mutex
	day     string
	charged lru[scope]     // the places that charged
	origins map[string]int // origin → how many of charged are its
	stopped lru[string]    // the origins offered nothing more today
}

// scope is a place of an origin (Place).
type scope struct {
	origin string
	Place
}

// NewRecent returns a Recent of at most max places and max stopped
// origins (MaxRecent when max is not above 0).
func NewRecent(max int) *Recent {
	if max <= 0 {
		max = MaxRecent
	}
	return &Recent{max: max, charged: newLRU[scope](), origins: map[string]int{}, stopped: newLRU[string]()}
}

// turn forgets everything when day is not the one remembered, and
// reports whether day is older than it (a request that began before
// midnight UTC, settled after it: not remembered). r.mu is held.
func (r *Recent) turn(day string) (old bool) {
	if day < r.day {
		return true
	}
	if day != r.day {
		r.day = day
		r.charged.reset()
		clear(r.origins)
		r.stopped.reset()
	}
	return false
}

// Mark remembers that origin charged on day for a request in place p
// (its strings copied: a section is a part of its request's target).
func (r *Recent) Mark(day, origin string, p Place) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.turn(day) || r.charged.touch(scope{origin, p}) {
		return
	}
	p.Section = strings.Clone(p.Section)
	origin = strings.Clone(origin)
	r.origins[origin]++
	if gone, ok := r.charged.add(scope{origin, p}, r.max); ok {
		if r.origins[gone.origin]--; r.origins[gone.origin] == 0 {
			delete(r.origins, gone.origin)
		}
	}
}

// Stop has origin offered nothing more on day: an answer to an offer
// was lost (Negotiator.LostOffer), and a site that loses them could
// otherwise have every offer counted as spent.
func (r *Recent) Stop(day, origin string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.turn(day) {
		r.stopped.add(origin, r.max)
	}
}

// Charging reports whether origin charged on day in any place, and is
// still offered prices: what to ask first, before the place of a
// request is read (most origins never charge).
func (r *Recent) Charging(day, origin string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return day == r.day && r.origins[origin] > 0 && r.offered(origin)
}

// Charged reports whether origin charged on day for a request in place
// p, and is still offered prices (it keeps them the most recently used).
func (r *Recent) Charged(day, origin string, p Place) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return day == r.day && r.charged.touch(scope{origin, p}) && r.offered(origin)
}

// offered reports whether origin was not stopped today (touching it if
// it was). r.mu is held.
func (r *Recent) offered(origin string) bool {
	return r.stopped.order.Len() == 0 || !r.stopped.touch(origin)
}

// Len is how many places are remembered.
func (r *Recent) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.charged.order.Len()
}

// lru is a set of at most a given number of keys, the least recently
// used removed first.
type lru[K comparable] struct {
	order *list.List          // of K, most recent first
	at    map[K]*list.Element // key → its element of order
}

func newLRU[K comparable]() lru[K] {
	return lru[K]{order: list.New(), at: map[K]*list.Element{}}
}

// add puts k in l, the most recent, removing the least recent past max,
// which it returns.
func (l *lru[K]) add(k K, max int) (gone K, removed bool) {
	if l.touch(k) {
		return gone, false
	}
	l.at[k] = l.order.PushFront(k)
	if l.order.Len() > max {
		gone = l.order.Remove(l.order.Back()).(K)
		delete(l.at, gone)
		return gone, true
	}
	return gone, false
}

// touch reports whether k is in l, making it the most recent.
func (l *lru[K]) touch(k K) bool {
	e, ok := l.at[k]
	if ok {
		l.order.MoveToFront(e)
	}
	return ok
}

// reset empties l.
func (l *lru[K]) reset() {
	l.order.Init()
	clear(l.at)
}
