package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// More reasons, for the steps before the rules.
const (
	reasonBadRequest = "bad request URL"
	reasonFragment   = "bad request URL: a request-target cannot hold a fragment (\"#\")"
	reasonPrivate    = "target resolves to a private address"
	reasonSiteAllow  = "site allow %q"
	reasonSiteDeny   = "site deny %q"
	reasonFetches    = "too many robots.txt fetches in flight (robots.max_fetches): retry"
)

// A request is what the policy needs to know of one proxied request.
type request struct {
	scheme    string // "http" or "https"
	authority string // host[:port] to reach
	target    string // raw request target: path, params and query
	userAgent string
	client    netip.Addr
	user      string   // authenticated proxy user; "" if none
	agents    []string // the tokens obeyed, when given (check -agent); nil: step 3 finds them
}

// rulesSource gives the robots.txt answer for an origin: Cache.Get, or a
// file given to check.
type rulesSource func(ctx context.Context, o fetch.Origin) (fetch.Answer, error)

// Policy is a Config compiled for deciding requests: every value checked,
// globs, CIDRs, hosts and the next hop parsed. Compile is the only way to
// get one. A Policy is immutable (but for its authenticator's memory of
// checked credentials) and safe for concurrent use; a reload compiles a
// new one and swaps it in whole.
type Policy struct {
	cfg           Config // what was compiled, for its plain values; read only
	agentRules    []agentRule
	siteRules     []siteRule
	upstreamProxy *url.URL       // nil: direct
	auth          *authenticator // nil: no [auth] users
	pacing        bool           // [politeness] is active
}

// world is what a decision looks at besides the policy: where rules come
// from, the private-address lookups (nil: block_private is not applied, as
// in check) and the clock.
type world struct {
	rules   rulesSource
	private *privateCache
	now     func() time.Time
}

// decide runs DESIGN.md's steps 1 to 7 for one request, into d.
func (p *Policy) decide(ctx context.Context, w *world, r *request, d *Decision) {
	d.CrawlDelay, d.User = -1, r.user
	// A fragment is never part of a request-target (RFC 9112 section
	// 3.2): what follows "#" would be decided on one reading and served on
	// another.
	if strings.IndexByte(r.target, '#') >= 0 {
		d.Action, d.Reason = ActionBadRequest, reasonFragment
		return
	}
	// 1. Origin.
	o, err := fetch.OriginOf(r.scheme, r.authority)
	if err != nil {
		d.Action, d.Reason = ActionBadRequest, reasonBadRequest+": "+strings.TrimPrefix(err.Error(), fetch.ErrBadOrigin.Error()+": ")
		return
	}
	d.Origin = o
	// 2. Private targets.
	if p.private(ctx, w, o.Host) {
		d.Action, d.Reason = ActionPrivate, reasonPrivate
		return
	}
	// 3. Agent.
	if d.Agents = r.agents; d.Agents == nil {
		d.Agents = p.agents(r, &d.agentBuf)
	}
	// 4. robots.txt itself.
	if path, _, _ := strings.Cut(r.target, "?"); path == "/robots.txt" {
		d.Action, d.Reason = ActionAllowed, reasonRobotsTxt
		return
	}
	// 5. Sites.
	if s := p.site(o.Host, d.Agents); s != nil {
		d.Site = s
		switch s.Policy {
		case "allow":
			d.Action, d.Reason, d.noRobots = ActionAllowed, fmt.Sprintf(reasonSiteAllow, s.Reason), true
			return
		case "deny":
			d.Action, d.Reason, d.noRobots = ActionDenied, fmt.Sprintf(reasonSiteDeny, s.Reason), true
			return
		}
	}
	// 6 and 7. Rules.
	a, err := w.rules(ctx, o)
	switch {
	case errors.Is(err, fetch.ErrOverloaded):
		d.Action, d.Reason = ActionOverloaded, reasonFetches
		return
	case err != nil:
		d.Action, d.Reason = ActionUnreachable, "gave up waiting for robots.txt"
		return
	}
	decideAnswer(d, a, robots.Normalize(r.target), w.now())
}

