package proxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// TestOnRequestAlwaysAnswers: goproxy's request hook answers every
// request itself, allowed, refused or failed upstream, so that none takes
// goproxy's own RoundTrip (whose header edits robotsgate does not rely on:
// newGoproxy).
func TestOnRequestAlwaysAnswers(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nDisallow: /private\n", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fails":
			w.WriteHeader(http.StatusInternalServerError)
		case "/slow-down":
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/cut":
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
		default:
			w.Write([]byte("ok"))
		}
	})
	down := newTestOrigin(t, "", nil)
	down.Close() // nothing listens there: the request fails upstream
	robotsDown := newTestOrigin(t, "", nil)
	robotsDown.robotsStatus.Store(http.StatusServiceUnavailable)
	open := startProxy(t, loopbackConfig())
	guarded := startProxy(t, func() *config.Config { c := loopbackConfig(); c.Upstream.BlockPrivate = true; return c }())
	for _, tc := range []struct {
		name         string
		p            *testProxy
		method, url  string
		body, header string
	}{
		{"allowed", open, "GET", o.URL + "/page", "", ""},
		{"allowed HEAD", open, "HEAD", o.URL + "/page", "", ""},
		{"allowed POST with a body", open, "POST", o.URL + "/form", "a=1", ""},
		{"disallowed", open, "GET", o.URL + "/private/x", "", ""},
		{"the origin fails", open, "GET", o.URL + "/fails", "", ""},
		{"the origin asks for a pause", open, "GET", o.URL + "/slow-down", "", ""},
		{"held by that pause", open, "GET", o.URL + "/page", "", ""},
		{"the origin cuts the connection", open, "GET", o.URL + "/cut", "", ""},
		{"nothing listens", open, "GET", down.URL + "/page", "", ""},
		{"robots.txt unreachable", open, "GET", robotsDown.URL + "/page", "", ""},
		{"a private address", guarded, "GET", o.URL + "/page", "", ""},
		{"a purpose declared", open, "GET", o.URL + "/page", "", "ai-train"},
		{"not absolute", open, "GET", "/page", "", ""},
	} {
		r := httptest.NewRequest(tc.method, tc.url, nil)
		if tc.body != "" {
			r = httptest.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
		}
		if tc.header != "" {
			r.Header.Set(policy.PurposeHeader, tc.header)
		}
		r.RemoteAddr = net.JoinHostPort("127.0.0.1", "40000")
		_, resp := tc.p.srv.onRequest(r, nil)
		if resp == nil {
			t.Errorf("%s: %s %s: no answer; want one from the hook", tc.name, tc.method, tc.url)
			continue
		}
		t.Logf("%s: %d", tc.name, resp.StatusCode)
		resp.Body.Close()
	}
}
