package policy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/proxy/auth"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/pace"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// Kind says where a request came in, which decides the steps it takes.
type Kind uint8

// The kinds of request.
const (
	KindPlain   Kind = iota // a request to the proxy in absolute-form
	KindConnect             // a CONNECT
	KindInner               // a request inside a CONNECT's tunnel (MITM, or plain HTTP in either mode)
	KindCheck               // robotsgate check and /v1/decide: no connection, no pacing
)

// A Request is what a decision needs to know of one request, whatever its
// entry point: adapters build one, and the Policy decides it.
type Request struct {
	Kind                 Kind
	Method               string
	Content              bool   // it has content: Content-Length > 0 or any Transfer-Encoding
	ContentType          bool   // it names a Content-Type
	URILen               int    // the length of the request-target as received (absolute-form included)
	Scheme               string // "http" or "https"
	Authority            string // host[:port] the request names
	Target               string // raw request-target: path, params and query ("/" for a CONNECT)
	UserAgent            string
	Client               netip.Addr
	Credentials          string   // Proxy-Authorization as sent
	Tunnel               *Tunnel  // KindInner: the CONNECT it came through
	User                 string   // the authenticated proxy user, once known (KindCheck: given)
	Agents               []string // the tokens obeyed, when given (check -agent); nil: step 3 finds them
	Purposes             []string // X-Robots-Gate-Purpose's values (or check -purpose), unparsed
	OtherPurposeSpelling bool     // the header came spelt another way too (X_Robots_Gate_Purpose)
	NoProxy              bool     // decided by a command with no running proxy (check): a reason advises no reload or purge
}

// A Tunnel is what the requests inside a CONNECT's tunnel carry of it.
type Tunnel struct {
	Authority string       // the CONNECT target, host:port as sent
	Origin    fetch.Origin // of Authority, with the scheme spoken inside
	User      string       // the CONNECT's authenticated user
	Purposes  Purposes     // the purposes the CONNECT declared, which every request inside declares too
}

// An Env is what a decision looks at besides the policy. Each field the
// policy needs is an interface its owner satisfies; a nil field is a step
// not taken (as in check, which has no client).
type Env struct {
	Rules    RulesSource   // where robots.txt answers come from
	Private  PrivateLookup // nil: block_private is not applied
	Auth     Authenticator // nil: no proxy authentication
	Pacer    Pacer         // nil: no pacing
	Backoffs Backoffs      // nil: no origin back-off
	Fleet    FleetPacer    // nil: this instance paces alone
	Self     SelfCheck     // nil: robotsgate's own address is not known
	Files    UsageFiles    // nil: usage is read from robots.txt and responses only
	Now      func() time.Time
}

// RulesSource gives the robots.txt answer for an origin: fetch.Cache.Get,
// or a file given to check.
type RulesSource func(ctx context.Context, o fetch.Origin) (fetch.Answer, error)

// PrivateLookup reports whether a host (a name or an IP address) is, or
// resolves to, a private address, resolving a name within timeout
// (upstream.PrivateCache).
type PrivateLookup interface {
	Private(ctx context.Context, host string, timeout time.Duration) bool
}

// Authenticator checks Basic proxy credentials (auth.Authenticator): the
// user they authenticate, or false.
type Authenticator interface {
	Check(ctx context.Context, header string, client netip.Addr) (string, bool)
}

// Pacer holds a request for its turn on a host (pace.Pacer).
type Pacer interface {
	Wait(ctx context.Context, host string, gap time.Duration, lim pace.Limits) (time.Duration, error)
	// Reserve runs reserve (the fleet's reservation, no sooner than
	// local from now) for one request to host at a time, and records the
	// start it returns; it returns when the request may start.
	Reserve(ctx context.Context, host string, gap, maxDelay time.Duration, reserve func(local time.Duration) (time.Time, bool, error)) (time.Time, bool, error)
}

// Backoffs say until when a host is to be sent nothing, and why
// (pace.Backoffs); a zero time when it may be sent to now. Holding counts
// the requests waiting for it (+1, then -1).
type Backoffs interface {
	Hold(host string) (time.Time, string)
	Holding(host string, delta int)
	// Releasing reports whether host's hold ended so recently that what
	// it held is still being released gap apart.
	Releasing(host string, gap time.Duration) bool
}

// FleetPacer reserves request starts for a whole fleet of instances
// (cluster.Client.Reserve), no sooner than local from now: how long to
// wait, or false with the wait that would be needed past maxWait.
type FleetPacer interface {
	Reserve(ctx context.Context, host string, gap, maxWait, local time.Duration) (time.Duration, bool, error)
}

