package pay

import (
	"container/list"
	"sync"
)

// MaxRecent bounds how many origins a Recent remembers: past it, the one
// least recently charged or asked of is forgotten (it is then asked a
// price again, as before it first charged).
const MaxRecent = 4096

// Recent remembers the origins that charged within the current UTC day
// (docs/identity.md, "crawler-max-price"), at most max of them, least
// recently used forgotten first; a new day forgets them all. It is safe
// for concurrent use.
type Recent struct {
	max int

	mu    sync.Mutex
	day   string
	order *list.List               // of origin strings, most recent first
	at    map[string]*list.Element // origin → its element of order
}

// NewRecent returns a Recent of at most max origins (MaxRecent when max is
// not above 0).
func NewRecent(max int) *Recent {
	if max <= 0 {
		max = MaxRecent
	}
	return &Recent{max: max, order: list.New(), at: map[string]*list.Element{}}
}

// turn forgets every origin when day is not the one remembered. r.mu is
// held.
func (r *Recent) turn(day string) {
	if day != r.day {
		r.day = day
		r.order.Init()
		clear(r.at)
	}
}

// Mark remembers that origin charged on day.
func (r *Recent) Mark(day, origin string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if day < r.day {
		return // a request that began before midnight, settled after it
	}
	r.turn(day)
	if e, ok := r.at[origin]; ok {
		r.order.MoveToFront(e)
		return
	}
	r.at[origin] = r.order.PushFront(origin)
	if r.order.Len() > r.max {
		delete(r.at, r.order.Remove(r.order.Back()).(string))
	}
}

// Charged reports whether origin charged on day (and keeps it the most
// recently used).
func (r *Recent) Charged(day, origin string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if day != r.day {
		return false
	}
	e, ok := r.at[origin]
	if ok {
		r.order.MoveToFront(e)
	}
	return ok
}

// Len is how many origins are remembered.
func (r *Recent) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.order.Len()
}
