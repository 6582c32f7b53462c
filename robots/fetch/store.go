package fetch

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Store keeps what a Cache must not lose beyond itself: each origin's last
// good copy (the body, so that it can be parsed again) and the marks of a
// run of failures. A Cache consults it on a miss before fetching and
// writes to it after every fetch, so that a restarted process, or another
// instance sharing the store, answers as this one would. Implementations
// must be safe for concurrent use, bound what they hold (or leave that to a
// backend with its own bound and TTLs, as Redis), and treat a value
// they cannot read as absent (reporting it their own way): a Store never
// turns a malformed value into rules.
type Store interface {
	// Load returns what is held for o; a zero Record if nothing.
	Load(ctx context.Context, o Origin) (Record, error)
	// SaveGood records a successful fetch: g becomes the last good copy
	// and any failure marks are cleared.
	SaveGood(ctx context.Context, o Origin, g *GoodCopy) error
	// SaveFailure records the marks of a failed fetch; the good copy, if
	// any, stays.
	SaveFailure(ctx context.Context, o Origin, f *Failure) error
	// Delete forgets o (Cache.Purge).
	Delete(ctx context.Context, o Origin) error
}

// FetchLocker is implemented by a Store shared by several processes: at
// most one of them fetches an origin at a time, and the others wait for its
// result in the store (see CacheOptions.PeerWait).
type FetchLocker interface {
	// LockFetch tries to take o's fetch lock for ttl. ok is false when
	// another holder has it; unlock releases it (only if still held).
	LockFetch(ctx context.Context, o Origin, ttl time.Duration) (unlock func(), ok bool, err error)
}

// Record is what a Store holds for an origin.
type Record struct {
	Good    *GoodCopy // nil: none
	Failure *Failure  // nil: the latest fetch succeeded, or none failed
}

// GoodCopy is a fetched or unavailable answer as stored: enough to make
// the Entry again.
type GoodCopy struct {
	Outcome     Outcome   `json:"outcome"` // Fetched or Unavailable
	Status      int       `json:"status"`
	Body        []byte    `json:"body,omitempty"` // Fetched: the body after the MaxBytes cap
	DisallowAll bool      `json:"disallow_all,omitempty"`
	URL         string    `json:"url"`
	Truncated   bool      `json:"truncated,omitempty"`
	Note        string    `json:"note,omitempty"`
	FetchedAt   time.Time `json:"fetched_at"`
	Expires     time.Time `json:"expires"`
}

// Failure is the state of a run of failed fetches.
type Failure struct {
	UnreachableSince time.Time `json:"unreachable_since"`
	RetryAt          time.Time `json:"retry_at"`
	LastError        string    `json:"last_error"`
	LastKind         string    `json:"last_kind,omitempty"`
	LastStatus       int       `json:"last_status,omitempty"`
}

// Check reports whether g is a value a Store may hand back: a known
// outcome, a status in range, times set, and no body for an unavailable
// answer. A value read from a file or a shared store that fails it is
// ignored.
func (g *GoodCopy) Check() error {
	switch {
	case g.Outcome != Fetched && g.Outcome != Unavailable:
		return fmt.Errorf("outcome %q", g.Outcome)
	case g.Status < 100 || g.Status > 599:
		return fmt.Errorf("status %d", g.Status)
	case g.FetchedAt.IsZero() || g.Expires.IsZero():
		return errors.New("no fetch or expiry time")
	case g.Outcome == Unavailable && len(g.Body) > 0:
		return errors.New("a body for an unavailable answer")
	}
	return nil
}

// Check reports whether f is a value a Store may hand back.
func (f *Failure) Check() error {
	if f.UnreachableSince.IsZero() {
		return errors.New("no unreachable-since time")
	}
	return nil
}

// MaxClockSkew is how far apart the clocks of processes sharing a Store
// (a fleet's instances) may be: a time read from a Store may lie this far
// past the bound this process would keep to itself. Beyond it the value
// was not written by a Cache, whatever wrote it.
const MaxClockSkew = time.Minute

// CheckTimes reports whether g's times are ones a Cache whose TTL is ttl
// could have written by now: fetched no later than now, and expiring no
// later than now + ttl, each give or take MaxClockSkew. A copy that fails
// is not used: an expiry years ahead would make any copy, even an empty
// one that allows everything, fresh for ever.
func (g *GoodCopy) CheckTimes(now time.Time, ttl time.Duration) error {
	switch {
	case g.FetchedAt.After(now.Add(MaxClockSkew)):
		return fmt.Errorf("fetched at %s, in the future", g.FetchedAt.UTC().Format(time.RFC3339))
	case g.Expires.After(now.Add(ttl + MaxClockSkew)):
		return fmt.Errorf("expires at %s, more than the cache TTL (%v) from now", g.Expires.UTC().Format(time.RFC3339), ttl)
	}
	return nil
}

// CheckTimes reports whether f's times are ones a Cache could have written
// by now: unreachable since no later than now, and retrying no later than
// now + 24 h (the longest wait a Cache sets, see CacheOptions.RetryAfter),
// each give or take MaxClockSkew. Marks that fail are not used: a retry
// time years ahead would stop every fetch of the origin, and with an old
// unreachable-since time lift its restrictions (UnreachableLimit) for
// ever.
func (f *Failure) CheckTimes(now time.Time) error {
	switch {
	case f.UnreachableSince.After(now.Add(MaxClockSkew)):
		return fmt.Errorf("unreachable since %s, in the future", f.UnreachableSince.UTC().Format(time.RFC3339))
	case f.RetryAt.After(now.Add(maxRetryAfter + MaxClockSkew)):
		return fmt.Errorf("retry at %s, more than %v from now", f.RetryAt.UTC().Format(time.RFC3339), maxRetryAfter)
	}
	return nil
}
