package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/robotsgate/robotsgate/robots/fetch"
)

// Pacing, back-off and purges shared by the fleet.

// reserveSource reserves a request's start on a host for the whole fleet:
// gap after the last start reserved, on Redis's own clock (instances'
// clocks may differ), and no sooner than the instance's own pacing allows
// (local wait: after a Redis outage, or a failover to a replica that
// lost the last writes, the later of the two last starts wins), unless
// that is more than max_wait away. It returns
// {wait in milliseconds, or -1 - wait when refused (nothing reserved);
// 1 if the start stored was foreign, else 0}. An instance never stores a
// start more than gap + max_wait ahead of Redis's clock, so a stored value
// beyond that (with a second to spare), or one that is not a positive
// number, was not written by one: it is reserved over as if absent, and
// reported. KEYS[1]: the host's key; ARGV: gap, max wait, TTL, local
// wait, the furthest ahead any instance reserves (Options.MaxWait), all
// in milliseconds.
const reserveSource = `
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gap, maxwait, ahead = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[5])
local raw = redis.call("GET", KEYS[1])
local last, foreign = 0, 0
if raw then
	last = tonumber(raw)
	if not last or last ~= last or last <= 0 or last > now + gap + ahead + 1000 then
		last, foreign = 0, 1
	end
end
local start = now + math.max(tonumber(ARGV[4]) or 0, 0)
if last > 0 and last + gap > start then start = last + gap end
local wait = start - now
if wait > maxwait then return {-1 - wait, foreign} end
redis.call("SET", KEYS[1], start, "PX", tonumber(ARGV[3]))
return {wait, foreign}`

// errForeignStart is why a host's stored start was reserved over.
var errForeignStart = errors.New("a start no instance reserves (not a number, or further ahead than gap + max_wait): reserved over")

// Reserve reserves the next start on host, gap after the fleet's previous
// one and at least local from now (how long the instance's own pacing
// would hold the request: what it started while Redis was away counts),
// and returns how long to wait for it; ok is false, with the wait
// that would have been needed, when that is longer than maxWait (nothing
// is reserved then). A reserved start is kept even if its request is
// abandoned: the fleet may leave a gap unused. A stored start no instance
// could have reserved is counted as foreign and reserved over.
func (c *Client) Reserve(ctx context.Context, host string, gap, maxWait, local time.Duration) (time.Duration, bool, error) {
	key := c.key("pace", host)
	ttl := gap + maxWait + time.Second
	var res []int64
	err := c.do(ctx, func(ctx context.Context) error {
		var err error
		res, err = c.reserve.Run(ctx, c.rdb, []string{key}, gap.Milliseconds(), maxWait.Milliseconds(), ttl.Milliseconds(), ceilMillis(local), max(maxWait, c.opts.MaxWait).Milliseconds()).Int64Slice()
		if err == nil && len(res) != 2 {
			err = fmt.Errorf("pacing script: %d results; want 2", len(res))
		}
		return err
	})
	if err != nil {
		return 0, false, err
	}
	if res[1] != 0 {
		c.foreign(key, errForeignStart)
	}
	if n := res[0]; n < 0 {
		return time.Duration(-1-n) * time.Millisecond, false, nil
	}
	return time.Duration(res[0]) * time.Millisecond, true, nil
}

// ceilMillis is d in whole milliseconds, rounded up: a wait sent to Redis
// never shortens the one it stands for.
func ceilMillis(d time.Duration) int64 {
	return int64((max(d, 0) + time.Millisecond - 1) / time.Millisecond)
}

// ceilUnixMilli is t in Unix milliseconds, rounded up: the other
// instances hold a host no shorter than the one that saw its answer
// (UnixMilli's truncation ended their hold up to a millisecond early,
// and a request queued for that instant reached the origin inside the
// back-off).
func ceilUnixMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

// backoffMessage announces an origin's back-off to the fleet.
type backoffMessage struct {
	From  string `json:"from"` // the instance that saw the answer
	Host  string `json:"host"`
	Until int64  `json:"until"` // Unix milliseconds, rounded up (ceilUnixMilli)
	Why   string `json:"why"`
}

