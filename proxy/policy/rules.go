package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage"
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
	style    BlockStyle     // how the requests it matches are answered a block, when hasStyle
	hasStyle bool
}

// members returns the keys of the named members of the table key.
func members(key string, names ...string) []string {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = key + "." + n
	}
	return keys
}

// compileAgent checks a (key is its path) and compiles it.
func compileAgent(a *config.AgentRule, key string, users map[string]bool, pb *config.Problems) agentRule {
	var ar agentRule
	if a.UserAgent == "" && len(a.Client) == 0 && a.User == "" {
		pb.AddfIfRead(members(key, "user_agent", "client", "user"), key, "needs at least one of user_agent, client, user to match on")
	}
	if a.Token == "" && len(a.Also) == 0 && len(a.Purpose) == 0 && a.BlockStyle == "" {
		pb.AddfIfRead(members(key, "token", "also", "purpose", "block_style"), key, "needs token, also, purpose or block_style: the tokens to obey, the purposes to declare, or how to answer a block")
	}
	if a.BlockStyle != "" {
		ar.style, ar.hasStyle = compileBlockStyle(pb, key+".block_style", a.BlockStyle), true
	}
	for j, name := range a.Purpose {
		ps, err := ParsePurposes([]string{name})
		if err != nil || strings.Contains(name, ",") {
			pb.Addf(fmt.Sprintf("%s.purpose[%d]", key, j), "%s", usage.NotAPurpose(name))
		}
		ar.purposes |= ps
	}
	if a.UserAgent != "" {
		g, err := compileGlob(a.UserAgent)
		if err != nil {
			pb.Addf(key+".user_agent", "%v", err)
		}
		ar.glob = g
	}
	for j, s := range a.Client {
		p, err := parsePrefix(s)
		if err != nil {
			pb.Addf(fmt.Sprintf("%s.client[%d]", key, j), "%q is not a CIDR or IP address", s)
			continue
		}
		ar.client = append(ar.client, p)
	}
	if a.User != "" && !users[a.User] {
		pb.Addf(key+".user", "no [[auth.users]] entry is named %q", a.User)
	}
	ar.user = a.User
	if a.Token != "" {
		if !robots.ValidToken(a.Token) {
			pb.Addf(key+".token", "%q is not a product token (letters, \"_\" and \"-\")", a.Token)
		}
		ar.tokens = append(ar.tokens, a.Token)
	}
	checkTokens(pb, key+".also", a.Also)
	ar.tokens = append(ar.tokens, a.Also...)
	return ar
}

// matches reports whether the rule applies to r.
func (a *agentRule) matches(r *Request) bool {
	if a.glob != nil && !a.glob.MatchString(r.UserAgent) {
		return false
	}
	if a.user != "" && a.user != r.User {
		return false
	}
	if len(a.client) == 0 {
		return true
	}
	c := r.Client.Unmap()
	for _, pfx := range a.client {
		if pfx.Contains(c) {
			return true
		}
	}
	return false
}

// SitePolicy is what a [[sites]] rule does: SiteRobots (robots.txt
// decides), SiteAllow (skip it: a written permission), SiteDeny (refuse).
type SitePolicy uint8

// The site policies.
const (
	SiteRobots SitePolicy = iota
	SiteAllow
	SiteDeny
)

// A Site is a [[sites]] rule, compiled.
type Site struct {
	Host        string // as configured: an exact host, or "*.example.com"
	Policy      SitePolicy
	Agents      []string // tokens it is for; none: every token
	Reason      string
	MinInterval time.Duration // its own pacing interval; 0: none
	// AgentForm is the form of Signature-Agent sent on the requests it
	// matches; 0: [identity]'s.
	AgentForm identity.Form
	match     string // normalised: the exact host, or the suffix ".example.com"
}

// compileSite checks s (key is its path) and compiles it; signing is
// whether [identity] signs requests.
func compileSite(s *config.SiteRule, key string, signing bool, pb *config.Problems) Site {
	site := Site{Host: s.Host, Agents: s.Agents, Reason: s.Reason, MinInterval: s.MinInterval}
	switch s.Policy {
	case "robots":
	case "allow":
		site.Policy = SiteAllow
	case "deny":
		site.Policy = SiteDeny
	default:
		oneOf(pb, key+".policy", s.Policy, "allow", "deny", "robots")
	}
	atLeast(pb, key+".min_interval", s.MinInterval, 0)
	h, err := siteHost(s.Host)
	if err != nil {
		pb.Addf(key+".host", "%v", err)
	}
	site.match = h
	checkTokens(pb, key+".agents", s.Agents)
	if s.SignatureAgentForm != "" {
		f, err := identity.ParseForm(s.SignatureAgentForm)
		switch {
		case err != nil:
			pb.Addf(key+".signature_agent_form", "%v", err)
		case !signing: // as [identity]'s own is refused
			pb.Addf(key+".signature_agent_form", "set without identity.signature_agent: nothing is signed")
		}
		site.AgentForm = f
	}
	return site
}

// matches reports whether the rule applies to host when agents are obeyed.
func (s *Site) matches(host string, agents Agents) bool {
	if s.match != host && !(strings.HasPrefix(s.match, ".") && strings.HasSuffix(host, s.match)) {
		return false
	}
	return len(s.Agents) == 0 || anyFold(s.Agents, agents)
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