// SelfCheck reports whether an origin names robotsgate's own listener
// (upstream.Self).
type SelfCheck interface {
	IsOrigin(o fetch.Origin) bool
}

// Reasons for the steps before the rules.
const (
	reasonContent    = "bad request: %s with content, which that method gives no meaning (RFC 9110 section 9.3): an origin could read it as a request of its own"
	reasonLongTarget = "request-target longer than %d bytes"
	reasonAuth       = "proxy authentication required"
	// ReasonBadRequest is the reason of a request URL that cannot be
	// decided.
	ReasonBadRequest  = "bad request URL"
	reasonBadConnect  = "bad CONNECT target"
	reasonFragment    = "bad request URL: a request-target cannot hold a fragment (\"#\")"
	reasonNoPath      = "bad request URL: the request-target is not a path"
	reasonBadByte     = "bad request URL: the request-target holds %s, which a URI cannot (RFC 3986): percent-encode it"
	reasonBadPercent  = "bad request URL: the request-target holds a '%' not followed by two hex digits (RFC 3986): write a '%' as %25"
	reasonMisdirected = "request for %s inside a tunnel to %s"
	// ReasonPrivate is the reason of a refused private target.
	ReasonPrivate = "target resolves to a private address"
	// ReasonSelf is the reason of a refused request for robotsgate's own
	// address.
	ReasonSelf      = "target is robotsgate itself"
	reasonMITM      = "tunnel opened: every request inside is decided on its own"
	reasonSiteAllow = "site allow %q"
	reasonSiteDeny  = "site deny %q"
	reasonFetches   = "too many robots.txt fetches in flight (robots.max_fetches): retry"
	reasonGaveUp    = "gave up waiting for robots.txt"
	reasonLeftTurn  = "client left while waiting for its turn"
	reasonBackoff   = "paced: %s, and its host is held until then; it would wait %v, past max_wait"
)

// Decide decides r into d, in docs/decision.md's order ("How a request is decided"):
// proxy authentication, the request's origin (and, inside a tunnel, that
// it is the tunnel's), private targets, then agents, site rules and
// robots.txt (for a tunnel-mode CONNECT, step 9's whole-origin rule),
// report mode, and last the pacing of what goes through. A request that
// is not allowed leaves with the first step that refuses it.
func (p *Policy) Decide(ctx context.Context, w *Env, r *Request, d *Decision) {
	d.Style = p.blockStyle
	if !frame(r, d) || !p.authenticate(ctx, w, r, d) {
		return
	}
	// Step 3's rule, found once its user is known: its block style
	// answers from here on.
	var rule *agentRule
	if len(p.agentRules) > 0 {
		if rule = p.agentRule(r); rule != nil && rule.hasStyle {
			d.Style = rule.style
		}
	}
	if !p.locate(ctx, w, r, d) || !declare(r, d) {
		return
	}
	if r.Kind == KindConnect && p.tlsMode == TLSMITM {
		d.Action, d.Reason = ActionAllowed, reasonMITM
		return
	}
	p.judge(ctx, w, r, d, rule)
	if r.Kind != KindCheck {
		p.report(d)
	}
	if d.Action == ActionAllowed || d.Action == ActionWouldBlock {
		p.pace(ctx, w, d)
	}
}

// MaxTargetBytes bounds a request-target as received, absolute-form
// included: past it, 414 (docs/decision.md step 0). Deciding is bounded by the
// length of what it reads.
const MaxTargetBytes = 8 << 10

// frame is step 0, before anything else: a request-target longer than
// MaxTargetBytes is refused (414), and so is a request with content whose
// method gives content no meaning (RFC 9110 section 9.3: GET, HEAD, DELETE,
// TRACE, CONNECT, and OPTIONS without a Content-Type). An origin that
// ignores such content, as many do, would read it as the next request on
// the connection: a request nobody decided, whose answer would wait in the
// connection pool for another client (see forward, which never reuses a
// connection that carried content).
func frame(r *Request, d *Decision) bool {
	if r.Kind == KindCheck {
		return true
	}
	if r.URILen > MaxTargetBytes {
		d.Action, d.Reason, d.Status = ActionBadRequest, fmt.Sprintf(reasonLongTarget, MaxTargetBytes), http.StatusRequestURITooLong
		return false
	}
	if r.Content && ContentWithoutMeaning(r.Method, r.ContentType) {
		d.Action, d.Reason = ActionBadRequest, fmt.Sprintf(reasonContent, strings.ToUpper(r.Method))
		return false
	}
	return true
}

