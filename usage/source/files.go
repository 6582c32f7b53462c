// Package source holds the sources of the statements sites make about how
// their content may be used (docs/decision.md step 7b), one file each,
// every one a Source: robots.txt's own Content-Usage and Content-Signal
// lines (robotstxt.go), the RSL licences it names on License lines
// (rsl.go), the site's /.well-known/tdmrep.json (tdmrep.go), a response's
// headers (header.go), and an HTML page's head (meta.go); and the one
// ordered list of them, List, which policy runs at each phase. Their
// verdicts are package usage's, each with its typed source. A new source
// is a file here and a line in List.
package source

import (
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

// What the file sources parse their files to says how many entries it
// holds (Len): the admin's /robots shows it as a usage file's entries,
// through an interface it asserts at run time; these fail the build if
// one stops implementing it.
var (
	_ interface{ Len() int } = (*RSL)(nil)
	_ interface{ Len() int } = (*TDMRep)(nil)
)
