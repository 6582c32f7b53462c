package policy

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// SetURL fills r's scheme, authority and target from an absolute URL, as
// the check command and the decision API take URLs. A URL's fragment is
// its client's own: it is never sent, so it is not decided on.
func (r *Request) SetURL(u string) error {
	origin, err := fetch.ParseOrigin(u)
	if err != nil {
		return fmt.Errorf("%q: %w", u, err)
	}
	noFragment, _, _ := strings.Cut(u, "#")
	r.Scheme, r.Authority, r.Target = origin.Scheme, origin.HostPort(), RequestTarget(noFragment)
	return nil
}

// DecideExact decides u as Google's reference OneAgentAllowedByRobots
// does (check -exact), with none of the proxy's steps: no normalisation,
// no /robots.txt exemption, no [[sites]], no framing or size bounds, no
// purposes. The tokens are r.Agents, or step 3's from r.UserAgent. rules
// gives the robots.txt; with given (a file given rather than fetched),
// any string is a URL, as the reference takes it ("example.com?a" is
// "/?a"), and d.Fetch and d.Copies stay empty.
func (p *Policy) DecideExact(ctx context.Context, rules RulesSource, now func() time.Time, r *Request, u string, given bool, d *Decision) error {
	d.Agents = Agents{list: r.Agents}
	if r.Agents == nil {
		d.Agents, _ = p.Agents(r)
	}
	origin, err := fetch.ParseOrigin(u)
	switch {
	case err == nil:
		d.Origin = origin
	case !given:
		return fmt.Errorf("%q: %w", u, err)
	}
	a, err := rules(ctx, origin)
	if err != nil {
		return err
	}
	if !given {
		d.Fetch = FetchInfoOf(a, now())
		d.noteRobots(a.Entry)
	}
	if a.Unreachable {
		d.Action, d.Reason = ActionUnreachable, reasonNoCopy
		return nil
	}
	var rs *robots.Robots // nil: no file, which allows everything
	if a.Entry != nil {
		rs = a.Entry.Rules
	}
	d.Token = d.Agents.At(0)
	d.Verdict = rs.TestURL(d.Token, u)
	d.CrawlDelay, d.HasDelay = rs.Group(d.Token).CrawlDelay()
	d.setVerdictAction(false)
	return nil
}
