package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// ErrNotAllowed is returned by [Checker.Run] when every URL was decided but
// some were not allowed: the check command's exit status 1.
var ErrNotAllowed = errors.New("not allowed")

// ErrCheckInput wraps the errors of [Checker.Run] that concern its input
// (a bad URL, an unreadable robots.txt): the check command's exit status 2.
var ErrCheckInput = errors.New("check")

// Checker decides URLs as the proxy would and prints one line for each: the
// "robotsgate check" command.
type Checker struct {
	// Config supplies default_agent, [[agents]], [[sites]] and the [robots]
	// keys; nil: the built-in defaults. [[agents]] rules keyed on client or
	// user never match, and block_private is not applied: check has no
	// client.
	Config *Config
	// Robots is the robots.txt of every URL's origin. Nil means fetch each
	// origin's own through Cache.
	Robots []byte
	// Cache fetches and holds robots.txt files when Robots is nil (see
	// CheckCache). With Exact, its files must be parsed without normalisation.
	Cache *fetch.Cache
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
	// JSON prints JSON Lines instead of text.
	JSON bool
	// Purposes are the purposes declared for every URL, each a
	// comma-separated list of names ("ai-train, search"); not with Exact.
	Purposes []string
}

// exactMaxBytes bounds a live fetch for check -exact, which has no size cap
// of its own: enough for any real robots.txt, not enough to hurt.
const exactMaxBytes = 32 << 20

// CheckCache returns the robots.txt fetcher and cache check uses without
// -robots: the proxy's, configured by cfg, except that block_private is not
// applied and, with exact, files are neither normalised nor cut at
// max_bytes.
func CheckCache(cfg *Config, version string, exact bool) (*fetch.Cache, error) {
	c := *cfg
	c.Upstream.BlockPrivate = false
	if exact {
		c.Robots.MaxBytes = exactMaxBytes
	}
	p, err := Compile(&c)
	if err != nil {
		return nil, err
	}
	tr, err := newTransport(p, net.DefaultResolver.LookupNetIP, nil, nil)
	if err != nil {
		return nil, err
	}
	var parse []robots.Option
	if !exact {
		parse = append(parse, robots.WithNormalization())
	}
	return newRobotsCache(p, tr, version, time.Now, parse, nil, nil, nil)
}

// checkLine is one JSON Lines record of check's output.
type checkLine struct {
	URL        string     `json:"url"`
	Origin     *string    `json:"origin"`
	Agent      []string   `json:"agent"`
	Allowed    bool       `json:"allowed"`
	Decision   string     `json:"decision"`
	Reason     string     `json:"reason"`
	RobotsURL  string     `json:"robots_url"`
	Rule       string     `json:"rule"`
	Line       int        `json:"line"`
	Fetch      *fetchJSON `json:"fetch"`
	CrawlDelay *float64   `json:"crawl_delay"`
	Purpose    []string   `json:"purpose"`
	Usage      *usageJSON `json:"usage"`
}

// usageJSON is check's "usage" object: what robots.txt's usage statements
// say of the URL for each purpose, and the statements that apply to the
// tokens obeyed.
type usageJSON struct {
	Purposes   map[string]usageVerdictJSON `json:"purposes"`
	Statements []statementJSON             `json:"statements"`
}

type usageVerdictJSON struct {
	State     string `json:"state"` // allowed, refused or unstated
	Statement string `json:"statement"`
	Line      int    `json:"line"`
}

type statementJSON struct {
	Field string            `json:"field"`
	Path  string            `json:"path"`
	Value string            `json:"value"`
	Line  int               `json:"line"`
	Prefs map[string]string `json:"prefs"` // purpose → allowed or refused, for those it states
	Use   string            `json:"use,omitempty"`
}

// fetchJSON is check's "fetch" object.
type fetchJSON struct {
	Outcome   fetch.Outcome `json:"outcome"`
	Status    int           `json:"status"`
	FetchedAt *time.Time    `json:"fetched_at"`
	AgeS      *float64      `json:"age_s"`
	Error     string        `json:"error"`
}

