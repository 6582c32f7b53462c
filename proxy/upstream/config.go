package upstream

import (
	"net/url"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// CheckConfig checks c's [upstream] into pb (policy.Compile calls it) and
// returns its next hop, parsed: nil when there is none, or when it is
// not a proxy URL (a problem in pb).
func CheckConfig(c *config.Config, pb *config.Problems) *url.URL {
	uc := &c.Upstream
	var next *url.URL
	if uc.Proxy != "" {
		u, err := ProxyURL(uc.Proxy)
		if err != nil {
			pb.Addf("upstream.proxy", "%v", err)
		}
		next = u
	}
	if uc.CA != "" {
		if _, err := ReadPool(uc.CA); err != nil {
			pb.Addf("upstream.ca", "%v", err)
		}
	}
	if uc.Timeout < time.Millisecond {
		pb.Addf("upstream.timeout", "%v is less than %v", uc.Timeout, time.Millisecond)
	}
	return next
}
