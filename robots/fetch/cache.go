package fetch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/internal/recency"
	"github.com/robotsgate/robotsgate/robots"
)

// Defaults of CacheOptions, as docs/configuration.md's [robots] keys.
const (
	DefaultTTL              = 24 * time.Hour
	DefaultUnreachableLimit = 30 * 24 * time.Hour
	DefaultRetryAfter       = time.Minute
	DefaultCacheMaxBytes    = 1 << 30
	// DefaultMaxFetches bounds the robots.txt fetches in flight at once.
	// A fetch holds one connection while it runs (redirects are followed
	// one at a time), so 256 is as many descriptors as NewTransport keeps
	// idle, well within common limits. Even if every origin hangs for the
	// whole 10 s fetch_timeout, 256 slots start 25 fetches a second, and
	// about a thousand a second at a typical quarter-second fetch: more
	// cold origins than the clients of one proxy ask for.
	DefaultMaxFetches = 256
	minTTL            = time.Minute
	// fetchSlotWait bounds how long a Get that needs a fetch waits for a
	// free slot: long enough for fetches that nobody waits for any more to
	// be given up and end, short enough that a refused request is answered
	// at once.
	fetchSlotWait = 100 * time.Millisecond
)

// ErrOverloaded is wrapped by the error of a Get that needed a fetch when
// CacheOptions.MaxFetches fetches were in flight and none ended in time.
var ErrOverloaded = errors.New("too many robots.txt fetches in flight")

// ErrColdCopy is wrapped by the errors OnBadRecord is given for a last
// good copy the cold tier could not keep or read back.
var ErrColdCopy = errors.New("robots.txt cache: cold copy")

// ErrClosed is wrapped by the error of a Get on a closed Cache, or whose
// fetch Close cancelled.
var ErrClosed = errors.New("robots.txt cache closed")

// errAbandoned is the cause of a fetch given up because nobody waited for
// it any more.
var errAbandoned = errors.New("robots.txt fetch given up: nobody waits for it")

// CacheOptions configures a Cache. Each zero value means the default named
// in its comment.
type CacheOptions struct {
	// Fetcher fetches robots.txt files. Nil: NewFetcher(FetcherOptions{}).
	Fetcher *Fetcher
	// Parse holds the options fetched files are parsed with, such as
	// WithNormalization.
	Parse []robots.Option
	// TTL bounds how long a fetched or unavailable answer is used; the
	// origin's Cache-Control max-age may shorten it, to no less than a
	// minute. 0: DefaultTTL.
	TTL time.Duration
	// UnreachableLimit: an origin unreachable this long with no good copy
	// ever gets no restrictions until a fetch succeeds. 0:
	// DefaultUnreachableLimit.
	UnreachableLimit time.Duration
	// RetryAfter is how long a failed fetch is remembered before the next
	// try; an origin's own longer Retry-After on 429 or 503 wins. Either
	// is at most 24 h (a longer RetryAfter counts as 24 h), the bound
	// Failure.CheckTimes holds stored marks to. 0: DefaultRetryAfter.
	RetryAfter time.Duration
	// MaxBytes bounds the heap held for origins, in one bound over both
	// tiers (see cold.go), all counted at heapSlack times their live bytes
	// to leave the collector its slack: a share of it (hotShare) for the
	// hot tier's entries, their rules counted with every matcher built
	// (see Entry.Size); the rest for every origin's state and cold last
	// good copy. Past it the least recently refreshed origins are
	// forgotten, which only ever costs a refetch. The Go heap in use stays
	// within it plus a fixed overhead (docs/performance.md, "What
	// cache_max_bytes bounds"). 0: DefaultCacheMaxBytes.
	MaxBytes int64
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// MaxFetches bounds the robots.txt fetches in flight at once, over all
	// origins. A Get that needs one more first gives up the fetches whose
	// callers have all left, then waits a little (at most 100 ms, and not
	// past its ctx) for a slot; failing that it answers with the origin's
	// last good copy, or an error wrapping ErrOverloaded. 0:
	// DefaultMaxFetches.
	MaxFetches int
	// Store, if set, keeps last good copies and failure marks beyond this
	// Cache (on disk, or shared by several processes): consulted on a miss
	// before fetching, written after every fetch. Nil: none.
	Store Store
	// PeerWait bounds how long a Get waits for another process's fetch
	// of the same origin, when Store is a FetchLocker and that process
	// holds the lock; past it this process fetches itself. 0: 15 s.
	PeerWait time.Duration
	// OnFetch, if set, is called after every fetch, for metrics; not for
	// a fetch given up (see MaxFetches) or cancelled by Close that ended
	// unreachable, which is not the origin's failure.
	OnFetch func(o Origin, r *Result)
	// OnBadRecord, if set, is called for each part of a Record from Store
	// that the Cache ignores: one that fails GoodCopy.Check or
	// Failure.Check, or whose times no Cache could have written
	// (GoodCopy.CheckTimes with TTL, Failure.CheckTimes), for logs and
	// metrics. err says which part and why. The other part of the same
	// Record is still used if it passes. It is also called, with an error
	// wrapping ErrColdCopy, for a last good copy the cache could not keep
	// in its cold tier (no memory to map) or read back (never, unless
	// memory is corrupted): the origin is then fetched afresh.
	OnBadRecord func(o Origin, err error)
	// Keeper, if set, is handed every body of robots.txt this process
	// reads, with the Copy that names it (Entry.Copy): each fetched or
	// unavailable answer (an unavailable one with no body and a zero
	// Sum), and each good copy adopted from Store, which another instance
	// of a fleet fetched, or this process before a restart. So every
	// instance of a fleet can keep each copy its own decisions name, from
	// the body the fleet already shares. It is called on the fetch path
	// only, outside the Cache's lock; never for a lookup answered from
	// what the Cache holds. Nil: none.
	Keeper evidence.Keeper
}

