package fetch

import (
	"container/list"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/robotsgate/robotsgate/evidence"
)

// A DocCache holds the other files sites publish about their content,
// beside robots.txt (TDMRep's /.well-known/tdmrep.json, RSL licences), as
// the Cache holds robots.txt, with its semantics: one fetch per URL shared
// by every caller waiting for it (a caller that gives up stops waiting;
// the fetch goes on), a fetched or unavailable answer kept for its
// Cache-Control max-age between a minute and TTL, a failed fetch retried
// after RetryAfter (or the site's own longer Retry-After), the last good
// copy kept while a URL is unreachable, and the Fetcher's size cap. T is
// the parsed file; parse failing is an answer too (Doc.ParseErr). It is
// bounded: at most MaxEntries URLs and MaxBytes of files held (each
// counted at twice its body, what a parsed file takes), the least
// recently used forgotten first (which costs a refetch). It is safe for
// concurrent use.
type DocCache[T any] struct {
	opts DocCacheOptions[T]

	mu      sync.Mutex
	entries map[string]*list.Element // of *docEntry[T]
	lru     list.List                // most recently used first
	bytes   int64                    // the entries' sizes
	flights map[string]*docFlight[T]
	slots   chan struct{} // the fetches in flight: a fetch holds one
	// ownEpoch counts RetryOwnFailures calls (see Cache.ownEpoch).
	ownEpoch uint64
}

// DocCacheOptions configure a DocCache. Each zero value means the default
// named in its comment.
type DocCacheOptions[T any] struct {
	Fetcher *Fetcher // required
	// Parse reads a fetched body, fetched from url. Required.
	Parse func(url string, body []byte) (T, error)
	// Accept is the Accept header sent. "": "*/*".
	Accept string
	// TTL bounds how long an answer is used. 0: DefaultTTL.
	TTL time.Duration
	// RetryAfter is how long a failed fetch is remembered. 0:
	// DefaultRetryAfter.
	RetryAfter time.Duration
	// MaxEntries bounds the URLs held. 0: DefaultMaxDocs.
	MaxEntries int
	// MaxBytes bounds the files held. 0: DefaultMaxDocBytes.
	MaxBytes int64
	// MaxFetches bounds the fetches in flight at once: a Get that needs
	// one more waits for a slot up to a tenth of a second, then answers
	// with the last good copy, however old (Stale), or an error wrapping
	// ErrOverloaded. 0: DefaultMaxDocFetches.
	MaxFetches int
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// OnFetch, if set, is called with each fetch's answer (for a log: a
	// file that does not parse, one that cannot be fetched).
	OnFetch func(Doc[T])
	// Store, if set, shares answers with other processes: a URL fresh in
	// it is not fetched, and each fetched or unavailable answer is stored.
	Store DocStore
	// Keeper, if set, is handed every body this process reads, with the
	// Copy that names it (Doc.Copy): each fetched or unavailable answer
	// (an unavailable one with no body and a zero Sum), and each taken
	// from Store, which another instance of a fleet fetched. As
	// CacheOptions.Keeper: on the fetch path only, outside the lock, never
	// for an answer held. Nil: none.
	Keeper evidence.Keeper
}

// DefaultMaxDocs and DefaultMaxDocBytes bound the files a DocCache holds
// by default.
const (
	DefaultMaxDocs       = 20_000
	DefaultMaxDocBytes   = 64 << 20
	DefaultMaxDocFetches = 64
)

// A Doc is a DocCache's answer for one URL.
type Doc[T any] struct {
	URL     string
	Outcome Outcome // Fetched, Unavailable, Unreachable
	Status  int     // the last HTTP status; 0 if none was received
	// Value is the parsed file: Fetched, and it parsed (ParseErr nil).
	Value    T
	ParseErr error  // Fetched, but the body is not such a file
	Err      string // why the last fetch failed (unreachable), or why a 3xx counted as 404
	// Stale: the URL is unreachable now, and this is the last answer that
	// was not (Outcome Fetched or Unavailable, however old). A URL
	// unreachable with no such answer is Outcome Unreachable.
	Stale     bool
	FetchedAt time.Time // of the answer used
	RetryAt   time.Time // Unreachable: when the next fetch may be made
	Truncated bool      // the body was cut at the size cap
	// Sum is the SHA-256 of the body of the answer used, as read (after
	// the size cap); zero when it has none (Unavailable, Unreachable).
	Sum [sha256.Size]byte
}

// Copy names the copy of the file d was answered from, as an audit record
// names it (a stale one with its own fetch time); false when there is
// none (the URL is unreachable and no answer is held).
func (d *Doc[T]) Copy() (evidence.Copy, bool) {
	if d.Outcome != Fetched && d.Outcome != Unavailable {
		return evidence.Copy{}, false
	}
	return evidence.Copy{URL: d.URL, Sum: d.Sum, Fetched: d.FetchedAt, Status: d.Status}, true
}

