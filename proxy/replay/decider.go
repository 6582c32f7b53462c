// Package replay re-decides past requests from the copies of sites' files
// the evidence store kept (docs/auditors.md): the evidence command's
// verdict for a URL at a time, and audit replay's check that every record
// of an audit log reproduces. It decides with the proxy's own policy
// (compiled from the config, its [[agents]] and [[sites]] rules included)
// and matcher, on the copy a record names instead of a fetch.
package replay

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage/source"
)

// ErrMissing wraps the error of a decision that needs a copy the store
// does not hold (removed by retention or the size bound, or never kept).
var ErrMissing = errors.New("copy missing from the evidence store")

// DefaultCacheLen is how many parsed copies a Decider holds.
const DefaultCacheLen = 1024

// Decider decides requests on stored copies. It holds the parsed copies
// it used last, at most CacheLen of them. It is safe for concurrent use.
type Decider struct {
	pol   *policy.Policy
	cfg   *config.Config
	dir   string // the store's directory
	max   int64  // bound on a body read back
	kinds map[string]fetch.FileKind

	mu    sync.Mutex
	lru   list.List // of *parsed, most recently used first
	byKey map[parsedKey]*list.Element
	cap   int
}

type parsedKey struct {
	sum  [32]byte
	kind string // "" for robots.txt
}

type parsed struct {
	key   parsedKey
	rules *robots.Robots // robots.txt
	value any            // a usage file
	err   error          // a usage file that did not parse
}

// New returns a Decider under cfg's policy on the copies of the store in
// dir.
func New(cfg *config.Config, dir string) (*Decider, error) {
	pol, err := policy.Compile(cfg)
	if err != nil {
		return nil, err
	}
	x := &Decider{
		pol: pol, cfg: pol.Config(), dir: dir,
		max:   max(evidence.DefaultMaxBody, 2*int64(cfg.Robots.MaxBytes)),
		kinds: map[string]fetch.FileKind{},
		byKey: map[parsedKey]*list.Element{},
		cap:   DefaultCacheLen,
	}
	for _, k := range source.FileKinds(robots.WithNormalization()) {
		x.kinds[k.Name] = k
	}
	return x, nil
}

// Policy returns the policy decisions are made under.
func (x *Decider) Policy() *policy.Policy { return x.pol }

// Decide decides r (a KindCheck request: its URL set, its client, user,
// User-Agent or agents and purposes as the request had them) at time at,
// on copies: the robots.txt of r's origin first, then the usage files it
// consulted. It returns an error wrapping ErrMissing naming the copy and
// the store when a body is not there, or any other error reading it.
func (x *Decider) Decide(ctx context.Context, r *policy.Request, copies []evidence.Copy, at time.Time) (*policy.Decision, error) {
	if len(copies) == 0 {
		return nil, errors.New("no copy of robots.txt to decide on")
	}
	e, err := x.entry(copies[0])
	if err != nil {
		return nil, err
	}
	rules := func(_ context.Context, o fetch.Origin) (fetch.Answer, error) {
		ent := *e
		ent.Origin = o
		if u := copies[0].URL; u != o.RobotsURL() {
			ent.URL = u
		}
		return fetch.Answer{Entry: &ent}, nil
	}
	f := &files{x: x, copies: copies[1:]}
	w := &policy.Env{Rules: rules, Files: f, Now: func() time.Time { return at }}
	d := &policy.Decision{}
	x.pol.Decide(ctx, w, r, d)
	return d, f.failed
}

// entry is the robots.txt answer a copy gives: its rules when it was
// fetched (2xx), none for a 4xx (all of them under auth_errors =
// "disallow" for a 401 or 403).
func (x *Decider) entry(c evidence.Copy) (*fetch.Entry, error) {
	e := &fetch.Entry{Status: c.Status, FetchedAt: c.Fetched}
	switch {
	case c.Status >= 200 && c.Status <= 299 && c.HasBody():
		p, err := x.get(c, "")
		if err != nil {
			return nil, err
		}
		e.Outcome, e.Rules = fetch.Fetched, p.rules
	case c.Status >= 200 && c.Status <= 299:
		e.Outcome, e.Rules = fetch.Fetched, robots.Parse(nil, robots.WithNormalization())
	default:
		e.Outcome = fetch.Unavailable
		e.DisallowAll = x.cfg.Robots.AuthErrors == "disallow" && (c.Status == 401 || c.Status == 403)
	}
	return e, nil
}

// get returns a copy parsed as kind ("" for robots.txt), from the cache or
// read from the store.
func (x *Decider) get(c evidence.Copy, kind string) (*parsed, error) {
	k := parsedKey{c.Sum, kind}
	x.mu.Lock()
	if el, ok := x.byKey[k]; ok {
		x.lru.MoveToFront(el)
		x.mu.Unlock()
		return el.Value.(*parsed), nil
	}
	x.mu.Unlock()
	body, err := evidence.GetObject(x.dir, c.Sum, x.max)
	if errors.Is(err, evidence.ErrMissing) {
		return nil, fmt.Errorf("%w: %s of %s (sha256 %s) is not in the store %s", ErrMissing, c.URL, c.Fetched.UTC().Format(time.RFC3339), c.Hex(), x.dir)
	}
	if err != nil {
		return nil, fmt.Errorf("read the copy of %s (sha256 %s): %w", c.URL, c.Hex(), err)
	}
	p := &parsed{key: k}
	if kind == "" {
		if len(body) > x.cfg.Robots.MaxBytes {
			body = body[:x.cfg.Robots.MaxBytes] // kept as read; cut as the fetcher cuts
		}
		p.rules = robots.Parse(body, robots.WithNormalization())
	} else {
		p.value, p.err = x.kinds[kind].Parse(c.URL, body)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if el, ok := x.byKey[k]; ok {
		return el.Value.(*parsed), nil
	}
	x.byKey[k] = x.lru.PushFront(p)
	for x.lru.Len() > x.cap {
		old := x.lru.Back()
		x.lru.Remove(old)
		delete(x.byKey, old.Value.(*parsed).key)
	}
	return p, nil
}

// files gives a decision the usage files its record names, read from the
// store: a file it does not name is unreachable (the decision then
// differs, as it should: that file was not consulted).
type files struct {
	x      *Decider
	copies []evidence.Copy
	failed error // the first copy that could not be read
}

// Get implements source.Files.
func (f *files) Get(_ context.Context, kind, url string) (fetch.Doc[any], error) {
	d := fetch.Doc[any]{URL: url}
	for _, c := range f.copies {
		if c.URL != url {
			continue
		}
		d.Status, d.FetchedAt = c.Status, c.Fetched
		switch {
		case c.Status >= 200 && c.Status <= 299:
			if _, ok := f.x.kinds[kind]; !ok {
				return d, fmt.Errorf("%w: %s", fetch.ErrUnknownKind, kind)
			}
			p, err := f.x.get(c, kind)
			if err != nil {
				if f.failed == nil {
					f.failed = err
				}
				return d, err
			}
			d.Outcome, d.Value, d.ParseErr = fetch.Fetched, p.value, p.err
		default:
			d.Outcome = fetch.Unavailable
		}
		return d, nil
	}
	d.Outcome, d.Err = fetch.Unreachable, "not among the copies the record names"
	return d, nil
}
