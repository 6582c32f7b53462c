package source

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage"
)

// A Source is one place sites state how their content may be used. Policy
// runs every source of List at its phase (docs/decision.md step 7b), and
// the verdicts it gives carry its ID. A new source is a file with a type
// that implements Source, and a line in List: its Info declares its ID,
// the name reports count its refusals under and the prefix its rules
// start with, by which the report (which reads List's Infos) tells its
// refusals apart. (The interface is here, not
// in package usage with the IDs and phases, because what a source judges,
// Input, holds robots' and fetch's types, and robots imports usage.)
type Source interface {
	// Info declares the source: its ID, which every verdict it gives
	// carries and no other source of List has; its name; and the prefix
	// of its rules (usage.SourceInfo), distinct from every other's.
	Info() usage.SourceInfo
	// Phase says when it judges a request.
	Phase() usage.Phase
	// Judge answers what the source says of in: for each purpose, the
	// verdict and its statement. An error says the source could not be
	// judged (a *FileError, a *CostError); the Usage then holds what was
	// judged before it.
	Judge(ctx context.Context, in *Input) (usage.Usage, error)
}

// A FileSource is a Source that reads a kind of file besides robots.txt,
// which fetch.Files holds for it (FileKinds).
type FileSource interface {
	Source
	// FileKind says how its files are fetched and parsed (with opts), and
	// which of them an origin leads to.
	FileKind(opts ...robots.Option) fetch.FileKind
}

// A Lifter is a Source of phase usage.Reserve: its refusal, held for the
// response, is lifted by a response that states a reservation of its own.
type Lifter interface {
	Source
	// Lifts reports whether the response in states its own reservation,
	// overriding the source's.
	Lifts(in *Input) bool
}

// List returns the sources, in the order policy runs them at each phase:
// robots.txt's own lines (with its rules), then the RSL licences it names
// (before the request is sent), the site's tdmrep.json (its reservation
// held for the response), and on the response its headers, then its HTML
// head's meta elements.
func List() []Source {
	return []Source{
		robotsTxtSource{},
		rslSource{},
		tdmrepSource{},
		headerSource{},
		metaSource{},
	}
}

// Infos returns what each source of list declares of itself (Source.Info),
// in order: what the report tells usage refusals' sources apart by
// (usage.RuleSource).
func Infos(list []Source) []usage.SourceInfo {
	out := make([]usage.SourceInfo, len(list))
	for i, s := range list {
		out[i] = s.Info()
	}
	return out
}

// FileKinds returns the kinds of file the sources of List read, parsed with
// opts (robots.WithNormalization, as robots.txt is), for fetch.Files.
func FileKinds(opts ...robots.Option) []fetch.FileKind {
	var out []fetch.FileKind
	for _, s := range List() {
		if f, ok := s.(FileSource); ok {
			out = append(out, f.FileKind(opts...))
		}
	}
	return out
}

// Files gives the files besides robots.txt that sources read (fetch.Files):
// of each kind, the file at a URL.
type Files interface {
	Get(ctx context.Context, kind, url string) (fetch.Doc[any], error)
}

// Input is what a source judges: the request as decided and, on the
// response, what the response says. Policy fills the request's fields in
// every phase (on the response: Paths the target as decided alone, no
// Budget, no Files, which only the sources judged before sending read);
// a source reads what it needs and ignores the rest.
type Input struct {
	Origin   fetch.Origin
	Agents   []string        // the tokens obeyed
	Purposes []usage.Purpose // the purposes the request declares, in order; none for robots.txt's evidence (check)
	// Everywhere: a tunnel-mode CONNECT, which sees neither paths nor
	// responses: what a source says of every path of the origin
	// (docs/decision.md step 9).
	Everywhere bool
	Paths      []string       // the target as decided (robots.Normalize) and each lenient reading of it
	Budget     *robots.Budget // bounds the matching work; nil: unbounded
	Rules      *robots.Robots // the origin's robots.txt rules; nil when none applied
	Files      Files          // the files besides robots.txt; nil: none are read

	// Phase usage.WithRules: the token whose group of Rules is judged; on
	// the response, the token that decided.
	Token string

	// Phase usage.OnResponse (and Lifter.Lifts):
	Header http.Header  // the response's header
	Image  bool         // the response is an image (Content-Type image/*)
	Head   *usage.Usage // what its HTML head's meta elements say; nil when not read
}

// A FileError says a file a source needs was not answered: the wait for it
// ended (Err, wrapping fetch.ErrOverloaded when too many files were being
// fetched), or it is unreachable with no copy held.
type FileError struct {
	What    string    // the file, as reasons name it: "tdmrep.json", "RSL licence https://…"
	Why     string    // why its fetch failed, when it is unreachable
	RetryAt time.Time // when it is unreachable: when it is fetched again
	Err     error     // the wait's error; nil when the fetch answered unreachable
}

// Error says which file was not answered, and why.
func (e *FileError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("fetch %s: %v", e.What, e.Err)
	}
	return fmt.Sprintf("fetch %s: unreachable: %s", e.What, e.Why)
}

// Unwrap returns the wait's error.
func (e *FileError) Unwrap() error { return e.Err }

// unanswered returns the FileError of what's answer doc (and the wait's
// err), or nil when it was answered.
func unanswered(what string, doc fetch.Doc[any], err error) *FileError {
	switch {
	case err != nil:
		return &FileError{What: what, Err: err}
	case doc.Outcome == fetch.Unreachable:
		return &FileError{What: what, Why: doc.Err, RetryAt: doc.RetryAt}
	}
	return nil
}

// A CostError says judging the request under What (a file) would take
// more than the work bound (Input.Budget).
type CostError struct {
	What string // "the site's tdmrep.json", "the RSL licence https://…"
}

// Error names the file.
func (e *CostError) Error() string {
	return "judge under " + e.What + ": more than the work bound"
}
