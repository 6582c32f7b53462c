// Package policy is robotsgate's one decision: a Config compiled into a
// Policy (Compile is the only way to one, and the only validator), and
// Policy.Decide, which every entry point calls (a plain request, a
// CONNECT, a request inside a tunnel, the check command and the decision
// API) with a Request value, in docs/decision.md's order (framing, auth, origin
// and tunnel, private targets, agents, sites, robots.txt, usage, report
// mode, pacing). The Decision it returns carries the evidence from which
// the response, the audit record and the metrics are all rendered.
// Deciding does no I/O of its own: what it needs (robots.txt answers,
// lookups, the pacer, credentials) comes through interfaces in Env.
// Compiling reads only the files a config names for checking (the fleet's
// secret file, upstream.ca), so that a bad one is reported with its key.
package policy

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/robots/lenient"
	"github.com/robotsgate/robotsgate/usage"
	"github.com/robotsgate/robotsgate/usage/source"
)

// An Action is what is done with a request: ActionAllowed (it goes to its
// origin), or the answer robotsgate makes itself, whose X-Robots-Gate
// value String gives.
type Action uint8

// The actions.
const (
	ActionAllowed Action = iota
	ActionDisallowed
	ActionDenied
	ActionPrivate
	ActionUnreachable
	ActionPaced
	ActionWouldBlock
	ActionUpstream
	ActionBadRequest
	ActionMisdirected
	ActionAuth
	ActionOverloaded
	ActionUsageRefused // the site refuses a purpose the request declares
	ActionShuttingDown // held (pacing, back-off, a robots.txt fetch) when the proxy's drain time ran out
	ActionPriceRefused // the site asked for a payment robotsgate does not make ([payments]): over max_price or the budget, or asked twice
	// ActionClientLeft: the client went away (closed its connection,
	// reset its stream) while the request was held or decided, or before
	// the origin answered. No answer was sent: not a refusal, and never
	// a robots.txt block.
	ActionClientLeft
	numActions
)

// NumActions is the number of actions, all of them below it: the length
// of an array indexed by Action.
const NumActions = int(numActions)

// actionNames are the actions' X-Robots-Gate values.
var actionNames = [numActions]string{
	ActionAllowed: "allowed", ActionDisallowed: "disallowed", ActionDenied: "denied", ActionPrivate: "private-address",
	ActionUnreachable: "unreachable", ActionPaced: "paced", ActionWouldBlock: "would-block", ActionUpstream: "upstream-error",
	ActionBadRequest: "bad-request", ActionMisdirected: "misdirected", ActionAuth: "auth-required", ActionOverloaded: "overloaded",
	ActionUsageRefused: "usage-refused", ActionShuttingDown: "shutting-down", ActionPriceRefused: "price-refused",
	ActionClientLeft: "client-left",
}