// report applies report mode to d: a block by robots.txt or a site rule,
// or for an unreachable robots.txt, becomes "would-block" and goes through.
// It reports whether d changed.
func (p *Policy) report(d *Decision) bool {
	if p.cfg.Mode != "report" {
		return false
	}
	switch d.Action {
	case ActionDisallowed, ActionDenied, ActionUnreachable:
		d.Action = ActionWouldBlock
		return true
	}
	return false
}

// private reports whether host is, or resolves to, a private address,
// when block_private applies (DESIGN step 2).
func (p *Policy) private(ctx context.Context, w *world, host string) bool {
	if !p.cfg.Upstream.BlockPrivate || w.private == nil {
		return false
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return isPrivate(a)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Upstream.Timeout)
	defer cancel()
	return w.private.lookup(ctx, host)
}

// privateCache remembers for a while whether a host resolves to a private
// address, so that step 2 costs a DNS lookup per host, not per request. It
// is a first line only: the dialer checks every address it dials.
type privateCache struct {
	resolve lookupFunc
	now     func() time.Time
	mu      sync.Mutex
	hosts   map[string]privateEntry
}

type privateEntry struct {
	private bool
	expires time.Time
}

const (
	privateTTL     = 30 * time.Second
	privateMaxSize = 10000
)

func newPrivateCache(lookup lookupFunc, now func() time.Time) *privateCache {
	return &privateCache{resolve: lookup, now: now, hosts: map[string]privateEntry{}}
}

// lookup resolves host (or recalls it) and reports whether any of its
// addresses is private. A host that does not resolve is left to the fetch
// and the dial, which fail on their own.
func (c *privateCache) lookup(ctx context.Context, host string) bool {
	now := c.now()
	c.mu.Lock()
	e, ok := c.hosts[host]
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.private
	}
	addrs, err := c.resolve(ctx, "ip", host)
	if err != nil {
		return false
	}
	private := false
	for _, a := range addrs {
		private = private || isPrivate(a)
	}
	c.mu.Lock()
	if len(c.hosts) >= privateMaxSize {
		clear(c.hosts)
	}
	c.hosts[host] = privateEntry{private: private, expires: now.Add(privateTTL)}
	c.mu.Unlock()
	return private
}

// agents returns the tokens a request obeys: the first matching [[agents]]
// rule's, else the User-Agent header's product token, else default_agent
// (in buf, to save an allocation).
func (p *Policy) agents(r *request, buf *[1]string) []string {
	for i := range p.agentRules {
		if a := &p.agentRules[i]; a.matches(r) {
			return a.tokens
		}
	}
	buf[0] = robots.TokenFromUserAgent(r.userAgent)
	if buf[0] == "" {
		buf[0] = p.cfg.DefaultAgent
	}
	return buf[:]
}

// site returns the first [[sites]] rule for host whose agents, if any,
// include an obeyed token.
func (p *Policy) site(host string, agents []string) *SiteRule {
	for i := range p.siteRules {
		if s := &p.siteRules[i]; s.matches(host, agents) {
			return s.rule
		}
	}
	return nil
}

// requestTarget returns the raw request target of a request line's URI,
// absolute ("http://h/p?q") or origin-form ("/p?q"): path, params and
// query, "/" when empty. Nothing is cut or decoded: a "#" stays, for the
// decision to refuse.
func requestTarget(uri string) string {
	if strings.HasPrefix(uri, "/") {
		return uri
	}
	_, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return "/"
	}
	i := strings.IndexAny(rest, "/?")
	if i < 0 {
		return "/"
	}
	if rest[i] == '?' {
		return "/" + rest[i:]
	}
	return rest[i:]
}
