package policy

import (
	"context"
	"net/url"
	"strings"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/pay"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/usage/source"
)

// Policy is a Config compiled for deciding requests: every value checked,
// globs, CIDRs, hosts and the next hop parsed, modes typed. Compile is the
// only way to get one. A Policy is immutable and safe for concurrent use;
// a reload compiles a new one and swaps it in whole.
type Policy struct {
	cfg           config.Config // what was compiled, for its plain values; read only
	agentRules    []agentRule
	sites         []Site
	upstreamProxy *url.URL // nil: direct
	mode          Mode
	tlsMode       TLSMode
	blockStyle    BlockStyle
	pacing        bool            // [politeness] is active
	maxPrice      pay.Amount      // [payments] max_price; zero: pay-per-crawl is off
	budget        pay.Amount      // [payments] budget, per UTC day
	sources       []source.Source // the usage sources, in the order they are run (source.List)
	card          *identity.Card  // [identity.card]; nil: none
	warnings      []*config.Error // what is valid but likely not meant
}

// Warnings returns what the config holds that is valid but likely not
// meant, each naming its key and line (a [[sites]] rule an earlier one
// leaves no request to): for validate and the start-up log to say, never
// a reason to refuse the config.
func (p *Policy) Warnings() []*config.Error { return p.warnings }

// Card returns the Signature Agent Card [identity.card] describes; nil
// when there is none.
func (p *Policy) Card() *identity.Card { return p.card }

// obeyedBy returns the tokens a request whose User-Agent is ua, and that
// names nothing else, obeys: step 3 as check -user-agent runs it (an
// [[agents]] rule keyed on client or user does not match).
func (p *Policy) obeyedBy(ua string) []string {
	a, _ := p.Agents(&Request{UserAgent: ua})
	return a.Slice()
}

// Payments returns [payments] parsed: the most paid for one request and
// the day's budget; ok is false when pay-per-crawl is off.
func (p *Policy) Payments() (maxPrice, budget pay.Amount, ok bool) {
	return p.maxPrice, p.budget, p.maxPrice.Currency != ""
}

// Config returns the config p was compiled from. It is p's own copy, to
// read, never to change.
func (p *Policy) Config() *config.Config { return &p.cfg }

// Mode is enforce or report.
func (p *Policy) Mode() Mode { return p.mode }

// TLSMode is how CONNECT tunnels are served.
func (p *Policy) TLSMode() TLSMode { return p.tlsMode }

// UpstreamProxy is upstream.proxy parsed; nil: direct.
func (p *Policy) UpstreamProxy() *url.URL { return p.upstreamProxy }

// HasUsers reports whether [auth] lists users: every proxy request and
// CONNECT must then carry their credentials.
func (p *Policy) HasUsers() bool { return len(p.cfg.Auth.Users) > 0 }

// private reports whether host is, or resolves to, a private address,
// when block_private applies (docs/decision.md step 2).
func (p *Policy) private(ctx context.Context, w *Env, host string) bool {
	if !p.cfg.Upstream.BlockPrivate || w.Private == nil {
		return false
	}
	return w.Private.Private(ctx, host, p.cfg.Upstream.Timeout)
}

// Agents returns the tokens a request obeys (docs/decision.md step 3): the first
// matching [[agents]] rule's, else the User-Agent header's product token,
// else default_agent; and the purposes that rule declares.
func (p *Policy) Agents(r *Request) (Agents, Purposes) {
	return p.agentsOf(p.agentRule(r), r)
}

// agentRule returns the first [[agents]] rule that matches r, or nil.
func (p *Policy) agentRule(r *Request) *agentRule {
	for i := range p.agentRules {
		if a := &p.agentRules[i]; a.matches(r) {
			return a
		}
	}
	return nil
}

// agentsOf is Agents for r, whose first matching rule is a (nil: none).
func (p *Policy) agentsOf(a *agentRule, r *Request) (Agents, Purposes) {
	var purposes Purposes
	if a != nil {
		if len(a.tokens) > 0 {
			return Agents{list: a.tokens}, a.purposes
		}
		purposes = a.purposes // a rule that only declares purposes, or a block style
	}
	tok := robots.TokenFromUserAgent(r.UserAgent)
	if tok == "" {
		tok = p.cfg.DefaultAgent
	}
	return Agents{one: tok}, purposes
}

// site returns the first [[sites]] rule for host whose agents, if any,
// include an obeyed token.
func (p *Policy) site(host string, agents Agents) *Site {
	for i := range p.sites {
		if s := &p.sites[i]; s.matches(host, agents) {
			return s
		}
	}
	return nil
}

// RequestTarget returns the raw request target of a request line's URI,
// absolute ("http://h/p?q") or origin-form ("/p?q"): path, params and
// query, "/" when empty. Nothing is cut or decoded: a "#" stays, for the
// decision to refuse, and a URI of neither form ("*") is returned as it
// is, for the decision to refuse too.
func RequestTarget(uri string) string {
	if strings.HasPrefix(uri, "/") {
		return uri
	}
	_, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return uri
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