// Good reports whether d holds a file that parsed: fetched now, or the
// last good copy of an unreachable URL.
func (d *Doc[T]) Good() bool { return d.Outcome == Fetched && d.ParseErr == nil }

type docEntry[T any] struct {
	url     string
	size    int64   // what it holds, as counted against MaxBytes
	good    *Doc[T] // the last answer that was fetched or unavailable; nil if none
	expires time.Time
	failed  *Doc[T] // the last failure, while retryAt is ahead; nil if none
	retryAt time.Time
	own     bool // failed for a reason of robotsgate's own configuration (ownFailure)
}

type docFlight[T any] struct {
	done  chan struct{}
	doc   Doc[T]
	epoch uint64 // the DocCache's ownEpoch when the flight began
}

// NewDocCache returns an empty DocCache with opts, defaults filled in.
func NewDocCache[T any](opts DocCacheOptions[T]) *DocCache[T] {
	if opts.Accept == "" {
		opts.Accept = "*/*"
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	opts.RetryAfter = min(opts.RetryAfter, maxRetryAfter)
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxDocs
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxDocBytes
	}
	if opts.MaxFetches <= 0 {
		opts.MaxFetches = DefaultMaxDocFetches
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &DocCache[T]{
		opts: opts, entries: map[string]*list.Element{}, flights: map[string]*docFlight[T]{},
		slots: make(chan struct{}, opts.MaxFetches),
	}
}

// Get returns the answer for url: a fresh one held, a failure whose retry
// time has not come (with the last good copy, if any, as Stale), or the
// result of one fetch shared by every caller waiting on url. It fails
// when ctx ends first, and when a fetch is needed but MaxFetches are in
// flight and no copy of url was ever held (an error wrapping
// ErrOverloaded).
func (c *DocCache[T]) Get(ctx context.Context, url string) (Doc[T], error) {
	c.mu.Lock()
	d, held := c.held(url, c.opts.Now())
	f := c.flights[url]
	c.mu.Unlock()
	if held {
		return d, nil
	}
	if f == nil {
		if err := c.acquire(ctx); err != nil {
			if d, ok := c.lastGood(url); ok && errors.Is(err, ErrOverloaded) {
				return d, nil
			}
			return Doc[T]{}, fmt.Errorf("fetch %s: %w", url, err)
		}
		c.mu.Lock()
		d, held = c.held(url, c.opts.Now())
		switch f = c.flights[url]; {
		case held || f != nil:
			<-c.slots // answered, or being fetched, while the slot was awaited
		default:
			f = &docFlight[T]{done: make(chan struct{}), epoch: c.ownEpoch}
			c.flights[url] = f
			go c.fetch(url, f) // which frees the slot
		}
		c.mu.Unlock()
		if held {
			return d, nil
		}
	}
	select {
	case <-f.done:
		return f.doc, nil
	case <-ctx.Done():
		return Doc[T]{}, fmt.Errorf("wait for %s: %w", url, context.Cause(ctx))
	}
}

// acquire takes a fetch slot, waiting up to fetchSlotWait (and not past
// ctx); failing that, the error wraps ErrOverloaded.
func (c *DocCache[T]) acquire(ctx context.Context) error {
	switch taken, err := takeSlot(ctx, c.slots, nil, nil); {
	case taken:
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("%w: %d in flight", ErrOverloaded, cap(c.slots))
}

// lastGood returns the last answer for url that was not a failure,
// however old, as Stale: the answer when no fetch can be made now.
func (c *DocCache[T]) lastGood(url string) (Doc[T], bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.entries[url]
	if el == nil || el.Value.(*docEntry[T]).good == nil {
		return Doc[T]{}, false
	}
	d := *el.Value.(*docEntry[T]).good
	d.Stale = true
	return d, true
}

// held answers for url from what is held, if that may be used at now.
// c.mu is held.
func (c *DocCache[T]) held(url string, now time.Time) (Doc[T], bool) {
	el := c.entries[url]
	if el == nil {
		return Doc[T]{}, false
	}
	e := el.Value.(*docEntry[T])
	c.lru.MoveToFront(el)
	switch {
	case e.failed != nil && now.Before(e.retryAt):
		return *e.failed, true
	case e.good != nil && now.Before(e.expires):
		return *e.good, true
	}
	return Doc[T]{}, false
}

// docStoreTimeout bounds a DocStore call: a slow store costs a request no
// more than this before the file is fetched.
const docStoreTimeout = 2 * time.Second

// fetch answers url for f: from the store, when another process fetched it
// and it is still fresh; else by fetching it (and storing the answer).
func (c *DocCache[T]) fetch(url string, f *docFlight[T]) {
	defer func() { <-c.slots }()
	now := c.opts.Now()
	if sd := c.loadStored(url, now); sd != nil {
		d := Doc[T]{URL: url, Outcome: sd.Outcome, Status: sd.Status, FetchedAt: sd.FetchedAt, Truncated: sd.Truncated, Sum: bodySum(sd.Outcome, sd.Body)}
		if sd.Outcome == Fetched {
			d.Value, d.ParseErr = c.opts.Parse(url, sd.Body)
		}
		c.record(url, f, d, len(sd.Body), sd.Expires, time.Time{}, false)
		close(f.done)
		c.keep(&d, sd.Body)
		return
	}
	res := c.opts.Fetcher.FetchDocument(context.Background(), url, c.opts.Accept)
	now = c.opts.Now()
	d := Doc[T]{URL: url, Outcome: res.Outcome, Status: res.Status, FetchedAt: res.At, Truncated: res.Truncated, Sum: bodySum(res.Outcome, res.Body)}
	if res.Err != nil {
		d.Err = Describe(res.Err)
	}
	if res.Outcome == Fetched {
		d.Value, d.ParseErr = c.opts.Parse(url, res.Body)
	}
	var expires, retry time.Time
	if res.Outcome == Unreachable {
		retry = now.Add(max(c.opts.RetryAfter, res.RetryAfter))
	} else {
		ttl := c.opts.TTL
		if res.MaxAge >= 0 {
			ttl = min(max(res.MaxAge, minTTL), c.opts.TTL)
		}
		expires = now.Add(ttl)
	}
	d = c.record(url, f, d, len(res.Body), expires, retry, res.Outcome == Unreachable && ownFailure(ErrorKind(res.Err)))
	close(f.done)
	if res.Outcome != Unreachable {
		c.keep(&d, res.Body)
	}
	if res.Outcome != Unreachable && c.opts.Store != nil {
		sd := &StoredDoc{URL: url, Outcome: res.Outcome, Status: res.Status, Truncated: res.Truncated, FetchedAt: res.At, Expires: expires}
		if res.Outcome == Fetched {
			sd.Body = res.Body
		}
		ctx, cancel := context.WithTimeout(context.Background(), docStoreTimeout)
		c.opts.Store.SaveDoc(ctx, url, sd) // a store that fails logs its own
		cancel()
	}
	if c.opts.OnFetch != nil {
		c.opts.OnFetch(d)
	}
}

// keep hands d's body to the Keeper, if any. c.mu is not held.
func (c *DocCache[T]) keep(d *Doc[T], body []byte) {
	if cp, ok := d.Copy(); ok && c.opts.Keeper != nil {
		c.opts.Keeper.Keep(cp, body)
	}
}

// loadStored returns url's answer in the store, if there is a fresh one a
// process of the fleet could have written.
func (c *DocCache[T]) loadStored(url string, now time.Time) *StoredDoc {
	if c.opts.Store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), docStoreTimeout)
	defer cancel()
	sd, err := c.opts.Store.LoadDoc(ctx, url)
	if err != nil || sd == nil || !now.Before(sd.Expires) || sd.Check(url, now, c.opts.TTL, c.opts.Fetcher.opts.MaxBytes) != nil {
		return nil
	}
	return sd
}

