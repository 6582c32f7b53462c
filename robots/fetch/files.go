package fetch

import (
	"context"
	"time"

	"github.com/robotsgate/robotsgate/robots"
)

// Files holds, for many sites, the files besides robots.txt in which they
// state how their content may be used: TDMRep's tdmrep.json and the RSL
// licences their robots.txt files name, each in a DocCache.
type Files struct {
	tdm *DocCache[*robots.TDMRep]
	rsl *DocCache[*robots.RSL]
}

// FilesOptions configure Files. Each zero value means the default named
// in DocCacheOptions.
type FilesOptions struct {
	Fetcher    *Fetcher        // required
	Parse      []robots.Option // how files are parsed (WithNormalization, as robots.txt)
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
}

// NewFiles returns empty Files with o.
func NewFiles(o FilesOptions) *Files {
	return &Files{
		tdm: NewDocCache(DocCacheOptions[*robots.TDMRep]{
			Fetcher: o.Fetcher, Accept: "application/json, */*;q=0.5", TTL: o.TTL, RetryAfter: o.RetryAfter, MaxEntries: o.MaxEntries, MaxBytes: o.MaxBytes, MaxFetches: o.MaxFetches, Now: o.Now,
			Parse:   func(_ string, body []byte) (*robots.TDMRep, error) { return robots.ParseTDMRep(body, o.Parse...) },
			OnFetch: onFetch[*robots.TDMRep](o.OnFetch), Store: o.Store,
		}),
		rsl: NewDocCache(DocCacheOptions[*robots.RSL]{
			Fetcher: o.Fetcher, Accept: "application/rsl+xml, application/xml;q=0.9, */*;q=0.5", TTL: o.TTL, RetryAfter: o.RetryAfter, MaxEntries: o.MaxEntries, MaxBytes: o.MaxBytes, MaxFetches: o.MaxFetches, Now: o.Now,
			Parse:   func(url string, body []byte) (*robots.RSL, error) { return robots.ParseRSL(url, body, o.Parse...) },
			OnFetch: onFetch[*robots.RSL](o.OnFetch), Store: o.Store,
		}),
	}
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

// TDMRep returns the answer for o's tdmrep.json.
func (f *Files) TDMRep(ctx context.Context, o Origin) (Doc[*robots.TDMRep], error) {
	return f.tdm.Get(ctx, o.TDMRepURL())
}

// RSL returns the answer for the RSL licence at url.
func (f *Files) RSL(ctx context.Context, url string) (Doc[*robots.RSL], error) {
	return f.rsl.Get(ctx, url)
}

// PeekTDMRep returns what is held of o's tdmrep.json, without fetching it.
func (f *Files) PeekTDMRep(o Origin) (Doc[*robots.TDMRep], bool) { return f.tdm.Peek(o.TDMRepURL()) }

// PeekRSL returns what is held of the licence at url, without fetching it.
func (f *Files) PeekRSL(url string) (Doc[*robots.RSL], bool) { return f.rsl.Peek(url) }

// Forget drops what is held of o's tdmrep.json, and of the licences at
// licenses, for a purge another process made (and made in the Store
// already): the next request that needs them fetches them.
func (f *Files) Forget(o Origin, licenses ...string) {
	f.tdm.Forget(o.TDMRepURL())
	for _, l := range licenses {
		f.rsl.Forget(l)
	}
}

// Purge forgets o's tdmrep.json, and the licences at licenses, here and in
// the Store: the fleet's next request that needs them fetches them.
func (f *Files) Purge(o Origin, licenses ...string) {
	f.tdm.Purge(o.TDMRepURL())
	for _, l := range licenses {
		f.rsl.Purge(l)
	}
}

// RetryOwnFailures makes every file whose latest fetch failed for a
// reason of robotsgate's own configuration due for a fetch at its next
// request (DocCache.RetryOwnFailures); it returns how many.
func (f *Files) RetryOwnFailures() int { return f.tdm.RetryOwnFailures() + f.rsl.RetryOwnFailures() }
