package fetch

import (
	"context"
	"fmt"
	"time"

	"github.com/robotsgate/robotsgate/robots"
)

// The Cache's use of its Store (CacheOptions.Store): adopting what the
// store holds on a miss, waiting for a peer's fetch under a shared lock,
// and writing each fetch's result.

// peerPoll is how often a Get waiting for another process's fetch looks
// for its result.
const peerPoll = 50 * time.Millisecond

// fromStore adopts what the Store holds for o and answers from it when
// that needs no fetch (a fresh copy, or a failure whose retry time has not
// come). A store that fails answers nothing: the caller fetches.
func (c *Cache) fromStore(ctx context.Context, o Origin) (Answer, bool) {
	if c.opts.Store == nil {
		return Answer{}, false
	}
	rec, err := c.opts.Store.Load(ctx, o)
	if err != nil {
		return Answer{}, false
	}
	c.adopt(o, c.trusted(o, rec))
	return c.fromState(o, c.opts.Now())
}

// trusted returns rec without the parts the Cache does not use: any that
// fails its Check (a Store should not return one, but the Cache is what
// turns a record into rules) or whose times are not ones a Cache could
// have written by now (CheckTimes: an expiry or a retry time years
// ahead). Each part dropped is reported to OnBadRecord.
func (c *Cache) trusted(o Origin, rec Record) Record {
	if rec.Good == nil && rec.Failure == nil {
		return rec
	}
	now := c.opts.Now()
	if g := rec.Good; g != nil {
		err := g.Check()
		if err == nil {
			err = g.CheckTimes(now, c.opts.TTL)
		}
		if err != nil {
			rec.Good = nil
			c.badRecord(o, fmt.Errorf("stored good copy for %s ignored: %w", o, err))
		}
	}
	if f := rec.Failure; f != nil {
		err := f.Check()
		if err == nil {
			err = f.CheckTimes(now)
		}
		if err != nil {
			rec.Failure = nil
			c.badRecord(o, fmt.Errorf("stored failure marks for %s ignored: %w", o, err))
		}
	}
	return rec
}

func (c *Cache) badRecord(o Origin, err error) {
	if c.opts.OnBadRecord != nil {
		c.opts.OnBadRecord(o, err)
	}
}

// adopt takes rec's good copy and failure marks into o's state where they
// are newer than what the state holds.
func (c *Cache) adopt(o Origin, rec Record) {
	if rec.Good == nil && rec.Failure == nil {
		return
	}
	var e *Entry
	var g *coldCopy
	var bin []byte
	if sg := rec.Good; sg != nil && c.newerThanHeld(o, sg.FetchedAt) {
		e = c.entryFromGood(o, sg) // parsed only when it will be adopted
		var err error
		if g, bin, err = freeze(e); err != nil {
			c.badRecord(o, err)
			e = nil
		}
	}
	if c.adoptHeld(o, rec, e, g, bin) {
		c.keep(e, rec.Good.Body) // outside the lock
	}
}

// adoptHeld takes e, made from rec's good copy (nil: none to adopt; g and
// bin its cold copy), and rec's failure marks into o's state where they
// are newer than what it holds; it reports whether e was adopted.
func (c *Cache) adoptHeld(o Origin, rec Record, e *Entry, g *coldCopy, bin []byte) (adopted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state(o)
	if e != nil && (st.good == nil || e.FetchedAt.After(st.good.fetched())) {
		if err := c.setGood(st, g, bin); err != nil {
			c.badRecord(o, err)
		} else {
			adopted = true
		}
	}
	f := rec.Failure
	switch {
	case f == nil:
		if g != nil && st.good == g { // the stored success is newer than our failure
			c.setFailure(st, nil)
		}
	case g != nil && st.good == g && !f.UnreachableSince.After(e.FetchedAt):
		// A failure older than the copy it sits beside cannot be.
	case ownFailure(f.LastKind):
		// Made under a configuration that may not be this one's (a
		// process before a restart, a peer not yet changed; older
		// versions stored them): never adopted, the origin is fetched.
	case f.RetryAt.After(st.failure().RetryAt):
		nf := Failure{UnreachableSince: f.UnreachableSince, RetryAt: f.RetryAt, LastError: f.LastError, LastKind: f.LastKind, LastStatus: f.LastStatus}
		if !nf.UnreachableSince.IsZero() && st.good != nil && st.good.fetched().After(nf.UnreachableSince) {
			nf.UnreachableSince = st.good.fetched()
		}
		c.setFailure(st, &nf)
	}
	return adopted
}

