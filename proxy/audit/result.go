package audit

import (
	"slices"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage"
	"github.com/robotsgate/robotsgate/usage/source"
)

// Result is one URL's decision as check -json prints it and POST
// /v1/decide answers it (docs/decision.md, "Checking URLs: robotsgate check").
type Result struct {
	URL        string        `json:"url"`
	Origin     *string       `json:"origin"` // null when the URL has none
	Agent      []string      `json:"agent"`
	Allowed    bool          `json:"allowed"`
	Decision   policy.Action `json:"decision"`
	Reason     string        `json:"reason"`
	RobotsURL  string        `json:"robots_url"`
	Rule       string        `json:"rule"`
	Line       int           `json:"line"`
	Fetch      *Fetch        `json:"fetch"` // null when no robots.txt was fetched
	CrawlDelay *float64      `json:"crawl_delay"`
	Purpose    []string      `json:"purpose"`
	Usage      *Usage        `json:"usage"` // null when no robots.txt rules decided
	// Copies are the copies of the site's files that decided, as the
	// audit log names them (Record.Copies); [] when none did.
	Copies []Copy `json:"copies"`
	// Unseen is what the decision did not judge and can still refuse the
	// URL's purposes (UnseenOf); null when nothing can.
	Unseen *Unseen `json:"unseen"`
}

// Unseen is a Result's "unseen": what a decision made without fetching
// the page (check, POST /v1/decide) did not judge of an allowed URL that
// declares purposes, and can still refuse them: the usage sources that
// judge the response (its headers, its HTML meta), and, when the site's
// usage files were not read (check -robots), the sources that read them.
type Unseen struct {
	Purposes []string `json:"purposes"`
	Sources  []string `json:"sources"` // as the report names them (usage.SourceInfo.Name), in the order the proxy judges them
}

// Fetch is a Result's "fetch": how the robots.txt decided on was got.
type Fetch struct {
	Outcome   fetch.Outcome `json:"outcome"`
	Status    int           `json:"status"`
	FetchedAt *time.Time    `json:"fetched_at"`
	AgeS      *float64      `json:"age_s"`
	Error     string        `json:"error"`
}

// Usage is a Result's "usage": what robots.txt's usage statements say of
// the URL for each purpose, and the statements that apply to the tokens
// obeyed.
type Usage struct {
	Purposes   map[string]UsageVerdict `json:"purposes"`
	Statements []Statement             `json:"statements"`
}

// UsageVerdict is what the usage statements say of one purpose.
type UsageVerdict struct {
	State     string `json:"state"` // allowed, refused or unstated
	Statement string `json:"statement"`
	Line      int    `json:"line"`
}

// Statement is one usage statement of a robots.txt, as check and GET
// /robots show it.
type Statement struct {
	Field string            `json:"field"`
	Path  string            `json:"path"`
	Value string            `json:"value"`
	Line  int               `json:"line"`
	Prefs map[string]string `json:"prefs"` // purpose → allowed or refused, for those it states
	Use   string            `json:"use,omitempty"`
}

// ResultOf renders the decision of url, made without fetching the page.
// filesRead: the site's usage files (RSL licences, tdmrep.json) were read
// for it, as they are unless check is given a robots.txt (-robots).
func ResultOf(url string, d *policy.Decision, filesRead bool) Result {
	r := Result{
		URL:       url,
		Agent:     d.Agents.Slice(),
		Allowed:   d.Allowed(),
		Decision:  d.Action,
		Reason:    d.Reason,
		RobotsURL: d.RobotsURL(),
		Purpose:   d.Purposes.Names(),
		Usage:     usageOf(d),
		Copies:    CopiesOf(d.Copies()),
		Unseen:    UnseenOf(d, filesRead),
	}
	r.Rule, r.Line = RuleOf(d)
	if r.Agent == nil {
		r.Agent = []string{}
	}
	if !d.Origin.IsZero() {
		o := d.Origin.String()
		r.Origin = &o
	}
	if d.HasDelay {
		r.CrawlDelay = &d.CrawlDelay
	}
	if f := &d.Fetch; !f.IsZero() {
		r.Fetch = &Fetch{Outcome: f.Outcome, Status: f.Status, Error: f.Error}
		if !f.FetchedAt.IsZero() {
			at, age := f.FetchedAt.UTC(), f.Age.Seconds()
			r.Fetch.FetchedAt, r.Fetch.AgeS = &at, &age
		}
	}
	return r
}

// UnseenOf returns what a decision made without fetching the page did
// not judge of d and can still refuse its declared purposes: nil unless d
// is allowed, declares purposes, and its response would be judged (not a
// [[sites]] allow, which skips the site's statements, nor /robots.txt
// itself). filesRead: the site's usage files were read.
func UnseenOf(d *policy.Decision, filesRead bool) *Unseen {
	if d.Action != policy.ActionAllowed || d.Purposes == 0 || d.Site != nil && d.Site.Policy == policy.SiteAllow {
		return nil
	}
	if path, _, _ := strings.Cut(d.Target, "?"); path == "/robots.txt" {
		return nil
	}
	u := &Unseen{Purposes: d.Purposes.Names()}
	for _, s := range source.List() {
		switch s.Phase() {
		case usage.OnResponse:
			u.Sources = append(u.Sources, s.Info().Name)
		case usage.BeforeSend, usage.Reserve:
			if !filesRead {
				u.Sources = append(u.Sources, s.Info().Name)
			}
		}
	}
	return u
}

// usageOf renders what robots.txt's usage statements say for d, or nil
// when no robots.txt rules decided it.
func usageOf(d *policy.Decision) *Usage {
	rules := d.Rules()
	if rules == nil {
		return nil
	}
	u := &Usage{Purposes: map[string]UsageVerdict{}, Statements: []Statement{}}
	for p, v := range d.Usage {
		u.Purposes[usage.Purpose(p).String()] = UsageVerdict{State: v.State.String(), Statement: v.Statement, Line: v.Line}
	}
	seen := map[int]bool{}
	for i := range d.Agents.Len() {
		for _, s := range rules.Group(d.Agents.At(i)).Statements() {
			if seen[s.Line] {
				continue
			}
			seen[s.Line] = true
			u.Statements = append(u.Statements, StatementOf(&s))
		}
	}
	slices.SortFunc(u.Statements, func(a, b Statement) int { return a.Line - b.Line })
	return u
}

// StatementOf renders one usage statement.
func StatementOf(s *robots.Statement) Statement {
	prefs := map[string]string{}
	for p, st := range s.State {
		if st != usage.Unstated {
			prefs[usage.Purpose(p).String()] = st.String()
		}
	}
	return Statement{Field: s.Field, Path: s.Path, Value: s.Value, Line: s.Line, Prefs: prefs, Use: s.Use}
}
