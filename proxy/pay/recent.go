package pay

import (
	"container/list"
	"strings"
	"sync"
)

// MaxRecent bounds how many sections of origins a Recent remembers (and
// how many origins it keeps from offers): past it, the one least recently
// charged or asked of is forgotten (it is then asked a price again, as
// before it first charged).
const MaxRecent = 4096

// Section is the part of a request-target (path and query, as sent) that
// a Recent remembers charges by: the path's first segment when more of
// the path follows it ("/news/2026/a" and "/news/b" are in "news"), else
// "", the site's root ("/story-1", "/favicon.ico", "/news", "/"). The
// query is not looked at, nor are escapes read: a section spelt another
// way is another section (its price is then asked, as before any charge).
// It does not allocate.
func Section(target string) string {
	if len(target) < 2 || target[0] != '/' {
		return ""
	}
	rest := target[1:]
	end := strings.IndexAny(rest, "/?")
	if end < 0 || rest[end] != '/' {
		return ""
	}
	return rest[:end]
}

// Recent remembers, within the current UTC day, the sections of origins
// that charged (docs/identity.md, "crawler-max-price"), and the origins
// offered nothing more (an answer to an offer lost); at most max of
// each, least recently used forgotten first; a new day forgets them all.
// It is safe for concurrent use.
type Recent struct {
	max int

	mu      sync.Mutex
	day     string
	charged lru[scope]  // the sections that charged
	stopped lru[string] // the origins offered nothing more today
}

// scope is a section of an origin (Section).
type scope struct{ origin, section string }

// NewRecent returns a Recent of at most max sections and max stopped
// origins (MaxRecent when max is not above 0).
func NewRecent(max int) *Recent {
	if max <= 0 {
		max = MaxRecent
	}
	return &Recent{max: max, charged: newLRU[scope](), stopped: newLRU[string]()}
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
		r.stopped.reset()
	}
	return false
}

// Mark remembers that origin charged on day for a request in section.
func (r *Recent) Mark(day, origin, section string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.turn(day) {
		r.charged.add(scope{origin, section}, r.max)
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

// Charged reports whether origin charged on day for a request in
// section, and is still offered prices (it keeps them the most recently
// used).
func (r *Recent) Charged(day, origin, section string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if day != r.day || !r.charged.touch(scope{origin, section}) {
		return false
	}
	return r.stopped.order.Len() == 0 || !r.stopped.touch(origin)
}

// Len is how many sections are remembered.
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

// add puts k in l, the most recent, removing the least recent past max.
func (l *lru[K]) add(k K, max int) {
	if l.touch(k) {
		return
	}
	l.at[k] = l.order.PushFront(k)
	if l.order.Len() > max {
		delete(l.at, l.order.Remove(l.order.Back()).(K))
	}
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