// newerThanHeld reports whether a copy fetched at t is newer than the good
// copy held for o, if any.
func (c *Cache) newerThanHeld(o Origin, t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.lookup(o)
	if st == nil {
		return true
	}
	return st.good == nil || t.After(st.good.fetched())
}

// entryFromGood makes the Entry a stored good copy describes, parsing its
// body with the Cache's options.
func (c *Cache) entryFromGood(o Origin, g *GoodCopy) *Entry {
	e := &Entry{
		Origin:      o,
		Outcome:     g.Outcome,
		Status:      g.Status,
		DisallowAll: g.DisallowAll,
		URL:         ownURL(o, g.URL),
		Truncated:   g.Truncated,
		Note:        g.Note,
		FetchedAt:   g.FetchedAt,
		Expires:     g.Expires,
		Sum:         bodySum(g.Outcome, g.Body),
	}
	if g.Outcome == Fetched {
		e.Rules = robots.Parse(g.Body, c.opts.Parse...)
	}
	e.Size = entrySize(e)
	return e
}

// lockOrAwait takes o's fetch lock when the Store is shared. When another
// process holds it, it waits for that process's result in the store (up to
// PeerWait), answering from it (ok); or takes the lock once it is free.
// unlock is nil when no lock is held: no shared store, a store that
// failed, or a peer that took too long (this process then fetches anyway:
// a second fetch is better than no answer).
func (c *Cache) lockOrAwait(ctx context.Context, o Origin) (unlock func(), a Answer, ok bool) {
	l, shared := c.opts.Store.(FetchLocker)
	if !shared {
		return nil, Answer{}, false
	}
	ttl := c.opts.PeerWait
	deadline := time.Now().Add(c.opts.PeerWait)
	for {
		unlock, got, err := l.LockFetch(ctx, o, ttl)
		switch {
		case err != nil:
			return nil, Answer{}, false
		case got:
			// A peer may have saved its result and let go of the lock
			// since this process last looked: no second fetch then.
			if a, ok := c.fromStore(ctx, o); ok {
				unlock()
				return nil, a, true
			}
			return unlock, Answer{}, false
		}
		if !time.Now().Before(deadline) {
			return nil, Answer{}, false
		}
		t := time.NewTimer(peerPoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, Answer{}, false
		}
		if a, ok := c.fromStore(ctx, o); ok {
			return nil, a, true
		}
	}
}

// saveGood returns the write of a successful fetch to the Store; nil
// without one.
func (c *Cache) saveGood(o Origin, e *Entry, body []byte) func(context.Context) {
	if c.opts.Store == nil {
		return nil
	}
	g := &GoodCopy{Outcome: e.Outcome, Status: e.Status, DisallowAll: e.DisallowAll, URL: e.RulesURL(),
		Truncated: e.Truncated, Note: e.Note, FetchedAt: e.FetchedAt, Expires: e.Expires}
	if e.Outcome == Fetched {
		g.Body = body
	}
	return func(ctx context.Context) { c.opts.Store.SaveGood(ctx, o, g) }
}

// saveFailure returns the write of st's failure marks to the Store; nil
// without one. c.mu is held.
func (c *Cache) saveFailure(o Origin, st *originState) func(context.Context) {
	if c.opts.Store == nil {
		return nil
	}
	f := &Failure{}
	*f = st.failure()
	return func(ctx context.Context) { c.opts.Store.SaveFailure(ctx, o, f) }
}
