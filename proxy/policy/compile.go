package policy

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/pay"
	"github.com/robotsgate/robotsgate/proxy/upstream"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/usage/source"
)

// Mode is [mode]: what a block does.
type Mode uint8

// The modes.
const (
	ModeEnforce Mode = iota // blocks are answered by robotsgate
	ModeReport              // what would be blocked goes through, marked would-block
)

// String returns the mode as the config spells it.
func (m Mode) String() string {
	if m == ModeReport {
		return "report"
	}
	return "enforce"
}

// TLSMode is [tls] mode: how a CONNECT's tunnel is served.
type TLSMode uint8

// The TLS modes.
const (
	TLSMITM   TLSMode = iota // decrypted, every request inside decided
	TLSTunnel                // relayed, only the CONNECT decided
)

// BlockStyle is [responses] block_style: how a block is answered.
type BlockStyle uint8

// The block styles.
const (
	// BlockPlain answers every block with the plain-text 403 (or 503),
	// whatever asked for it: right for scrapers, which read the status.
	BlockPlain BlockStyle = iota
	// BlockBrowser answers a blocked request the way its destination in a
	// page can take without breaking the page: an empty script, style
	// sheet, image or font with 200, an XHR or fetch with 204, and a page
	// or frame with the explanation as an HTML page.
	BlockBrowser
)

// A Check checks one concern's settings of a config into pb, each problem
// naming its key: the concern's package owns it (cluster.CheckConfig
// checks [cluster]).
type Check func(c *config.Config, pb *config.Problems)

// Compile checks c and compiles it into a Policy: the only way to get one,
// so that no unchecked config can decide a request. Every problem is
// reported at once: the error joins one *config.Error per problem, each
// naming its key (and its line, for a config read from a file). The
// Policy keeps a copy of c: changing c afterwards changes nothing.
//
// checks are the settings of concerns policy does not link, checked too:
// the commands that run a fleet pass cluster.CheckConfig, so that [cluster]
// is checked without this package (nor audit and report, which import it)
// linking the Redis client. They run after [politeness] is checked and
// before [identity]: problems on one line keep the order they always had.
func Compile(c *config.Config, checks ...Check) (*Policy, error) {
	pb := c.Problems()
	p := compile(c, pb, checks)
	if err := pb.Err(); err != nil {
		return nil, err
	}
	p.warnings = pb.Warnings()
	return p, nil
}

// compile checks c's values into pb, checks included, and builds the
// Policy (which is only usable when pb holds no problem).
func compile(c *config.Config, pb *config.Problems, checks []Check) *Policy {
	p := &Policy{cfg: *c, sources: source.List()}
	p.cfg.Agents, p.cfg.Sites = slices.Clone(c.Agents), slices.Clone(c.Sites)
	p.cfg.Auth.Users = slices.Clone(c.Auth.Users)
	if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		pb.Addf("listen", "%q is not host:port", c.Listen)
	} else if _, err := net.LookupPort("tcp", port); err != nil {
		pb.Addf("listen", "%q: %q is not a port (0 to 65535, or a service name)", c.Listen, port)
	}
	switch c.Mode {
	case "enforce":
	case "report":
		p.mode = ModeReport
	default:
		oneOf(pb, "mode", c.Mode, "enforce", "report")
	}
	if c.DefaultAgent != "*" && !robots.ValidToken(c.DefaultAgent) {
		pb.Addf("default_agent", "%q is not \"*\" or a product token (letters, \"_\" and \"-\")", c.DefaultAgent)
	}
	switch c.TLS.Mode {
	case "mitm":
	case "tunnel":
		p.tlsMode = TLSTunnel
	default:
		oneOf(pb, "tls.mode", c.TLS.Mode, "mitm", "tunnel")
	}
	if (c.TLS.CACert == "") != (c.TLS.CAKey == "") {
		pb.Addf("tls.ca_cert", "ca_cert and ca_key go together: give both or neither")
	}
	p.upstreamProxy = upstream.CheckConfig(c, pb)
	compileRobots(c, pb)
	compileLimits(c, pb)
	compilePoliteness(c, pb)
	compileEvidence(c, pb)
	for _, check := range checks {
		check(c, pb)
	}
	identity.CheckConfig(c, pb)
	p.maxPrice, p.budget = pay.CheckConfig(c, pb)
	p.blockStyle = compileBlockStyle(pb, "responses.block_style", c.Responses.BlockStyle)
	users := compileUsers(c.Auth.Users, pb)
	for i := range p.cfg.Agents {
		p.agentRules = append(p.agentRules, compileAgent(&p.cfg.Agents[i], fmt.Sprintf("agents[%d]", i), users, pb))
	}
	signing := c.Identity.SignatureAgent != ""
	for i := range p.cfg.Sites {
		p.sites = append(p.sites, compileSite(&p.cfg.Sites[i], fmt.Sprintf("sites[%d]", i), signing, pb))
	}
	warnShadowed(c, p.sites, pb)
	p.pacing = pacingActive(c)
	p.card = identity.CheckCard(c, pb, p.obeyedBy) // after [[agents]]: it names the token they make robotsgate obey
	return p
}

// compileEvidence checks [evidence].
func compileEvidence(c *config.Config, pb *config.Problems) {
	e := &c.Evidence
	atLeast(pb, "evidence.retention", e.Retention, 24*time.Hour)
	atLeast(pb, "evidence.checkpoint_interval", e.CheckpointInterval, time.Second)
	if e.CheckpointInterval > 24*time.Hour {
		pb.Addf("evidence.checkpoint_interval", "%v is more than 24h: lines would wait that long for a signature", e.CheckpointInterval)
	}
	if e.MaxBytes < 1<<20 {
		pb.Addf("evidence.max_bytes", "%d is less than 1 MiB (1048576): too small to hold one origin's files", e.MaxBytes)
	}
}

