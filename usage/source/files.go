// Package source reads the statements sites make about how their content
// may be used in files besides robots.txt and in responses
// (docs/decision.md step 7b): RSL licences, which a robots.txt names on
// License lines; the site's /.well-known/tdmrep.json; and an HTML page's
// head. Their verdicts are package usage's, each with its typed source.
package source

import (
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// The kinds of file the sources read, as fetch.Files names them.
const (
	KindTDMRep = "tdmrep.json" // the site's /.well-known/tdmrep.json
	KindRSL    = "rsl"         // an RSL licence its robots.txt names
)

// TDMRepURL returns the URL of o's TDMRep file (TDM Reservation Protocol):
// its /.well-known/tdmrep.json.
func TDMRepURL(o fetch.Origin) string { return o.URL("/.well-known/tdmrep.json") }

// FileKinds returns the kinds of file the sources read, parsed with opts
// (robots.WithNormalization, as robots.txt is), for fetch.Files.
func FileKinds(opts ...robots.Option) []fetch.FileKind {
	return []fetch.FileKind{
		{
			Name: KindTDMRep, Accept: "application/json, */*;q=0.5",
			Parse: func(_ string, body []byte) (any, error) { return ParseTDMRep(body, opts...) },
			URLs:  func(o fetch.Origin, _ []string) []string { return []string{TDMRepURL(o)} },
		},
		{
			Name: KindRSL, Accept: "application/rsl+xml, application/xml;q=0.9, */*;q=0.5",
			Parse: func(url string, body []byte) (any, error) { return ParseRSL(url, body, opts...) },
			URLs:  func(_ fetch.Origin, licenses []string) []string { return licenses },
		},
	}
}
