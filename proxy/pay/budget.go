package pay

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A Budget holds what was spent each UTC day, in each currency, against a
// daily limit: this process's (Local), or a fleet's (cluster.Client).
type Budget interface {
	// Reserve adds a to day's spending if that stays within limit (of
	// a's currency), and reports whether it did, with what is spent after
	// (or before, when it did not).
	Reserve(ctx context.Context, day string, a, limit Amount) (spent Amount, ok bool, err error)
	// Refund takes back a reservation that was not charged (or the part
	// of it that was not).
	Refund(ctx context.Context, day string, a Amount) error
}

// Day is the UTC day of t, as budgets are kept: "2026-11-27".
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// Local is a Budget of this process alone. Days before the newest one
// reserved in are forgotten. It is safe for concurrent use.
type Local struct {
	mu    sync.Mutex
	day   string
	spent map[string]int64 // by currency, on day
}

// Reserve implements Budget.
func (l *Local) Reserve(_ context.Context, day string, a, limit Amount) (Amount, bool, error) {
	if a.Currency != limit.Currency {
		return Amount{}, false, fmt.Errorf("reserve %s against a limit in %s: %w", a, limit.Currency, ErrCurrency)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if day != l.day {
		l.day, l.spent = day, map[string]int64{}
	}
	spent := l.spent[a.Currency]
	if spent+a.Nanos > limit.Nanos {
		return Amount{Currency: a.Currency, Nanos: spent}, false, nil
	}
	l.spent[a.Currency] = spent + a.Nanos
	return Amount{Currency: a.Currency, Nanos: spent + a.Nanos}, true, nil
}

// Refund implements Budget.
func (l *Local) Refund(_ context.Context, day string, a Amount) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if day == l.day {
		l.spent[a.Currency] = max(l.spent[a.Currency]-a.Nanos, 0)
	}
	return nil
}
