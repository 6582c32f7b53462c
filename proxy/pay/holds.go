package pay

import (
	"sync"
)

// Holds keeps what this process's requests in flight hold of the budget
// (docs/identity.md, "What the budget holds"): crawler-max-price offers
// (ReserveOffer, until SettleOffer or LostOffer), and prices accepted
// whose paid requests are out (Settle). A Budget counts both as spent
// until they are settled; Holds tells them apart, so that a refusal
// names what is spent and what is held, and so that a price that does
// not fit only because of offers in flight waits for them to settle
// rather than being refused (Negotiator.reserve). While a price waits, no
// new offer is made. It is safe for concurrent use; the zero Holds is
// not: use NewHolds.
type Holds struct {
	mu      sync.Mutex
	held    map[holdKey]held
	waiting int           // prices waiting for offers to settle
	settled chan struct{} // closed, and replaced, when an offer is settled while watched
	watched bool          // settled was handed out (changes) since it was made
}

// holdKey is a day's holds in one currency.
type holdKey struct{ day, currency string }

// held is what is held, in billionths.
type held struct{ offers, prices int64 }

// NewHolds returns Holds that hold nothing.
func NewHolds() *Holds {
	return &Holds{held: map[holdKey]held{}, settled: make(chan struct{})}
}

// add adds a (negative: takes it back) to day's holds, an offer's or a
// price's; an offer taken back wakes the prices waiting.
func (h *Holds) add(day string, a Amount, offer bool) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := holdKey{day, a.Currency}
	v := h.held[k]
	if offer {
		v.offers += a.Nanos
	} else {
		v.prices += a.Nanos
	}
	if v == (held{}) {
		delete(h.held, k)
	} else {
		h.held[k] = v
	}
	if offer && a.Nanos < 0 && h.watched {
		// Made anew only when someone may wait on it: an offer settled
		// with no price waiting costs nothing more.
		close(h.settled)
		h.settled, h.watched = make(chan struct{}), false
	}
}

// Held returns what day's offers and prices in flight hold in currency.
func (h *Holds) Held(day, currency string) (offers, prices Amount) {
	offers, prices = Amount{Currency: currency}, Amount{Currency: currency}
	if h == nil {
		return offers, prices
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	v := h.held[holdKey{day, currency}]
	offers.Nanos, prices.Nanos = v.offers, v.prices
	return offers, prices
}

// changes returns a channel closed when an offer is next settled; nil
// for nil Holds (nothing is waited for).
func (h *Holds) changes() <-chan struct{} {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watched = true
	return h.settled
}

// wait counts a price waiting (n 1) or done waiting (n -1).
func (h *Holds) wait(n int) {
	h.mu.Lock()
	h.waiting += n
	h.mu.Unlock()
}

// Waiting is how many prices wait for offers to settle; while any does,
// no new offer is made.
func (h *Holds) Waiting() int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting
}
