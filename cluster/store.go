package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/robotsgate/robotsgate/robots/fetch"
)

// The Client as a fetch.Store and fetch.FetchLocker: robots.txt copies and
// failure marks under "<prefix>robots:good:{<origin>}" and
// "<prefix>robots:fail:{<origin>}" (JSON, sealed for its key, TTL KeepFor),
// and each origin's fetch lock under "<prefix>robots:lock:{<origin>}": the
// braces are a hash tag, so that in a Redis Cluster an origin's keys share
// a slot, and a call that reads or writes both goes to one node.

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

// originKey is the key of what for origin o, hash-tagged by the origin.
func (c *Client) originKey(what string, o fetch.Origin) string {
	return c.key("robots", what, "{"+o.String()+"}")
}

// Load reads o's good copy and failure marks. A value that is not sealed
// for its key with the fleet's secret, does not decode, or fails the
// checks a fetched copy passes (fetch.GoodCopy.Check and CheckTimes with
// MaxTTL, fetch.Failure.Check and CheckTimes) is left out and counted as
// foreign; the other one may still be returned.
func (c *Client) Load(ctx context.Context, o fetch.Origin) (fetch.Record, error) {
	goodKey, failKey := c.originKey("good", o), c.originKey("fail", o)
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
	now := c.opts.Now()
	if s, ok := vals[0].(string); ok {
		if g, err := c.decodeGood(goodKey, s, o, now); err != nil {
			c.foreign(goodKey, err)
		} else {
			rec.Good = g
		}
	}
	if s, ok := vals[1].(string); ok {
		if f, err := c.decodeFailure(failKey, s, o, now); err != nil {
			c.foreign(failKey, err)
		} else {
			rec.Failure = f
		}
	}
	return rec, nil
}

// decodeGood returns the good copy in s, read under key, if it is sealed
// for key, o's, sound, and with times an instance could have written by
// now.
func (c *Client) decodeGood(key, s string, o fetch.Origin, now time.Time) (*fetch.GoodCopy, error) {
	var g storedGood
	if err := c.decode(key, s, &g, o, &g.Origin); err != nil {
		return nil, err
	}
	if err := g.Check(); err != nil {
		return nil, err
	}
	if err := g.CheckTimes(now, c.opts.MaxTTL); err != nil {
		return nil, err
	}
	return &g.GoodCopy, nil
}

// decodeFailure is decodeGood for failure marks.
func (c *Client) decodeFailure(key, s string, o fetch.Origin, now time.Time) (*fetch.Failure, error) {
	var f storedFailure
	if err := c.decode(key, s, &f, o, &f.Origin); err != nil {
		return nil, err
	}
	if err := f.Check(); err != nil {
		return nil, err
	}
	if err := f.CheckTimes(now); err != nil {
		return nil, err
	}
	return &f.Failure, nil
}

// decode opens the sealed value s read under key and unmarshals it into
// v, checking that it is o's (*origin, once decoded).
func (c *Client) decode(key, s string, v any, o fetch.Origin, origin *string) error {
	payload, err := c.seal.open(key, []byte(s))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(payload, v); err != nil {
		return err
	}
	if *origin != o.String() {
		return fmt.Errorf("a value for %q", *origin)
	}
	return nil
}

// encode marshals v and seals it for key.
func (c *Client) encode(key string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return c.seal.seal(key, b), nil
}

// SaveGood stores g as o's last good copy and clears its failure marks.
func (c *Client) SaveGood(ctx context.Context, o fetch.Origin, g *fetch.GoodCopy) error {
	key := c.originKey("good", o)
	b, err := c.encode(key, storedGood{Origin: o.String(), GoodCopy: *g})
	if err != nil {
		return err
	}
	return c.do(ctx, func(ctx context.Context) error {
		_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, key, b, c.opts.KeepFor)
			p.Del(ctx, c.originKey("fail", o))
			return nil
		})
		return err
	})
}

// SaveFailure stores o's failure marks.
func (c *Client) SaveFailure(ctx context.Context, o fetch.Origin, f *fetch.Failure) error {
	key := c.originKey("fail", o)
	b, err := c.encode(key, storedFailure{Origin: o.String(), Failure: *f})
	if err != nil {
		return err
	}
	return c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Set(ctx, key, b, c.opts.KeepFor).Err()
	})
}

// Delete forgets o's good copy and failure marks, for the whole fleet.
func (c *Client) Delete(ctx context.Context, o fetch.Origin) error {
	return c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Del(ctx, c.originKey("good", o), c.originKey("fail", o)).Err()
	})
}

// unlockSource deletes a lock only if it still holds this value: a lock
// that expired and was taken by another instance is left alone.
const unlockSource = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`

// LockFetch takes o's fetch lock for ttl, unless another instance has it.
func (c *Client) LockFetch(ctx context.Context, o fetch.Origin, ttl time.Duration) (func(), bool, error) {
	key := c.originKey("lock", o)
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

// The Client as a fetch.DocStore: the other files sites state usage in
// (tdmrep.json, RSL licences) under "<prefix>doc:<SHA-256 of the URL>"
// (JSON, sealed for its key, until the file expires).

var _ fetch.DocStore = (*Client)(nil)

// docKey is url's key.
func (c *Client) docKey(url string) string {
	sum := sha256.Sum256([]byte(url))
	return c.key("doc", hex.EncodeToString(sum[:]))
}

// LoadDoc reads url's stored answer; nil if there is none, or one that is
// not sealed for its key with the fleet's secret, does not decode, or fails
// the checks a fetched answer passes (fetch.StoredDoc.Check, with MaxTTL
// and MaxDocBytes), which is counted as foreign.
func (c *Client) LoadDoc(ctx context.Context, url string) (*fetch.StoredDoc, error) {
	key := c.docKey(url)
	var s string
	err := c.do(ctx, func(ctx context.Context) error {
		var err error
		s, err = c.rdb.Get(ctx, key).Result()
		return err
	})
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil
	case err != nil:
		return nil, err
	}
	var d fetch.StoredDoc
	payload, err := c.seal.open(key, []byte(s))
	if err == nil {
		err = json.Unmarshal(payload, &d)
	}
	if err == nil {
		err = d.Check(url, c.opts.Now(), c.opts.MaxTTL, c.opts.MaxDocBytes)
	}
	if err != nil {
		c.foreign(key, err)
		return nil, nil
	}
	return &d, nil
}

// SaveDoc stores d as url's answer, until it expires.
func (c *Client) SaveDoc(ctx context.Context, url string, d *fetch.StoredDoc) error {
	key := c.docKey(url)
	ttl := time.Until(d.Expires)
	if ttl <= 0 {
		return nil
	}
	b, err := c.encode(key, d)
	if err != nil {
		return err
	}
	return c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Set(ctx, key, b, ttl).Err()
	})
}

// DeleteDoc forgets url's answer, for the whole fleet.
func (c *Client) DeleteDoc(ctx context.Context, url string) error {
	key := c.docKey(url)
	return c.do(ctx, func(ctx context.Context) error {
		return c.rdb.Del(ctx, key).Err()
	})
}
