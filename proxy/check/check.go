// Package check decides URLs as the proxy would, without a client: the
// check command, and the decision API's prefetch of origins.
package check

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/proxy/upstream"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// ErrNotAllowed is returned by [Checker.Run] when every URL was decided but
// some were not allowed: the check command's exit status 1.
var ErrNotAllowed = errors.New("not allowed")

// ErrInput wraps the errors of [Checker.Run] that concern its input
// (a bad URL, an unreadable robots.txt): the check command's exit status 2.
var ErrInput = errors.New("check")

// Checker decides URLs as the proxy would: the "robotsgate check"
// command, which prints each decision.
type Checker struct {
	// Config supplies default_agent, [[agents]], [[sites]] and the [robots]
	// keys; nil: the built-in defaults. [[agents]] rules keyed on client or
	// user never match, and block_private is not applied: check has no
	// client.
	Config *config.Config
	// Robots is the robots.txt of every URL's origin. Nil means fetch each
	// origin's own through Cache.
	Robots []byte
	// Cache fetches and holds robots.txt files when Robots is nil (see
	// CheckCache). With Exact, its files must be parsed without normalisation.
	Cache *fetch.Cache
	// Files fetches and holds the other files sites state usage in
	// (tdmrep.json, RSL licences), for URLs checked with purposes; nil:
	// none is read (with Robots, nothing is fetched).
	Files policy.UsageFiles
	// Now is the clock for ages; nil: time.Now.
	Now func() time.Time
	// Token is the token obeyed, taken verbatim; TokenSet says it was given.
	Token    string
	TokenSet bool
	// UserAgent is a User-Agent header to take the token from, as the proxy
	// does (step 3, [[agents]] included); used when TokenSet is false.
	UserAgent string
	// Exact decides exactly as Google's reference OneAgentAllowedByRobots,
	// with none of the proxy's steps: no normalisation, no /robots.txt
	// exemption, no [[agents]] or [[sites]], no size cap.
	Exact bool
	// Purposes are the purposes declared for every URL, each a
	// comma-separated list of names ("ai-train, search"); not with Exact.
	Purposes []string
}

// exactMaxBytes bounds a live fetch for check -exact, which has no size cap
// of its own: enough for any real robots.txt, not enough to hurt.
const exactMaxBytes = 32 << 20

// Cache returns the robots.txt fetcher and cache check uses without
// -robots, and its usage files: the proxy's, configured by cfg, except
// that block_private is not applied and, with exact, files are neither
// normalised nor cut at max_bytes.
func Cache(cfg *config.Config, version string, exact bool) (*fetch.Cache, *fetch.Files, error) {
	c := *cfg
	c.Upstream.BlockPrivate = false
	if exact {
		c.Robots.MaxBytes = exactMaxBytes
	}
	p, err := policy.Compile(&c)
	if err != nil {
		return nil, nil, err
	}
	o := upstream.OptionsFor(p.Config(), p.UpstreamProxy())
	o.Lookup = net.DefaultResolver.LookupNetIP
	tr, err := upstream.NewTransport(o)
	if err != nil {
		return nil, nil, err
	}
	var parse []robots.Option
	if !exact {
		parse = append(parse, robots.WithNormalization())
	}
	ft := upstream.NewFetchTransport(upstream.FetchOptions{Transport: tr, Proxy: p.UpstreamProxy()})
	ro := upstream.RobotsOptions{Transport: ft, Version: version, Now: time.Now, Parse: parse}
	cache, err := upstream.NewRobotsCache(&p.Config().Robots, ro)
	if err != nil {
		return nil, nil, err
	}
	return cache, upstream.NewUsageFiles(&p.Config().Robots, ro, nil, nil), nil
}

// Run decides every URL, in order, and hands each decision to print; a
// URL that cannot be decided is named on stderr. It returns an error
// wrapping ErrInput if any URL could not be decided (the others are still
// printed) or print failed, else ErrNotAllowed if any URL is not allowed,
// else nil.
func (c *Checker) Run(ctx context.Context, urls []string, print func(url string, d *policy.Decision) error, stderr io.Writer) error {
	if len(urls) == 0 {
		return fmt.Errorf("%w: no URL given", ErrInput)
	}
	if c.Robots == nil && c.Cache == nil {
		return fmt.Errorf("%w: no robots.txt: give -robots FILE or a cache", ErrInput)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.productToken(stderr)
	if _, err := policy.ParsePurposes(c.Purposes); err != nil {
		return fmt.Errorf("%w: -purpose: %v", ErrInput, err)
	}
	if c.Exact && len(c.Purposes) > 0 {
		return fmt.Errorf("%w: -purpose cannot go with -exact, which decides as Google's reference, where usage statements do not exist", ErrInput)
	}
	cfg := c.Config
	if cfg == nil {
		cfg = config.Default()
	}
	p, err := policy.Compile(cfg)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInput, err)
	}
	w := &policy.Env{Rules: c.rulesFor(cfg), Now: c.Now} // no private lookups: check has no client
	if c.Robots == nil {
		w.Rules = Prefetch(ctx, c.Cache, urls)
		w.Files = c.Files
	}
	var bad, blocked int
	for _, u := range urls {
		d, err := c.decide(ctx, p, w, u)
		if err != nil {
			bad++
			fmt.Fprintf(stderr, "robotsgate: check: %v\n", err)
			continue
		}
		if !d.Allowed() {
			blocked++
		}
		if err := print(u, d); err != nil {
			return fmt.Errorf("%w: write output: %v", ErrInput, err)
		}
	}
	switch {
	case bad > 0:
		return fmt.Errorf("%w: %d of %d URLs could not be decided", ErrInput, bad, len(urls))
	case blocked > 0:
		return ErrNotAllowed
	}
	return nil
}

