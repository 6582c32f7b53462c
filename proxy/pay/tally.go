package pay

import (
	"maps"
	"slices"
	"sync"
)

// Tally adds up what sites charged, by currency, in billionths, as the
// budget does: exact however many amounts are added (a float64 sum of
// 0.005s is not), for robotsgate_spent_total to read. It is safe for
// concurrent use; the zero Tally is empty.
type Tally struct {
	mu    sync.Mutex
	total map[string]int64
}

// Add adds a (nothing for a zero Amount).
func (t *Tally) Add(a Amount) {
	if a.Currency == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.total == nil {
		t.total = map[string]int64{}
	}
	t.total[a.Currency] += a.Nanos
}

// Totals returns what was added in each currency, by currency.
func (t *Tally) Totals() []Amount {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Amount, 0, len(t.total))
	for _, c := range slices.Sorted(maps.Keys(t.total)) {
		out = append(out, Amount{Currency: c, Nanos: t.total[c]})
	}
	return out
}
