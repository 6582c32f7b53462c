package proxy

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// siteHost normalises a [[sites]] host as origins are normalised: an exact
// host, or "*.example.com", kept as ".example.com".
func siteHost(h string) (string, error) {
	if h == "" {
		return "", errors.New("must not be empty")
	}
	orig := h
	wild := strings.HasPrefix(h, "*.")
	if wild {
		h = h[2:]
	}
	if strings.ContainsAny(h, "*/:") && !strings.HasPrefix(h, "[") {
		return "", fmt.Errorf("%q is not a host or \"*.\" and a domain", orig)
	}
	o, err := fetch.OriginOf("http", h)
	if err != nil {
		return "", fmt.Errorf("%q is not a host: %v", orig, err)
	}
	if wild {
		return "." + o.Host, nil
	}
	return o.Host, nil
}

// compileGlob compiles a User-Agent glob: "*" any run of characters
// (spaces and "/" too), "?" one character, matched against the whole
// header, case-insensitively.
func compileGlob(g string) (*regexp.Regexp, error) {
	if strings.ContainsAny(g, "\r\n\x00") {
		return nil, fmt.Errorf("%q has a control character", g)
	}
	var b strings.Builder
	b.WriteString(`(?is)\A`)
	for _, r := range g {
		switch r {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`\z`)
	return regexp.Compile(b.String())
}

// agentRule is an [[agents]] entry, compiled.
type agentRule struct {
	glob     *regexp.Regexp // nil: any User-Agent
	client   []netip.Prefix // empty: any client
	user     string         // "": any user
	tokens   []string       // token, then also; none: the User-Agent header's
	purposes Purposes       // declared for the requests it matches
}

// compileAgent checks a (key is its path) and compiles it.
func compileAgent(a *AgentRule, key string, users map[string]bool, d *decoder) agentRule {
	var r agentRule
	if a.UserAgent == "" && len(a.Client) == 0 && a.User == "" {
		d.errorf(key, "needs at least one of user_agent, client, user to match on")
	}
	if a.Token == "" && len(a.Also) == 0 && len(a.Purpose) == 0 {
		d.errorf(key, "needs token, also or purpose: the tokens to obey, or the purposes to declare")
	}
	for j, name := range a.Purpose {
		ps, err := parsePurposes([]string{name})
		if err != nil || strings.Contains(name, ",") {
			d.errorf(fmt.Sprintf("%s.purpose[%d]", key, j), "%q is not a purpose: known purposes are %s", name, knownPurposes())
		}
		r.purposes |= ps
	}
	if a.UserAgent != "" {
		g, err := compileGlob(a.UserAgent)
		if err != nil {
			d.errorf(key+".user_agent", "%v", err)
		}
		r.glob = g
	}
	for j, s := range a.Client {
		p, err := parsePrefix(s)
		if err != nil {
			d.errorf(fmt.Sprintf("%s.client[%d]", key, j), "%q is not a CIDR or IP address", s)
			continue
		}
		r.client = append(r.client, p)
	}
	if a.User != "" && !users[a.User] {
		d.errorf(key+".user", "no [[auth.users]] entry is named %q", a.User)
	}
	r.user = a.User
	if a.Token != "" {
		if !robots.ValidToken(a.Token) {
			d.errorf(key+".token", "%q is not a product token (letters, \"_\" and \"-\")", a.Token)
		}
		r.tokens = append(r.tokens, a.Token)
	}
	checkTokens(d, key+".also", a.Also)
	r.tokens = append(r.tokens, a.Also...)
	return r
}

// matches reports whether the rule applies to r.
func (a *agentRule) matches(r *request) bool {
	if a.glob != nil && !a.glob.MatchString(r.userAgent) {
		return false
	}
	if a.user != "" && a.user != r.user {
		return false
	}
	if len(a.client) == 0 {
		return true
	}
	c := r.client.Unmap()
	for _, pfx := range a.client {
		if pfx.Contains(c) {
			return true
		}
	}
	return false
}

// siteRule is a [[sites]] entry, compiled.
type siteRule struct {
	host string    // normalised: the exact host, or the suffix ".example.com"
	rule *SiteRule // as configured (in the Policy's own copy)
}

// compileSite checks s (key is its path) and compiles it.
func compileSite(s *SiteRule, key string, d *decoder) siteRule {
	oneOf(d, key+".policy", s.Policy, "allow", "deny", "robots")
	h, err := siteHost(s.Host)
	if err != nil {
		d.errorf(key+".host", "%v", err)
	}
	checkTokens(d, key+".agents", s.Agents)
	return siteRule{host: h, rule: s}
}

// matches reports whether the rule applies to host when agents are obeyed.
func (s *siteRule) matches(host string, agents Agents) bool {
	if s.host != host && !(strings.HasPrefix(s.host, ".") && strings.HasSuffix(host, s.host)) {
		return false
	}
	return len(s.rule.Agents) == 0 || anyFold(s.rule.Agents, agents)
}

// anyFold reports whether a and b share a token, ignoring case.
func anyFold(a []string, b Agents) bool {
	for _, x := range a {
		for i := range b.Len() {
			if strings.EqualFold(x, b.At(i)) {
				return true
			}
		}
	}
	return false
}