// ContentWithoutMeaning reports whether method gives a request's content
// no meaning (RFC 9110 section 9.3); OPTIONS does when it names a
// Content-Type (section 9.3.7).
// Methods are case-sensitive (RFC 9110 section 9.1), but some servers
// match them ignoring case and would read "Get" as GET: so does this.
func ContentWithoutMeaning(method string, contentType bool) bool {
	for _, m := range [...]string{http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodTrace, http.MethodConnect} {
		if strings.EqualFold(method, m) {
			return true
		}
	}
	return strings.EqualFold(method, http.MethodOptions) && !contentType
}

// authenticate checks a request's proxy credentials when [auth] has users;
// a request inside a tunnel carries its CONNECT's user.
func (p *Policy) authenticate(ctx context.Context, w *Env, r *Request, d *Decision) bool {
	switch {
	case r.Kind == KindInner:
		r.User = r.Tunnel.User
	case r.Kind == KindCheck || !p.HasUsers():
	default:
		user, ok := "", false
		if w.Auth != nil { // none: nothing can be checked, and nothing passes
			user, ok = w.Auth.Check(ctx, r.Credentials, r.Client)
		}
		if !ok {
			d.Action, d.Reason = ActionAuth, reasonAuth
			d.User = auth.BasicUser(r.Credentials) // the name tried, for the audit log
			return false
		}
		r.User = user
	}
	d.User = r.User
	return true
}

// locate finds the request's origin (step 1), refusing a malformed target,
// a request inside a tunnel for another origin than the tunnel's (421),
// and a private target (step 2).
func (p *Policy) locate(ctx context.Context, w *Env, r *Request, d *Decision) bool {
	bad := ReasonBadRequest
	if r.Kind == KindConnect {
		bad = reasonBadConnect
	}
	if !strings.HasPrefix(r.Target, "/") {
		d.Action, d.Reason = ActionBadRequest, reasonNoPath
		return false
	}
	if i := invalidTargetByte(r.Target); i >= 0 {
		d.Action, d.Reason = ActionBadRequest, fmt.Sprintf(reasonBadByte, byteName(r.Target[i]))
		switch r.Target[i] {
		case '#':
			d.Reason = reasonFragment
		case '%':
			d.Reason = reasonBadPercent
		}
		return false
	}
	o, err := fetch.OriginOf(r.Scheme, r.Authority)
	if err != nil {
		d.Action, d.Reason = ActionBadRequest, bad+": "+strings.TrimPrefix(err.Error(), fetch.ErrBadOrigin.Error()+": ")
		return false
	}
	if r.Kind == KindInner {
		if o != r.Tunnel.Origin {
			d.Action, d.Reason = ActionMisdirected, fmt.Sprintf(reasonMisdirected, r.Authority, r.Tunnel.Authority)
			return false
		}
	}
	if r.Kind == KindConnect && o.Port == 80 {
		o.Scheme = "http" // tunnel mode: the robots.txt of the plain-HTTP origin
	}
	d.Origin = o
	if r.Kind != KindConnect {
		d.Target = r.Target
	}
	if w.Self != nil && w.Self.IsOrigin(o) {
		d.Action, d.Reason = ActionPrivate, ReasonSelf
		return false
	}
	if p.private(ctx, w, o.Host) {
		d.Action, d.Reason = ActionPrivate, ReasonPrivate
		return false
	}
	return true
}

// declare reads the purposes a request declares in its header and, inside
// a tunnel, those its CONNECT declared; an unknown name is a bad request.
// (Step 3 adds those of its [[agents]] rule.)
func declare(r *Request, d *Decision) bool {
	ps, err := ParsePurposes(r.Purposes)
	if err != nil {
		d.Action, d.Reason = ActionBadRequest, fmt.Sprintf(reasonBadPurpose, err)
		return false
	}
	if r.Kind == KindInner {
		ps |= r.Tunnel.Purposes
	}
	d.Purposes = ps
	return true
}

