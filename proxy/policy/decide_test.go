package policy

import (
	"context"
	"encoding/base64"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/robotsgate/robotsgate/proxy/auth"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/pace"
	"github.com/robotsgate/robotsgate/proxy/upstream"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// decideRobots is the robots.txt of every origin in the decision table but
// those tableAnswer names.
const decideRobots = "User-agent: *\nDisallow: /private\nAllow: /private/open\n\nUser-agent: GPTBot\nDisallow: /\n"

// tableEnv is an Env with no network: robots.txt answers by host, names
// that resolve by a fixed table, and p's [auth] users.
func tableEnv(t *testing.T, p *Policy) *Env {
	t.Helper()
	fetched := func(body string) fetch.Answer {
		return fetch.Answer{Entry: &fetch.Entry{Outcome: fetch.Fetched, Status: 200, Rules: robots.Parse([]byte(body), robots.WithNormalization())}}
	}
	answers := map[string]fetch.Answer{
		"closed.example": fetched("User-agent: *\nDisallow: /\n"),
		"down.example":   {Unreachable: true, LastError: "refused: connection refused"},
		"usage.example":  fetched("Content-Signal: search=yes, ai-train=no\nUser-agent: *\nContent-Usage: ai-use=n\nDisallow: /private\n"),
		"cu.example":     fetched("User-agent: *\nContent-Usage: train-ai=n\nContent-Usage: /open/ train-ai=y\n"),
		"mixed.example":  fetched("User-agent: *\nContent-Usage: train-ai=n\nContent-Usage: /open/ train-ai=y\nContent-Signal: ai-train=no\n"),
	}
	resolve := func(_ context.Context, _, host string) ([]netip.Addr, error) {
		if host == "internal.example" {
			return []netip.Addr{netip.MustParseAddr("10.0.0.7")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	}
	w := &Env{
		Rules: func(ctx context.Context, o fetch.Origin) (fetch.Answer, error) {
			switch o.Host {
			case "busy.example":
				return fetch.Answer{}, fetch.ErrOverloaded
			case "slow.example":
				return fetch.Answer{}, context.DeadlineExceeded
			case "gone.example":
				if err := ctx.Err(); err != nil {
					return fetch.Answer{}, err // its client has gone
				}
			}
			if a, ok := answers[o.Host]; ok {
				return a, nil
			}
			return fetched(decideRobots), nil
		},
		Private: upstream.NewPrivateCache(resolve, time.Now),
		Pacer:   pace.NewPacer(time.Now),
		Now:     time.Now,
	}
	var users []auth.User
	for _, u := range p.Config().Auth.Users {
		users = append(users, auth.User{Name: u.Name, PasswordHash: u.PasswordHash})
	}
	if a := auth.New(users, time.Now); a != nil {
		w.Auth = a
	}
	return w
}

// TestDecide is the decision order of docs/decision.md, one row
// per step and per X-Robots-Gate value the decision can give.
func TestDecide(t *testing.T) {
	t.Parallel()
	hash, _ := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	withAuth := func(c *config.Config) { c.Auth.Users = []config.AuthUser{{Name: "etl", PasswordHash: string(hash)}} }
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("etl:secret"))
	plain := func(authority, target string) Request {
		return Request{Kind: KindPlain, Scheme: "http", Authority: authority, Target: target, UserAgent: "FooBot/1.0"}
	}
	purpose := func(authority, target string, purposes ...string) Request {
		r := plain(authority, target)
		r.Purposes = purposes
		return r
	}
	tunnel := &Tunnel{Authority: "a.example:443", User: "etl", Origin: fetch.Origin{Scheme: "https", Host: "a.example", Port: 443}}
	tests := []struct {
		name   string
		config func(*config.Config)
		req    Request
		twice  bool // decide the Request twice, the second time for a client that has left, and check that one
		action Action
		reason string // a part of the reason
		token  string
	}{
		{"auth: no credentials", withAuth, plain("a.example", "/x"), false, ActionAuth, reasonAuth, ""},
		{"auth: good credentials", withAuth, func() Request { r := plain("a.example", "/x"); r.Credentials = basic; return r }(), false, ActionAllowed, "no rule", "FooBot"},
		{"auth: not asked of check", withAuth, Request{Kind: KindCheck, Scheme: "http", Authority: "a.example", Target: "/x"}, false, ActionAllowed, "", "*"},
		{"inner: another origin", nil, Request{Kind: KindInner, Scheme: "https", Authority: "b.example", Target: "/x", Tunnel: tunnel}, false, ActionMisdirected, "inside a tunnel to a.example:443", ""},
		{"inner: the tunnel's origin", nil, Request{Kind: KindInner, Scheme: "https", Authority: "A.EXAMPLE:443", Target: "/x", Tunnel: tunnel}, false, ActionAllowed, "", "*"},
		{"1: bad host", nil, plain("exa mple.com", "/x"), false, ActionBadRequest, ReasonBadRequest, ""},
		{"1: fragment", nil, plain("a.example", "/x#/../private"), false, ActionBadRequest, "fragment", ""},
		{"1: not a path", nil, plain("a.example", "*"), false, ActionBadRequest, "not a path", ""},
		{"1: a UTF-8 byte, named as a byte", nil, plain("a.example", "/caf\xc3\xa9"), false, ActionBadRequest, "holds the byte 0xC3, which", ""},
		{"1: a space", nil, plain("a.example", "/a b"), false, ActionBadRequest, "holds a space, which", ""},
		{"1: a control byte", nil, plain("a.example", "/a\x7f"), false, ActionBadRequest, "holds the byte 0x7F, which", ""},
		{"1: a bad percent", nil, plain("a.example", "/a%zz"), false, ActionBadRequest, "a '%' not followed by two hex digits", ""},
		{"2: private literal", nil, plain("10.1.2.3", "/x"), false, ActionPrivate, ReasonPrivate, ""},
		{"2: numeric form", nil, plain("0x7f.1", "/x"), false, ActionPrivate, ReasonPrivate, ""},
		{"2: name resolving inward", nil, plain("internal.example", "/x"), false, ActionPrivate, ReasonPrivate, ""},
		{"2: off", func(c *config.Config) { c.Upstream.BlockPrivate = false }, plain("10.1.2.3", "/x"), false, ActionAllowed, "", "FooBot"},
		{"3: [[agents]] also", func(c *config.Config) {
			c.Agents = []config.AgentRule{{UserAgent: "FooBot/*", Token: "FooBot", Also: []string{"GPTBot"}}}
		}, plain("a.example", "/public"), false, ActionDisallowed, reasonDisallowed, "GPTBot"},
		{"4: /robots.txt", nil, plain("closed.example", "/robots.txt"), false, ActionAllowed, reasonRobotsTxt, ""},
		{"5: site deny", func(c *config.Config) {
			c.Sites = []config.SiteRule{{Host: "*.example", Policy: "deny", Reason: "legal"}}
		}, plain("a.example", "/x"), false, ActionDenied, `site deny "legal"`, ""},
		{"5: site allow", func(c *config.Config) {
			c.Sites = []config.SiteRule{{Host: "closed.example", Policy: "allow", Reason: "ok"}}
		}, plain("closed.example", "/x"), false, ActionAllowed, `site allow "ok"`, ""},
		{"6: unreachable, no copy", nil, plain("down.example", "/x"), false, ActionUnreachable, reasonNoCopy, ""},
		{"6: too many fetches", nil, plain("busy.example", "/x"), false, ActionOverloaded, "max_fetches", ""},
		{"6: gave up waiting", nil, plain("slow.example", "/x"), false, ActionUnreachable, reasonGaveUp, ""},
		{"7: disallowed", nil, plain("a.example", "/private/x"), false, ActionDisallowed, reasonDisallowed, "FooBot"},
		{"7: allowed by the longer rule", nil, plain("a.example", "/private/open/x"), false, ActionAllowed, reasonAllowed, "FooBot"},
		{"7: normalised", nil, plain("a.example", "/%70rivate"), false, ActionDisallowed, reasonDisallowed, "FooBot"},
		{"7: ambiguous", nil, plain("a.example", "/private/open/..;/x"), false, ActionDisallowed, "ambiguous: a lenient server would serve /private/x", "FooBot"},
		{"7b: no purpose declared", nil, plain("usage.example", "/x"), false, ActionAllowed, reasonNoRule, "FooBot"},
		{"7b: ai-train refused by content-signal before any group", nil, purpose("usage.example", "/x", "search, AI-Train"), false, ActionUsageRefused, "refuses ai-train: content-signal: search=yes, ai-train=no (line 1)", "FooBot"},
		{"7b: search allowed", nil, purpose("usage.example", "/x", "search"), false, ActionAllowed, reasonNoRule, "FooBot"},
		{"7b: two header lines", nil, purpose("usage.example", "/x", "search", "ai-input"), false, ActionUsageRefused, "refuses ai-input: content-usage: ai-use=n (line 3)", "FooBot"},
		{"7b: rules decide first", nil, purpose("usage.example", "/private", "ai-train"), false, ActionDisallowed, reasonDisallowed, "FooBot"},
		{"7b: a longer path grants", nil, purpose("cu.example", "/open/x", "ai-train"), false, ActionAllowed, reasonNoRule, "FooBot"},
		{"7b: elsewhere refused", nil, purpose("cu.example", "/closed", "ai-train"), false, ActionUsageRefused, "content-usage: train-ai=n (line 2)", "FooBot"},
		{"7b: a lenient reading refused", nil, purpose("cu.example", "/open/..;/x", "ai-train"), false, ActionUsageRefused, "content-usage: train-ai=n (line 2)", "FooBot"},
		{"7b: [[agents]] purpose", func(c *config.Config) {
			c.Agents = []config.AgentRule{{UserAgent: "FooBot/*", Purpose: []string{"ai-input"}}}
		}, plain("usage.example", "/x"), false, ActionUsageRefused, "refuses ai-input", "FooBot"},
		{"7b: unknown purpose", nil, purpose("usage.example", "/x", "training"), false, ActionBadRequest, `"training" is not a purpose: known purposes are ai-train, ai-input, search`, ""},
		{"7b: report mode", func(c *config.Config) { c.Mode = "report" }, purpose("usage.example", "/x", "ai-train"), false, ActionWouldBlock, "usage refused", "FooBot"},
		{"7b: site allow", func(c *config.Config) {
			c.Sites = []config.SiteRule{{Host: "usage.example", Policy: "allow", Reason: "licensed"}}
		}, purpose("usage.example", "/x", "ai-train"), false, ActionAllowed, `site allow "licensed"`, ""},
		{"report mode", func(c *config.Config) { c.Mode = "report" }, plain("a.example", "/private"), false, ActionWouldBlock, reasonDisallowed, "FooBot"},
		{"report mode: not for check", func(c *config.Config) { c.Mode = "report" }, Request{Kind: KindCheck, Scheme: "http", Authority: "a.example", Target: "/private"}, false, ActionDisallowed, "", "*"},
		{"8: held, and the client left", func(c *config.Config) {
			c.Politeness.MinInterval, c.Politeness.MaxDelay, c.Politeness.MaxWait = time.Hour, time.Hour, time.Hour
		}, plain("a.example", "/x"), true, ActionClientLeft, "client left while waiting for its turn", "FooBot"},
		{"6: the client left while robots.txt was fetched", nil, plain("gone.example", "/x"), true, ActionClientLeft, "client left while its robots.txt was being fetched", ""},
		{"9: MITM CONNECT", nil, Request{Kind: KindConnect, Scheme: "https", Authority: "closed.example:443", Target: "/"}, false, ActionAllowed, reasonMITM, ""},
		{"9: CONNECT to a private address", nil, Request{Kind: KindConnect, Scheme: "https", Authority: "internal.example:443", Target: "/"}, false, ActionPrivate, ReasonPrivate, ""},
		{"9: tunnel mode, every path closed", func(c *config.Config) { c.TLS.Mode = "tunnel" }, Request{Kind: KindConnect, Scheme: "https", Authority: "closed.example:443", Target: "/"}, false, ActionDisallowed, reasonEveryPath, "*"},
		{"9: tunnel mode, some paths open", func(c *config.Config) { c.TLS.Mode = "tunnel" }, Request{Kind: KindConnect, Scheme: "https", Authority: "a.example:443", Target: "/"}, false, ActionAllowed, reasonSomePaths, ""},
		{"9: tunnel mode, usage refused everywhere", func(c *config.Config) { c.TLS.Mode = "tunnel" }, func() Request {
			r := Request{Kind: KindConnect, Scheme: "https", Authority: "usage.example:443", Target: "/"}
			r.Purposes = []string{"ai-train"}
			return r
		}(), false, ActionUsageRefused, "content-signal", "*"},
		{"9: tunnel mode, usage granted somewhere", func(c *config.Config) { c.TLS.Mode = "tunnel" }, func() Request {
			r := Request{Kind: KindConnect, Scheme: "https", Authority: "cu.example:443", Target: "/"}
			r.Purposes = []string{"ai-train"}
			return r
		}(), false, ActionAllowed, reasonSomePaths, ""},
		{"9: tunnel mode, one kind grants somewhere, the other refuses everywhere", func(c *config.Config) { c.TLS.Mode = "tunnel" }, func() Request {
			r := Request{Kind: KindConnect, Scheme: "https", Authority: "mixed.example:443", Target: "/"}
			r.Purposes = []string{"ai-train"}
			return r
		}(), false, ActionUsageRefused, "content-signal: ai-train=no", "*"},
		{"9: tunnel mode, unreachable", func(c *config.Config) { c.TLS.Mode = "tunnel" }, Request{Kind: KindConnect, Scheme: "https", Authority: "down.example:443", Target: "/"}, false, ActionUnreachable, reasonNoCopy, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			if tt.config != nil {
				tt.config(cfg)
			}
			p, err := Compile(cfg)
			if err != nil {
				t.Fatal(err)
			}
			w := tableEnv(t, p)
			var d Decision
			ctx := t.Context()
			for range 1 + btoi(tt.twice) {
				req := tt.req
				d = Decision{}
				p.Decide(ctx, w, &req, &d)
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c // the second Request's client has gone
			}
			if d.Action != tt.action || !strings.Contains(d.Reason, tt.reason) || d.Token != tt.token {
				t.Errorf("decide = %s (%q, token %q); want %s (%q, token %q)", d.Action, d.Reason, d.Token, tt.action, tt.reason, tt.token)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// BenchmarkDecide is the whole decision for a typical allowed Request
// (origin, agent from a User-Agent with a compatible; token, robots.txt
// from a cache answer, both readings of the path), beside the robots
// package's Group.Test of the same path, measured in the same run.
func BenchmarkDecide(b *testing.B) {
	p, err := Compile(config.Default())
	if err != nil {
		b.Fatal(err)
	}
	rules := robots.Parse([]byte(decideRobots), robots.WithNormalization())
	a := fetch.Answer{Entry: &fetch.Entry{Outcome: fetch.Fetched, Status: 200, Rules: rules}}
	w := &Env{Rules: func(context.Context, fetch.Origin) (fetch.Answer, error) { return a, nil }, Now: time.Now}
	const target = "/a/b/page.html?x=1"
	b.Run("decide", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req := Request{Kind: KindPlain, Scheme: "https", Authority: "www.example.com", Target: target,
				UserAgent: "Mozilla/5.0 (compatible; FooBot/1.0; +https://example.com/bot)"}
			var d Decision
			p.Decide(b.Context(), w, &req, &d)
		}
	})
	b.Run("group-test", func(b *testing.B) {
		b.ReportAllocs()
		g := rules.Group("FooBot")
		for b.Loop() {
			g.Test(target)
		}
	})
}