// String returns the action's X-Robots-Gate value ("allowed" for
// ActionAllowed): what the audit log, the metrics and check print.
func (a Action) String() string {
	if a < numActions {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Actions returns every action, in order.
func Actions() []Action {
	out := make([]Action, numActions)
	for i := range out {
		out[i] = Action(i)
	}
	return out
}

// ParseAction returns the action whose String is s.
func ParseAction(s string) (Action, bool) {
	for i, n := range actionNames {
		if n == s {
			return Action(i), true
		}
	}
	return 0, false
}

// MarshalText writes the action as String does.
func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText reads an action written by MarshalText.
func (a *Action) UnmarshalText(b []byte) error {
	x, ok := ParseAction(string(b))
	if !ok {
		return fmt.Errorf("%q is not an action", b)
	}
	*a = x
	return nil
}

// Reasons, as they appear in the audit log, the 403 body and check's output.
const (
	reasonDisallowed = "disallowed by robots.txt"
	reasonAllowed    = "allowed by robots.txt"
	reasonNoRule     = "no rule matches"
	reasonNoGroup    = "no group applies"
	reasonRobotsTxt  = "robots.txt itself is always allowed"
	reasonUnavail    = "robots.txt unavailable: no restrictions"
	reasonAuthDeny   = "robots.txt refused with %d: disallowing all (auth_errors = \"disallow\")"
	reasonNoCopy     = "robots.txt unreachable and no copy held: disallowing all"
	reasonLimit      = "robots.txt unreachable longer than unreachable_limit: no restrictions"
	reasonSomePaths  = "robots.txt allows some paths; tunnel mode cannot see which"
	reasonTLSVerify  = "robots.txt could not be fetched: %s; retrying will not help: add the site's CA to upstream.ca if you trust it and reload (SIGHUP) or restart robotsgate, which then fetches it at once; to retry now, POST /robots/purge?origin=%s"
	// reasonTLSVerifyNoProxy is reasonTLSVerify for a command that reads
	// the config itself (check): no running proxy to reload or purge.
	reasonTLSVerifyNoProxy = "robots.txt could not be fetched: %s; retrying will not help: add the site's CA to upstream.ca if you trust it, in the config given with -config"
	reasonEveryPath        = "robots.txt disallows every path"
	reasonAmbiguous        = "disallowed by robots.txt: the path is ambiguous: a lenient server would serve %s"
	reasonTooCostly        = "bad request: deciding this path under this robots.txt would take more than the work bound (robots.txt of %d bytes, a path of %d); refused rather than let through undecided"
	reasonLeft             = "client left while the request was being decided"
	reasonStopped          = "shutting down while the request was being decided"
	// reasonOutOfTime: the time bound it was decided under (the decision
	// API's call bound) ran out while it was being decided.
	reasonOutOfTime = "not decided: its time bound ran out while it was being decided; retry"
)

// DecideWork is the work bound of deciding one request's path, in the
// robots package's units (about a byte compared; see robots.Budget): some
// 5 ms of CPU on a 2-core 2020s server in the worst case constructed
// (BenchmarkDecideWorstCase), and about 4 times what the costliest real
// file of the corpus takes for an 8 KiB path of every byte (dreamstime.com,
// 0.9M). A decision that would take more is refused, never let through.
const DecideWork = 4_000_000

// Decision is the proxy's answer for one request: the robots.txt verdict
// and its evidence, plus the overrides that applied and the action taken.
type Decision struct {
	Action     Action         // ActionAllowed, or the answer robotsgate makes
	Reason     string         // why, in words
	Status     int            // the status of the proxy's own answer when not the action's usual one (414 for a bad request); 0: the usual
	Style      BlockStyle     // how a block is answered: the matching [[agents]] rule's block_style, else [responses]
	Gap        time.Duration  // the pacing interval applied (step 8): Crawl-delay or min_interval, at most max_delay (at least BackoffRelease after a back-off)
	Origin     fetch.Origin   // zero when the URL has none
	Target     string         // the request-target decided on, as sent; "" before step 1
	Agents     Agents         // the tokens obeyed
	Token      string         // the token whose verdict decided (the first blocking one)
	Verdict    robots.Verdict // the deciding verdict
	CrawlDelay float64        // largest Crawl-delay of the groups selected, seconds, when HasDelay
	HasDelay   bool           // some group selected has a Crawl-delay
	Fetch      FetchInfo      // how the rules were obtained; zero when no robots.txt was used
	// Unfetched names the file besides robots.txt (tdmrep.json, an RSL
	// licence) that left the decision ActionUnreachable; "" when it was
	// robots.txt.
	Unfetched string
	Site      *Site           // the [[sites]] rule that matched, if any
	User      string          // the authenticated proxy user; "" if none
	Paced     bool            // it went through the pacer, which held it for Waited
	Waited    time.Duration   // held for its turn; for ActionPaced, the wait that was refused
	Purposes  Purposes        // the purposes the request declares
	Usage     usage.Usage     // what robots.txt's usage statements say of the path, when worked out
	Refusal   Refusal         // for ActionUsageRefused (or a would-block for usage): what refused
	reserved  Refusal         // the site's tdmrep.json reserves the path for a declared purpose: refused unless the response says otherwise
	rules     *robots.Robots  // the rules decided on, when robots.txt decided; for check's statements
	entry     *fetch.Entry    // the robots.txt copy decided on (Copies); nil when none was
	files     []evidence.Copy // the usage files the sources read, in order (Copies)
	explain   bool            // work out Usage even when no purpose is declared (check)
	noProxy   bool            // Request.NoProxy: no running proxy to advise a reload or purge of
	noRobots  bool            // a site rule decided: no robots.txt applied (beside explain: one word for both)
	work      int64           // the matching work it took, in robots.Budget units
}

// Agents are the tokens a request obeys: the one its User-Agent header
// names (or default_agent), or those of an [[agents]] rule. A single token
// is held as a string, so that deciding allocates nothing for it and a
// Decision holds no pointer into itself.
type Agents struct {
	one  string   // the token, when list is nil
	list []string // several (an [[agents]] rule's, shared with the Policy; or check's)
}

// Len is the number of tokens; 0 for the zero Agents (no step 3 yet).
func (a Agents) Len() int {
	switch {
	case a.list != nil:
		return len(a.list)
	case a.one != "":
		return 1
	}
	return 0
}

// At returns token i.
func (a Agents) At(i int) string {
	if a.list != nil {
		return a.list[i]
	}
	return a.one
}

// Slice returns the tokens as a slice (a new one for a single token; nil
// for none).
func (a Agents) Slice() []string {
	switch {
	case a.list != nil:
		return a.list
	case a.one != "":
		return []string{a.one}
	}
	return nil
}

// FetchInfo says how the robots.txt behind a decision was obtained; its
// zero value, that none was (IsZero).
type FetchInfo struct {
	Outcome   fetch.Outcome // of the fetch whose rules apply; Unreachable when none do
	Status    int           // its HTTP status; 0 if none
	FetchedAt time.Time     // when those rules were fetched; zero if none
	Age       time.Duration // how old they are
	Stale     bool          // kept after a failed refresh
	Error     string        // the latest failure, if any
	RetryAt   time.Time     // the next fetch after a failure
}

// IsZero reports whether no robots.txt was used.
func (f *FetchInfo) IsZero() bool { return f.Outcome == "" }

// FetchInfoOf describes a cache answer at now.
func FetchInfoOf(a fetch.Answer, now time.Time) FetchInfo {
	f := FetchInfo{Error: a.LastError, RetryAt: a.RetryAt, Stale: a.Stale}
	if e := a.Entry; e != nil {
		f.Outcome, f.Status, f.FetchedAt, f.Age = e.Outcome, e.Status, e.FetchedAt, now.Sub(e.FetchedAt)
		if f.Error == "" {
			f.Error = e.Note
		}
	} else {
		f.Outcome, f.Status = fetch.Unreachable, a.LastStatus
	}
	return f
}

// decideAnswer decides target, a raw request target, under what the cache
// answered for the request's origin (docs/decision.md steps 6 and 7; the caller has
// taken care of step 4, /robots.txt), with the sources of srcs that judge
// beside the rules. Deciding stops when ctx ends.
func decideAnswer(ctx context.Context, d *Decision, a fetch.Answer, target string, now time.Time, srcs []source.Source, files source.Files) {
	d.Fetch = FetchInfoOf(a, now)
	d.noteRobots(a.Entry)
	switch e := a.Entry; {
	case a.Unreachable && a.LastKind == "tls-verify":
		// Retrying cannot help: the origin's certificate does not verify.
		d.Action, d.Reason = ActionUpstream, fmt.Sprintf(reasonTLSVerify, a.LastError, d.Origin)
		if d.noProxy {
			d.Reason = fmt.Sprintf(reasonTLSVerifyNoProxy, a.LastError)
		}
	case a.Unreachable:
		d.Action, d.Reason = ActionUnreachable, reasonNoCopy
		if a.LastError != "" {
			d.Reason += " (" + a.LastError + ")"
		}
	case a.LimitPassed:
		d.Action, d.Reason = ActionAllowed, reasonLimit
	case e.DisallowAll:
		d.Action, d.Reason = ActionDisallowed, fmt.Sprintf(reasonAuthDeny, e.Status)
	case e.Rules == nil:
		d.Action, d.Reason = ActionAllowed, reasonUnavail
	default:
		decideRules(ctx, d, e.Rules, target, srcs, files)
	}
}

// decideWholeOrigin decides a tunnel-mode CONNECT under what the cache
// answered (docs/decision.md step 9), where paths cannot be seen: refused when the
// rules shut out every path for some obeyed token (or robots.txt is
// unreachable with no copy, or refused under auth_errors = "disallow"),
// else opened. The sources of srcs that judge beside the rules say what
// they refuse on every path, for each token.
func decideWholeOrigin(ctx context.Context, d *Decision, a fetch.Answer, now time.Time, srcs []source.Source, files source.Files) {
	// As a request for "/", statements included: their work counts
	// against what is left for the files (judgeBeforeSend). Not cut short
	// by ctx, as the whole origin's decision never was.
	decideAnswer(context.Background(), d, a, "/", now, srcs, files)
	if d.Action != ActionDisallowed && d.Action != ActionAllowed || a.Entry == nil || a.Entry.Rules == nil {
		return
	}
	d.Action, d.Reason, d.Verdict, d.Token = ActionAllowed, reasonSomePaths, robots.Verdict{}, ""
	d.Usage = usage.Usage{}
	in := &source.Input{Origin: d.Origin, Agents: d.Agents.Slice(), Purposes: d.Purposes.List(), Everywhere: true, Rules: a.Entry.Rules, Files: files}
	for i := range d.Agents.Len() {
		tok := d.Agents.At(i)
		g := a.Entry.Rules.Group(tok)
		if g.DisallowsAll() {
			d.Action, d.Reason, d.Token, d.Verdict = ActionDisallowed, reasonEveryPath, tok, g.Test("/")
			return
		}
		in.Token = tok
		u, err := judgeWithRules(ctx, srcs, in)
		if _, _, refused := u.Refuses(in.Purposes); refused && d.Token == "" {
			d.Token = tok // the first token whose statements refuse
		}
		d.Usage.Combine(&u)
		if err != nil {
			d.unjudgedWithRules(ctx, err)
			break
		}
	}
	d.judgeUsage()
}

// RobotsURL returns the URL of the robots.txt that applied, "" when none
// did (no origin, or a site rule decided). It is made when asked for: most
// requests never print it.
func (d *Decision) RobotsURL() string {
	if d.noRobots || d.Origin.IsZero() {
		return ""
	}
	return d.Origin.RobotsURL()
}

// Copies returns the copies of sites' files that decided d, as its audit
// record names them: robots.txt's first (a stale copy with its own fetch
// time; an unavailable answer with no body), then each usage file the
// sources read (tdmrep.json, RSL licences), in the order they read them;
// nil when none did (no origin, a [[sites]] rule, robots.txt unreachable
// with no copy, a request refused before robots.txt).
func (d *Decision) Copies() []evidence.Copy {
	if d.entry == nil && len(d.files) == 0 {
		return nil
	}
	out := make([]evidence.Copy, 0, 1+len(d.files))
	if d.entry != nil {
		out = append(out, d.entry.Copy())
	}
	return append(out, d.files...)
}

// noteRobots notes e (nil: none, robots.txt unreachable with no copy) as
// the robots.txt copy d is decided under, for Copies; not a file check
// was given, which was never fetched (no fetch time).
func (d *Decision) noteRobots(e *fetch.Entry) {
	if e != nil && !e.FetchedAt.IsZero() {
		d.entry = e
	}
}

// Allowed reports whether the request goes to its origin.
func (d *Decision) Allowed() bool { return d.Action == ActionAllowed }

// Rules returns the rules robots.txt decided on, if it did: for the usage
// statements check shows.
func (d *Decision) Rules() *robots.Robots { return d.rules }

// Work returns the matching work the decision took, in robots.Budget
// units.
func (d *Decision) Work() int64 { return d.work }

// decideRules decides raw, a request target as sent, under rules for every
// agent token (docs/decision.md step 7): the request is blocked if any token's
// verdict blocks it, and the first blocking token is the evidence. A
// token's verdict is taken on the exact reading of the target
// (robots.Normalize, then Google's matching) and, when that allows it, on
// every path a lenient server could serve for it (lenient.Readings,
// none in the common case): one disallowed reading blocks the request as
// ambiguous, with that reading's verdict as evidence. The work of it all
// is bounded by DecideWork: past it, the request is refused. It stops
// when ctx ends (the client left), refused too. The sources of srcs that
// judge beside the rules (robots.txt's own usage statements) judge each
// token's group on the same readings under the same bound, when the
// request declares purposes or check explains it.
func decideRules(ctx context.Context, d *Decision, rules *robots.Robots, raw string, srcs []source.Source, files source.Files) {
	target := robots.Normalize(raw) // raw itself in the common case
	// The work bound, shared with the sources when they are asked: only
	// then on the heap (a source keeps it, in its Input), never for the
	// common request, which declares no purpose.
	var shared *robots.Budget
	asked := d.Purposes != 0 || d.explain
	if asked {
		shared = robots.NewBudget(DecideWork)
	}
	budget := robots.MakeBudget(DecideWork)
	w := &budget
	if shared != nil {
		w = shared
	}
	var readings []string
	for r := range lenient.ReadingsWithin(raw, w) {
		readings = append(readings, r)
	}
	noGroup, ambiguous := false, ""
	var in *source.Input // for the sources that judge beside the rules; nil: not asked for
	var read *fileCopies // what they read
	if asked {
		var noted source.Files
		read, noted = noting(files)
		in = &source.Input{Origin: d.Origin, Agents: d.Agents.Slice(), Purposes: d.Purposes.List(), Paths: append([]string{target}, readings...),
			Budget: shared, Rules: rules, Files: noted}
	}
	d.rules = rules
	left := false
	var unjudged error // a source that judges beside the rules could not be judged
	for i := range d.Agents.Len() {
		tok := d.Agents.At(i)
		g := rules.Group(tok)
		if in != nil {
			in.Token = tok
			u, err := judgeWithRules(ctx, srcs, in)
			d.Usage.Combine(&u)
			if err != nil {
				unjudged, in = err, nil // the sources are not run for the tokens after it
			}
		}
		if cd, ok := g.CrawlDelay(); ok && (!d.HasDelay || cd > d.CrawlDelay) {
			d.CrawlDelay, d.HasDelay = cd, true
		}
		var v robots.Verdict
		var amb string
		v, amb, left = testReadings(ctx, g, target, readings, w)
		if i == 0 || !v.Allowed && d.Verdict.Allowed {
			d.Verdict, d.Token, noGroup, ambiguous = v, tok, g.Empty(), amb
		}
		if w.Exhausted() || left {
			break
		}
	}
	d.work = DecideWork - w.Left()
	d.noteFiles(read)
	switch {
	case w.Exhausted():
		// A bound of step 0, reached here: the request is refused as a
		// bad request, not blocked by the site's rules (no rule decided).
		d.Verdict, d.Usage = robots.Verdict{}, usage.Usage{}
		d.Action, d.Reason = ActionBadRequest, fmt.Sprintf(reasonTooCostly, rules.Size(), len(raw))
		return
	case left:
		d.Verdict, d.Usage = robots.Verdict{}, usage.Usage{}
		d.cutShort(ctx)
		return
	}
	d.setVerdictAction(noGroup)
	if ambiguous != "" {
		d.Reason = fmt.Sprintf(reasonAmbiguous, ambiguous)
	}
	d.unjudgedWithRules(ctx, unjudged)
}

// cutShort makes d what a decision whose ctx ended while it was being
// decided is: shutting-down for a shutdown, client-left when its client
// went away, and otherwise (a deadline: the decision API's call bound)
// overloaded, not decided within its time, never told a client that is
// still there that it left.
func (d *Decision) cutShort(ctx context.Context) {
	switch {
	case stopped(ctx):
		d.Action, d.Reason = ActionShuttingDown, reasonStopped
	case left(ctx):
		d.Action, d.Reason = ActionClientLeft, reasonLeft
	default:
		d.Action, d.Reason = ActionOverloaded, reasonOutOfTime
	}
}

// testReadings tests target, then each of its lenient readings while the
// verdict allows, against g under w: the verdict, the reading that
// disallowed (if one did), and whether ctx ended first (for whatever
// reason: cutShort tells them apart).
func testReadings(ctx context.Context, g robots.Group, target string, readings []string, w *robots.Budget) (v robots.Verdict, amb string, left bool) {
	v, _ = g.TestWithin(target, w)
	for _, r := range readings {
		if !v.Allowed || w.Exhausted() {
			break
		}
		if left = ctx.Err() != nil; left {
			break
		}
		if lv, _ := g.TestWithin(r, w); !lv.Allowed {
			v, amb = lv, r
		}
	}
	return v, amb, left
}

// judgeWithRules is what the sources of srcs that judge beside the rules
// (phase usage.WithRules) say of in, combined: the most restrictive answer
// wins, as for allow and disallow rules. Running out of in.Budget is the
// rules' to report. err says a source could not be judged (its Judge's
// error, naming it): the Usage then holds what was judged before it, and
// the sources after it are not run.
func judgeWithRules(ctx context.Context, srcs []source.Source, in *source.Input) (all usage.Usage, err error) {
	for _, s := range srcs {
		if s.Phase() != usage.WithRules {
			continue
		}
		u, err := s.Judge(ctx, in)
		all.Combine(&u)
		if err != nil {
			return all, fmt.Errorf("judge %s: %w", s.Info().Name, err)
		}
	}
	return all, nil
}

// unjudgedWithRules refuses d for err, a source that judges beside the
// rules and could not be judged (judgeWithRules), as judgeBeforeSend
// refuses for one that judges before the request is sent: when the rules
// allow a request that declares purposes. A request the rules refuse
// stays refused by them; with no purposes declared there is nothing the
// source could refuse.
func (d *Decision) unjudgedWithRules(ctx context.Context, err error) {
	if err != nil && d.Action == ActionAllowed && d.Purposes != 0 {
		d.unjudged(ctx, err)
	}
}

// setVerdictAction sets the action and reason that d.Verdict calls for;
// noGroup says that no group applied to the deciding token.
func (d *Decision) setVerdictAction(noGroup bool) {
	switch {
	case !d.Verdict.Allowed:
		d.Action, d.Reason = ActionDisallowed, reasonDisallowed
	case d.Verdict.Line > 0:
		d.Action, d.Reason = ActionAllowed, reasonAllowed
	case noGroup:
		d.Action, d.Reason = ActionAllowed, reasonNoGroup
	default:
		d.Action, d.Reason = ActionAllowed, reasonNoRule
	}
}

// RuleHeader is X-Robots-Gate-Rule for d: the usage statement that
// refused it, or the robots.txt rule that decided; "" for neither.
func (d *Decision) RuleHeader() string {
	switch {
	case d.Refusal.Statement != "":
		return d.Refusal.HeaderValue()
	case d.Verdict.Line > 0:
		return ruleHeader(d.Verdict.Rule(), d.Verdict.Line)
	}
	return ""
}

// ruleHeader formats X-Robots-Gate-Rule: the directive, the pattern with
// bytes outside 0x21-0x7E percent-encoded, and the line.
func ruleHeader(rule string, line int) string {
	dir, pat, _ := strings.Cut(rule, ":")
	pat = strings.TrimPrefix(pat, " ")
	var b strings.Builder
	b.WriteString(strings.ToLower(dir))
	b.WriteString(": ")
	for i := 0; i < len(pat); i++ {
		if c := pat[i]; c < 0x21 || c > 0x7E {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	fmt.Fprintf(&b, " (line %d)", line)
	return b.String()
}
