package proxy

import (
	"context"
	"errors"
	"fmt"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/proxy/pay"
)

// fleetBudget is the pay-per-crawl budget of a fleet: a pay.Budget kept
// in the fleet's spending counter (cluster.Client.Counter), in amounts'
// billionths. The adapter lives here, with the wiring, so that cluster
// knows nothing of amounts and pay nothing of Redis.
type fleetBudget struct{ c *cluster.Counter }

// Reserve implements pay.Budget.
func (b fleetBudget) Reserve(ctx context.Context, day string, a, limit pay.Amount) (pay.Amount, bool, error) {
	if a.Currency != limit.Currency {
		return pay.Amount{}, false, fmt.Errorf("reserve %s against a limit in %s: %w", a, limit.Currency, pay.ErrCurrency)
	}
	spent, ok, err := b.c.Reserve(ctx, day, a.Currency, a.Nanos, limit.Nanos)
	if err != nil {
		return pay.Amount{}, false, fmt.Errorf("reserve %s in the fleet's budget: %w", a, rewound(err))
	}
	return pay.Amount{Currency: a.Currency, Nanos: spent}, ok, nil
}

// Refund implements pay.Budget.
func (b fleetBudget) Refund(ctx context.Context, day string, a pay.Amount) error {
	if err := b.c.Refund(ctx, day, a.Currency, a.Nanos); err != nil {
		return fmt.Errorf("refund %s to the fleet's budget: %w", a, rewound(err))
	}
	return nil
}

// Spent implements pay.Budget.
func (b fleetBudget) Spent(ctx context.Context, day, currency string) (pay.Amount, error) {
	n, err := b.c.Spent(ctx, day, currency)
	if err != nil {
		return pay.Amount{}, fmt.Errorf("read the fleet's spending: %w", rewound(err))
	}
	return pay.Amount{Currency: currency, Nanos: n}, nil
}

// rewound returns err, which also matches pay.ErrCounterRewound (what a
// Budget's caller checks for) when it wraps cluster.ErrCounterRewound;
// its text is err's.
func rewound(err error) error {
	if errors.Is(err, cluster.ErrCounterRewound) {
		return rewoundError{err}
	}
	return err
}

// rewoundError is a fleet counter's error that is pay.ErrCounterRewound
// too.
type rewoundError struct{ err error }

func (e rewoundError) Error() string        { return e.err.Error() }
func (e rewoundError) Unwrap() error        { return e.err }
func (e rewoundError) Is(target error) bool { return target == pay.ErrCounterRewound }
