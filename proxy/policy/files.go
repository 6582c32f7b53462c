package policy

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// UsageFiles gives the files besides robots.txt in which a site states how
// its content may be used, held with robots.txt's cache semantics
// (fetch.DocCache): its TDMRep file, /.well-known/tdmrep.json, and the RSL
// licences its robots.txt names on License lines.
type UsageFiles interface {
	TDMRep(ctx context.Context, o fetch.Origin) (fetch.Doc[*robots.TDMRep], error)
	RSL(ctx context.Context, url string) (fetch.Doc[*robots.RSL], error)
}

// MaxLicenses is how many of a robots.txt's License lines are read: a
// site names one, or a few.
const MaxLicenses = 4

const (
	reasonFileUnreachable = "%s unreachable and no copy held: refusing the purposes it could refuse (%s)"
	reasonFileWait        = "gave up waiting for %s"
	reasonFileStopped     = "shutting down while %s was being fetched"
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
	tooCostly := func(what string) {
		d.Action, d.Reason = ActionBadRequest, fmt.Sprintf("bad request: deciding this path under %s would take more than the work bound; refused rather than let through undecided", what)
	}
	var licenses []string
	if d.rules != nil { // no robots.txt (4xx, or unreachable past its limit): no License line
		licenses = d.rules.Licenses()
	}
	for i, lic := range licenses {
		var u robots.Usage
		switch lower := strings.ToLower(lic); {
		case !strings.HasPrefix(lower, "https://") && !strings.HasPrefix(lower, "http://"):
			continue // not an absolute URL: RSL names none other
		case i >= MaxLicenses:
			// More licences than robotsgate reads: terms unread.
			u = refuseAI("rsl " + lic + ": unread (more than " + fmt.Sprint(MaxLicenses) + " License lines)")
		default:
			what := "RSL licence " + lic
			doc, err := w.Files.RSL(ctx, lic)
			if !d.fileAnswered(ctx, err, what, doc.Outcome, doc.Err, doc.RetryAt) {
				return
			}
			if !doc.Good() {
				why := doc.Err
				if doc.ParseErr != nil {
					why = doc.ParseErr.Error()
				}
				if why == "" {
					why = fmt.Sprintf("status %d", doc.Status)
				}
				u = refuseAI("rsl " + lic + ": unreadable (" + why + ")")
				break
			}
			for _, path := range paths {
				v, ok := doc.Value.UsageWithin(d.Origin.Scheme, d.Origin.Authority(), path, false, &budget)
				if !ok {
					tooCostly("the RSL licence " + lic)
					return
				}
				u.Combine(&v)
			}
		}
		d.Usage.Combine(&u)
	}
	d.judgeUsage()
	if d.Action != ActionAllowed || !d.Purposes.Has(robots.AITrain) && !d.Purposes.Has(robots.AIInput) {
		return
	}
	const what = "tdmrep.json"
	doc, err := w.Files.TDMRep(ctx, d.Origin)
	if !d.fileAnswered(ctx, err, what, doc.Outcome, doc.Err, doc.RetryAt) || !doc.Good() {
		return
	}
	for _, path := range paths {
		u, ok := doc.Value.UsageWithin(path, &budget)
		if !ok {
			tooCostly("the site's tdmrep.json")
			return
		}
		if pur, v, refused := u.Refuses(d.Purposes.List()); refused {
			d.reserved = Refusal{Purpose: pur, Statement: v.Statement}
			break
		}
	}
	if d.reserved.Statement != "" && check {
		d.Refusal = d.reserved
		d.Action, d.Reason = ActionUsageRefused, fmt.Sprintf(reasonReserved, d.reserved.Purpose, d.Refusal.HeaderValue())
	}
}

// refuseAI is a Usage that refuses ai-train and ai-input by statement.
func refuseAI(statement string) robots.Usage {
	var u robots.Usage
	v := robots.UsageVerdict{State: robots.Refused, Statement: statement}
	u[robots.AITrain], u[robots.AIInput] = v, v
	return u
}

// fileAnswered reports whether a file besides robots.txt was answered for
// d: false, with d refused, when the wait for it ended (the client left, a
// shutdown) or it is unreachable with no copy held (503 unreachable, to be
// retried at retryAt).
func (d *Decision) fileAnswered(ctx context.Context, err error, what string, outcome fetch.Outcome, why string, retryAt time.Time) bool {
	switch {
	case err != nil && stopped(ctx):
		d.Action, d.Reason = ActionShuttingDown, fmt.Sprintf(reasonFileStopped, what)
	case err != nil:
		d.Action, d.Reason = ActionUnreachable, fmt.Sprintf(reasonFileWait, what)
	case outcome == fetch.Unreachable:
		d.Action, d.Reason = ActionUnreachable, fmt.Sprintf(reasonFileUnreachable, what, why)
		d.Fetch.RetryAt = retryAt
	default:
		return true
	}
	return false
}