// Run decides every URL and prints the answers to stdout, errors to stderr.
// It returns an error wrapping ErrCheckInput if any URL could not be
// decided (the others are still printed), else ErrNotAllowed if any URL is
// not allowed, else nil.
func (c *Checker) Run(ctx context.Context, urls []string, stdout, stderr io.Writer) error {
	if len(urls) == 0 {
		return fmt.Errorf("%w: no URL given", ErrCheckInput)
	}
	if c.Robots == nil && c.Cache == nil {
		return fmt.Errorf("%w: no robots.txt: give -robots FILE or a cache", ErrCheckInput)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.productToken(stderr)
	if _, err := parsePurposes(c.Purposes); err != nil {
		return fmt.Errorf("%w: -purpose: %v", ErrCheckInput, err)
	}
	if c.Exact && len(c.Purposes) > 0 {
		return fmt.Errorf("%w: -purpose cannot go with -exact, which decides as Google's reference, where usage statements do not exist", ErrCheckInput)
	}
	cfg := c.Config
	if cfg == nil {
		cfg = Default()
	}
	p, err := Compile(cfg)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCheckInput, err)
	}
	w := &world{rules: c.rulesFor(cfg), now: c.Now} // no private lookups: check has no client
	if c.Robots == nil {
		w.rules = prefetch(ctx, c.Cache, urls)
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
		if err := c.print(stdout, u, d); err != nil {
			return fmt.Errorf("%w: write output: %v", ErrCheckInput, err)
		}
	}
	switch {
	case bad > 0:
		return fmt.Errorf("%w: %d of %d URLs could not be decided", ErrCheckInput, bad, len(urls))
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

// errNotLookedUp stands for an answer prefetch has not got yet; it is
// never seen once prefetch returns.
var errNotLookedUp = errors.New("robots.txt not looked up yet")

// prefetch gets the robots.txt of every distinct origin among urls from
// cache, 16 at a time (and no more than the cache's own max_fetches), so
// that unreachable origins do not add up their timeouts; and returns the
// answers, for deciding each URL on the answer got here rather than a
// second lookup (which, for an origin whose fetch failed or found no slot,
// would fetch again, one at a time).
func prefetch(ctx context.Context, cache *fetch.Cache, urls []string) rulesSource {
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
func (c *Checker) rulesFor(cfg *Config) rulesSource {
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

func (c *Checker) decide(ctx context.Context, p *Policy, w *world, u string) (*Decision, error) {
	req := &request{kind: kindCheck, userAgent: c.UserAgent, purposes: c.Purposes}
	if c.TokenSet {
		req.agents = []string{c.Token}
	} else if c.UserAgent == "" {
		req.agents = []string{p.cfg.DefaultAgent}
	}
	if c.Exact {
		origin, err := fetch.ParseOrigin(u)
		return c.decideExact(ctx, p, w.rules, req, origin, err, u)
	}
	if err := urlRequest(u, req); err != nil {
		return nil, err
	}
	d := &Decision{}
	p.decide(ctx, w, req, d)
	if c.Robots != nil {
		d.Fetch = FetchInfo{} // the file was given, not fetched
	}
	return d, nil
}

// urlRequest fills req's scheme, authority and target from an absolute
// URL, as check and /v1/decide take URLs.
func urlRequest(u string, req *request) error {
	origin, err := fetch.ParseOrigin(u)
	if err != nil {
		return fmt.Errorf("%q: %w", u, err)
	}
	// A URL's fragment is the client's own: it is never sent.
	noFragment, _, _ := strings.Cut(u, "#")
	req.scheme, req.authority, req.target = origin.Scheme, origin.HostPort(), requestTarget(noFragment)
	return nil
}

// decideExact answers as the reference's OneAgentAllowedByRobots: any
// string is a URL to it ("example.com?a" is "/?a") when the file is given.
func (c *Checker) decideExact(ctx context.Context, p *Policy, rulesFor rulesSource, req *request, origin fetch.Origin, originErr error, u string) (*Decision, error) {
	d := &Decision{Agents: Agents{list: req.agents}}
	if req.agents == nil {
		d.Agents, _ = p.agents(req) // purposes are a proxy step: -exact has none
	}
	if originErr == nil {
		d.Origin = origin
	} else if c.Robots == nil {
		return nil, fmt.Errorf("%q: %w", u, originErr)
	}
	a, err := rulesFor(ctx, origin)
	if err != nil {
		return nil, err
	}
	if c.Robots == nil {
		d.Fetch = fetchInfo(a, c.Now())
	}
	if a.Unreachable {
		d.Action, d.Reason = ActionUnreachable, reasonNoCopy
		return d, nil
	}
	var rules *robots.Robots // nil: no file, which allows everything
	if a.Entry != nil {
		rules = a.Entry.Rules
	}
	d.Token = d.Agents.At(0)
	d.Verdict = rules.TestURL(d.Token, u)
	d.CrawlDelay, d.HasDelay = rules.Group(d.Token).CrawlDelay()
	d.setVerdictAction(false)
	return d, nil
}

func (c *Checker) print(w io.Writer, u string, d *Decision) error {
	if c.JSON {
		return printJSON(w, u, d)
	}
	return printText(w, u, d)
}

// printJSON prints one JSON Lines record of check's output.
func printJSON(w io.Writer, u string, d *Decision) error {
	b, err := json.Marshal(checkLineOf(u, d))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// checkLineOf renders a decision as check -json's object, which
// /v1/decide's results are too.
func checkLineOf(u string, d *Decision) checkLine {
	l := checkLine{
		URL:       u,
		Agent:     d.Agents.Slice(),
		Allowed:   d.Allowed(),
		Decision:  d.Action,
		Reason:    d.Reason,
		RobotsURL: d.RobotsURL(),
		Rule:      d.Verdict.Rule(),
		Line:      d.Verdict.Line,
		Purpose:   d.Purposes.Names(),
		Usage:     usageOf(d),
	}
	if l.Agent == nil {
		l.Agent = []string{}
	}
	if !d.Origin.IsZero() {
		o := d.Origin.String()
		l.Origin = &o
	}
	if d.HasDelay {
		l.CrawlDelay = &d.CrawlDelay
	}
	if d.Refusal.Statement != "" {
		l.Rule, l.Line = d.Refusal.Rule(), d.Refusal.Line
	}
	if f := &d.Fetch; !f.IsZero() {
		l.Fetch = &fetchJSON{Outcome: f.Outcome, Status: f.Status, Error: f.Error}
		if !f.FetchedAt.IsZero() {
			at, age := f.FetchedAt.UTC(), f.Age.Seconds()
			l.Fetch.FetchedAt, l.Fetch.AgeS = &at, &age
		}
	}
	return l
}

// printText prints one line of check's text output: the status, the URL
// and why, tab-separated.
func printText(w io.Writer, u string, d *Decision) error {
	status := "allowed"
	switch {
	case d.Action == ActionUnreachable, d.Action == ActionUpstream:
		status = "unreachable"
	case d.Action == ActionUsageRefused:
		status = ActionUsageRefused
	case !d.Allowed():
		status = "disallowed"
	}
	why := []string{d.Reason}
	switch {
	case d.Refusal.Statement != "":
		why = append(why, fmt.Sprintf("rule %q line %d", d.Refusal.Rule(), d.Refusal.Line))
	case d.Verdict.Line > 0:
		why = append(why, fmt.Sprintf("rule %q line %d", d.Verdict.Rule(), d.Verdict.Line))
	}
	if f := &d.Fetch; !f.IsZero() {
		s := fmt.Sprintf("%s %s", d.RobotsURL(), f.Outcome)
		if f.Status != 0 {
			s += " " + strconv.Itoa(f.Status)
		}
		if !f.FetchedAt.IsZero() {
			s += " age " + f.Age.Round(time.Second).String()
		}
		if f.Stale {
			s += " (stale)"
		}
		if f.Error != "" && !strings.Contains(d.Reason, f.Error) {
			s += " (" + f.Error + ")"
		}
		why = append(why, s)
	}
	if d.HasDelay {
		why = append(why, "crawl-delay "+strconv.FormatFloat(d.CrawlDelay, 'f', -1, 64))
	}
	var stated []string
	for p, v := range d.Usage {
		if v.State != robots.Unstated {
			stated = append(stated, fmt.Sprintf("%s %s by %q line %d", robots.Purpose(p), v.State, v.Statement, v.Line))
		}
	}
	if len(stated) > 0 {
		why = append(why, "usage: "+strings.Join(stated, ", "))
	}
	_, err := fmt.Fprintf(w, "%s\t%s\t%s\n", status, u, strings.Join(why, "; "))
	return err
}

// usageOf renders what robots.txt's usage statements say for d, or nil
// when no robots.txt rules decided it.
func usageOf(d *Decision) *usageJSON {
	if d.rules == nil {
		return nil
	}
	u := &usageJSON{Purposes: map[string]usageVerdictJSON{}, Statements: []statementJSON{}}
	for p, v := range d.Usage {
		u.Purposes[robots.Purpose(p).String()] = usageVerdictJSON{State: v.State.String(), Statement: v.Statement, Line: v.Line}
	}
	seen := map[int]bool{}
	for i := range d.Agents.Len() {
		for _, s := range d.rules.Group(d.Agents.At(i)).Statements() {
			if seen[s.Line] {
				continue
			}
			seen[s.Line] = true
			u.Statements = append(u.Statements, statementJSONOf(&s))
		}
	}
	slices.SortFunc(u.Statements, func(a, b statementJSON) int { return a.Line - b.Line })
	return u
}

// statementJSONOf renders one usage statement for check and /robots.
func statementJSONOf(s *robots.Statement) statementJSON {
	prefs := map[string]string{}
	for p, st := range s.State {
		if st != robots.Unstated {
			prefs[robots.Purpose(p).String()] = st.String()
		}
	}
	return statementJSON{Field: s.Field, Path: s.Path, Value: s.Value, Line: s.Line, Prefs: prefs, Use: s.Use}
}
