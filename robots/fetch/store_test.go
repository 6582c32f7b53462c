package fetch

import (
	"context"
	"sync"
	"testing"
	"time"
)

// recordStore is a Store holding one Record for every origin, as a shared
// store holding what someone else wrote there would: Load returns copies
// of it, and writes are dropped.
type recordStore struct{ rec Record }

func (s *recordStore) Load(context.Context, Origin) (Record, error) {
	var rec Record
	if s.rec.Good != nil {
		g := *s.rec.Good
		rec.Good = &g
	}
	if s.rec.Failure != nil {
		f := *s.rec.Failure
		rec.Failure = &f
	}
	return rec, nil
}

func (s *recordStore) SaveGood(context.Context, Origin, *GoodCopy) error   { return nil }
func (s *recordStore) SaveFailure(context.Context, Origin, *Failure) error { return nil }
func (s *recordStore) Delete(context.Context, Origin) error                { return nil }

// TestCacheIgnoresRecordsOutOfTime: what a Store returns is used only if
// its times are ones a Cache could have written by now (give or take
// MaxClockSkew): a failure mark unreachable since 2000 and retrying in
// 2099 (which would lift every restriction and never fetch again), or an
// empty copy expiring in 2099 (which would allow everything), is dropped
// and reported, and the origin is fetched; the other part of the same
// record is still used.
func TestCacheIgnoresRecordsOutOfTime(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	now := clock.Now()
	y2000, y2099 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	const ttl = time.Hour
	good := func(fetched, expires time.Time) *GoodCopy {
		return &GoodCopy{Outcome: Fetched, Status: 200, Body: []byte("User-agent: *\nDisallow: /stored\n"), URL: "u", FetchedAt: fetched, Expires: expires}
	}
	empty := &GoodCopy{Outcome: Fetched, Status: 200, URL: "u", FetchedAt: now.Add(-time.Minute), Expires: y2099}
	for _, tt := range []struct {
		name      string
		rec       Record
		bad       int  // parts reported
		fetched   bool // the origin is fetched: nothing usable was held
		stored    bool // the stored rules are in force
		limitless bool
	}{
		{"failure since 2000 retrying in 2099", Record{Failure: &Failure{UnreachableSince: y2000, RetryAt: y2099, LastError: "x"}}, 1, true, false, false},
		{"empty copy expiring in 2099", Record{Good: empty}, 1, true, false, false},
		{"both", Record{Good: empty, Failure: &Failure{UnreachableSince: y2000, RetryAt: y2099}}, 2, true, false, false},
		{"copy fetched in the future", Record{Good: good(now.Add(time.Hour), now.Add(time.Hour))}, 1, true, false, false},
		{"failure since the future", Record{Failure: &Failure{UnreachableSince: now.Add(time.Hour), RetryAt: now.Add(time.Minute)}}, 1, true, false, false},
		{"a good copy with a bad failure beside it", Record{Good: good(now.Add(-time.Minute), now.Add(ttl)), Failure: &Failure{UnreachableSince: now, RetryAt: y2099}}, 1, false, true, false},
		{"within the clock skew", Record{Good: good(now.Add(MaxClockSkew/2), now.Add(ttl+MaxClockSkew/2))}, 0, false, true, false},
		{"failure retrying within 24 h", Record{Failure: &Failure{UnreachableSince: y2000, RetryAt: now.Add(23 * time.Hour)}}, 0, false, false, true},
		{"malformed copy", Record{Good: &GoodCopy{Outcome: "allow-all", Status: 200, FetchedAt: now, Expires: now.Add(ttl)}}, 1, true, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newOrigin(t, serveText("User-agent: *\nDisallow: /fetched\n"))
			var bad []error
			var mu sync.Mutex
			c := newTestCache(t, clock, CacheOptions{TTL: ttl, Store: &recordStore{tt.rec}, OnBadRecord: func(got Origin, err error) {
				mu.Lock()
				defer mu.Unlock()
				if got != o.origin(t) {
					t.Errorf("OnBadRecord for %v; want %v", got, o.origin(t))
				}
				bad = append(bad, err)
			}})
			a := mustGet(t, c, o.origin(t))
			mu.Lock()
			if len(bad) != tt.bad {
				t.Errorf("%d parts reported (%v); want %d", len(bad), bad, tt.bad)
			}
			mu.Unlock()
			if n := o.count("/robots.txt"); (n > 0) != tt.fetched {
				t.Errorf("fetched %d times; want fetched = %v", n, tt.fetched)
			}
			switch {
			case tt.limitless:
				if !a.LimitPassed || a.Entry != nil {
					t.Errorf("answer %+v; want the stored failure (unreachable past the limit)", a)
				}
			case a.Entry == nil || a.Entry.Rules == nil:
				t.Fatalf("answer %+v; want rules", a)
			case tt.stored && a.Entry.Rules.Allowed("Bot", "http://h/stored"):
				t.Errorf("the stored rules are not in force: %+v", a)
			case !tt.stored && a.Entry.Rules.Allowed("Bot", "http://h/fetched"):
				t.Errorf("the fetched rules are not in force: %+v", a)
			}
		})
	}
}

// mapStore is a Store in memory, as a process's state directory is
// across restarts: every Cache given it reads what the others wrote.
type mapStore struct {
	mu   sync.Mutex
	recs map[Origin]Record
}

func newMapStore() *mapStore { return &mapStore{recs: map[Origin]Record{}} }

func (s *mapStore) Load(_ context.Context, o Origin) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recs[o], nil
}

func (s *mapStore) SaveGood(_ context.Context, o Origin, g *GoodCopy) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs[o] = Record{Good: g}
	return nil
}

func (s *mapStore) SaveFailure(_ context.Context, o Origin, f *Failure) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs[o] = Record{Good: s.recs[o].Good, Failure: f}
	return nil
}

func (s *mapStore) Delete(_ context.Context, o Origin) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.recs, o)
	return nil
}
