package proxy

import (
	"net/http"
	"testing"

	"github.com/robotsgate/robotsgate/proxy/policy"
)

// aiprefRobots states usage as draft-ietf-aipref-attach-05 and Cloudflare's
// use= level have it: a line with no path for the whole site, a longer
// line that decides alone on its paths, and a refusal that use=full does
// not lift.
const aiprefRobots = "User-agent: *\nContent-Usage: train-ai=n\nContent-Usage: /open/ search=y\nContent-Signal: /sig/ ai-input=no, use=full\n"

// TestAIPrefThroughProxy: the drafts' readings decide requests through the
// real proxy, from robots.txt before anything leaves and from a response's
// Content-Usage header (vocab-08's ai-use; the earlier drafts' bots no
// longer read).
func TestAIPrefThroughProxy(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, aiprefRobots, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/open/h/ai-use":
			w.Header().Set("Content-Usage", "ai-use=n")
		case "/open/h/bots":
			w.Header().Set("Content-Usage", "bots=n")
		}
		w.Write([]byte("page " + r.URL.Path + "\n"))
	})
	p := startProxy(t, loopbackConfig())
	c := p.client()
	tests := []struct {
		path, purpose string
		status        int
		rule          string
	}{
		{"/story", "ai-train", http.StatusForbidden, "content-usage: train-ai=n (line 2)"},
		{"/open/story", "ai-train", http.StatusOK, ""}, // the /open/ line decides alone
		{"/open/story", "search", http.StatusOK, ""},
		{"/sig/story", "ai-input", http.StatusForbidden, "content-signal: /sig/ ai-input=no, use=full (line 4)"},
		{"/open/h/ai-use", "ai-input", http.StatusForbidden, "response header content-usage: ai-use=n"},
		{"/open/h/bots", "ai-input", http.StatusOK, ""},
	}
	for _, tt := range tests {
		resp, body := get(t, c, o.URL+tt.path, policy.PurposeHeader, tt.purpose)
		if resp.StatusCode != tt.status || resp.Header.Get("X-Robots-Gate-Rule") != tt.rule {
			t.Errorf("%s for %s: %d %q; want %d %q\n%.200s", tt.path, tt.purpose, resp.StatusCode, resp.Header.Get("X-Robots-Gate-Rule"), tt.status, tt.rule, body)
		}
	}
}
