package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The fleet's pay-per-crawl spending counter: what the fleet spent each
// UTC day in each currency, under "<payments key_prefix>spent:{<currency>:<day>}"
// (hash-tagged: one slot in a Redis Cluster), kept two days. It is a hash
// of two integers of billionths that only grow: "reserved" (every
// reservation) and "refunded" (every reservation given back, never more
// than reserved); what is spent is their difference. Reserving is one
// script, atomic for the fleet: no two instances can both take the last
// of a budget.
//
// The counter is not sealed as the fleet's other values are (a script
// adds to it), so each instance checks it against what it saw: each
// field it read stays at least as high as it was, a counter it saw does
// not vanish, and what it says was spent is never less than this
// instance alone has spent that day (a writer raising "refunded" makes
// both fields grow). A counter that went backwards — a Redis writer reset
// it, or a failover to a replica lost its last writes — would have the
// fleet pay again what it already paid, so the instance that sees it
// pays nothing more that day in that currency (ErrCounterRewound), logs
// it and counts it as a cluster error. A restart clears that: the
// operator's decision, once the counter is known good.

// counterSource is the prelude of the budget's scripts: it reads KEYS[1]
// into res (reserved) and ref (refunded), rewriting a plain integer (as
// an instance before the hash wrote it) as a hash, and returns from the
// script {-2, 0, 0} for a value no instance writes, or {-1, res, ref}
// when either field is below what the instance saw (ARGV[1] reserved,
// ARGV[2] refunded), or the spending below what the instance itself
// spent (ARGV[3]): a counter that went backwards, or vanished (read as
// 0, 0). Lua compares doubles: exact while a day's reservations stay
// below 2^53 billionths (nine million of a currency a day, refunded ones
// included).
const counterSource = `
local function whole(n) return n ~= nil and n >= 0 and n == math.floor(n) end
local res, ref = 0, 0
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'string' then
	res = tonumber(redis.call('GET', KEYS[1]))
	if not whole(res) then
		return {-2, 0, 0}
	end
	local ttl = redis.call('PTTL', KEYS[1])
	redis.call('DEL', KEYS[1])
	redis.call('HSET', KEYS[1], 'reserved', res, 'refunded', 0)
	if ttl > 0 then
		redis.call('PEXPIRE', KEYS[1], ttl)
	end
elseif kind == 'hash' then
	res = tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0')
	ref = tonumber(redis.call('HGET', KEYS[1], 'refunded') or '0')
	if not whole(res) or not whole(ref) or ref > res then
		return {-2, 0, 0}
	end
elseif kind ~= 'none' then
	return {-2, 0, 0}
end
if res < tonumber(ARGV[1]) or ref < tonumber(ARGV[2]) or res - ref < tonumber(ARGV[3]) then
	return {-1, res, ref}
end
`

// reserveSpendSource adds ARGV[4] to what KEYS[1] reserved if the
// spending stays within ARGV[5]; it returns {1, reserved, refunded} after
// or {0, reserved, refunded} as they were.
const reserveSpendSource = counterSource + `
local amount, limit = tonumber(ARGV[4]), tonumber(ARGV[5])
if res - ref + amount > limit then
	return {0, res, ref}
end
res = redis.call('HINCRBY', KEYS[1], 'reserved', amount)
redis.call('EXPIRE', KEYS[1], 172800)
return {1, res, ref}
`

// refundSpendSource gives ARGV[4] back to KEYS[1], never more than is
// spent; it returns {1, reserved, refunded} after.
const refundSpendSource = counterSource + `
local back = math.min(tonumber(ARGV[4]), res - ref)
if back > 0 then
	ref = redis.call('HINCRBY', KEYS[1], 'refunded', back)
end
return {1, res, ref}
`

// readSpendSource returns {1, reserved, refunded}.
const readSpendSource = counterSource + `
return {1, res, ref}
`

// ErrCounterRewound is wrapped by a Counter's errors once the counter was
// found lower than it had been, or gone, within its day: spending that may
// have been paid already is not paid again, so nothing more is paid that
// day in that currency. (The proxy's budget reports it as pay's
// ErrCounterRewound, whose words these are: cluster does not import pay,
// and proxy's TestRewoundIsPays holds the two texts equal.)
var ErrCounterRewound = errors.New("the day's spending went backwards")

// Counter returns the fleet's pay-per-crawl spending counter, under keys
// that start with prefix ([payments] key_prefix): the proxy keeps its
// pay.Budget in it. A Redis that does not answer reserves nothing: no
// payment is made on a budget that cannot be checked. A counter that
// holds what no instance writes refuses every reservation; one that went
// backwards or vanished while this instance used it stops this instance's
// reservations in its currency for the day (ErrCounterRewound): whoever
// can write to Redis cannot make the fleet pay the same budget twice over
// unseen. max_price still bounds each payment.
func (c *Client) Counter(prefix string) *Counter {
	return &Counter{
		c: c, prefix: prefix, seen: map[string]*counterSeen{},
		reserve: redis.NewScript(reserveSpendSource), refund: redis.NewScript(refundSpendSource), read: redis.NewScript(readSpendSource),
	}
}

// A Counter is the fleet's spending of each UTC day in each currency, in
// billionths of it (Client.Counter). It is safe for concurrent use.
type Counter struct {
	c                     *Client
	prefix                string
	reserve, refund, read *redis.Script

	mu   sync.Mutex
	seen map[string]*counterSeen // by day, then currency: "2026-11-27 USD"
}

