package proxy

import (
	"context"
	"net/url"
	"strings"

	"github.com/robotsgate/robotsgate/proxy/auth"
	"github.com/robotsgate/robotsgate/robots"
)

// Policy is a Config compiled for deciding requests: every value checked,
// globs, CIDRs, hosts and the next hop parsed. Compile is the only way to
// get one. A Policy is immutable (but for its authenticator's memory of
// checked credentials) and safe for concurrent use; a reload compiles a
// new one and swaps it in whole.
type Policy struct {
	cfg           Config // what was compiled, for its plain values; read only
	agentRules    []agentRule
	siteRules     []siteRule
	upstreamProxy *url.URL            // nil: direct
	auth          *auth.Authenticator // nil: no [auth] users
	pacing        bool                // [politeness] is active
}

// private reports whether host is, or resolves to, a private address,
// when block_private applies (DESIGN step 2).
func (p *Policy) private(ctx context.Context, w *world, host string) bool {
	if !p.cfg.Upstream.BlockPrivate || w.private == nil {
		return false
	}
	return w.private.Private(ctx, host, p.cfg.Upstream.Timeout)
}

// agents returns the tokens a request obeys: the first matching [[agents]]
// rule's, else the User-Agent header's product token, else default_agent;
// and the purposes that rule declares.
func (p *Policy) agents(r *request) (Agents, Purposes) {
	var purposes Purposes
	for i := range p.agentRules {
		if a := &p.agentRules[i]; a.matches(r) {
			if len(a.tokens) > 0 {
				return Agents{list: a.tokens}, a.purposes
			}
			purposes = a.purposes // a rule that only declares purposes
			break
		}
	}
	tok := robots.TokenFromUserAgent(r.userAgent)
	if tok == "" {
		tok = p.cfg.DefaultAgent
	}
	return Agents{one: tok}, purposes
}

// site returns the first [[sites]] rule for host whose agents, if any,
// include an obeyed token.
func (p *Policy) site(host string, agents Agents) *SiteRule {
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
// decision to refuse, and a URI of neither form ("*") is returned as it
// is, for the decision to refuse too.
func requestTarget(uri string) string {
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