// productToken makes a -agent value that is a product with a version
// ("CCBot/2.0") the token Google's rules would extract from it ("CCBot"),
// saying so on stderr: as given, it would name no group and be decided by
// the "*" rules without a word. With Exact the value stays as given, as
// the reference takes it; so do values with no "/" (empty, or with spaces).
func (c *Checker) productToken(stderr io.Writer) {
	if !c.TokenSet || c.Exact || robots.ValidToken(c.Token) || !strings.Contains(c.Token, "/") {
		return
	}
	if tok := robots.ExtractToken(c.Token); tok != "" {
		fmt.Fprintf(stderr, "robotsgate: check: -agent %q is not a product token; deciding for %q, the token robots.txt rules would name (for a whole User-Agent header, use -user-agent)\n", c.Token, tok)
		c.Token = tok
	}
}

// errNotLookedUp stands for an answer Prefetch has not got yet; it is
// never seen once Prefetch returns.
var errNotLookedUp = errors.New("robots.txt not looked up yet")

// Prefetch gets the robots.txt of every distinct origin among urls from
// cache, 16 at a time (and no more than the cache's own max_fetches), so
// that unreachable origins do not add up their timeouts; and returns the
// answers, for deciding each URL on the answer got here rather than a
// second lookup (which, for an origin whose fetch failed or found no slot,
// would fetch again, one at a time).
func Prefetch(ctx context.Context, cache *fetch.Cache, urls []string) policy.RulesSource {
	const parallel = 16
	type got struct {
		a   fetch.Answer
		err error
	}
	var mu sync.Mutex
	answers := map[fetch.Origin]got{}
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, u := range urls {
		o, err := fetch.ParseOrigin(u)
		if err != nil {
			continue
		}
		mu.Lock()
		_, seen := answers[o]
		if !seen {
			answers[o] = got{err: errNotLookedUp} // until its lookup ends
		}
		mu.Unlock()
		if seen {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a, err := cache.Get(ctx, o)
			mu.Lock()
			answers[o] = got{a, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return func(ctx context.Context, o fetch.Origin) (fetch.Answer, error) {
		if g, ok := answers[o]; ok {
			return g.a, g.err
		}
		return cache.Get(ctx, o) // an origin the URLs' parsing did not find: the decision's own
	}
}

// rulesFor returns where rules come from: the given file for every origin,
// or the cache.
func (c *Checker) rulesFor(cfg *config.Config) policy.RulesSource {
	if c.Robots == nil {
		return c.Cache.Get
	}
	body := c.Robots
	var opts []robots.Option
	if !c.Exact {
		if len(body) > cfg.Robots.MaxBytes {
			body = body[:cfg.Robots.MaxBytes]
		}
		opts = append(opts, robots.WithNormalization())
	}
	e := &fetch.Entry{Outcome: fetch.Fetched, Status: 200, Rules: robots.Parse(body, opts...)}
	return func(context.Context, fetch.Origin) (fetch.Answer, error) {
		return fetch.Answer{Entry: e}, nil
	}
}

func (c *Checker) decide(ctx context.Context, p *policy.Policy, w *policy.Env, u string) (*policy.Decision, error) {
	req := &policy.Request{Kind: policy.KindCheck, UserAgent: c.UserAgent, Purposes: c.Purposes, NoProxy: true}
	if c.TokenSet {
		req.Agents = []string{c.Token}
	} else if c.UserAgent == "" {
		req.Agents = []string{p.Config().DefaultAgent}
	}
	d := &policy.Decision{}
	if c.Exact {
		return d, p.DecideExact(ctx, w.Rules, c.Now, req, u, c.Robots != nil, d)
	}
	if err := req.SetURL(u); err != nil {
		return nil, err
	}
	p.Decide(ctx, w, req, d)
	if c.Robots != nil {
		d.Fetch = policy.FetchInfo{} // the file was given, not fetched
	}
	return d, nil
}