// judge runs steps 3 to 7b: the agent and declared purposes, the
// /robots.txt exemption, site rules, the origin's robots.txt, and its usage
// statements.
func (p *Policy) judge(ctx context.Context, w *Env, r *Request, d *Decision, rule *agentRule) {
	if r.Agents != nil {
		d.Agents = Agents{list: r.Agents}
	} else {
		var ps Purposes
		d.Agents, ps = p.agentsOf(rule, r)
		d.Purposes |= ps
	}
	d.explain, d.noProxy = r.Kind == KindCheck, r.NoProxy
	if path, _, _ := strings.Cut(r.Target, "?"); path == "/robots.txt" && r.Kind != KindConnect {
		d.Action, d.Reason = ActionAllowed, reasonRobotsTxt
		return
	}
	if s := p.site(d.Origin.Host, d.Agents); s != nil {
		d.Site = s
		switch s.Policy {
		case SiteAllow:
			d.Action, d.Reason, d.noRobots = ActionAllowed, fmt.Sprintf(reasonSiteAllow, s.Reason), true
			return
		case SiteDeny:
			d.Action, d.Reason, d.noRobots = ActionDenied, fmt.Sprintf(reasonSiteDeny, s.Reason), true
			return
		}
	}
	a, err := w.Rules(ctx, d.Origin)
	switch {
	case errors.Is(err, fetch.ErrOverloaded):
		d.Action, d.Reason = ActionOverloaded, reasonFetches
	case stopped(ctx):
		d.Action, d.Reason = ActionShuttingDown, "shutting down while its robots.txt was being fetched"
	case err != nil && left(ctx):
		d.Action, d.Reason = ActionClientLeft, "client left while its robots.txt was being fetched"
	case err != nil:
		d.Action, d.Reason = ActionUnreachable, reasonGaveUp
	case r.Kind == KindConnect:
		decideWholeOrigin(ctx, d, a, w.Now(), p.sources, w.Files)
		p.judgeBeforeSend(ctx, w, d, false, true)
	default:
		decideAnswer(ctx, d, a, r.Target, w.Now(), p.sources, w.Files)
		d.judgeUsage()
		p.judgeBeforeSend(ctx, w, d, r.Kind == KindCheck, false)
	}
}

// ErrShuttingDown is the cause the server cancels every request's context
// with when its drain time runs out: a request then held (for its turn, an
// origin's back-off, a robots.txt fetch) is answered ActionShuttingDown,
// not left without an answer.
var ErrShuttingDown = errors.New("shutting down")

// stopped reports whether ctx ended because the proxy is shutting down.
func stopped(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrShuttingDown)
}

// left reports whether ctx ended because its client went away (net/http
// cancels a request's context when its connection closes or its stream
// is reset): not a shutdown, not a deadline of robotsgate's own.
func left(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) && !stopped(ctx)
}

// report applies report mode to d: a block by robots.txt (its rules or its
// usage statements) or a site rule, or for an unreachable robots.txt,
// becomes "would-block" and goes through.
func (p *Policy) report(d *Decision) {
	if p.mode != ModeReport {
		return
	}
	switch d.Action {
	case ActionDisallowed, ActionDenied, ActionUnreachable, ActionUsageRefused:
		d.Action = ActionWouldBlock
	}
}

// pace holds a request that goes through (step 8): first until the time
// its host's origin asked for with a 429 or 503 (origin back-off, pacing on
// or off), then until its turn when [politeness] is active. A back-off
// that began while it waited for its turn (this instance's or, in a
// fleet, another's) holds it again: nothing leaves for a host that asked
// for a pause, whether it was queued before or after the answer that
// began it. One that would wait longer than max_wait in all, or whose
// client gave up, becomes "paced".
func (p *Policy) pace(ctx context.Context, w *Env, d *Decision) {
	backoff := p.cfg.Politeness.HonourRetryAfter && w.Backoffs != nil
	for range maxHolds {
		if backoff && !p.holdForOrigin(ctx, w, d) {
			return
		}
		if !p.takeTurn(ctx, w, d, backoff) {
			return
		}
		if !backoff {
			return
		}
		if until, _ := w.Backoffs.Hold(d.Origin.Host); until.IsZero() {
			return
		}
	}
	d.Action, d.Reason = ActionPaced, fmt.Sprintf("paced: its host's back-off began again each of the %d times its turn came", maxHolds)
}

// maxHolds bounds the times a request goes back to wait for a back-off
// that began while it waited for its turn (each such wait counts toward
// max_wait too).
const maxHolds = 8