// Entry is the rules of one origin and how they were obtained. It is
// immutable once made.
type Entry struct {
	Origin      Origin
	Outcome     Outcome        // Fetched or Unavailable
	Status      int            // HTTP status of the fetch
	Rules       *robots.Robots // Fetched: the file; nil: no restrictions
	DisallowAll bool           // Unavailable with a 401 or 403 under AuthErrorsDisallow
	URL         string         // the URL the rules came from, after redirects, if not Origin.RobotsURL(); see RulesURL
	Truncated   bool           // the file was longer than the fetcher reads
	Note        string         // why a 3xx counted as 404 (a loop, too many hops); "" if none
	FetchedAt   time.Time      // when the fetch started
	Expires     time.Time      // when the next request refetches
	Size        int            // live heap bytes held, rules with every matcher built (see entrySize)
	// Sum is the SHA-256 of the body the rules were parsed from, as read
	// (after the fetcher's MaxBytes); zero for Unavailable, which has none.
	Sum [sha256.Size]byte
}

// Copy names the copy of robots.txt e was made from, as an audit record
// names it: where it came from (RulesURL), the SHA-256 of its body (zero
// for an unavailable answer), when it was fetched and its status.
func (e *Entry) Copy() evidence.Copy {
	c := evidence.Copy{URL: e.RulesURL(), Sum: e.Sum, Fetched: e.FetchedAt, Status: e.Status}
	if e.URL != "" {
		c.For = e.Origin.RobotsURL()
	}
	return c
}

// bodySum is the Sum of an answer with outcome and body: the body's
// SHA-256 when fetched; zero otherwise, even for an empty body.
func bodySum(outcome Outcome, body []byte) [sha256.Size]byte {
	if outcome != Fetched {
		return [sha256.Size]byte{}
	}
	return evidence.SumOf(body)
}

// RulesURL returns the URL the rules came from, after redirects: a cached
// entry keeps it only when a redirect made it differ from its origin's
// own /robots.txt.
func (e *Entry) RulesURL() string {
	if e.URL != "" {
		return e.URL
	}
	return e.Origin.RobotsURL()
}

// ownURL returns url as Entry.URL keeps it for o: "" for o's own
// /robots.txt, which most files are fetched from.
func ownURL(o Origin, url string) string {
	if url == o.RobotsURL() {
		return ""
	}
	return url
}

// Answer is what a Cache says about an origin: the rules to apply, or why
// there are none.
type Answer struct {
	// Entry is the rules in force; nil when there are none.
	Entry *Entry
	// Stale: Entry is the last good copy, kept because refreshing it
	// failed, or could not start (too many fetches in flight).
	Stale bool
	// Unreachable: the origin is unreachable and there is no copy: every
	// path is disallowed until RetryAt (RFC 9309 section 2.3.1.4).
	Unreachable bool
	// LimitPassed: unreachable for UnreachableLimit with no copy ever: no
	// restrictions until a fetch succeeds.
	LimitPassed bool
	// LastError describes the latest failed fetch; "" if none.
	LastError string
	// LastKind is the kind of that failure, as ErrorKind names it
	// ("tls-verify", "timeout", ...); "" if none.
	LastKind string
	// LastStatus is the HTTP status of the latest failed fetch; 0 if none.
	LastStatus int
	// RetryAt is when the next fetch will be tried after a failure.
	RetryAt time.Time
	// UnreachableSince is when the current run of failures began.
	UnreachableSince time.Time
}

// Copy names the copy of robots.txt a's rules came from (Entry.Copy), a
// stale one with its own fetch time; false when there is none (the origin
// is unreachable).
func (a *Answer) Copy() (evidence.Copy, bool) {
	if a.Entry == nil {
		return evidence.Copy{}, false
	}
	return a.Entry.Copy(), true
}

