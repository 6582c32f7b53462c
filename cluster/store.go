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

// The Client as a fetch.Store and fetch.FetchLocker: robots.txt copies and
// failure marks under "<prefix>robots:good:<origin>" and
// "<prefix>robots:fail:<origin>" (JSON, TTL KeepFor), and each origin's
// fetch lock under "<prefix>robots:lock:<origin>".

var (
	_ fetch.Store       = (*Client)(nil)
	_ fetch.FetchLocker = (*Client)(nil)
)

// storedGood is a good copy as stored, with the origin it is for: a value
// under another origin's key is foreign and ignored.
type storedGood struct {
	Origin string `json:"origin"`
	fetch.GoodCopy
}

type storedFailure struct {
	Origin string `json:"origin"`
	fetch.Failure
}

// Load reads o's good copy and failure marks.
func (c *Client) Load(ctx context.Context, o fetch.Origin) (fetch.Record, error) {
	goodKey, failKey := c.key("robots", "good", o.String()), c.key("robots", "fail", o.String())
	var vals []any
	err := c.do(ctx, func(ctx context.Context) error {
		var err error
		vals, err = c.rdb.MGet(ctx, goodKey, failKey).Result()
		return err
	})
	if err != nil {
		return fetch.Record{}, err
	}
	var rec fetch.Record
	if s, ok := vals[0].(string); ok {
		var g storedGood
		if err := decode(s, &g, o, func() error { return g.GoodCopy.Check() }, &g.Origin); err != nil {
			c.malformed(goodKey, err)
		} else {
			rec.Good = &g.GoodCopy
		}
	}
	if s, ok := vals[1].(string); ok {
		var f storedFailure
		if err := decode(s, &f, o, func() error { return f.Failure.Check() }, &f.Origin); err != nil {
			c.malformed(failKey, err)
		} else {
			rec.Failure = &f.Failure
		}
	}
	return rec, nil
}

// decode unmarshals s into v and checks it is o's and sound.
func decode(s string, v any, o fetch.Origin, check func() error, origin *string) error {
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return err
	}
	if *origin != o.String() {
		return fmt.Errorf("a value for %q", *origin)
	}
	return check()
}

// SaveGood stores g as o's last good copy and clears its failure marks.
func (c *Client) SaveGood(ctx context.Context, o fetch.Origin, g *fetch.GoodCopy) error {
	b, err := json.Marshal(storedGood{Origin: o.String(), GoodCopy: *g})
	if err != nil {
		return err
	}
	return c.do(ctx, func(ctx context.Context) error {
		_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, c.key("robots", "good", o.String()), b, c.opts.KeepFor)
			p.Del(ctx, c.key("robots", "fail", o.String()))
			return nil
		})
		return err
	})
}

// SaveFailure stores o's failure marks.
func (c *Client) SaveFailure(ctx context.Context, o fetch.Origin, f *fetch.Failure) error {
	b, err := json.Marshal(storedFailure{Origin: o.String(), Failure: *f})
	if err != nil {
		return err
	}
	return c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Set(ctx, c.key("robots", "fail", o.String()), b, c.opts.KeepFor).Err()
	})
}

// Delete forgets o's good copy and failure marks, for the whole fleet.
func (c *Client) Delete(ctx context.Context, o fetch.Origin) error {
	return c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Del(ctx, c.key("robots", "good", o.String()), c.key("robots", "fail", o.String())).Err()
	})
}

// unlockSource deletes a lock only if it still holds this value: a lock
// that expired and was taken by another instance is left alone.
const unlockSource = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`

// LockFetch takes o's fetch lock for ttl, unless another instance has it.
func (c *Client) LockFetch(ctx context.Context, o fetch.Origin, ttl time.Duration) (func(), bool, error) {
	key := c.key("robots", "lock", o.String())
	value := c.id + ":" + fmt.Sprint(c.opts.Now().UnixNano())
	var ok bool
	err := c.do(ctx, func(ctx context.Context) error {
		var err error
		ok, err = c.rdb.SetNX(ctx, key, value, ttl).Result()
		return err
	})
	if err != nil || !ok {
		return nil, false, err
	}
	unlock := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.OpTimeout)
		defer cancel()
		c.do(ctx, func(ctx context.Context) error {
			err := c.unlock.Run(ctx, c.rdb, []string{key}, value).Err()
			if errors.Is(err, redis.Nil) {
				return nil
			}
			return err
		})
	}
	return unlock, true, nil
}
