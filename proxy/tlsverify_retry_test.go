package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/proxy/config"
)

// getBody sends GET url with c and returns the status, X-Robots-Gate and
// body.
func getBody(t *testing.T, c *http.Client, url string) (int, string, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Robots-Gate"), string(body)
}

// TestTLSVerifyRetriedAfterRestart: started without the site's CA, a page
// of an HTTPS origin gets 502 tls-verify, the body naming upstream.ca and
// /robots/purge for the origin; restarted on the same state_dir (or the
// same fleet Redis) with upstream.ca, its robots.txt is fetched at once,
// not a minute later: the failure was robotsgate's configuration's, not
// the site's, and was not persisted. An instance of the fleet still
// without the CA does not hand its failure to one that has it. (A reload
// with upstream.ca fetches at once too: TestReloadAppliesUpstream.)
func TestTLSVerifyRetriedAfterRestart(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"state_dir", "fleet"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			pki := newTestPKI(t)
			o, port := tlsOrigin(t, pki, "User-agent: *\nDisallow: /private\n", "secure.example")
			page := "https://secure.example:" + port + "/page"
			stateDir := t.TempDir()
			var r *redistest.Server
			if store == "fleet" {
				r = redistest.Start(t)
			}
			configFor := func(ca string) *config.Config {
				cfg := loopbackConfig()
				cfg.TLS.StateDir = stateDir
				cfg.Upstream.CA = ca
				if r != nil {
					cfg.Cluster.Redis, cfg.Cluster.KeyPrefix, cfg.Cluster.Secret = r.URL(), "rgtest:"+t.Name()+":", fleetSecret
				}
				return cfg
			}

			first, stop := startWithLookup(t, configFor(""), loopbackLookup)
			code, gate, body := getBody(t, first.mitmClient(t, nil, false), page)
			if code != http.StatusBadGateway || gate != "upstream-error" || !strings.Contains(body, "tls-verify") ||
				!strings.Contains(body, "upstream.ca") || !strings.Contains(body, "/robots/purge?origin=https://secure.example:"+port) {
				t.Fatalf("without the site's CA: %d %q %q; want 502 upstream-error naming tls-verify, upstream.ca and /robots/purge?origin=https://secure.example:%s", code, gate, body, port)
			}
			if r != nil {
				// A second instance, with the CA, beside the first: the
				// first's failure of another origin is not its answer.
				other, oport := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n", "other.example")
				otherPage := "https://other.example:" + oport + "/page"
				if code, _, _ := getBody(t, first.mitmClient(t, nil, false), otherPage); code != http.StatusBadGateway {
					t.Errorf("another origin, without the CA: %d; want 502", code)
				}
				second, _ := startWithLookup(t, configFor(pki.pemPath), loopbackLookup)
				if code, gate, body := getBody(t, second.mitmClient(t, nil, false), otherPage); code != http.StatusOK || other.count("/robots.txt") != 1 {
					t.Errorf("an instance with the CA beside one without: %d %q %q, robots.txt served %d times; want 200, fetched once", code, gate, body, other.count("/robots.txt"))
				}
			}
			stop()

			restarted, _ := startWithLookup(t, configFor(pki.pemPath), loopbackLookup)
			c := restarted.mitmClient(t, nil, false)
			if code, gate, body := getBody(t, c, page); code != http.StatusOK {
				t.Errorf("restarted with upstream.ca: %d %q %q; want 200, robots.txt fetched at once", code, gate, body)
			}
			if code, gate, _ := getBody(t, c, "https://secure.example:"+port+"/private/x"); code != http.StatusForbidden || gate != "disallowed" {
				t.Errorf("restarted with upstream.ca, a disallowed path: %d %q; want 403 disallowed", code, gate)
			}
			if n := o.count("/robots.txt"); n != 1 {
				t.Errorf("robots.txt served %d times; want once, fetched at once after the restart", n)
			}
		})
	}
}