// Cache holds the robots.txt rules of many origins, in two tiers (see
// cold.go): the state that changes answers (the last good copy, cold,
// when failures began, when to retry) in an LRU, so that eviction only
// ever costs a refetch; and the hot tier, a ristretto cache of the
// entries decided on most, ready to decide in a few hundred nanoseconds,
// for lookups without a lock. ristretto holds only entries the LRU holds
// (forgetting an origin deletes it there too), and MaxBytes bounds both.
// Concurrent lookups of an origin that needs fetching wait on one fetch,
// and at most MaxFetches fetches run at once. Cache is safe for
// concurrent use; Close releases it.
type Cache struct {
	opts CacheOptions
	rc   *ristretto.Cache[uint64, *Entry] // the hot tier
	seed maphash.Seed
	// coldMax bounds the cold tier (see coldBytes): MaxBytes less the
	// hot tier's share.
	coldMax int64

	// slots is the semaphore of fetches in flight: a fetch holds one
	// element from before it starts until it is out of flights.
	slots chan struct{}
	// ctx is the parent of every fetch's context; Close cancels it.
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // fetches running

	mu sync.Mutex
	// states holds each origin's state by its key (see key), in 16-byte
	// map slots where an Origin key would take 48: the origins of
	// colliding keys chain through their states' sameKey.
	states  map[uint64]*originState
	nStates int
	// lru holds the states, most recently refreshed first.
	lru        recency.List[originState]
	stateBytes int64  // live heap bytes of the states
	arena      *arena // the cold copies' rules
	// thawBuffers keeps *thawBuffer for reading cold copies back.
	thawBuffers sync.Pool
	// flights holds the fetch in flight of each origin, which every Get
	// of that origin waits on. It replaces x/sync/singleflight: joining a
	// fetch, counting its waiters and giving it up when none is left must
	// be one decision under one lock, and singleflight's calls can be
	// neither counted nor cancelled (with a count kept beside it, a caller
	// could join a call just given up, and the two maps would have to be
	// kept in step with Forget).
	flights map[Origin]*flight
	// saving holds, per origin, the writes to the Store of fetches whose
	// waiters have their answer already: a purge waits for them, or the
	// copy it purged would be written back after it.
	saving map[Origin][]chan struct{}
	// ownEpoch counts RetryOwnFailures calls: a fetch that began before
	// the latest may have been sent the old configuration's way, and its
	// failure of the configuration's kind is not kept for retry_after.
	ownEpoch uint64
	closed   bool

	hits, coldHits, misses, evictions, fetches, abandoned, overloads atomic.Int64
}

// flight is one robots.txt fetch in flight and the Gets waiting on it.
type flight struct {
	origin Origin
	ctx    context.Context // cancelled to give the fetch up, or by Close
	cancel context.CancelCauseFunc
	done   chan struct{} // closed once answer and err are set
	answer Answer
	err    error

	waiters int // Gets waiting on it; c.mu is held
	// epoch is the Cache's ownEpoch when the flight began.
	epoch uint64
}

// originState is what the cache holds for an origin, one per origin it
// knows: kept small (80 bytes, with its links), as most origins have only a good copy.
type originState struct {
	origin Origin
	good   *coldCopy // the last good copy; nil if none
	// fail describes the current run of failures: when it began, when to
	// retry, the latest error. Nil while the latest fetch succeeded; set
	// and cleared by setFailure, as a whole, never changed in place.
	fail    *Failure
	lru     recency.Links[originState]
	sameKey *originState // the next state in Cache.states with the same key
}

// failure returns st's failure marks: all zero while the latest fetch
// succeeded.
func (st *originState) failure() Failure {
	if st.fail == nil {
		return Failure{}
	}
	return *st.fail
}