// takeTurn holds d until its turn when [politeness] is active (or it was
// held by a back-off): with the fleet's shared slots, or this instance's
// pacer. It reports whether d goes on; if not, d is "paced" or
// "shutting-down".
func (p *Policy) takeTurn(ctx context.Context, w *Env, d *Decision, backoff bool) bool {
	// Held by the origin's back-off, or sent while what it held is being
	// released: either way one at a time.
	held := d.Paced || backoff && w.Backoffs.Releasing(d.Origin.Host, BackoffRelease)
	if !p.pacing && !held || w.Pacer == nil {
		return true
	}
	gap := paceGap(&p.cfg, d)
	if gap == 0 && !held && !d.rules.HasCrawlDelay() {
		// Nothing to space: no interval is set and the origin's file has
		// no Crawl-delay for any token, so no request of this origin
		// waits for this one's start, which is not remembered (a broad
		// crawl of such origins holds no state per host, and a fleet
		// makes no Redis call for them).
		return true
	}
	if held {
		// The back-off has just ended for every request it held: they,
		// and those sent while they are released, leave one at a time,
		// never as a burst at a site that asked for a pause.
		gap = max(gap, BackoffRelease)
	}
	d.Gap = gap
	maxDelay := max(p.cfg.Politeness.MaxDelay, gap)
	if w.Fleet != nil {
		if done, ok := p.paceFleet(ctx, w, d, gap, maxDelay); done {
			return ok
		}
	}
	heldFor := d.Waited
	lim := pace.Limits{MaxWait: p.cfg.Politeness.MaxWait - heldFor, MaxDelay: maxDelay}
	waited, err := w.Pacer.Wait(ctx, d.Origin.Host, gap, lim)
	var pe *pace.WaitError
	switch {
	case err == nil:
		d.Paced, d.Waited = true, heldFor+waited
		return true
	case errors.As(err, &pe) && pe.Full:
		d.Action, d.Reason, d.Waited = ActionPaced, fmt.Sprintf("paced: pacing as many hosts as it remembers; room in %v", pe.Wait.Round(time.Millisecond)), pe.Wait
	case errors.As(err, &pe):
		d.Action, d.Reason, d.Waited = ActionPaced, fmt.Sprintf("paced: would wait %v for its turn (gap %v)", pe.Wait.Round(time.Millisecond), gap), pe.Wait
	case errors.Is(err, ErrShuttingDown):
		d.Action, d.Reason = ActionShuttingDown, "shutting down while it waited for its turn"
	default: // the client gave up waiting
		d.Action, d.Reason = ActionClientLeft, reasonLeftTurn
	}
	return false
}

// BackoffRelease is the least gap between the starts of the requests an
// origin's back-off held, once it ends: the pacing interval when it is
// longer.
const BackoffRelease = time.Second

// paceFleet paces d with the fleet's shared slots ([cluster]): every
// instance's requests to a host keep one gap between them. It reports
// whether it did, and if so whether d goes on; with Redis unavailable,
// the caller paces locally. A slot is never earlier than this instance's
// own pacer would give (what it started while Redis was away), and is
// recorded there: should Redis go away, the instance paces on from the
// starts it knows, never afresh.
func (p *Policy) paceFleet(ctx context.Context, w *Env, d *Decision, gap, maxDelay time.Duration) (done, ok bool) {
	maxWait := p.cfg.Politeness.MaxWait - d.Waited // less what a back-off held it
	var refused time.Duration
	at, ok, err := w.Pacer.Reserve(ctx, d.Origin.Host, gap, maxDelay, func(local time.Duration) (time.Time, bool, error) {
		wait, ok, err := w.Fleet.Reserve(ctx, d.Origin.Host, gap, maxWait, local)
		if err == nil && !ok {
			refused = wait
		}
		return w.Now().Add(wait), ok, err
	})
	switch {
	case err != nil && ctx.Err() == nil: // Redis: pace locally
		return false, false
	case err != nil:
		leftFleetTurn(ctx, d)
		return true, false
	case !ok:
		d.Action, d.Reason, d.Waited = ActionPaced, fmt.Sprintf("paced: would wait %v for its turn in the fleet (gap %v)", refused.Round(time.Millisecond), gap), refused
		return true, false
	}
	wait := at.Sub(w.Now())
	if wait <= 0 {
		d.Paced = true
		return true, true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		d.Paced, d.Waited = true, d.Waited+wait
		return true, true
	case <-ctx.Done():
		leftFleetTurn(ctx, d)
		return true, false
	}
}

// leftFleetTurn makes d "client-left", its client having left while it
// waited for its turn in the fleet, or "shutting-down".
func leftFleetTurn(ctx context.Context, d *Decision) {
	d.Action, d.Reason = ActionClientLeft, reasonLeftTurn
	if stopped(ctx) {
		d.Action, d.Reason = ActionShuttingDown, "shutting down while it waited for its turn in the fleet"
	}
}