// record keeps d, of a body of n bytes, as url's answer, and takes its
// flight f out of flights; it returns the answer to give. A failure (retry
// not zero) keeps the last answer that was not one, stale; another answer
// is kept until expires. own says the failure is of robotsgate's own
// configuration (ownFailure): one met by a fetch that began before the
// latest RetryOwnFailures is not kept for retry_after.
func (c *DocCache[T]) record(url string, f *docFlight[T], d Doc[T], n int, expires, retry time.Time, own bool) Doc[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	if own && f.epoch != c.ownEpoch {
		retry = c.opts.Now() // due at the next Get: the configuration it met may be gone
	}
	e := c.entry(url)
	if retry.IsZero() {
		size := 2*int64(n) + 512
		c.bytes += size - e.size
		e.size = size
		c.lru.MoveToFront(c.entries[url])
		for c.bytes > c.opts.MaxBytes && c.lru.Len() > 1 {
			c.evict()
		}
	}
	if !retry.IsZero() {
		if g := e.good; g != nil {
			// The last answer that was not a failure answers, however
			// old: the file it held, or that there was none.
			stale := *g
			stale.Stale, stale.RetryAt, stale.Err = true, retry, d.Err
			d = stale
		} else {
			d.RetryAt = retry
		}
		e.failed, e.retryAt, e.own = &d, retry, own
	} else {
		e.good, e.expires, e.failed = &d, expires, nil
	}
	f.doc = d
	delete(c.flights, url)
	return d
}

