package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/robotsgate/robotsgate/proxy/pay"
)

// The fleet's pay-per-crawl budget: what the fleet spent each UTC day in
// each currency, an integer of billionths under
// "<payments key_prefix>spent:{<currency>:<day>}" (hash-tagged: one slot
// in a Redis Cluster), kept two days. Reserving is one script, atomic for
// the fleet: no two instances can both take the last of a budget.

// reserveSpendSource adds ARGV[1] to KEYS[1] if the sum stays within
// ARGV[2]; it returns {1, spent after} or {0, spent before}.
const reserveSpendSource = `
local spent = tonumber(redis.call('GET', KEYS[1]) or '0')
if spent == nil or spent < 0 or spent ~= math.floor(spent) then
	return redis.error_reply('the spending counter holds what no instance writes')
end
local amount, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if spent + amount > limit then
	return {0, spent}
end
spent = redis.call('INCRBY', KEYS[1], amount)
redis.call('EXPIRE', KEYS[1], 172800)
return {1, spent}
`

// refundSpendSource takes ARGV[1] back from KEYS[1], never below 0.
const refundSpendSource = `
if redis.call('EXISTS', KEYS[1]) == 0 then
	return 0
end
local left = redis.call('DECRBY', KEYS[1], ARGV[1])
if left < 0 then
	redis.call('SET', KEYS[1], '0', 'KEEPTTL')
	left = 0
end
return left
`

// Budget returns the fleet's pay-per-crawl budget, under keys that start
// with prefix ([payments] key_prefix). A Redis that does not answer
// reserves nothing: no payment is made on a budget that cannot be
// checked. The counter is a plain integer, not sealed as the fleet's
// other values are: one that no instance writes (negative, not an
// integer) refuses every reservation, but whoever can write to Redis can
// reset a day's spending; max_price still bounds each payment.
func (c *Client) Budget(prefix string) pay.Budget {
	return &fleetBudget{c: c, prefix: prefix, reserve: redis.NewScript(reserveSpendSource), refund: redis.NewScript(refundSpendSource)}
}

type fleetBudget struct {
	c               *Client
	prefix          string
	reserve, refund *redis.Script
}

func (b *fleetBudget) key(day, currency string) string {
	return b.prefix + "spent:{" + currency + ":" + day + "}"
}

// Reserve implements pay.Budget.
func (b *fleetBudget) Reserve(ctx context.Context, day string, a, limit pay.Amount) (pay.Amount, bool, error) {
	if a.Currency != limit.Currency {
		return pay.Amount{}, false, fmt.Errorf("reserve %s against a limit in %s: %w", a, limit.Currency, pay.ErrCurrency)
	}
	var res []any
	err := b.c.do(ctx, func(ctx context.Context) error {
		var err error
		res, err = b.reserve.Run(ctx, b.c.rdb, []string{b.key(day, a.Currency)}, a.Nanos, limit.Nanos).Slice()
		return err
	})
	if err != nil {
		return pay.Amount{}, false, fmt.Errorf("reserve %s in the fleet's budget: %w", a, err)
	}
	if len(res) != 2 {
		return pay.Amount{}, false, fmt.Errorf("reserve %s in the fleet's budget: %d values from the script", a, len(res))
	}
	ok, _ := res[0].(int64)
	spent, _ := res[1].(int64)
	return pay.Amount{Currency: a.Currency, Nanos: spent}, ok == 1, nil
}

// Refund implements pay.Budget.
func (b *fleetBudget) Refund(ctx context.Context, day string, a pay.Amount) error {
	err := b.c.do(ctx, func(ctx context.Context) error {
		return b.refund.Run(ctx, b.c.rdb, []string{b.key(day, a.Currency)}, strconv.FormatInt(a.Nanos, 10)).Err()
	})
	if err != nil {
		return fmt.Errorf("refund %s to the fleet's budget: %w", a, err)
	}
	return nil
}

// Spent implements pay.Budget.
func (b *fleetBudget) Spent(ctx context.Context, day, currency string) (pay.Amount, error) {
	var n int64
	err := b.c.do(ctx, func(ctx context.Context) error {
		var err error
		n, err = b.c.rdb.Get(ctx, b.key(day, currency)).Int64()
		return err
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return pay.Amount{}, fmt.Errorf("read the fleet's spending: %w", err)
	}
	return pay.Amount{Currency: currency, Nanos: n}, nil
}