// counterSeen is what an instance saw of a day's counter: the highest
// value of each field, what the instance itself reserved and has not
// given back (never more than it did: it is raised once a reservation is
// made, and lowered before a refund is asked), and why it no longer
// trusts the counter ("" while it does).
type counterSeen struct {
	reserved, refunded int64
	own                int64
	rewound            string
}

// keptCounterDays is how many days' counters an instance remembers (a
// request that began before midnight UTC may settle after it).
const keptCounterDays = 2

func (b *Counter) key(day, currency string) string {
	return b.prefix + "spent:{" + currency + ":" + day + "}"
}

// before returns what this instance saw of day's counter in currency,
// before a call that reads it; the error of a counter it no longer
// trusts.
func (b *Counter) before(day, currency string) (counterSeen, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.seen[day+" "+currency]
	if s == nil {
		s = &counterSeen{}
		b.seen[day+" "+currency] = s
		days := map[string]bool{}
		for k := range b.seen {
			days[k[:strings.IndexByte(k, ' ')]] = true
		}
		if sorted := slices.Sorted(maps.Keys(days)); len(sorted) > keptCounterDays {
			for k := range b.seen {
				if k[:strings.IndexByte(k, ' ')] < sorted[len(sorted)-keptCounterDays] {
					delete(b.seen, k)
				}
			}
		}
	}
	if s.rewound != "" {
		return counterSeen{}, fmt.Errorf("%w: %s", ErrCounterRewound, s.rewound)
	}
	return *s, nil
}

// run runs script for day's counter in currency with args after what
// this instance saw, and returns its status and the counter's fields. A
// counter that went backwards is remembered, logged once and counted; a
// foreign one is counted and logged as other foreign values are.
func (b *Counter) run(ctx context.Context, script *redis.Script, day, currency string, args ...any) (status, reserved, refunded int64, err error) {
	seen, err := b.before(day, currency)
	if err != nil {
		return 0, 0, 0, err
	}
	key := b.key(day, currency)
	var res []any
	err = b.c.do(ctx, func(ctx context.Context) error {
		var err error
		res, err = script.Run(ctx, b.c.rdb, []string{key}, append([]any{seen.reserved, seen.refunded, seen.own}, args...)...).Slice()
		return err
	})
	if err != nil {
		return 0, 0, 0, err
	}
	if len(res) != 3 {
		return 0, 0, 0, fmt.Errorf("%d values from the script", len(res))
	}
	status, _ = res[0].(int64)
	reserved, _ = res[1].(int64)
	refunded, _ = res[2].(int64)
	switch status {
	case -2:
		err := fmt.Errorf("the spending counter %s holds what no instance writes", key)
		b.c.foreign(key, err)
		return 0, 0, 0, err
	case -1:
		why := fmt.Sprintf("the spending counter %s went backwards or vanished: reserved %d, refunded %d, where this instance saw %d and %d and itself spent %d (billionths)", key, reserved, refunded, seen.reserved, seen.refunded, seen.own)
		b.mu.Lock()
		s := b.seen[day+" "+currency]
		first := s != nil && s.rewound == ""
		if s != nil {
			s.rewound = why
		}
		b.mu.Unlock()
		if first {
			b.c.opts.Logger.Error("fleet budget: "+why+": this instance pays nothing more today in "+currency+" (a restart resumes payments, once the counter is known good)", "key", key)
			b.c.foreign(key, fmt.Errorf("%w: %s", ErrCounterRewound, why))
		}
		return 0, 0, 0, fmt.Errorf("%w: %s", ErrCounterRewound, why)
	}
	b.mu.Lock()
	if s := b.seen[day+" "+currency]; s != nil {
		s.reserved, s.refunded = max(s.reserved, reserved), max(s.refunded, refunded)
	}
	b.mu.Unlock()
	return status, reserved, refunded, nil
}

// Reserve adds n to day's spending in currency if that stays within
// limit, and reports whether it did, with what is spent after (or
// before, when it did not).
func (b *Counter) Reserve(ctx context.Context, day, currency string, n, limit int64) (spent int64, ok bool, err error) {
	status, reserved, refunded, err := b.run(ctx, b.reserve, day, currency, n, limit)
	if err != nil {
		return 0, false, err
	}
	if status == 1 {
		b.addOwn(day, currency, n)
	}
	return reserved - refunded, status == 1, nil
}

// Refund gives n of day's spending in currency back: a reservation that
// was not charged (or the part of it that was not). What is spent never
// goes below nothing.
func (b *Counter) Refund(ctx context.Context, day, currency string, n int64) error {
	b.addOwn(day, currency, -n) // before: the counter may show it given back first
	_, _, _, err := b.run(ctx, b.refund, day, currency, n)
	return err
}

// addOwn adds n (less than 0 for a refund) to what this instance itself
// has spent of day's budget in currency.
func (b *Counter) addOwn(day, currency string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.seen[day+" "+currency]; s != nil {
		s.own = max(s.own+n, 0)
	}
}

// Spent returns day's spending in currency.
func (b *Counter) Spent(ctx context.Context, day, currency string) (int64, error) {
	_, reserved, refunded, err := b.run(ctx, b.read, day, currency)
	if err != nil {
		return 0, err
	}
	return reserved - refunded, nil
}