// RetryOwnFailures makes every URL whose latest fetch failed for a
// reason of robotsgate's own configuration (see ownFailure) due for a
// fetch at its next Get, rather than after RetryAfter, as
// Cache.RetryOwnFailures does for robots.txt. It returns how many URLs it
// made due.
func (c *DocCache[T]) RetryOwnFailures() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ownEpoch++
	n := 0
	for _, el := range c.entries {
		if e := el.Value.(*docEntry[T]); e.failed != nil && e.own && !e.retryAt.IsZero() {
			e.retryAt = time.Time{}
			n++
		}
	}
	return n
}

// entry returns url's entry, making it, and forgetting the least recently
// used past MaxEntries. c.mu is held.
func (c *DocCache[T]) entry(url string) *docEntry[T] {
	if el := c.entries[url]; el != nil {
		return el.Value.(*docEntry[T])
	}
	for c.lru.Len() >= c.opts.MaxEntries {
		c.evict()
	}
	e := &docEntry[T]{url: url}
	c.entries[url] = c.lru.PushFront(e)
	return e
}

// Peek returns what is held for url, fresh or not, without fetching it:
// the last failure while it is remembered, else the last answer.
func (c *DocCache[T]) Peek(url string) (Doc[T], bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.entries[url]
	if el == nil {
		return Doc[T]{}, false
	}
	e := el.Value.(*docEntry[T])
	switch {
	case e.failed != nil && c.opts.Now().Before(e.retryAt):
		return *e.failed, true
	case e.good != nil:
		return *e.good, true
	}
	return Doc[T]{}, false
}

// evict forgets the least recently used entry. c.mu is held.
func (c *DocCache[T]) evict() {
	last := c.lru.Back()
	e := last.Value.(*docEntry[T])
	delete(c.entries, e.url)
	c.lru.Remove(last)
	c.bytes -= e.size
}

// Forget drops what is held for url, so that the next Get fetches it.
func (c *DocCache[T]) Forget(url string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.entries[url]; el != nil {
		e := el.Value.(*docEntry[T])
		delete(c.entries, url)
		c.lru.Remove(el)
		c.bytes -= e.size
	}
}

// Purge forgets url here and in the Store, so that the next Get, here or
// in another process sharing the Store, fetches it again.
func (c *DocCache[T]) Purge(url string) {
	if c.opts.Store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), docStoreTimeout)
		c.opts.Store.DeleteDoc(ctx, url) // a store that fails logs its own
		cancel()
	}
	c.Forget(url)
}

// Bytes returns what the files held count against MaxBytes.
func (c *DocCache[T]) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// Len returns how many URLs are held.
func (c *DocCache[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// A DocStore shares a DocCache's answers among processes: the fleet's
// Redis, where a file one instance fetched serves the others until it
// expires. It holds bodies, which each process parses itself.
type DocStore interface {
	// LoadDoc returns what is stored for url; nil if nothing (or nothing
	// a process of the fleet could have written).
	LoadDoc(ctx context.Context, url string) (*StoredDoc, error)
	// SaveDoc stores d as url's answer.
	SaveDoc(ctx context.Context, url string, d *StoredDoc) error
	// DeleteDoc forgets url's answer (DocCache.Purge).
	DeleteDoc(ctx context.Context, url string) error
}

// StoredDoc is a fetched or unavailable answer for a URL, as a DocStore
// holds it.
type StoredDoc struct {
	URL       string    `json:"url"`
	Outcome   Outcome   `json:"outcome"` // Fetched or Unavailable
	Status    int       `json:"status"`
	Body      []byte    `json:"body,omitempty"` // Fetched: the body, after the size cap
	Truncated bool      `json:"truncated,omitempty"`
	FetchedAt time.Time `json:"fetched_at"`
	Expires   time.Time `json:"expires"`
}

// Check reports what makes d something no process of the fleet writes for
// url, when anything does: another URL, another outcome, a body where
// there is none or past maxBytes, times out of order, a fetch after now,
// or an expiry past now + maxTTL (give or take MaxClockSkew).
func (d *StoredDoc) Check(url string, now time.Time, maxTTL time.Duration, maxBytes int) error {
	switch {
	case d.URL != url:
		return fmt.Errorf("a stored file for %q", d.URL)
	case d.Outcome != Fetched && d.Outcome != Unavailable:
		return fmt.Errorf("stored outcome %q", d.Outcome)
	case d.Outcome == Unavailable && len(d.Body) > 0, len(d.Body) > maxBytes:
		return fmt.Errorf("a stored body of %d bytes", len(d.Body))
	case d.FetchedAt.After(now.Add(MaxClockSkew)), d.Expires.Before(d.FetchedAt), d.Expires.After(now.Add(maxTTL + MaxClockSkew)):
		return fmt.Errorf("stored times out of range (fetched %v, expires %v)", d.FetchedAt, d.Expires)
	}
	return nil
}