// NewCache returns a Cache with opts, defaults filled in.
func NewCache(opts CacheOptions) (*Cache, error) {
	if opts.Fetcher == nil {
		opts.Fetcher = NewFetcher(FetcherOptions{})
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
	opts.RetryAfter = min(opts.RetryAfter, maxRetryAfter)
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultCacheMaxBytes
	}
	if opts.MaxFetches <= 0 {
		opts.MaxFetches = DefaultMaxFetches
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PeerWait <= 0 {
		opts.PeerWait = 15 * time.Second
	}
	c := &Cache{
		opts:    opts,
		seed:    maphash.MakeSeed(),
		slots:   make(chan struct{}, opts.MaxFetches),
		states:  map[uint64]*originState{},
		lru:     recency.New(func(st *originState) *recency.Links[originState] { return &st.lru }),
		flights: map[Origin]*flight{},
		saving:  map[Origin][]chan struct{}{},
	}
	// The hot tier's live bytes are its share of MaxBytes over heapSlack.
	// ristretto's admission policy keeps the entries whose origins are
	// looked up most (TinyLFU, fed by every lookup, hit or miss): ten
	// counters per entry it can hold, at a hot entry's typical 8 KiB
	// (ristretto's sketch and doorkeeper take about 4 bytes a counter).
	hotMax := hotShare(opts.MaxBytes)
	c.coldMax = opts.MaxBytes - hotMax
	c.arena = newArena()
	// The arena's slabs are the OS's until unmapped: a Cache dropped
	// without Close, or used after it (lookups answer from what it holds),
	// gives them back when it is collected.
	runtime.AddCleanup(c, func(a *arena) { a.releaseAll() }, c.arena)
	rc, err := ristretto.NewCache(&ristretto.Config[uint64, *Entry]{
		NumCounters: max(hotMax/heapSlack/(8<<10)*10, 1000),
		MaxCost:     hotMax / heapSlack,
		BufferItems: 64,
		// Each entry's cost counts its ristretto slots (hotOverhead).
		IgnoreInternalCost: true,
		// ristretto's own metrics cost every Get an atomic add; the cache
		// counts what it reports itself (evictions in trim: what ristretto
		// drops on its own the state still holds).
	})
	if err != nil {
		return nil, fmt.Errorf("create robots.txt cache: %w", err)
	}
	c.rc = rc
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	return c, nil
}

// Close cancels the fetches in flight (their callers get an error wrapping
// ErrClosed), waits for them to end, stops the cache's background work and
// closes its fetcher's idle connections. Later lookups are answered from
// what is held, or with ErrClosed.
func (c *Cache) Close() {
	c.mu.Lock()
	closed := c.closed
	c.closed = true
	c.mu.Unlock()
	if closed {
		return
	}
	c.cancel(ErrClosed)
	c.wg.Wait()
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

// hotShare is the part of a bound of maxBytes that the hot tier takes: a
// thirty-second (32 MiB of the default 1 GiB: five thousand hot origins
// of median files, more as their requests leave matchers unbuilt), and no
// less than 4 MiB or a quarter of maxBytes, whichever is less. A skewed
// load's hot origins are a few thousand; the cold tier holds the many
// others at about their text's size each. An origin enters the hot tier
// on its second decision, not its fetch: the many origins a crawl asks
// once cost only their cold copy.
func hotShare(maxBytes int64) int64 {
	return max(maxBytes/32, min(4<<20, maxBytes/4))
}

// Get returns the rules in force for origin o: a fresh cached entry, or
// the result of one fetch shared by every caller waiting on o. A caller
// whose ctx ends stops waiting; the fetch goes on for the others, and for
// the cache, until a slot is needed for a fetch that someone waits for
// (see CacheOptions.MaxFetches). When no slot frees in time, the last good
// copy of o, however old, is the answer (Stale), or else an error wrapping
// ErrOverloaded. A hit does not allocate.
func (c *Cache) Get(ctx context.Context, o Origin) (Answer, error) {
	now := c.opts.Now()
	if e, ok := c.rc.Get(c.key(o)); ok && e.Origin == o && now.Before(e.Expires) {
		c.hits.Add(1)
		e.Rules.Hot() // read back cold and offered: decided on often now
		return Answer{Entry: e}, nil
	}
	if a, ok := c.fromState(o, now); ok {
		return a, nil
	}
	c.misses.Add(1)
	f, err := c.join(ctx, o)
	if err != nil {
		if errors.Is(err, ErrOverloaded) {
			if a, ok := c.held(o, c.opts.Now()); ok {
				return a, nil
			}
		}
		return Answer{}, err
	}
	select {
	case <-f.done:
		return f.answer, f.err
	case <-ctx.Done():
		c.mu.Lock()
		f.waiters--
		c.mu.Unlock()
		return Answer{}, fmt.Errorf("wait for robots.txt of %s: %w", o, context.Cause(ctx))
	}
}

// join counts the caller as a waiter of o's fetch: the one in flight, or a
// new one if a slot is free or frees within fetchSlotWait (and ctx).
// Another caller may start o's fetch while this one waits for a slot: it
// joins that fetch once it has a slot, or when the wait is over.
func (c *Cache) join(ctx context.Context, o Origin) (*flight, error) {
	if f, err := c.joinFlight(o); f != nil || err != nil {
		return f, err
	}
	if ctx.Err() != nil {
		// Nobody would wait for a fetch started now.
		return nil, fmt.Errorf("wait for robots.txt of %s: %w", o, context.Cause(ctx))
	}
	if err := c.acquire(ctx); err != nil {
		if f, cerr := c.joinFlight(o); f != nil || cerr != nil {
			return f, cerr
		}
		c.overloads.Add(1)
		return nil, fmt.Errorf("fetch robots.txt for %s: %w", o, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		<-c.slots
		return nil, fmt.Errorf("fetch robots.txt for %s: %w", o, ErrClosed)
	}
	if f := c.flights[o]; f != nil {
		<-c.slots
		f.waiters++
		return f, nil
	}
	f := &flight{origin: o, done: make(chan struct{}), waiters: 1, epoch: c.ownEpoch}
	f.ctx, f.cancel = context.WithCancelCause(c.ctx)
	c.flights[o] = f
	c.wg.Add(1)
	go c.run(f)
	return f, nil
}

// joinFlight counts the caller as a waiter of o's fetch in flight, if
// there is one.
func (c *Cache) joinFlight(o Origin) (*flight, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.flights[o]; f != nil {
		f.waiters++
		return f, nil
	}
	if c.closed {
		return nil, fmt.Errorf("fetch robots.txt for %s: %w", o, ErrClosed)
	}
	return nil, nil
}

// acquire takes a fetch slot. With none free, it gives up the fetches
// nobody waits for, then waits for a slot up to fetchSlotWait, and not
// past ctx or Close; failing that, the error wraps ErrOverloaded.
func (c *Cache) acquire(ctx context.Context) error {
	switch taken, err := takeSlot(ctx, c.slots, c.abandon, c.ctx.Done()); {
	case taken:
		return nil
	case errors.Is(err, ErrClosed):
		return err // joinFlight reports it
	case err != nil:
		return fmt.Errorf("%w: %w", ErrOverloaded, err)
	}
	return ErrOverloaded
}

// takeSlot takes a place in slots, the semaphore of fetches in flight: at
// once if one is free; else, after busy (if not nil), waiting up to
// fetchSlotWait. It reports false with a nil error when the wait ran out,
// and an error when ctx ended first (its cause) or closed did (ErrClosed).
func takeSlot(ctx context.Context, slots chan struct{}, busy func(), closed <-chan struct{}) (bool, error) {
	select {
	case slots <- struct{}{}:
		return true, nil
	default:
	}
	if busy != nil {
		busy()
	}
	t := time.NewTimer(fetchSlotWait)
	defer t.Stop()
	select {
	case slots <- struct{}{}:
		return true, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, context.Cause(ctx)
	case <-closed:
		return false, ErrClosed
	}
}

// abandon gives up every fetch in flight that nobody waits for any more:
// it cancels them, so that they end promptly and free their slots, and
// takes them out of flights, so that the next Get of their origin starts
// afresh.
func (c *Cache) abandon() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for o, f := range c.flights {
		if f.waiters == 0 {
			delete(c.flights, o)
			f.cancel(errAbandoned)
			c.abandoned.Add(1)
		}
	}
}

// run is one fetch in flight: it refreshes f's origin, hands the answer to
// its waiters and frees its slot.
func (c *Cache) run(f *flight) {
	defer c.wg.Done()
	var save func(context.Context)
	f.answer, save, f.err = c.refresh(f)
	f.cancel(nil)
	<-c.slots // after refresh took f out of flights
	if save == nil {
		close(f.done)
		return
	}
	// The write comes after the waiters have their answer, and is known
	// to Purge before they have it.
	saved := make(chan struct{})
	c.mu.Lock()
	c.saving[f.origin] = append(c.saving[f.origin], saved)
	c.mu.Unlock()
	close(f.done)
	ctx, cancel := context.WithTimeout(c.ctx, storeTimeout)
	save(ctx)
	cancel()
	c.mu.Lock()
	if rest := slices.DeleteFunc(c.saving[f.origin], func(ch chan struct{}) bool { return ch == saved }); len(rest) > 0 {
		c.saving[f.origin] = rest
	} else {
		delete(c.saving, f.origin)
	}
	c.mu.Unlock()
	close(saved)
}

// storeTimeout bounds one write to the Store after a fetch.
const storeTimeout = 5 * time.Second

// land takes f out of flights, unless it was given up already. c.mu is
// held.
func (c *Cache) land(f *flight) {
	if c.flights[f.origin] == f {
		delete(c.flights, f.origin)
	}
}

// held answers for o, when a fetch could not start, from what the cache
// holds: the last good copy (Stale, however old), or no restrictions once
// the origin has been unreachable for UnreachableLimit.
func (c *Cache) held(o Origin, now time.Time) (Answer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.lookup(o)
	if st == nil {
		st = &originState{origin: o}
	}
	var a Answer
	if since := st.failure().UnreachableSince; st.good != nil {
		a = c.failed(st, now)
	} else if e, ok := c.rc.Get(c.key(o)); ok && e.Origin == o {
		a = Answer{Entry: e, Stale: true, UnreachableSince: since}
	} else if !since.IsZero() && now.Sub(since) >= c.opts.UnreachableLimit {
		a = c.failed(st, now)
	} else {
		return Answer{}, false
	}
	// The latest try is this one, which could not start; the next Get
	// tries again.
	a.LastError, a.LastStatus, a.RetryAt = "overloaded: "+ErrOverloaded.Error(), 0, time.Time{}
	return a, true
}

// fromState answers without fetching when the state allows: a fresh copy
// the hot tier does not hold, read back from the cold tier (outside the
// lock) and offered to the hot tier; or a failure whose retry time has
// not come.
func (c *Cache) fromState(o Origin, now time.Time) (Answer, bool) {
	c.mu.Lock()
	st := c.lookup(o)
	if st == nil {
		c.mu.Unlock()
		return Answer{}, false
	}
	if g := st.good; g != nil && g.fresh(now) {
		buf, _ := c.thawBuffers.Get().(*thawBuffer)
		if buf == nil {
			buf = new(thawBuffer)
		}
		buf.blob = append(buf.blob[:0], c.arena.bytes(g.ref)...)
		c.mu.Unlock()
		e, err := thaw(o, g, buf.blob, &buf.bin)
		if cap(buf.blob)+cap(buf.bin) <= maxPooledThaw {
			c.thawBuffers.Put(buf)
		}
		if err != nil {
			c.badRecord(o, err)
			return Answer{}, false // fetched afresh
		}
		c.promote(o, g, e, now)
		c.hits.Add(1)
		c.coldHits.Add(1)
		return Answer{Entry: e}, true
	}
	defer c.mu.Unlock()
	if now.Before(st.failure().RetryAt) {
		c.misses.Add(1)
		return c.failed(st, now), true
	}
	return Answer{}, false
}

// promote offers e, read back from g, to the hot tier, if g is still o's
// last good copy (a purge or a refresh may have come between): its
// admission policy takes it if o is looked up more than what it would
// displace. A copy is offered from its second cold decision on, at most
// once a second (coldCopy.offered).
func (c *Cache) promote(o Origin, g *coldCopy, e *Entry, now time.Time) {
	sec := uint32(max(now.Unix(), 2))
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.lookup(o); st == nil || st.good != g {
		return
	}
	switch g.offered {
	case 0:
		g.offered = 1 // decided on once: not yet one the hot tier wants
	case sec:
	default:
		g.offered = sec
		c.set(o, e)
	}
}

// goodEntry returns st's last good copy as an Entry: the hot tier's if it
// holds the same copy, else read back and offered to the hot tier, so
// that the requests an unreachable origin's stale copy answers read it
// back once, not each under the lock; nil if there is none, or it cannot
// be read back (reported to OnBadRecord). c.mu is held.
func (c *Cache) goodEntry(st *originState) *Entry {
	g := st.good
	if g == nil {
		return nil
	}
	if e, ok := c.rc.Get(c.key(st.origin)); ok && e.Origin == st.origin && g.sameCopy(e) {
		e.Rules.Hot()
		return e
	}
	e, err := thaw(st.origin, g, c.arena.bytes(g.ref), nil)
	if err != nil {
		c.badRecord(st.origin, err)
		return nil
	}
	c.set(st.origin, e)
	return e
}

// thawBuffer holds a cold copy's bytes, copied out of the arena under the
// lock, and the binary form they decompress to, while it is read back
// outside the lock.
type thawBuffer struct{ blob, bin []byte }

// maxPooledThaw bounds the buffers Cache.thawBuffers keeps: a median
// file's take 3 KB, and one huge file's should not be kept for all.
const maxPooledThaw = 256 << 10

// refresh fetches f's origin's robots.txt, records what it found and takes
// f out of flights; save, when not nil, writes it to the Store. A fetch
// given up or cancelled by Close that ended unreachable records nothing: it
// is not the origin's failure, and the next Get fetches afresh. With a
// Store, what it holds is adopted first, and may answer without a fetch;
// with a shared one, only the process holding the origin's lock fetches,
// and the others wait for its result (up to PeerWait).
func (c *Cache) refresh(f *flight) (a Answer, save func(context.Context), err error) {
	o := f.origin
	landed := func() {
		c.mu.Lock()
		c.land(f)
		c.mu.Unlock()
	}
	// Another caller may have refreshed o between our miss and this fetch.
	if a, ok := c.fromState(o, c.opts.Now()); ok {
		landed()
		return a, nil, nil
	}
	if a, ok := c.fromStore(f.ctx, o); ok {
		landed()
		return a, nil, nil
	}
	unlock, a, ok := c.lockOrAwait(f.ctx, o)
	if ok {
		landed()
		return a, nil, nil
	}
	c.fetches.Add(1)
	res := c.opts.Fetcher.Fetch(f.ctx, o, c.opts.Parse...)
	// A fetched or unavailable answer is the origin's own, even if f was
	// given up meanwhile: keep it.
	if res.Outcome == Unreachable && f.ctx.Err() != nil {
		landed()
		if unlock != nil {
			unlock()
		}
		return Answer{}, nil, fmt.Errorf("fetch robots.txt for %s: %w", o, context.Cause(f.ctx))
	}
	a, save = c.record(o, res, f.epoch)
	if unlock != nil {
		saveFirst := save
		save = func(ctx context.Context) {
			if saveFirst != nil {
				saveFirst(ctx)
			}
			unlock() // after the result is in the store, for peers to read
		}
	}
	landed()
	return a, save, nil
}

// record keeps what a fetch found in the state (and the rules cache), and
// returns the answer and the write of it to the Store (nil without one);
// epoch is the ownEpoch the fetch began in.
func (c *Cache) record(o Origin, res *Result, epoch uint64) (Answer, func(context.Context)) {
	if c.opts.OnFetch != nil {
		c.opts.OnFetch(o, res)
	}
	now := c.opts.Now()
	if res.Outcome == Unreachable {
		c.mu.Lock()
		defer c.mu.Unlock()
		st := c.state(o)
		f := st.failure()
		if f.UnreachableSince.IsZero() {
			f.UnreachableSince = res.At
		}
		f.LastError, f.LastStatus, f.LastKind = describeFailure(res), res.Status, ErrorKind(res.Err)
		f.RetryAt = now.Add(max(c.opts.RetryAfter, res.RetryAfter))
		own := ownFailure(f.LastKind)
		if own && epoch != c.ownEpoch {
			f.RetryAt = time.Time{} // the configuration it met may be gone: see RetryOwnFailures
		}
		c.setFailure(st, &f)
		if own {
			return c.failed(st, now), nil // this process's, for retry_after: see ownFailure
		}
		return c.failed(st, now), c.saveFailure(o, st)
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
		URL:         ownURL(o, res.URL),
		Truncated:   res.Truncated,
		FetchedAt:   res.At,
		Note:        errText(res.Err),
		Expires:     now.Add(ttl),
		Sum:         bodySum(res.Outcome, res.Body),
	}
	e.Size = entrySize(e)
	c.keep(e, res.Body)
	g, bin, err := freeze(e)
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.state(o)
	if err == nil {
		err = c.setGood(st, g, bin)
	}
	if err != nil {
		c.badRecord(o, err) // answered, but not kept past the hot tier
	}
	c.setFailure(st, nil)
	if st.good == nil {
		c.set(o, e) // the only copy: the fetches it saves are worth the bytes
	}
	return Answer{Entry: e}, c.saveGood(o, e, res.Body)
}

// keep hands the body e was made from to the Keeper, if any. c.mu is not
// held.
func (c *Cache) keep(e *Entry, body []byte) {
	if c.opts.Keeper != nil {
		c.opts.Keeper.Keep(e.Copy(), body)
	}
}

// set offers e to the hot tier (which may refuse or drop it: the state
// keeps its cold copy).
func (c *Cache) set(o Origin, e *Entry) {
	c.rc.Set(c.key(o), e, int64(e.Size)+hotOverhead)
}

// ownFailure reports whether a failure of kind (as ErrorKind names it)
// says more about robotsgate's own configuration than about the origin: a
// certificate the roots it was given (the system's and upstream.ca) do
// not verify ("tls-verify"), or an address block_private refuses
// ("private-address"). Such a failure is kept by this process only, for
// retry_after as any other, and never written to the Store nor adopted
// from it: the operator who adds the site's CA to upstream.ca and
// restarts gets a fetch at once, not a minute of the same answer
// persisted from before (in state_dir, or by an instance of the fleet
// still running the old configuration).
func ownFailure(kind string) bool { return kind == "tls-verify" || kind == "private-address" }

// RetryOwnFailures makes every origin whose latest fetch failed for a
// reason of robotsgate's own configuration (see ownFailure) due for a
// fetch at its next Get, rather than after retry_after: for a reload
// that changed that configuration (upstream.ca, block_private). A fetch
// in flight, which may have been sent the old way, does not keep such a
// failure for retry_after either. The rest of each failure (since when
// the origin has been unreachable, its last copy) is kept. It returns how
// many origins it made due.
func (c *Cache) RetryOwnFailures() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ownEpoch++
	n := 0
	for _, st := range c.states {
		for ; st != nil; st = st.sameKey {
			if f := st.fail; f != nil && ownFailure(f.LastKind) && !f.RetryAt.IsZero() {
				due := *f // failure marks are replaced whole, never changed in place
				due.RetryAt = time.Time{}
				c.setFailure(st, &due)
				n++
			}
		}
	}
	return n
}

func describeFailure(res *Result) string {
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
	f := st.failure()
	a := Answer{LastError: f.LastError, LastKind: f.LastKind, LastStatus: f.LastStatus, RetryAt: f.RetryAt, UnreachableSince: f.UnreachableSince}
	switch e := c.goodEntry(st); {
	case e != nil:
		a.Entry, a.Stale = e, true
	case now.Sub(f.UnreachableSince) >= c.opts.UnreachableLimit:
		a.LimitPassed = true
	default:
		a.Unreachable = true
	}
	return a
}

// state returns o's state, creating it, and marks it most recent. c.mu is held.
func (c *Cache) state(o Origin) *originState {
	if st := c.lookup(o); st != nil {
		c.lru.Touch(st)
		return st
	}
	k := c.key(o)
	// The host name is copied: the caller's is often a view of a longer
	// string (a request's header line) that would be kept with it.
	o.Host = strings.Clone(o.Host)
	st := &originState{origin: o, sameKey: c.states[k]}
	c.states[k] = st
	c.nStates++
	c.lru.PushNewest(st)
	c.stateBytes += stateOverhead
	c.trim()
	return st
}

// lookup returns o's state, or nil. c.mu is held.
func (c *Cache) lookup(o Origin) *originState {
	for st := c.states[c.key(o)]; st != nil; st = st.sameKey {
		if st.origin == o {
			return st
		}
	}
	return nil
}

// forget takes st out of the state and counts its bytes out. c.mu is held.
func (c *Cache) forget(st *originState) {
	c.lru.Unlink(st)
	k := c.key(st.origin)
	if first := c.states[k]; first == st {
		if st.sameKey == nil {
			delete(c.states, k)
		} else {
			c.states[k] = st.sameKey
		}
	} else {
		for prev := first; prev != nil; prev = prev.sameKey {
			if prev.sameKey == st {
				prev.sameKey = st.sameKey
				break
			}
		}
	}
	st.sameKey = nil
	c.nStates--
	c.stateBytes -= stateOverhead + failureSize(st.fail)
	c.dropGood(st)
}

// dropGood forgets st's last good copy, if any. c.mu is held.
func (c *Cache) dropGood(st *originState) {
	if g := st.good; g != nil {
		st.good = nil // first: the arena moves only the copies states hold
		c.stateBytes -= int64(g.size)
		c.arena.free(g.ref)
	}
}

// setFailure makes f (nil: none) st's failure marks. c.mu is held.
func (c *Cache) setFailure(st *originState, f *Failure) {
	c.stateBytes += failureSize(f) - failureSize(st.fail)
	st.fail = f
}

// setGood makes g, whose rules are bin (see freeze), the last good copy
// of st's origin; failing that (no memory to map), st has none. c.mu is
// held.
func (c *Cache) setGood(st *originState, g *coldCopy, bin []byte) error {
	c.dropGood(st)
	ref, err := c.arena.put(bin, st)
	if err != nil {
		return err
	}
	g.ref = ref
	st.good = g
	c.stateBytes += int64(g.size)
	c.trim()
	return nil
}

// coldBytes is what the cold tier counts against coldMax: the states'
// heap with the collector's slack, and the arena's bytes held with the
// holes it lets them leave (a quarter, see arena.compact). c.mu is held.
func (c *Cache) coldBytes() int64 {
	return c.stateBytes*heapSlack + c.arena.live + c.arena.live/4
}

// trim forgets the least recently refreshed origins while the state is
// over its bound, never the most recent, and takes their entries out of
// ristretto: what it holds stays within the state's bound. c.mu is held.
func (c *Cache) trim() {
	for c.coldBytes() > c.coldMax && !c.lru.Single() {
		st := c.lru.Oldest()
		c.forget(st)
		c.rc.Del(c.key(st.origin))
		c.evictions.Add(1)
	}
}

// Peek returns what the cache holds for o without fetching, and whether it
// holds anything.
func (c *Cache) Peek(o Origin) (Answer, bool) {
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.lookup(o); st != nil {
		if e := c.goodEntry(st); e != nil && st.failure().LastError == "" {
			return Answer{Entry: e}, true
		}
		return c.failed(st, now), true
	}
	if e, ok := c.rc.Get(c.key(o)); ok && e.Origin == o {
		return Answer{Entry: e}, true
	}
	return Answer{}, false
}

// Licenses returns the URLs of the licences o's robots.txt names on
// License lines (Origin.LicenseURL), for a purge of them: from the rules
// held here, or, failing that, from the Store's good copy (another process
// of the fleet may have fetched it). Nil when neither holds a robots.txt
// of o.
func (c *Cache) Licenses(ctx context.Context, o Origin) []string {
	urls := func(r *robots.Robots) []string {
		var out []string
		for _, l := range r.Licenses() {
			if u, ok := o.LicenseURL(l); ok {
				out = append(out, u)
			}
		}
		return out
	}
	if a, ok := c.Peek(o); ok && a.Entry != nil && a.Entry.Rules != nil {
		return urls(a.Entry.Rules)
	}
	if c.opts.Store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	rec, err := c.opts.Store.Load(ctx, o)
	if err != nil || rec.Good == nil || rec.Good.Outcome != Fetched {
		return nil
	}
	return urls(robots.Parse(rec.Good.Body))
}

// Purge forgets everything about o, here and in the Store, so that the
// next request fetches its robots.txt again. It reports whether anything
// was held here.
func (c *Cache) Purge(o Origin) bool {
	if c.opts.Store != nil {
		// A fetch that ended before the purge may not have written its
		// copy yet: that write comes first (each is bounded by
		// storeTimeout), then the delete.
		c.mu.Lock()
		pending := slices.Clone(c.saving[o])
		c.mu.Unlock()
		for _, saved := range pending {
			<-saved
		}
		ctx, cancel := context.WithTimeout(c.ctx, storeTimeout)
		c.opts.Store.Delete(ctx, o)
		cancel()
	}
	return c.Forget(o)
}

// Forget forgets what this Cache holds for o, leaving the Store alone: for
// a purge another process made (and made in the store already). It reports
// whether anything was held.
func (c *Cache) Forget(o Origin) bool {
	// The hot tier takes offers asynchronously: one made before this
	// call (a lookup that found o cold) lands first, then the delete,
	// never after it. Outside c.mu: the hot tier's own goroutine applies it.
	c.rc.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	_, held := c.rc.Get(c.key(o))
	c.rc.Del(c.key(o))
	if st := c.lookup(o); st != nil {
		held = true
		c.forget(st)
	}
	return held
}

// CacheStats are a Cache's counters since it was made, and its gauges.
type CacheStats struct {
	Hits, Misses, Evictions, Fetches int64 // a hit is answered by a fresh copy, from either tier, a miss not
	ColdHits                         int64 // the hits answered by the cold tier
	Bytes                            int64 // memory the cache answers for, what MaxBytes bounds: StateBytes and HotBytes with the collector's slack (heapSlack), ColdBytes with the arena's
	StateBytes                       int64 // live heap bytes of the cold tier: every origin's state and last good copy but its rules, failure marks, index slots
	ColdBytes                        int64 // bytes of the cold copies' rules, held off the heap
	ColdMapped                       int64 // bytes mapped for them: ColdBytes and the holes between
	HotBytes                         int64 // live bytes of the hot tier: its entries, matchers counted built, and their slots
	Origins                          int   // origins with state
	FetchesInFlight                  int   // fetches running now: at most CacheOptions.MaxFetches
	FetchesAbandoned                 int64 // fetches given up because nobody waited for them
	Overloads                        int64 // lookups that found no fetch slot (answered stale or with ErrOverloaded)
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	hot := c.rc.MaxCost() - c.rc.RemainingCost()
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{
		Hits:       c.hits.Load(),
		ColdHits:   c.coldHits.Load(),
		Misses:     c.misses.Load(),
		Evictions:  c.evictions.Load(),
		Fetches:    c.fetches.Load(),
		Bytes:      c.coldBytes() + hot*heapSlack,
		StateBytes: c.stateBytes,
		ColdBytes:  c.arena.live,
		ColdMapped: c.arena.mapped,
		HotBytes:   hot,
		Origins:    c.nStates,

		FetchesInFlight:  len(c.slots),
		FetchesAbandoned: c.abandoned.Load(),
		Overloads:        c.overloads.Load(),
	}
}

// Wait blocks until the cache has applied every earlier write; for tests.
func (c *Cache) Wait() { c.rc.Wait() }
