package policy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage"
	"github.com/robotsgate/robotsgate/usage/source"
)

// UsageFiles gives the files besides robots.txt in which a site states how
// its content may be used, held with robots.txt's cache semantics
// (fetch.Files): of each kind a usage source reads (source.FileKinds),
// the file at a URL.
type UsageFiles interface {
	Get(ctx context.Context, kind, url string) (fetch.Doc[any], error)
}

// MaxLicenses is how many of a robots.txt's License lines are read: a
// site names one, or a few.
const MaxLicenses = 4

const (
	reasonFileUnreachable = "%s unreachable and no copy held: refusing the purposes it could refuse (%s)"
	reasonFileWait        = "gave up waiting for %s"
	reasonFileStopped     = "shutting down while %s was being fetched"
	reasonFileFetches     = "too many usage files being fetched to fetch %s: retry"
	reasonReserved        = "usage refused: the site reserves %s: %s; a response of its own saying tdm-reservation: 0 would lift it"
)

// judgeFiles is step 7b for the files besides robots.txt, for a request
// its robots.txt allows that declares purposes: the RSL licences robots.txt
// names, which refuse before the request leaves, as robots.txt's own
// statements do; and, for ai-train or ai-input, the TDMRep file, whose
// reservation of the path is kept in d for the response, whose own
// tdm-reservation overrides it (JudgeResponse). A file unreachable with no
// copy held refuses the request for now (503 unreachable); a licence that
// cannot be read refuses ai-train and ai-input (RSL asks crawlers to
// comply with its terms before they use the content, which no one can do
// with terms unread); a TDMRep file that cannot be read reserves nothing,
// as the protocol reads an error. check, which sees no response, reports
// such a reservation as a refusal.
func (p *Policy) judgeFiles(ctx context.Context, w *Env, d *Decision, check bool) {
	if d.Action != ActionAllowed || d.Purposes == 0 || w.Files == nil {
		return
	}
	// The path as decided, and every path a lenient server could serve
	// for it, as robots.txt's own statements are read; under what is left
	// of the request's work bound.
	budget := robots.MakeBudget(max(DecideWork-d.work, 0))
	paths := []string{robots.Normalize(d.Target)}
	for r := range robots.LenientReadingsWithin(d.Target, &budget) {
		paths = append(paths, r)
	}
	ok := d.judgeLicenses(ctx, w, &budget, func(l *source.RSL) (usage.Usage, bool) {
		var u usage.Usage
		for _, path := range paths {
			v, ok := l.UsageWithin(d.Origin.Scheme, d.Origin.Authority(), path, false, &budget)
			if !ok {
				return u, false
			}
			u.Combine(&v)
		}
		return u, true
	})
	if !ok || !d.needsTDMRep() {
		return
	}
	tdm, cut, ok := d.tdmrep(ctx, w)
	if !ok {
		return
	}
	if pur, v, refused := cut.Refuses(d.Purposes.List()); refused {
		d.reserved = refusalOf(pur, v)
	}
	for _, path := range paths {
		if d.reserved.Statement != "" {
			break
		}
		u, ok := tdm.UsageWithin(path, &budget)
		if !ok {
			d.tooCostly("the site's tdmrep.json")
			return
		}
		if pur, v, refused := u.Refuses(d.Purposes.List()); refused {
			d.reserved = refusalOf(pur, v)
			break
		}
	}
	if d.reserved.Statement != "" && check {
		d.Refusal = d.reserved
		d.Action, d.Reason = ActionUsageRefused, fmt.Sprintf(reasonReserved, d.reserved.Purpose, d.Refusal.HeaderValue())
		// What check shows of the purpose says what refused it, whatever
		// another source granted (a refusal wins).
		d.Usage[d.reserved.Purpose] = usage.Verdict{State: usage.Refused, Statement: d.reserved.Statement, Source: d.reserved.Source}
	}
}

// judgeFilesEverywhere is judgeFiles for a tunnel-mode CONNECT (step 9),
// which sees neither paths nor responses: it is refused when a licence
// robots.txt names, or the TDMRep file, refuses a declared purpose on
// every path of the origin. A whole-site reservation in tdmrep.json
// refuses outright: the response that could lift it is never seen.
func (p *Policy) judgeFilesEverywhere(ctx context.Context, w *Env, d *Decision) {
	if d.Action != ActionAllowed || d.Purposes == 0 || w.Files == nil {
		return
	}
	budget := robots.MakeBudget(max(DecideWork-d.work, 0))
	ok := d.judgeLicenses(ctx, w, &budget, func(l *source.RSL) (usage.Usage, bool) {
		return l.UsageEverywhere(d.Origin.Scheme, d.Origin.Authority(), false, &budget)
	})
	if !ok || !d.needsTDMRep() {
		return
	}
	if tdm, cut, ok := d.tdmrep(ctx, w); ok {
		u := tdm.UsageEverywhere()
		u.Combine(&cut)
		d.Usage.Combine(&u)
		d.judgeUsage()
	}
}

