package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/robots/lenient"
	"github.com/robotsgate/robotsgate/usage"
	"github.com/robotsgate/robotsgate/usage/source"
)

// UsageFiles gives the files besides robots.txt in which a site states how
// its content may be used, held with robots.txt's cache semantics
// (fetch.Files): of each kind a usage source reads (source.FileKinds),
// the file at a URL.
type UsageFiles = source.Files

const (
	reasonFileUnreachable = "%s unreachable and no copy held: refusing the purposes it could refuse (%s)"
	reasonFileWait        = "gave up waiting for %s"
	reasonFileStopped     = "shutting down while %s was being fetched"
	reasonFileFetches     = "too many usage files being fetched to fetch %s: retry"
	reasonReserved        = "usage refused: the site reserves %s: %s; a response of its own saying tdm-reservation: 0 would lift it"
)

// judgeBeforeSend is step 7b for the sources that judge before the request
// is sent, besides robots.txt's own statements (decideRules), for a
// request its robots.txt allows that declares purposes: in the order of
// the list, each source of phase usage.BeforeSend (the RSL licences
// robots.txt names) refuses as robots.txt's statements do, and each of
// phase usage.Reserve (tdmrep.json) reserves the path for the response,
// whose own statement may lift it (JudgeResponse). A file unreachable
// with no copy held refuses the request for now (503 unreachable). check,
// which sees no response, reports a reservation as a refusal; everywhere
// (a tunnel-mode CONNECT, step 9, which sees neither paths nor
// responses), a source refuses what it refuses on every path of the
// origin, a reservation included.
func (p *Policy) judgeBeforeSend(ctx context.Context, w *Env, d *Decision, check, everywhere bool) {
	if d.Action != ActionAllowed || d.Purposes == 0 {
		return
	}
	// The path as decided, and every path a lenient server could serve
	// for it, as robots.txt's own statements are read; under what is left
	// of the request's work bound.
	budget := robots.MakeBudget(max(DecideWork-d.work, 0))
	read, noted := noting(w.Files)
	defer d.noteFiles(read)
	in := source.Input{Origin: d.Origin, Agents: d.Agents.Slice(), Purposes: d.Purposes.List(), Everywhere: everywhere,
		Budget: &budget, Rules: d.rules, Files: noted}
	if !everywhere {
		in.Paths = []string{robots.Normalize(d.Target)}
		for r := range lenient.ReadingsWithin(d.Target, &budget) {
			in.Paths = append(in.Paths, r)
		}
	}
	for _, s := range p.sources {
		ph := s.Phase()
		if ph != usage.BeforeSend && ph != usage.Reserve {
			continue
		}
		u, err := s.Judge(ctx, &in)
		if ph == usage.Reserve && !everywhere {
			if err == nil {
				d.reserve(&u, check)
			}
		} else {
			d.Usage.Combine(&u)
		}
		if err != nil {
			d.unjudged(ctx, err)
			return
		}
		d.judgeUsage()
		if d.Action != ActionAllowed {
			return
		}
	}
}

// reserve holds the reservation u makes of a declared purpose for the
// response, unless one is held already; check, which sees no response,
// refuses on it.
func (d *Decision) reserve(u *usage.Usage, check bool) {
	pur, v, refused := u.Refuses(d.Purposes.List())
	if !refused || d.reserved.Statement != "" {
		return
	}
	d.reserved = refusalOf(pur, v)
	if check {
		d.Refusal = d.reserved
		d.Action, d.Reason = ActionUsageRefused, fmt.Sprintf(reasonReserved, d.reserved.Purpose, d.Refusal.HeaderValue())
		// What check shows of the purpose says what refused it, whatever
		// another source granted (a refusal wins).
		d.Usage[d.reserved.Purpose] = usage.Verdict{State: usage.Refused, Statement: d.reserved.Statement, Source: d.reserved.Source}
	}
}

// unjudged refuses d for err, a source that could not be judged: a file
// it needs was not answered (fileAnswered), or judging it would take more
// than the work bound.
func (d *Decision) unjudged(ctx context.Context, err error) {
	var fe *source.FileError
	var ce *source.CostError
	switch {
	case errors.As(err, &ce):
		d.tooCostly(ce.What)
	case errors.As(err, &fe):
		d.fileAnswered(ctx, fe)
	default:
		d.Action, d.Reason = ActionBadRequest, "bad request: "+err.Error()
	}
}

// tooCostly refuses d: deciding it under what (a file) would take more
// than the work bound.
func (d *Decision) tooCostly(what string) {
	d.Action, d.Reason = ActionBadRequest, fmt.Sprintf("bad request: deciding this path under %s would take more than the work bound; refused rather than let through undecided", what)
}

// fileAnswered refuses d for fe, a file besides robots.txt that was not
// answered: the wait for it ended (the client left: client-left; a
// shutdown), too many
// such files were being fetched (503 overloaded), or it is unreachable
// with no copy held (503 unreachable, to be retried at fe.RetryAt); a
// kind of file not held (fetch.ErrUnknownKind) is unreachable too.
func (d *Decision) fileAnswered(ctx context.Context, fe *source.FileError) {
	switch err := fe.Err; {
	case err != nil && stopped(ctx):
		d.Action, d.Reason = ActionShuttingDown, fmt.Sprintf(reasonFileStopped, fe.What)
	case err != nil && left(ctx):
		d.Action, d.Reason = ActionClientLeft, fmt.Sprintf("client left while %s was being fetched", fe.What)
	case errors.Is(err, fetch.ErrOverloaded):
		d.Action, d.Reason = ActionOverloaded, fmt.Sprintf(reasonFileFetches, fe.What)
	case errors.Is(err, fetch.ErrUnknownKind):
		// A source asking for a kind of file no one holds: refused as an
		// unreachable file is, with the error as why, never let through.
		d.Action, d.Reason, d.Unfetched = ActionUnreachable, fmt.Sprintf(reasonFileUnreachable, fe.What, err), fe.What
	case err != nil:
		d.Action, d.Reason, d.Unfetched = ActionUnreachable, fmt.Sprintf(reasonFileWait, fe.What), fe.What
	default:
		d.Action, d.Reason, d.Unfetched = ActionUnreachable, fmt.Sprintf(reasonFileUnreachable, fe.What, fe.Why), fe.What
		d.Fetch.RetryAt = fe.RetryAt
	}
}

// fileCopies is the Files a decision's sources read through, for one
// phase: it notes the copy of each file they are answered with, for the
// decision's Copies.
type fileCopies struct {
	files  source.Files
	copies []evidence.Copy
}

// noting returns files wrapped in a fileCopies, twice (as itself and as
// the Files to give the sources); nil and a nil Files when files is nil,
// which the sources take as none. It allocates, so it is called only where
// the sources are asked: never for a request that declares no purpose.
func noting(files source.Files) (*fileCopies, source.Files) {
	if files == nil {
		return nil, nil
	}
	f := &fileCopies{files: files}
	return f, f
}

// Get gets the file (source.Files), noting its copy when it has one.
func (f *fileCopies) Get(ctx context.Context, kind, url string) (fetch.Doc[any], error) {
	doc, err := f.files.Get(ctx, kind, url)
	if c, ok := doc.Copy(); ok && err == nil && !slices.Contains(f.copies, c) {
		f.copies = append(f.copies, c)
	}
	return doc, err
}

// noteFiles adds the copies f noted (nil: none) to d's, each once.
func (d *Decision) noteFiles(f *fileCopies) {
	if f == nil {
		return
	}
	for _, c := range f.copies {
		if !slices.Contains(d.files, c) {
			d.files = append(d.files, c)
		}
	}
}
