package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/robotsgate/robotsgate/proxy/policy"
)

// TestHeadTrailerStatement: an X-Robots-Tag (or another usage field) in
// a response's trailer arrives after the body was sent, so it cannot
// withhold it: the page is delivered whole with its trailer, and a
// statement that refuses a declared purpose is logged and counted (once
// per response); one that refuses nothing declared, or a request with no
// purpose, is neither.
func TestHeadTrailerStatement(t *testing.T) {
	t.Parallel()
	const page = "<html><head><title>t</title></head><body>the whole page</body></html>"
	o := newTestOrigin(t, "User-agent: *\nDisallow: /private\n", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/declared": // announced in Trailer
			w.Header().Set("Trailer", "X-Robots-Tag")
			w.Write([]byte(page))
			w.Header().Set("X-Robots-Tag", "noai")
		case "/undeclared":
			w.Write([]byte(page))
			w.(http.Flusher).Flush()
			w.Header().Set(http.TrailerPrefix+"Tdm-Reservation", "1")
		case "/other-bot":
			w.Write([]byte(page))
			w.(http.Flusher).Flush()
			w.Header().Set(http.TrailerPrefix+"X-Robots-Tag", "OtherBot: noai")
		}
	})
	p := startProxy(t, loopbackConfig())
	c := p.client()
	tests := []struct {
		path, purpose, trailer string
		counted                int
	}{
		{"/declared", "ai-train", "X-Robots-Tag", 1},
		{"/undeclared", "ai-input", "Tdm-Reservation", 2},
		{"/declared", "", "X-Robots-Tag", 2},
		{"/declared", "search", "X-Robots-Tag", 2},
		{"/other-bot", "ai-train", "X-Robots-Tag", 2},
	}
	for _, tt := range tests {
		resp, body := get(t, c, o.URL+tt.path, "User-Agent", "GPTBot/1.0", policy.PurposeHeader, tt.purpose)
		if resp.StatusCode != 200 || body != page {
			t.Errorf("%s for %q: %d %q; want 200 and the page", tt.path, tt.purpose, resp.StatusCode, body)
		}
		if resp.Trailer.Get(tt.trailer) == "" {
			t.Errorf("%s for %q: trailer %v; want the origin's %s", tt.path, tt.purpose, resp.Trailer, tt.trailer)
		}
		_, metrics := get(t, &http.Client{}, p.url.String()+"/metrics")
		if want := "robotsgate_usage_trailer_statements_total " + string(rune('0'+tt.counted)); !strings.Contains(metrics, want+"\n") {
			t.Errorf("after %s for %q: /metrics lacks %s", tt.path, tt.purpose, want)
		}
	}
	if n := strings.Count(p.log.String(), "usage statement in a trailer"); n != 2 {
		t.Errorf("%d warnings of a trailer's statement logged; want 2:\n%s", n, p.log.String())
	}
	if log := p.log.String(); !strings.Contains(log, `rule="response header x-robots-tag: noai"`) || !strings.Contains(log, "/declared") {
		t.Errorf("the warning does not name the URL and the statement:\n%s", log)
	}
}
