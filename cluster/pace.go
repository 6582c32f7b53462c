package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/robotsgate/robotsgate/robots/fetch"
)

// Pacing, back-off and purges shared by the fleet.

// reserveSource reserves a request's start on a host for the whole fleet:
// gap after the last start reserved, on Redis's own clock (instances'
// clocks may differ), unless that is more than max_wait away. It returns
// the wait in milliseconds, or -1 - wait when refused (nothing reserved).
// KEYS[1]: the host's key; ARGV: gap, max wait, TTL, all in milliseconds.
const reserveSource = `
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = tonumber(redis.call("GET", KEYS[1]) or "0") or 0
local start = now
if last > 0 and last + tonumber(ARGV[1]) > now then start = last + tonumber(ARGV[1]) end
local wait = start - now
if wait > tonumber(ARGV[2]) then return -1 - wait end
redis.call("SET", KEYS[1], start, "PX", tonumber(ARGV[3]))
return wait`

// Reserve reserves the next start on host, gap after the fleet's previous
// one, and returns how long to wait for it; ok is false, with the wait
// that would have been needed, when that is longer than maxWait (nothing
// is reserved then). A reserved start is kept even if its request is
// abandoned: the fleet may leave a gap unused.
func (c *Client) Reserve(ctx context.Context, host string, gap, maxWait time.Duration) (time.Duration, bool, error) {
	key := c.key("pace", host)
	ttl := gap + maxWait + time.Second
	var n int64
	err := c.do(ctx, func(ctx context.Context) error {
		var err error
		n, err = c.reserve.Run(ctx, c.rdb, []string{key}, gap.Milliseconds(), maxWait.Milliseconds(), ttl.Milliseconds()).Int64()
		return err
	})
	if err != nil {
		return 0, false, err
	}
	if n < 0 {
		return time.Duration(-1-n) * time.Millisecond, false, nil
	}
	return time.Duration(n) * time.Millisecond, true, nil
}

// backoffMessage announces an origin's back-off to the fleet.
type backoffMessage struct {
	From  string `json:"from"` // the instance that saw the answer
	Host  string `json:"host"`
	Until int64  `json:"until"` // Unix milliseconds
	Why   string `json:"why"`
}

// PublishBackoff tells the other instances that host is to be sent nothing
// until until, and why.
func (c *Client) PublishBackoff(ctx context.Context, host string, until time.Time, why string) error {
	b, err := json.Marshal(backoffMessage{From: c.id, Host: host, Until: until.UnixMilli(), Why: why})
	if err != nil {
		return err
	}
	return c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Publish(ctx, c.key("backoff"), b).Err()
	})
}

// SubscribeBackoffs calls apply for every back-off another instance
// publishes, until Close. The subscription reconnects by itself after
// Redis comes back; back-offs published while it was away are missed
// (each instance still backs off on the answers it sees itself).
func (c *Client) SubscribeBackoffs(apply func(host string, until time.Time, why string)) {
	c.subscribe(c.key("backoff"), func(payload string) error {
		var m backoffMessage
		if err := json.Unmarshal([]byte(payload), &m); err != nil || m.Host == "" || m.Until <= 0 {
			return fmt.Errorf("back-off message %q", payload)
		}
		if m.From != c.id {
			apply(m.Host, time.UnixMilli(m.Until), m.Why)
		}
		return nil
	})
}

// purgeMessage asks every instance to forget an origin (POST /robots/purge).
type purgeMessage struct {
	From   string `json:"from"`
	Origin string `json:"origin"`
}

// PublishPurge tells the other instances to forget what they hold for
// origin, so that the fleet's next request fetches it again.
func (c *Client) PublishPurge(ctx context.Context, origin fetch.Origin) error {
	b, err := json.Marshal(purgeMessage{From: c.id, Origin: origin.String()})
	if err != nil {
		return err
	}
	return c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Publish(ctx, c.key("purge"), b).Err()
	})
}

// SubscribePurges calls purge for every origin another instance purges,
// until Close.
func (c *Client) SubscribePurges(purge func(fetch.Origin)) {
	c.subscribe(c.key("purge"), func(payload string) error {
		var m purgeMessage
		if err := json.Unmarshal([]byte(payload), &m); err != nil {
			return err
		}
		o, err := fetch.ParseOrigin(m.Origin)
		if err != nil {
			return err
		}
		if m.From != c.id {
			purge(o)
		}
		return nil
	})
}

// subscribe hands every message on channel to handle, until Close; a
// message handle cannot read is logged as malformed.
func (c *Client) subscribe(channel string, handle func(payload string) error) {
	sub := c.rdb.Subscribe(c.ctx, channel)
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
				if err := handle(msg.Payload); err != nil {
					c.malformed(msg.Channel, err)
				}
			}
		}
	}()
}