// judgeLicenses reads the RSL licences d's robots.txt names with judge
// (what a licence says of the request, within budget), refusing d as
// judgeUsage does. It reports whether d is still allowed.
func (d *Decision) judgeLicenses(ctx context.Context, w *Env, budget *robots.Budget, judge func(*source.RSL) (usage.Usage, bool)) bool {
	var licenses []string
	if d.rules != nil { // no robots.txt (4xx, or unreachable past its limit): no License line
		licenses = d.rules.Licenses()
	}
	for i, lic := range licenses {
		var u usage.Usage
		url, readable := d.Origin.LicenseURL(lic)
		switch {
		case !readable:
			// A licence robotsgate cannot fetch (RSL names http and
			// https URLs): terms unread.
			u = usage.RefuseAI("rsl "+lic+": unread (not an http or https URL)", usage.FromRSL)
		case i >= MaxLicenses:
			// More licences than robotsgate reads: terms unread.
			u = usage.RefuseAI("rsl "+lic+": unread (more than "+fmt.Sprint(MaxLicenses)+" License lines)", usage.FromRSL)
		default:
			lic = url
			what := "RSL licence " + lic
			doc, err := w.Files.Get(ctx, source.KindRSL, lic)
			if !d.fileAnswered(ctx, err, what, doc.Outcome, doc.Err, doc.RetryAt) {
				return false
			}
			if !doc.Good() {
				why := doc.Err
				if doc.ParseErr != nil {
					why = doc.ParseErr.Error()
				}
				if why == "" {
					why = fmt.Sprintf("status %d", doc.Status)
				}
				u = usage.RefuseAI("rsl "+lic+": unreadable ("+why+")", usage.FromRSL)
				break
			}
			var ok bool
			if u, ok = judge(doc.Value.(*source.RSL)); !ok {
				d.tooCostly("the RSL licence " + lic)
				return false
			}
		}
		d.Usage.Combine(&u)
	}
	d.judgeUsage()
	return d.Action == ActionAllowed
}

// needsTDMRep reports whether d declares a purpose a TDMRep file can
// refuse: ai-train or ai-input.
func (d *Decision) needsTDMRep() bool {
	return d.Purposes.Has(usage.AITrain) || d.Purposes.Has(usage.AIInput)
}

// tdmrep returns d's origin's TDMRep file, if it holds one that parsed
// (ok); d is refused when the file is unreachable with no copy held, or
// the wait for it ended. A file that does not parse because robotsgate cut
// it at robots.max_bytes is no protocol error of the site's but a
// statement robotsgate could not read: cut then reserves every path, for
// ai-train and ai-input.
func (d *Decision) tdmrep(ctx context.Context, w *Env) (tdm *source.TDMRep, cut usage.Usage, ok bool) {
	const what = "tdmrep.json"
	doc, err := w.Files.Get(ctx, source.KindTDMRep, source.TDMRepURL(d.Origin))
	switch {
	case !d.fileAnswered(ctx, err, what, doc.Outcome, doc.Err, doc.RetryAt):
		return nil, cut, false
	case doc.Outcome == fetch.Fetched && doc.ParseErr != nil && doc.Truncated:
		return nil, usage.RefuseAI("tdmrep.json: unreadable (longer than robots.max_bytes)", usage.FromTDMRep), true
	case !doc.Good():
		return nil, cut, false
	}
	return doc.Value.(*source.TDMRep), cut, true
}

// tooCostly refuses d: deciding it under what (a file) would take more
// than the work bound.
func (d *Decision) tooCostly(what string) {
	d.Action, d.Reason = ActionBadRequest, fmt.Sprintf("bad request: deciding this path under %s would take more than the work bound; refused rather than let through undecided", what)
}

// fileAnswered reports whether a file besides robots.txt was answered for
// d: false, with d refused, when the wait for it ended (the client left, a
// shutdown), too many such files were being fetched (503 overloaded), or
// it is unreachable with no copy held (503 unreachable, to be retried at
// retryAt).
func (d *Decision) fileAnswered(ctx context.Context, err error, what string, outcome fetch.Outcome, why string, retryAt time.Time) bool {
	switch {
	case err != nil && stopped(ctx):
		d.Action, d.Reason = ActionShuttingDown, fmt.Sprintf(reasonFileStopped, what)
	case errors.Is(err, fetch.ErrOverloaded):
		d.Action, d.Reason = ActionOverloaded, fmt.Sprintf(reasonFileFetches, what)
	case err != nil:
		d.Action, d.Reason, d.Unfetched = ActionUnreachable, fmt.Sprintf(reasonFileWait, what), what
	case outcome == fetch.Unreachable:
		d.Action, d.Reason, d.Unfetched = ActionUnreachable, fmt.Sprintf(reasonFileUnreachable, what, why), what
		d.Fetch.RetryAt = retryAt
	default:
		return true
	}
	return false
}