// compileRobots checks [robots].
func compileRobots(c *config.Config, pb *config.Problems) {
	r := &c.Robots
	atLeast(pb, "robots.cache_ttl", r.CacheTTL, time.Minute)
	atLeast(pb, "robots.unreachable_limit", r.UnreachableLimit, time.Second)
	atLeast(pb, "robots.retry_after", r.RetryAfter, time.Second)
	if r.RetryAfter > 24*time.Hour {
		pb.Addf("robots.retry_after", "%v is more than 24h: a failure mark further ahead is taken for one robotsgate did not write", r.RetryAfter)
	}
	atLeast(pb, "robots.fetch_timeout", r.FetchTimeout, 100*time.Millisecond)
	inRange(pb, "robots.max_bytes", int64(r.MaxBytes), 1024, 64<<20)
	inRange(pb, "robots.max_redirects", int64(r.MaxRedirects), 0, 20)
	inRange(pb, "robots.cache_max_bytes", r.CacheMaxBytes, 1<<20, 1<<40)
	inRange(pb, "robots.max_fetches", int64(r.MaxFetches), 1, 1<<16)
	oneOf(pb, "robots.auth_errors", r.AuthErrors, "allow", "disallow")
	if strings.TrimSpace(r.FetchUserAgent) == "" {
		pb.Addf("robots.fetch_user_agent", "must not be empty")
	}
}

// compileLimits checks [limits].
func compileLimits(c *config.Config, pb *config.Problems) {
	l := &c.Limits
	atLeast(pb, "limits.read_header_timeout", l.ReadHeaderTimeout, time.Millisecond)
	inRange(pb, "limits.max_header_bytes", int64(l.MaxHeaderBytes), 1024, 16<<20)
	atLeast(pb, "limits.idle_timeout", l.IdleTimeout, time.Millisecond)
	atLeast(pb, "limits.tunnel_idle_timeout", l.TunnelIdleTimeout, time.Millisecond)
	inRange(pb, "limits.max_connections", int64(l.MaxConnections), 1, 1<<20)
}

// compilePoliteness checks [politeness].
func compilePoliteness(c *config.Config, pb *config.Problems) {
	pc := &c.Politeness
	atLeast(pb, "politeness.min_interval", pc.MinInterval, 0)
	if pc.MaxDelay <= 0 {
		pb.Addf("politeness.max_delay", "must be more than 0s")
	}
	if pc.MaxBackoff <= 0 {
		pb.Addf("politeness.max_backoff", "must be more than 0s")
	}
	if pc.MaxWait < pc.MaxDelay {
		pb.Addf("politeness.max_wait", "%v is less than max_delay (%v): a request paced max_delay apart would be refused, never held", pc.MaxWait, pc.MaxDelay)
	}
}

// compileUsers checks [[auth.users]] and returns their names.
func compileUsers(list []config.AuthUser, pb *config.Problems) map[string]bool {
	users := map[string]bool{}
	for i, u := range list {
		key := fmt.Sprintf("auth.users[%d]", i)
		switch {
		case u.Name == "":
			pb.Addf(key+".name", "must not be empty")
		case strings.ContainsAny(u.Name, ":\r\n"):
			pb.Addf(key+".name", "%q has a colon or line break", u.Name)
		case users[u.Name]:
			pb.Addf(key+".name", "user %q is listed twice", u.Name)
		}
		users[u.Name] = true
		if _, err := bcrypt.Cost([]byte(u.PasswordHash)); err != nil {
			pb.Addf(key+".password_hash", "not a bcrypt hash (make one with robotsgate hash-password)")
		}
	}
	return users
}

// checkTokens reports the entries of toks that are not product tokens.
func checkTokens(pb *config.Problems, key string, toks []string) {
	for j, t := range toks {
		if !robots.ValidToken(t) {
			pb.Addf(fmt.Sprintf("%s[%d]", key, j), "%q is not a product token (letters, \"_\" and \"-\")", t)
		}
	}
}

// compileBlockStyle checks and compiles a block_style value (key is its
// path).
func compileBlockStyle(pb *config.Problems, key, v string) BlockStyle {
	switch v {
	case "plain":
		return BlockPlain
	case "browser":
		return BlockBrowser
	}
	oneOf(pb, key, v, "plain", "browser")
	return BlockPlain
}

// oneOf reports v, key's value, when it is not one of allowed: the
// choices quoted as they are written in the config, and the nearest by
// spelling, if one is near ("browser" for "browsr" or "Browser").
func oneOf(pb *config.Problems, key, v string, allowed ...string) {
	if slices.Contains(allowed, v) {
		return
	}
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = strconv.Quote(a)
	}
	choices := strings.Join(quoted, ", ")
	if n := len(quoted); n > 1 {
		choices = strings.Join(quoted[:n-1], ", ") + " or " + quoted[n-1]
	}
	switch near := config.Suggest(v, allowed...); {
	case near != "" && strings.EqualFold(near, v):
		pb.Addf(key, "%q is not one of %s; values are case-sensitive: did you mean %q?", v, choices, near)
		return
	case near != "":
		pb.Addf(key, "%q is not one of %s; did you mean %q?", v, choices, near)
		return
	}
	pb.Addf(key, "%q is not one of %s", v, choices)
}

// atLeast reports a duration below min.
func atLeast(pb *config.Problems, key string, v, min time.Duration) {
	if v < min {
		pb.Addf(key, "%v is less than %v", v, min)
	}
}

// inRange reports an integer out of lo to hi.
func inRange(pb *config.Problems, key string, v, lo, hi int64) {
	if v < lo || v > hi {
		pb.Addf(key, "%d is out of range %d to %d", v, lo, hi)
	}
}