// PublishBackoff tells the other instances that host is to be sent nothing
// until until, and why.
func (c *Client) PublishBackoff(ctx context.Context, host string, until time.Time, why string) error {
	channel := c.key("backoff")
	b, err := c.encode(channel, backoffMessage{From: c.id, Host: host, Until: ceilUnixMilli(until), Why: why})
	if err != nil {
		return err
	}
	return c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Publish(ctx, channel, b).Err()
	})
}

// SubscribeBackoffs calls apply for every back-off another instance
// publishes, until Close. The subscription reconnects by itself after
// Redis comes back; back-offs published while it was away are missed
// (each instance still backs off on the answers it sees itself). A
// message not sealed for the channel with the fleet's secret is dropped
// and counted as foreign.
func (c *Client) SubscribeBackoffs(apply func(host string, until time.Time, why string)) {
	c.subscribe(c.key("backoff"), func(channel, payload string) error {
		m, err := c.decodeBackoff(channel, payload)
		if err != nil {
			return err
		}
		if m.From != c.id {
			apply(m.Host, time.UnixMilli(m.Until), m.Why)
		}
		return nil
	})
}

// decodeBackoff opens a back-off message received on channel.
func (c *Client) decodeBackoff(channel, payload string) (backoffMessage, error) {
	var m backoffMessage
	b, err := c.seal.open(channel, []byte(payload))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, err
	}
	if m.Host == "" || m.Until <= 0 {
		return m, errors.New("a back-off message without a host or an end")
	}
	return m, nil
}

// purgeMessage asks every instance to forget an origin (POST /robots/purge).
type purgeMessage struct {
	From   string `json:"from"`
	Origin string `json:"origin"`
}

// PublishPurge tells the other instances to forget what they hold for
// origin, so that the fleet's next request fetches it again.
func (c *Client) PublishPurge(ctx context.Context, origin fetch.Origin) error {
	channel := c.key("purge")
	b, err := c.encode(channel, purgeMessage{From: c.id, Origin: origin.String()})
	if err != nil {
		return err
	}
	return c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Publish(ctx, channel, b).Err()
	})
}

// SubscribePurges calls purge for every origin another instance purges,
// until Close. A message not sealed for the channel with the fleet's
// secret is dropped and counted as foreign.
func (c *Client) SubscribePurges(purge func(fetch.Origin)) {
	c.subscribe(c.key("purge"), func(channel, payload string) error {
		m, o, err := c.decodePurge(channel, payload)
		if err != nil {
			return err
		}
		if m.From != c.id {
			purge(o)
		}
		return nil
	})
}

// decodePurge opens a purge message received on channel.
func (c *Client) decodePurge(channel, payload string) (purgeMessage, fetch.Origin, error) {
	var m purgeMessage
	b, err := c.seal.open(channel, []byte(payload))
	if err != nil {
		return m, fetch.Origin{}, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fetch.Origin{}, err
	}
	o, err := fetch.ParseOrigin(m.Origin)
	return m, o, err
}

// subscribeWait bounds the wait for Redis to confirm a subscription at
// start.
const subscribeWait = 2 * time.Second

// subscribe hands every message on channel to handle, until Close; a
// message handle cannot read is counted and logged as foreign.
func (c *Client) subscribe(channel string, handle func(channel, payload string) error) {
	sub := c.rdb.Subscribe(c.ctx, channel)
	// go-redis does not wait for Redis to confirm a subscription, and a
	// message published before it is lost: wait for it, briefly. With
	// Redis down the instance starts alone, and Channel subscribes once
	// Redis is back.
	ctx, cancel := context.WithTimeout(c.ctx, subscribeWait)
	sub.Receive(ctx)
	cancel()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer sub.Close()
		ch := sub.Channel(redis.WithChannelHealthCheckInterval(5 * time.Second))
		for {
			select {
			case <-c.ctx.Done():
				return
			case msg, ok := <-ch:
				if !ok {
					return
				}
				if err := handle(channel, msg.Payload); err != nil {
					c.foreign(channel, err)
				}
			}
		}
	}()
}
