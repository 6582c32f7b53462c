package proxy

import (
	"errors"
	"fmt"
	"testing"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/proxy/pay"
)

// TestRewoundIsPays: a fleet counter's rewound error is pay's too, for
// the budget's caller, with the counter's own words; other errors are
// left as they are.
func TestRewoundIsPays(t *testing.T) {
	t.Parallel()
	back := fmt.Errorf("%w: the spending counter k went backwards", cluster.ErrCounterRewound)
	err := fmt.Errorf("reserve USD 0.01 in the fleet's budget: %w", rewound(back))
	if !errors.Is(err, pay.ErrCounterRewound) || !errors.Is(err, cluster.ErrCounterRewound) {
		t.Errorf("errors.Is(%v, pay's and cluster's ErrCounterRewound) = %v, %v; want both", err, errors.Is(err, pay.ErrCounterRewound), errors.Is(err, cluster.ErrCounterRewound))
	}
	if want := "reserve USD 0.01 in the fleet's budget: the day's spending went backwards: the spending counter k went backwards"; err.Error() != want {
		t.Errorf("err = %q; want %q", err, want)
	}
	if other := errors.New("redis unavailable"); rewound(other) != other || errors.Is(rewound(other), pay.ErrCounterRewound) {
		t.Errorf("rewound(%v) = %v; want it as it was", other, rewound(other))
	}
	if pay.ErrCounterRewound.Error() != cluster.ErrCounterRewound.Error() {
		t.Errorf("pay.ErrCounterRewound %q, cluster.ErrCounterRewound %q; want the same words", pay.ErrCounterRewound, cluster.ErrCounterRewound)
	}
}
