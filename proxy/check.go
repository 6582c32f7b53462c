package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/robots"
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
	// Robots is the robots.txt of every URL's origin. Nil means fetch each
	// origin's own through Cache.
	Robots []byte
	// Cache fetches and holds robots.txt files when Robots is nil. With
	// Exact, its files must be parsed without normalisation.
	Cache *robots.Cache
	// Now is the clock for ages; nil: time.Now.
	Now func() time.Time
	// Token is the token obeyed, taken verbatim; TokenSet says it was given.
	Token    string
	TokenSet bool
	// UserAgent is a User-Agent header to take the token from, as the proxy
	// does; used when TokenSet is false and UserAgent is not "".
	UserAgent string
	// Exact decides exactly as Google's reference OneAgentAllowedByRobots,
	// with none of the proxy's steps: no normalisation, no /robots.txt
	// exemption, no size cap.
	Exact bool
	// JSON prints JSON Lines instead of text.
	JSON bool
	// DefaultAgent is the token when none is given or found ("*" if empty).
	DefaultAgent string
	// MaxBytes is how much of Robots is read, except with Exact (0: all).
	MaxBytes int
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
}

// fetchJSON is check's "fetch" object.
type fetchJSON struct {
	Outcome   robots.Outcome `json:"outcome"`
	Status    int            `json:"status"`
	FetchedAt *time.Time     `json:"fetched_at"`
	AgeS      *float64       `json:"age_s"`
	Error     string         `json:"error"`
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
	agents := []string{c.token()}
	var rules *robots.Robots
	switch {
	case c.Robots == nil:
	case c.Exact:
		rules = robots.Parse(c.Robots)
	default:
		body := c.Robots
		if c.MaxBytes > 0 && len(body) > c.MaxBytes {
			body = body[:c.MaxBytes]
		}
		rules = robots.Parse(body, robots.WithNormalization())
	}
	var bad, blocked int
	for _, u := range urls {
		d, err := c.decide(ctx, rules, agents, u)
		if err != nil {
			bad++
			fmt.Fprintf(stderr, "robotsgate check: %v\n", err)
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

func (c *Checker) token() string {
	switch {
	case c.TokenSet:
		return c.Token
	case c.UserAgent != "":
		if t := robots.TokenFromUserAgent(c.UserAgent); t != "" {
			return t
		}
	}
	if c.DefaultAgent == "" {
		return "*"
	}
	return c.DefaultAgent
}

func (c *Checker) decide(ctx context.Context, rules *robots.Robots, agents []string, u string) (*Decision, error) {
	d := &Decision{Agents: agents, CrawlDelay: -1}
	origin, err := robots.ParseOrigin(u)
	if err == nil {
		d.Origin = origin
		d.RobotsURL = origin.RobotsURL()
	} else if rules == nil || !c.Exact {
		// Only the reference, given the file, takes any string as a URL.
		return nil, fmt.Errorf("%q: %w", u, err)
	}
	if rules == nil {
		a, err := c.Cache.Get(ctx, origin)
		if err != nil {
			return nil, err
		}
		if c.Exact {
			d.Fetch = fetchInfo(a, c.Now())
			if a.Entry != nil {
				rules = a.Entry.Rules // nil for an unavailable file: allows all
			}
			if a.Unreachable {
				d.Action, d.Reason = ActionUnreachable, reasonNoCopy
				return d, nil
			}
		} else {
			decideAnswer(d, a, robots.Normalize(requestTarget(u)), c.Now())
			return d, nil
		}
	}
	if c.Exact {
		// Any string is a URL to the reference: "example.com?a" is "/?a".
		g := rules.Group(agents[0])
		d.Token = agents[0]
		d.Verdict = rules.TestURL(agents[0], u)
		if cd, ok := g.CrawlDelay(); ok {
			d.CrawlDelay = cd
		}
		switch {
		case !d.Verdict.Allowed:
			d.Action, d.Reason = ActionDisallowed, reasonDisallowed
		case d.Verdict.Line > 0:
			d.Action, d.Reason = ActionAllowed, reasonAllowed
		default:
			d.Action, d.Reason = ActionAllowed, reasonNoRule
		}
		return d, nil
	}
	decideRules(d, rules, robots.Normalize(requestTarget(u)))
	return d, nil
}

// requestTarget returns the raw path and query of an absolute URL, as a
// client sends them in its request line: "/" when empty, no fragment.
func requestTarget(u string) string {
	_, rest, _ := strings.Cut(u, "://")
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		rest = rest[:i]
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

func (c *Checker) print(w io.Writer, u string, d *Decision) error {
	if c.JSON {
		l := checkLine{
			URL:       u,
			Agent:     d.Agents,
			Allowed:   d.Allowed(),
			Decision:  d.Action,
			Reason:    d.Reason,
			RobotsURL: d.RobotsURL,
			Rule:      d.Verdict.Rule,
			Line:      d.Verdict.Line,
		}
		if !d.Origin.IsZero() {
			o := d.Origin.String()
			l.Origin = &o
		}
		if d.CrawlDelay >= 0 {
			l.CrawlDelay = &d.CrawlDelay
		}
		if f := d.Fetch; f != nil {
			l.Fetch = &fetchJSON{Outcome: f.Outcome, Status: f.Status, Error: f.Error}
			if !f.FetchedAt.IsZero() {
				at, age := f.FetchedAt.UTC(), f.Age.Seconds()
				l.Fetch.FetchedAt, l.Fetch.AgeS = &at, &age
			}
		}
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	status := "allowed"
	switch {
	case d.Action == ActionUnreachable:
		status = "unreachable"
	case !d.Allowed():
		status = "disallowed"
	}
	why := []string{d.Reason}
	if d.Verdict.Line > 0 {
		why = append(why, fmt.Sprintf("rule %q line %d", d.Verdict.Rule, d.Verdict.Line))
	}
	if f := d.Fetch; f != nil {
		s := fmt.Sprintf("%s %s", d.RobotsURL, f.Outcome)
		if f.Status != 0 {
			s += " " + strconv.Itoa(f.Status)
		}
		if !f.FetchedAt.IsZero() {
			s += " age " + f.Age.Round(time.Second).String()
		}
		if f.Stale {
			s += " (stale)"
		}
		if f.Error != "" {
			s += " (" + f.Error + ")"
		}
		why = append(why, s)
	}
	if d.CrawlDelay >= 0 {
		why = append(why, "crawl-delay "+strconv.FormatFloat(d.CrawlDelay, 'f', -1, 64))
	}
	_, err := fmt.Fprintf(w, "%s\t%s\t%s\n", status, u, strings.Join(why, "; "))
	return err
}
