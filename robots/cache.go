package robots

import (
	"container/list"
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/dgraph-io/ristretto/v2"
	"golang.org/x/sync/singleflight"
)

// Defaults of CacheOptions, as DESIGN.md's [robots] keys.
const (
	DefaultTTL              = 24 * time.Hour
	DefaultUnreachableLimit = 30 * 24 * time.Hour
	DefaultRetryAfter       = time.Minute
	DefaultCacheMaxBytes    = 1 << 30
	minTTL                  = time.Minute
)

// CacheOptions configures a Cache. Each zero value means the default named
// in its comment.
type CacheOptions struct {
	// Fetcher fetches robots.txt files. Nil: NewFetcher(FetchOptions{}).
	Fetcher *Fetcher
	// Parse holds the options fetched files are parsed with, such as
	// WithNormalization.
	Parse []Option
	// TTL bounds how long a fetched or unavailable answer is used; the
	// origin's Cache-Control max-age may shorten it, to no less than a
	// minute. 0: DefaultTTL.
	TTL time.Duration
	// UnreachableLimit: an origin unreachable this long with no good copy
	// ever gets no restrictions until a fetch succeeds. 0:
	// DefaultUnreachableLimit.
	UnreachableLimit time.Duration
	// RetryAfter is how long a failed fetch is remembered before the next
	// try; an origin's own longer Retry-After on 429 or 503 wins (at most
	// 24 h). 0: DefaultRetryAfter.
	RetryAfter time.Duration
	// MaxBytes bounds the memory held by cached rules, and separately that
	// held by the last good copies kept for failed refreshes (both hold the
	// same entries, so together they usually take little more than one
	// bound). 0: DefaultCacheMaxBytes.
	MaxBytes int64
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// OnFetch, if set, is called after every fetch, for metrics.
	OnFetch func(o Origin, r *FetchResult)
}

// Entry is the rules of one origin and how they were obtained. It is
// immutable once made.
type Entry struct {
	Origin      Origin
	Outcome     Outcome   // Fetched or Unavailable
	Status      int       // HTTP status of the fetch
	Rules       *Robots   // Fetched: the file; nil: no restrictions
	DisallowAll bool      // Unavailable with a 401 or 403 under AuthErrorsDisallow
	URL         string    // the URL the rules came from, after redirects
	Truncated   bool      // the file was longer than the fetcher reads
	Note        string    // why a 3xx counted as 404 (a loop, too many hops); "" if none
	FetchedAt   time.Time // when the fetch started
	Expires     time.Time // when the next request refetches
	Size        int       // estimated bytes held
}

// Answer is what a Cache says about an origin: the rules to apply, or why
// there are none.
type Answer struct {
	// Entry is the rules in force; nil when there are none.
	Entry *Entry
	// Stale: Entry is the last good copy, kept because refreshing it failed.
	Stale bool
	// Unreachable: the origin is unreachable and there is no copy: every
	// path is disallowed until RetryAt (RFC 9309 section 2.3.1.4).
	Unreachable bool
	// LimitPassed: unreachable for UnreachableLimit with no copy ever: no
	// restrictions until a fetch succeeds.
	LimitPassed bool
	// LastError describes the latest failed fetch; "" if none.
	LastError string
	// LastStatus is the HTTP status of the latest failed fetch; 0 if none.
	LastStatus int
	// RetryAt is when the next fetch will be tried after a failure.
	RetryAt time.Time
	// UnreachableSince is when the current run of failures began.
	UnreachableSince time.Time
}

// Cache holds the robots.txt rules of many origins: fresh entries in a
// ristretto cache bounded by bytes, and, outside it, the state that changes
// answers (the last good copy, when failures began, when to retry) in a
// bounded LRU, so that eviction only ever costs a refetch. Concurrent
// lookups of an origin that needs fetching wait on one fetch. Cache is safe
// for concurrent use; Close releases it.
type Cache struct {
	opts  CacheOptions
	rc    *ristretto.Cache[uint64, *Entry]
	seed  maphash.Seed
	group singleflight.Group

	mu         sync.Mutex
	states     map[Origin]*list.Element // of *originState
	lru        *list.List               // most recently refreshed first
	stateBytes int64

	hits, misses, evictions, fetches atomic.Int64
}

type originState struct {
	origin           Origin
	good             *Entry
	unreachableSince time.Time
	retryAt          time.Time
	lastErr          string
	lastStatus       int
}

// stateOverhead is the approximate size of an originState and its LRU and
// map slots, beyond its entry.
const stateOverhead = int64(unsafe.Sizeof(originState{})) + 128