// invalidTargetByte returns the index of the first byte of target that a
// URI cannot hold where it stands (RFC 3986), or -1: in the path anything
// but unreserved characters, sub-delims, ":", "@", "/", "[", "]" and "%"
// escapes; in
// the query, controls, spaces, bytes >= 0x80 and "#" (a fragment is never
// part of a request-target, RFC 9112). Servers read such bytes
// in ways of their own (Python splits its request line on "\x85" and
// "\xa0"; IIS reads "\" as "/"), so they are refused rather than sent.
func invalidTargetByte(target string) int {
	for i := 0; i < len(target); i++ {
		c := target[i]
		switch {
		case c <= ' ' || c >= 0x7F:
			return i
		case c == '?':
			for j := i + 1; j < len(target); j++ {
				if c := target[j]; c <= ' ' || c >= 0x7F || c == '#' {
					return j
				}
			}
			return -1
		case c == '%':
			if i+2 >= len(target) || !isHex(target[i+1]) || !isHex(target[i+2]) {
				return i
			}
		case !isPathByte(c):
			return i
		}
	}
	return -1
}

// isPathByte reports whether a URI's path may hold c as it is (RFC 3986
// section 3.3: unreserved, sub-delims, ":", "@" and "/"), or is "[" or "]",
// which RFC 3986 keeps for hosts but clients send in paths (Python's
// requests does) and servers read as any other byte.
func isPathByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("-._~!$&'()*+,;=:@/[]", c) >= 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// holdForOrigin holds d until its host's back-off ends, and reports
// whether it may go on; past max_wait d becomes "paced", with the
// origin's answer as the reason, and "client-left" if its client leaves.
func (p *Policy) holdForOrigin(ctx context.Context, w *Env, d *Decision) bool {
	until, why := w.Backoffs.Hold(d.Origin.Host)
	if until.IsZero() {
		return true
	}
	wait := until.Sub(w.Now())
	if wait > p.cfg.Politeness.MaxWait-d.Waited { // less what it waited before
		d.Action, d.Reason, d.Waited = ActionPaced, fmt.Sprintf(reasonBackoff, why, wait.Round(time.Millisecond)), wait
		return false
	}
	w.Backoffs.Holding(d.Origin.Host, 1)
	defer w.Backoffs.Holding(d.Origin.Host, -1)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		d.Paced, d.Waited = true, d.Waited+wait
		return true
	case <-ctx.Done():
		d.Action, d.Reason = ActionClientLeft, fmt.Sprintf("client left while the origin's back-off (%s) held it", why)
		if stopped(ctx) {
			d.Action, d.Reason = ActionShuttingDown, fmt.Sprintf("shutting down while the origin's back-off (%s) held it", why)
		}
		return false
	}
}

// paceGap returns a request's gap after the previous start to its origin
// (docs/decision.md step 8): its site's min_interval if set, else min_interval, or
// the largest Crawl-delay of its tokens' groups if larger (with
// crawl_delay on, and not for a site allow), at most max_delay; 0 when
// pacing is off.
func paceGap(cfg *config.Config, d *Decision) time.Duration {
	pc := cfg.Politeness
	base := pc.MinInterval
	if d.Site != nil && d.Site.MinInterval > 0 {
		base = d.Site.MinInterval
	}
	gap := base
	if pc.CrawlDelay && d.HasDelay && d.CrawlDelay > 0 && !(d.Site != nil && d.Site.Policy == SiteAllow) {
		gap = max(gap, time.Duration(d.CrawlDelay*float64(time.Second)))
	}
	return min(gap, pc.MaxDelay)
}

// pacingActive reports whether cfg paces any request.
func pacingActive(cfg *config.Config) bool {
	if cfg.Politeness.CrawlDelay || cfg.Politeness.MinInterval > 0 {
		return true
	}
	for _, s := range cfg.Sites {
		if s.MinInterval > 0 {
			return true
		}
	}
	return false
}

// byteName names b for a reason: a printable ASCII character quoted, any
// other byte by its value (0xC3, the first byte of a UTF-8 "é", is not
// the character U+00C3 that %q would show).
func byteName(b byte) string {
	if b > ' ' && b < 0x7f {
		return strconv.QuoteRune(rune(b))
	}
	if b == ' ' {
		return "a space"
	}
	return fmt.Sprintf("the byte 0x%02X", b)
}
