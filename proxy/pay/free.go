package pay

import (
	"strings"

	"github.com/robotsgate/robotsgate/robots"
)

// freePaths are the paths Cloudflare's pay-per-crawl never charges for
// (docs/identity.md, "Never paid for"): robotsgate never pays for them,
// whoever asks.
var freePaths = [...]string{"/robots.txt", "/sitemap.xml", "/security.txt", "/.well-known/security.txt", "/crawlers.json"}

// Free reports whether target (a request-target: path and query, as sent)
// names one of the paths never paid for, in any spelling robots.Normalize
// reads as it (escapes of unreserved characters, dot segments); the query,
// if any, is not looked at ("/robots.txt?x" is free: the list names
// paths). Letter case counts, as in robots.txt's paths.
func Free(target string) bool {
	path, _, _ := strings.Cut(target, "?")
	if len(path) > 64 || !strings.HasPrefix(path, "/") {
		return false // no free path is that long: nothing to normalise
	}
	path, _, _ = strings.Cut(robots.Normalize(path), "?")
	for _, p := range freePaths {
		if path == p {
			return true
		}
	}
	return false
}