// NewCache returns a Cache with opts, defaults filled in.
func NewCache(opts CacheOptions) (*Cache, error) {
	if opts.Fetcher == nil {
		opts.Fetcher = NewFetcher(FetchOptions{})
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.UnreachableLimit <= 0 {
		opts.UnreachableLimit = DefaultUnreachableLimit
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultCacheMaxBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &Cache{opts: opts, seed: maphash.MakeSeed(), states: map[Origin]*list.Element{}, lru: list.New()}
	// About one counter per 300 bytes: ten per entry of a typical ~3 KB
	// file, as ristretto advises.
	counters := max(opts.MaxBytes/300, 1000)
	rc, err := ristretto.NewCache(&ristretto.Config[uint64, *Entry]{
		NumCounters: counters,
		MaxCost:     opts.MaxBytes,
		BufferItems: 64,
		// ristretto's own metrics cost every Get an atomic add; the cache
		// counts what it reports itself.
		OnEvict: func(*ristretto.Item[*Entry]) { c.evictions.Add(1) },
	})
	if err != nil {
		return nil, fmt.Errorf("create robots.txt cache: %w", err)
	}
	c.rc = rc
	return c, nil
}

// Close stops the cache's background work and closes its fetcher's idle
// connections.
func (c *Cache) Close() {
	c.rc.Close()
	c.opts.Fetcher.CloseIdleConnections()
}

// CloseIdleConnections closes the fetcher's kept-alive connections.
func (c *Cache) CloseIdleConnections() { c.opts.Fetcher.CloseIdleConnections() }

// key hashes an origin without allocating. Entries carry their origin, so
// a collision is a miss, never a wrong answer.
func (c *Cache) key(o Origin) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(o.Scheme)
	h.WriteByte(0)
	h.WriteString(o.Host)
	h.WriteByte(0)
	var p [2]byte
	p[0], p[1] = byte(o.Port>>8), byte(o.Port)
	h.Write(p[:])
	return h.Sum64()
}

// Get returns the rules in force for origin o: a fresh cached entry, or
// the result of one fetch shared by every caller waiting on o. A caller
// whose ctx ends stops waiting; the fetch goes on for the others. A hit
// does not allocate.
func (c *Cache) Get(ctx context.Context, o Origin) (Answer, error) {
	now := c.opts.Now()
	if e, ok := c.rc.Get(c.key(o)); ok && e.Origin == o && now.Before(e.Expires) {
		c.hits.Add(1)
		return Answer{Entry: e}, nil
	}
	c.misses.Add(1)
	if a, ok := c.fromState(o, now); ok {
		return a, nil
	}
	ch := c.group.DoChan(o.String(), func() (any, error) {
		return c.refresh(o), nil
	})
	select {
	case r := <-ch:
		return r.Val.(Answer), nil
	case <-ctx.Done():
		return Answer{}, fmt.Errorf("wait for robots.txt of %s: %w", o, context.Cause(ctx))
	}
}

// fromState answers without fetching when the state allows: a fresh copy
// that ristretto dropped, or a failure whose retry time has not come.
func (c *Cache) fromState(o Origin, now time.Time) (Answer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.states[o]
	if !ok {
		return Answer{}, false
	}
	st := el.Value.(*originState)
	if st.good != nil && now.Before(st.good.Expires) {
		c.set(o, st.good)
		return Answer{Entry: st.good}, true
	}
	if now.Before(st.retryAt) {
		return c.failed(st, now), true
	}
	return Answer{}, false
}

// refresh fetches o's robots.txt and records what it found.
func (c *Cache) refresh(o Origin) Answer {
	// Another caller may have refreshed o between our miss and this fetch.
	if a, ok := c.fromState(o, c.opts.Now()); ok {
		return a
	}
	c.fetches.Add(1)
	res := c.opts.Fetcher.Fetch(context.Background(), o, c.opts.Parse...)
	if c.opts.OnFetch != nil {
		c.opts.OnFetch(o, res)
	}
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state(o)
	if res.Outcome == Unreachable {
		if st.good == nil {
			// A copy ristretto still holds, expired, is a good copy too.
			if e, ok := c.rc.Get(c.key(o)); ok && e.Origin == o {
				c.setGood(st, e)
			}
		}
		if st.unreachableSince.IsZero() {
			st.unreachableSince = res.At
		}
		st.lastErr, st.lastStatus = describeFailure(res), res.Status
		st.retryAt = now.Add(max(c.opts.RetryAfter, res.RetryAfter))
		return c.failed(st, now)
	}
	ttl := c.opts.TTL
	if res.MaxAge >= 0 {
		ttl = min(max(res.MaxAge, minTTL), c.opts.TTL)
	}
	e := &Entry{
		Origin:      o,
		Outcome:     res.Outcome,
		Status:      res.Status,
		Rules:       res.Rules,
		DisallowAll: res.DisallowAll,
		URL:         res.URL,
		Truncated:   res.Truncated,
		FetchedAt:   res.At,
		Note:        errText(res.Err),
		Expires:     now.Add(ttl),
	}
	e.Size = int(unsafe.Sizeof(*e)) + len(e.URL) + e.Rules.MemSize()
	c.setGood(st, e)
	st.unreachableSince, st.retryAt, st.lastErr, st.lastStatus = time.Time{}, time.Time{}, "", 0
	c.set(o, e)
	return Answer{Entry: e}
}

// set stores e in ristretto (which may drop it: the state keeps it).
func (c *Cache) set(o Origin, e *Entry) {
	c.rc.Set(c.key(o), e, int64(e.Size))
}

func describeFailure(res *FetchResult) string {
	if res.Err == nil {
		return string(res.Outcome)
	}
	return Describe(res.Err)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// failed answers for an origin whose latest fetch failed.
func (c *Cache) failed(st *originState, now time.Time) Answer {
	a := Answer{LastError: st.lastErr, LastStatus: st.lastStatus, RetryAt: st.retryAt, UnreachableSince: st.unreachableSince}
	switch {
	case st.good != nil:
		a.Entry, a.Stale = st.good, true
	case now.Sub(st.unreachableSince) >= c.opts.UnreachableLimit:
		a.LimitPassed = true
	default:
		a.Unreachable = true
	}
	return a
}

// state returns o's state, creating it, and marks it most recent. c.mu is held.
func (c *Cache) state(o Origin) *originState {
	if el, ok := c.states[o]; ok {
		c.lru.MoveToFront(el)
		return el.Value.(*originState)
	}
	st := &originState{origin: o}
	c.states[o] = c.lru.PushFront(st)
	c.stateBytes += stateOverhead
	c.trim()
	return st
}

// setGood makes e the last good copy of st's origin. c.mu is held.
func (c *Cache) setGood(st *originState, e *Entry) {
	if st.good != nil {
		c.stateBytes -= int64(st.good.Size)
	}
	st.good = e
	c.stateBytes += int64(e.Size)
	c.trim()
}

// trim forgets the least recently refreshed origins while the state is
// over its bound, never the most recent. c.mu is held.
func (c *Cache) trim() {
	for c.stateBytes > c.opts.MaxBytes && c.lru.Len() > 1 {
		el := c.lru.Back()
		st := el.Value.(*originState)
		c.lru.Remove(el)
		delete(c.states, st.origin)
		c.stateBytes -= stateOverhead
		if st.good != nil {
			c.stateBytes -= int64(st.good.Size)
		}
	}
}

// Peek returns what the cache holds for o without fetching, and whether it
// holds anything.
func (c *Cache) Peek(o Origin) (Answer, bool) {
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.states[o]; ok {
		st := el.Value.(*originState)
		if st.good != nil && st.lastErr == "" {
			return Answer{Entry: st.good}, true
		}
		return c.failed(st, now), true
	}
	if e, ok := c.rc.Get(c.key(o)); ok && e.Origin == o {
		return Answer{Entry: e}, true
	}
	return Answer{}, false
}

// Purge forgets everything about o, so that the next request fetches its
// robots.txt again. It reports whether anything was held.
func (c *Cache) Purge(o Origin) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, held := c.rc.Get(c.key(o))
	c.rc.Del(c.key(o))
	if el, ok := c.states[o]; ok {
		held = true
		st := el.Value.(*originState)
		c.lru.Remove(el)
		delete(c.states, o)
		c.stateBytes -= stateOverhead
		if st.good != nil {
			c.stateBytes -= int64(st.good.Size)
		}
	}
	return held
}

// CacheStats are a Cache's counters since it was made.
type CacheStats struct {
	Hits, Misses, Evictions, Fetches int64
	Bytes                            int64 // held by cached rules
	StateBytes                       int64 // held by the last good copies and failure state
	Origins                          int   // origins with state
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{
		Hits:       c.hits.Load(),
		Misses:     c.misses.Load(),
		Evictions:  c.evictions.Load(),
		Fetches:    c.fetches.Load(),
		Bytes:      c.rc.MaxCost() - c.rc.RemainingCost(),
		StateBytes: c.stateBytes,
		Origins:    c.lru.Len(),
	}
}

// Wait blocks until the cache has applied every earlier write; for tests.
func (c *Cache) Wait() { c.rc.Wait() }
