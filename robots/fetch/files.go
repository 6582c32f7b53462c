package fetch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/robotsgate/robotsgate/evidence"
)

// ErrUnknownKind says Files holds no kind of file by the name asked for:
// a caller asking under a name no FileKind it was given declares.
var ErrUnknownKind = errors.New("no such kind of file held")

// A FileKind is one kind of file besides robots.txt in which sites state
// how their content may be used (TDMRep's tdmrep.json, RSL licences): how
// it is fetched and parsed, and which of its URLs an origin leads to. The
// usage sources that read files declare theirs (usage/source.FileKinds);
// Files holds each kind in a DocCache of its own.
type FileKind struct {
	Name   string // names the kind, for Get and Peek: "tdmrep.json", "rsl"
	Accept string // the Accept header sent; "": "*/*"
	// Parse reads a body fetched from url. Required.
	Parse func(url string, body []byte) (any, error)
	// URLs returns the URLs of files of this kind that origin o leads to,
	// licenses being the URLs its robots.txt names on License lines: what
	// Forget and Purge drop for o. Nil: none.
	URLs func(o Origin, licenses []string) []string
}

// Files holds, for many sites, the files besides robots.txt in which they
// state how their content may be used, one DocCache for each kind.
type Files struct {
	kinds  []FileKind
	caches map[string]*DocCache[any]
}

// FilesOptions configure Files. Each zero value means the default named
// in DocCacheOptions.
type FilesOptions struct {
	Fetcher    *Fetcher   // required
	Kinds      []FileKind // the kinds held
	TTL        time.Duration
	RetryAfter time.Duration
	MaxEntries int   // of each kind
	MaxBytes   int64 // of each kind
	MaxFetches int   // in flight at once, of each kind
	Now        func() time.Time
	// OnFetch, if set, is called with each fetch's URL and answer: its
	// outcome, and what was wrong with it ("" when nothing was).
	OnFetch func(url string, outcome Outcome, problem string)
	// Store, if set, shares the files with the fleet (DocCacheOptions).
	Store DocStore
	// Keeper, if set, is handed every body of a file read, fetched or
	// taken from Store (DocCacheOptions.Keeper).
	Keeper evidence.Keeper
}

// NewFiles returns empty Files with o.
func NewFiles(o FilesOptions) *Files {
	f := &Files{kinds: o.Kinds, caches: map[string]*DocCache[any]{}}
	for _, k := range o.Kinds {
		f.caches[k.Name] = NewDocCache(DocCacheOptions[any]{
			Fetcher: o.Fetcher, Accept: k.Accept, Parse: k.Parse,
			TTL: o.TTL, RetryAfter: o.RetryAfter, MaxEntries: o.MaxEntries, MaxBytes: o.MaxBytes, MaxFetches: o.MaxFetches, Now: o.Now,
			OnFetch: onFetch[any](o.OnFetch), Store: o.Store, Keeper: o.Keeper,
		})
	}
	return f
}

// onFetch adapts a Files' OnFetch to a DocCache's.
func onFetch[T any](f func(string, Outcome, string)) func(Doc[T]) {
	if f == nil {
		return nil
	}
	return func(d Doc[T]) {
		problem := d.Err
		if d.ParseErr != nil {
			problem = d.ParseErr.Error()
		}
		f(d.URL, d.Outcome, problem)
	}
}

// Get returns the answer for the file of kind at url (DocCache.Get). A
// kind Files does not hold is an error wrapping ErrUnknownKind, naming
// it: answered as a file not found, a mistyped kind would never refuse.
func (f *Files) Get(ctx context.Context, kind, url string) (Doc[any], error) {
	c := f.caches[kind]
	if c == nil {
		return Doc[any]{URL: url}, fmt.Errorf("get %s file %s: %w", kind, url, ErrUnknownKind)
	}
	return c.Get(ctx, url)
}

// Peek returns what is held of the file of kind at url, without fetching
// it.
func (f *Files) Peek(kind, url string) (Doc[any], bool) {
	if c := f.caches[kind]; c != nil {
		return c.Peek(url)
	}
	return Doc[any]{}, false
}

// Forget drops what is held of o's files, licenses being the URLs its
// robots.txt names on License lines, for a purge another process made
// (and made in the Store already): the next request that needs them
// fetches them.
func (f *Files) Forget(o Origin, licenses ...string) {
	f.each(o, licenses, (*DocCache[any]).Forget)
}

// Purge forgets o's files (as Forget), here and in the Store: the fleet's
// next request that needs them fetches them.
func (f *Files) Purge(o Origin, licenses ...string) {
	f.each(o, licenses, (*DocCache[any]).Purge)
}

// each calls do with each kind's cache and each URL of that kind o leads
// to.
func (f *Files) each(o Origin, licenses []string, do func(*DocCache[any], string)) {
	for _, k := range f.kinds {
		if k.URLs == nil {
			continue
		}
		for _, u := range k.URLs(o, licenses) {
			do(f.caches[k.Name], u)
		}
	}
}

// RetryOwnFailures makes every file whose latest fetch failed for a
// reason of robotsgate's own configuration due for a fetch at its next
// request (DocCache.RetryOwnFailures); it returns how many.
func (f *Files) RetryOwnFailures() int {
	n := 0
	for _, k := range f.kinds {
		n += f.caches[k.Name].RetryOwnFailures()
	}
	return n
}
