package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/admin"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// testOrigin is an httptest origin that serves a robots.txt and counts its
// hits per path.
type testOrigin struct {
	*httptest.Server
	robots       atomic.Value // string
	robotsStatus atomic.Int64 // if set, robots.txt answers this status instead
	robotsDelay  atomic.Int64 // if set, robots.txt answers after this long (ns)
	hits         sync.Map     // path → *atomic.Int64
	handler      http.HandlerFunc
	// robotsHold, if set, holds robots.txt until the channel is closed
	// (or the fetch gives up): a test decides when it is answered.
	robotsHold atomic.Pointer[chan struct{}]
}

func newTestOrigin(t testing.TB, robotsTxt string, handler http.HandlerFunc) *testOrigin {
	t.Helper()
	o := &testOrigin{handler: handler}
	o.robots.Store(robotsTxt)
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := o.hits.LoadOrStore(r.URL.EscapedPath(), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		if r.URL.Path == "/robots.txt" {
			o.serveRobots(w, r)
			return
		}
		if o.handler != nil {
			o.handler(w, r)
			return
		}
		fmt.Fprintf(w, "page %s\n", r.URL.Path)
	}))
	t.Cleanup(o.Close)
	return o
}

// serveRobots answers /robots.txt: the file, after robotsDelay and
// robotsHold, or robotsStatus.
func (o *testOrigin) serveRobots(w http.ResponseWriter, r *http.Request) {
	time.Sleep(time.Duration(o.robotsDelay.Load())) // a slow robots.txt is what such a test is about
	if hold := o.robotsHold.Load(); hold != nil {
		select {
		case <-*hold:
		case <-r.Context().Done():
		}
	}
	if code := o.robotsStatus.Load(); code != 0 {
		w.WriteHeader(int(code))
		return
	}
	io.WriteString(w, o.robots.Load().(string))
}

func (o *testOrigin) count(path string) int64 {
	n, ok := o.hits.Load(path)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// testProxy is a running robotsgate on a loopback port.
type testProxy struct {
	srv   *Server
	url   *url.URL
	audit *testkit.Buffer
	log   *testkit.Buffer
}

// loopbackConfig is the default config, with block_private off so that
// loopback test origins can be reached.
func loopbackConfig() *config.Config {
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Upstream.BlockPrivate = false
	return cfg
}

func startProxy(t testing.TB, cfg *config.Config) *testProxy {
	t.Helper()
	return startProxyWith(t, cfg, Options{})
}

// startProxyWith starts a proxy for cfg with o (its logger, audit output
// and version are the test's).
func startProxyWith(t testing.TB, cfg *config.Config, o Options) *testProxy {
	t.Helper()
	if cfg.TLS.StateDir == "" && cfg.TLS.CACert == "" {
		cfg.TLS.StateDir = t.TempDir() // never the real home's CA
	}
	if _, err := policy.Compile(cfg); err != nil {
		t.Fatal(err)
	}
	p := &testProxy{audit: &testkit.Buffer{}, log: &testkit.Buffer{}}
	o.Logger, o.AuditOut, o.Version = testLogger(p.log), p.audit, "test"
	srv, err := NewServer(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	p.srv = srv
	p.url = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	return p
}

// client returns an HTTP client that goes through the proxy and leaves
// compression alone.
func (p *testProxy) client() *http.Client {
	return &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(p.url), DisableCompression: true},
		Timeout:   10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// raw sends a request written by hand through the proxy, so that the
// request line is exactly as given, and reads the response.
func (p *testProxy) raw(t testing.TB, request string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.url.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", request, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// auditLines decodes the audit log.
func (p *testProxy) auditLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(p.audit.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// auditFields are the fields every audit record carries.
var auditFields = []string{"time", "level", "msg", "client", "user", "method", "url", "path", "origin", "user_agent", "agent",
	"token", "purpose", "robots_url", "rule", "line", "status", "decision", "reason", "charged", "copies", "prev"}

// lastAudit returns the last audit record, checking it has every field.
func (p *testProxy) lastAudit(t *testing.T) map[string]any {
	t.Helper()
	lines := p.auditLines(t)
	if len(lines) == 0 {
		t.Fatal("audit log is empty")
	}
	rec := lines[len(lines)-1]
	for _, f := range auditFields {
		if _, ok := rec[f]; !ok {
			t.Errorf("audit record lacks %q: %v", f, rec)
		}
	}
	if len(rec) != len(auditFields) {
		t.Errorf("audit record has %d fields; want %d: %v", len(rec), len(auditFields), rec)
	}
	return rec
}

func get(t testing.TB, c *http.Client, u string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

const testRobots = "User-agent: *\nDisallow: /private\nDisallow: /caf%C3%A9\nDisallow: /%7Euser/\n\nUser-agent: FooBot\nDisallow: /foo-only\n"

func TestProxyDisallowed(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, testRobots, nil)
	p := startProxy(t, loopbackConfig())
	resp, body := get(t, p.client(), o.URL+"/private/report.pdf", "User-Agent", "BarBot/1.2 (+https://bar.example/bot)")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d; want 403", resp.StatusCode)
	}
	for k, want := range map[string]string{
		"X-Robots-Gate":      "disallowed",
		"X-Robots-Gate-Rule": "disallow: /private (line 2)",
		"Content-Type":       "text/plain; charset=utf-8",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s = %q; want %q", k, got, want)
		}
	}
	for _, want := range []string{o.URL + "/private/report.pdf", "BarBot", o.URL + "/robots.txt", "disallow: /private", "line 2"} {
		if !strings.Contains(body, want) {
			t.Errorf("body lacks %q:\n%s", want, body)
		}
	}
	if n := o.count("/private/report.pdf"); n != 0 {
		t.Errorf("origin saw the blocked request %d times", n)
	}
	rec := p.lastAudit(t)
	want := map[string]any{
		"msg": "blocked", "client": "127.0.0.1", "user": "", "method": "GET", "url": o.URL + "/private/report.pdf",
		"origin": "http://" + strings.TrimPrefix(o.URL, "http://"), "user_agent": "BarBot/1.2 (+https://bar.example/bot)",
		"robots_url": o.URL + "/robots.txt", "rule": "disallow: /private", "line": 2.0, "status": 403.0,
		"decision": "disallowed", "reason": "disallowed by robots.txt",
	}
	for k, w := range want {
		if rec[k] != w {
			t.Errorf("audit %s = %v; want %v", k, rec[k], w)
		}
	}
	if a, _ := rec["agent"].([]any); len(a) != 1 || a[0] != "BarBot" {
		t.Errorf("audit agent = %v; want [BarBot]", rec["agent"])
	}
	// FooBot has a group of its own, so the "*" rules do not apply to it.
	if resp, _ := get(t, p.client(), o.URL+"/private/report.pdf", "User-Agent", "FooBot/1.2"); resp.StatusCode != 200 {
		t.Errorf("FooBot: status %d; want 200", resp.StatusCode)
	}
}

func TestProxyAllowedPassesUnchanged(t *testing.T) {
	t.Parallel()
	gz := func() []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		io.WriteString(zw, strings.Repeat("compressed body ", 100))
		zw.Close()
		return b.Bytes()
	}()
	o := newTestOrigin(t, testRobots, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bare":
			// No Date, no Content-Type: the proxy must not add them.
			w.Header()["Date"] = nil
			w.Header()["Content-Type"] = nil
			io.WriteString(w, "<html>sniffable</html>")
		case "/gzip":
			if r.Header.Get("Accept-Encoding") != "gzip" {
				http.Error(w, "Accept-Encoding not forwarded: "+r.Header.Get("Accept-Encoding"), 400)
				return
			}
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Type", "text/plain")
			w.Write(gz)
		case "/headers":
			w.Header().Set("X-Custom", "kept")
			w.Header().Set("Set-Cookie", "a=b")
			w.WriteHeader(http.StatusTeapot)
			io.WriteString(w, "teapot")
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s %s", r.Method, r.Header.Get("Content-Type"), b)
		case "/not-modified":
			w.WriteHeader(http.StatusNotModified)
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			for i := range 3 {
				fmt.Fprintf(w, "chunk %d\n", i)
				w.(http.Flusher).Flush()
			}
			w.Header().Set("X-Sum", "3")
		}
	})
	p := startProxy(t, loopbackConfig())
	c := p.client()

	resp, body := get(t, c, o.URL+"/bare")
	if resp.StatusCode != 200 || body != "<html>sniffable</html>" {
		t.Errorf("/bare: %d %q", resp.StatusCode, body)
	}
	for _, h := range []string{"Date", "Content-Type", "X-Robots-Gate"} {
		if v, ok := resp.Header[h]; ok {
			t.Errorf("/bare: proxy added %s: %q", h, v)
		}
	}

	resp, body = get(t, c, o.URL+"/gzip", "Accept-Encoding", "gzip")
	if resp.Header.Get("Content-Encoding") != "gzip" || body != string(gz) {
		t.Errorf("/gzip: Content-Encoding %q, %d body bytes; want the origin's gzip bytes unchanged (%d)", resp.Header.Get("Content-Encoding"), len(body), len(gz))
	}

	resp, body = get(t, c, o.URL+"/headers")
	if resp.StatusCode != http.StatusTeapot || body != "teapot" || resp.Header.Get("X-Custom") != "kept" || resp.Header.Get("Set-Cookie") != "a=b" {
		t.Errorf("/headers: %d %q %v", resp.StatusCode, body, resp.Header)
	}

	for _, method := range []string{http.MethodPost, http.MethodPut} {
		req, _ := http.NewRequest(method, o.URL+"/echo", strings.NewReader("payload"))
		req.Header.Set("Content-Type", "application/x-test")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := method + " application/x-test payload"; string(b) != want {
			t.Errorf("%s /echo = %q; want %q", method, b, want)
		}
	}

	req, _ := http.NewRequest(http.MethodHead, o.URL+"/headers", nil)
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusTeapot {
		t.Errorf("HEAD: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	if resp, _ := get(t, c, o.URL+"/not-modified", "If-None-Match", `"x"`); resp.StatusCode != http.StatusNotModified {
		t.Errorf("/not-modified: %d; want 304", resp.StatusCode)
	}

	resp, body = get(t, c, o.URL+"/chunked")
	if body != "chunk 0\nchunk 1\nchunk 2\n" || resp.Trailer.Get("X-Sum") != "3" {
		t.Errorf("/chunked: %q, trailer %v", body, resp.Trailer)
	}
	if strings.TrimSpace(p.audit.String()) != "" {
		t.Errorf("allowed requests were audited without log_allowed:\n%s", p.audit.String())
	}
}

// TestProxyEvasion sends request lines byte for byte: equivalent spellings
// of a disallowed path must not slip past its rule.
func TestProxyEvasion(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, testRobots, nil)
	p := startProxy(t, loopbackConfig())
	host := strings.TrimPrefix(o.URL, "http://")
	tests := []struct {
		target string
		status int
	}{
		{"/%70rivate", 403},
		{"/priv%61te/x", 403},
		{"/public/../private", 403},
		{"/./private", 403},
		{"/public/%2e%2e/private", 403},
		{"/caf%c3%a9", 403},
		{"/caf\xc3\xa9", 400}, // a byte >= 0x80: percent-encode it
		{"/~user/x", 403},
		{"/%7euser/x", 403},
		{"/private?x=1", 403},
		{"/PRIVATE", 200},    // case is kept
		{"/%2Fprivate", 403}, // %2F is not "/" to Google, but is to a lenient server
		{"//private", 403},   // nor is "//" (merged by nginx)
		{"/%2Fpublic", 200},
		{"/robots.txt", 200},
		{"/public", 200},
	}
	for _, tt := range tests {
		resp, _ := p.raw(t, "GET http://"+host+tt.target+" HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != tt.status {
			t.Errorf("GET %q: status %d; want %d", tt.target, resp.StatusCode, tt.status)
		}
	}
	for _, blocked := range []string{"/%70rivate", "/public/../private", "/caf%c3%a9", "/private"} {
		if n := o.count(blocked); n != 0 {
			t.Errorf("origin saw %s %d times", blocked, n)
		}
	}
}

func TestProxyReportMode(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, testRobots, nil)
	cfg := loopbackConfig()
	cfg.Mode = "report"
	p := startProxy(t, cfg)
	resp, body := get(t, p.client(), o.URL+"/private/x")
	if resp.StatusCode != 200 || body != "page /private/x\n" || resp.Header.Get("X-Robots-Gate") != "would-block" {
		t.Errorf("report mode: %d %q X-Robots-Gate %q; want the page, would-block", resp.StatusCode, body, resp.Header.Get("X-Robots-Gate"))
	}
	if rec := p.lastAudit(t); rec["msg"] != "would-block" || rec["decision"] != "would-block" || rec["status"] != 200.0 || rec["rule"] != "disallow: /private" {
		t.Errorf("audit = %v; want would-block with the rule and status 200", rec)
	}
}

func TestProxyUnreachable(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "page") })
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		t.Errorf("origin reached at %s while its robots.txt is unreachable", r.URL.Path)
	}))
	t.Cleanup(down.Close)
	p := startProxy(t, loopbackConfig())
	resp, body := get(t, p.client(), down.URL+"/page")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Robots-Gate") != "unreachable" {
		t.Fatalf("status %d, X-Robots-Gate %q; want 503 unreachable", resp.StatusCode, resp.Header.Get("X-Robots-Gate"))
	}
	if ra := resp.Header.Get("Retry-After"); ra != "60" {
		t.Errorf("Retry-After = %q; want 60 (retry_after)", ra)
	}
	if !strings.Contains(body, "status 503") {
		t.Errorf("body does not say why:\n%s", body)
	}
	if rec := p.lastAudit(t); rec["msg"] != "unreachable" || rec["status"] != 503.0 {
		t.Errorf("audit = %v", rec)
	}
	// One WARN line for the failed fetch, naming the origin, the kind and
	// the next attempt; the second request within retry_after fetches
	// nothing and logs nothing.
	get(t, p.client(), down.URL+"/other")
	origin := "http://" + strings.TrimPrefix(down.URL, "http://")
	if n := strings.Count(p.log.String(), `msg="robots.txt fetch failed"`); n != 1 || !strings.Contains(p.log.String(), "kind=status") ||
		!strings.Contains(p.log.String(), "next_attempt=") || !strings.Contains(p.log.String(), origin) {
		t.Errorf("%d fetch failure lines; want 1 naming %s, the kind and the next attempt:\n%s", n, origin, p.log.String())
	}
	_ = o
}

func TestProxySitesAndAgents(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nDisallow: /\n\nUser-agent: AcmeBot\nAllow: /\nDisallow: /acme-private\n\nUser-agent: GPTBot\nDisallow: /no-gpt\n", nil)
	other := newTestOrigin(t, "User-agent: *\nDisallow: /\n", nil)
	cfg := loopbackConfig()
	cfg.Agents = []config.AgentRule{{UserAgent: "python-requests/*", Token: "AcmeBot", Also: []string{"GPTBot"}}}
	otherHost, _, _ := net.SplitHostPort(strings.TrimPrefix(other.URL, "http://"))
	_ = otherHost
	cfg.Sites = []config.SiteRule{{Host: "localhost", Policy: "allow", Reason: "ticket 1"}, {Host: "127.0.0.1", Policy: "robots"}}
	p := startProxy(t, cfg)
	c := p.client()

	// [[agents]]: python-requests obeys AcmeBot and GPTBot.
	if resp, _ := get(t, c, o.URL+"/page", "User-Agent", "python-requests/2.31.0"); resp.StatusCode != 200 {
		t.Errorf("AcmeBot /page: %d; want 200 (AcmeBot's group allows it)", resp.StatusCode)
	}
	resp, body := get(t, c, o.URL+"/no-gpt", "User-Agent", "python-requests/2.31.0")
	if resp.StatusCode != 403 || !strings.Contains(body, "blocked for: GPTBot") {
		t.Errorf("/no-gpt: %d; want 403 naming GPTBot as the blocking token:\n%s", resp.StatusCode, body)
	}
	if rec := p.lastAudit(t); fmt.Sprint(rec["agent"]) != "[AcmeBot GPTBot]" {
		t.Errorf("audit agent = %v; want [AcmeBot GPTBot]", rec["agent"])
	}
	// Without the rule: the header's token, then "*".
	if resp, _ := get(t, c, o.URL+"/page", "User-Agent", "curl/8.5.0"); resp.StatusCode != 403 {
		t.Errorf("curl /page: %d; want 403", resp.StatusCode)
	}

	// [[sites]] allow, reached under another host name for the same server.
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(other.URL, "http://"))
	resp, _ = get(t, c, "http://localhost:"+port+"/anything")
	if resp.StatusCode != 200 {
		t.Errorf("site allow: %d; want 200", resp.StatusCode)
	}
	if rec := p.lastAudit(t); rec["msg"] != "override" || rec["reason"] != `site allow "ticket 1"` || rec["decision"] != "allowed" {
		t.Errorf("audit = %v; want an override with the reason", rec)
	}

	// A reload swaps the policy: now localhost is denied.
	cfg2 := loopbackConfig()
	cfg2.Sites = []config.SiteRule{{Host: "localhost", Policy: "deny", Reason: "asked us to stop"}}
	if _, err := policy.Compile(cfg2); err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Reload(cfg2); err != nil {
		t.Fatal(err)
	}
	resp, body = get(t, c, "http://localhost:"+port+"/anything")
	if resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate") != "denied" || !strings.Contains(body, "asked us to stop") {
		t.Errorf("site deny after reload: %d %q:\n%s", resp.StatusCode, resp.Header.Get("X-Robots-Gate"), body)
	}
	if rec := p.lastAudit(t); rec["msg"] != "override" || rec["decision"] != "denied" {
		t.Errorf("audit = %v; want override, denied", rec)
	}
}

func TestProxyPrivateAddress(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	p := startProxy(t, cfg) // block_private on
	for _, u := range []string{o.URL + "/x", strings.Replace(o.URL, "127.0.0.1", "localhost", 1) + "/x"} {
		resp, body := get(t, p.client(), u)
		if resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate") != "private-address" || !strings.Contains(body, "block_private = false") {
			t.Errorf("%s: %d %q %q; want 403 private-address, saying block_private refused it and how to change that", u, resp.StatusCode, resp.Header.Get("X-Robots-Gate"), body)
		}
	}
	if n := o.count("/robots.txt") + o.count("/x"); n != 0 {
		t.Errorf("origin reached %d times", n)
	}
	if rec := p.lastAudit(t); rec["msg"] != "refused" || rec["decision"] != "private-address" {
		t.Errorf("audit = %v", rec)
	}
}

func TestProxyUpstreamErrors(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := newTestOrigin(t, "User-agent: *\nAllow: /\n", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	cfg := loopbackConfig()
	cfg.Upstream.Timeout = 500 * time.Millisecond
	cfg.Robots.FetchTimeout = 2 * time.Second
	p := startProxy(t, cfg)

	// The robots.txt of a closed port is unreachable: 503 from the rules.
	if resp, _ := get(t, p.client(), "http://"+closed+"/x"); resp.StatusCode != 503 {
		t.Errorf("closed port: %d; want 503 (robots.txt unreachable)", resp.StatusCode)
	}
	resp, body := get(t, p.client(), slow.URL+"/slow")
	want := "upstream " + strings.TrimPrefix(slow.URL, "http://") + ": timeout: no answer in time\n"
	if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("X-Robots-Gate") != "upstream-error" || body != want {
		t.Errorf("slow origin: %d %q %q; want 504 upstream-error %q", resp.StatusCode, resp.Header.Get("X-Robots-Gate"), body, want)
	}

	// An origin whose robots.txt allows but that then refuses connections.
	gone := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	get(t, p.client(), gone.URL+"/first") // fetches and caches the rules
	gone.Close()
	resp, body = get(t, p.client(), gone.URL+"/page")
	want = "upstream " + strings.TrimPrefix(gone.URL, "http://") + ": refused: connection refused\n"
	if resp.StatusCode != http.StatusBadGateway || body != want {
		t.Errorf("refused: %d %q; want 502 %q", resp.StatusCode, body, want)
	}
}

func TestProxyHopByHopAndProxyAuthorization(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	o := newTestOrigin(t, "", func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		// Written raw: net/http would rewrite a handler's Connection header.
		c, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		buf.WriteString("HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nConnection: X-Resp-Hop\r\nX-Resp-Hop: 1\r\nX-Resp-End: kept\r\nContent-Length: 2\r\n\r\nok")
		buf.Flush()
	})
	p := startProxy(t, loopbackConfig())
	host := strings.TrimPrefix(o.URL, "http://")
	resp, _ := p.raw(t, "GET "+o.URL+"/h HTTP/1.1\r\nHost: "+host+"\r\nProxy-Authorization: Basic c2VjcmV0OnNlY3JldA==\r\n"+
		"Proxy-Connection: keep-alive\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nX-End: kept\r\n\r\n")
	h := <-got
	for _, name := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop", "Keep-Alive", "Te"} {
		if v := h.Get(name); v != "" {
			t.Errorf("origin received %s: %q", name, v)
		}
	}
	if h.Get("X-End") != "kept" {
		t.Errorf("X-End not forwarded: %v", h)
	}
	if resp.Header.Get("X-Resp-Hop") != "" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-Resp-End") != "kept" {
		t.Errorf("response headers at the client: %v; want hop-by-hop ones removed, X-Resp-End kept", resp.Header)
	}
}

// TestProxyIgnoresProxyEnvironment runs the proxy with HTTP_PROXY and
// HTTPS_PROXY pointing at itself: it must still reach the origin directly.
func TestProxyIgnoresProxyEnvironment(t *testing.T) {
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	p := startProxy(t, loopbackConfig())
	t.Setenv("HTTP_PROXY", p.url.String())
	t.Setenv("HTTPS_PROXY", p.url.String())
	t.Setenv("NO_PROXY", "")
	resp, body := get(t, p.client(), o.URL+"/page")
	if resp.StatusCode != 200 || body != "page /page\n" {
		t.Errorf("with proxy variables set at itself: %d %q", resp.StatusCode, body)
	}
	if o.count("/page") != 1 || o.count("/robots.txt") != 1 {
		t.Errorf("origin hits: page %d, robots.txt %d; want 1 and 1", o.count("/page"), o.count("/robots.txt"))
	}
}

// wsUpgrade is a WebSocket upgrade request for target (as written in the
// request line) and host.
const wsUpgrade = "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"

// wsEcho answers a WebSocket upgrade with 101, then echoes one line.
func wsEcho(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "websocket" {
		http.Error(w, "not an upgrade", 400)
		return
	}
	c, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	buf.Flush()
	line, _ := buf.ReadString('\n')
	io.WriteString(c, "echo: "+line)
}

// checkWebSocket sends upgrades for /ws-private (disallowed by the test
// robots.txt: 403) and /ws (101, then relayed both ways).
func checkWebSocket(t *testing.T, upgrade func(path string) (net.Conn, *bufio.Reader, *http.Response)) {
	t.Helper()
	c, _, resp := upgrade("/ws-private")
	c.Close()
	if resp.StatusCode != 403 {
		t.Errorf("blocked upgrade: %d; want 403", resp.StatusCode)
	}
	c, br, resp := upgrade("/ws")
	defer c.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("allowed upgrade: %d; want 101", resp.StatusCode)
	}
	io.WriteString(c, "hello\n")
	if line, _ := br.ReadString('\n'); line != "echo: hello\n" {
		t.Errorf("relayed %q; want the echo", line)
	}
}

// TestProxyWebSocket decides an upgrade on its path and relays an allowed one.
func TestProxyWebSocket(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nDisallow: /ws-private\n", wsEcho)
	p := startProxy(t, loopbackConfig())
	host := strings.TrimPrefix(o.URL, "http://")
	checkWebSocket(t, func(path string) (net.Conn, *bufio.Reader, *http.Response) {
		c, err := net.DialTimeout("tcp", p.url.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, wsUpgrade, o.URL+path, host)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c, br, resp
	})
}

func TestProxyAdminEndpoints(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, testRobots, nil)
	p := startProxy(t, loopbackConfig())
	direct := &http.Client{Timeout: 5 * time.Second}
	resp, body := get(t, direct, p.url.String()+"/healthz")
	if resp.StatusCode != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", resp.StatusCode, body)
	}
	origin := url.QueryEscape(o.URL)
	if resp, _ := get(t, direct, p.url.String()+"/robots?origin="+origin); resp.StatusCode != 404 {
		t.Errorf("/robots before any request: %d; want 404", resp.StatusCode)
	}
	get(t, p.client(), o.URL+"/private") // fetches and caches robots.txt
	p.srv.cache.Wait()
	resp, body = get(t, direct, p.url.String()+"/robots?origin="+origin)
	var e admin.RobotsEntry
	if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/robots: %d %q: %v", resp.StatusCode, body, err)
	}
	if e.Outcome != "fetched" || e.Status != 200 || len(e.Groups) != 2 || e.Groups[0].Rules != 3 {
		t.Errorf("/robots = %+v", e)
	}
	presp, err := direct.Post(p.url.String()+"/robots/purge?origin="+origin, "", nil)
	if err != nil || presp.StatusCode != 200 {
		t.Fatalf("purge: %v %v", presp, err)
	}
	presp.Body.Close()
	get(t, p.client(), o.URL+"/private")
	if n := o.count("/robots.txt"); n != 2 {
		t.Errorf("robots.txt fetched %d times; want 2 (purged in between)", n)
	}
	if resp, _ := get(t, direct, p.url.String()+"/nope"); resp.StatusCode != 404 {
		t.Errorf("/nope: %d; want 404", resp.StatusCode)
	}
}

func TestProxyAuditFileReopen(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, testRobots, nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	cfg := loopbackConfig()
	cfg.Audit.File = path
	p := startProxy(t, cfg)
	get(t, p.client(), o.URL+"/private/1")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Reload(cfg); err != nil { // what SIGHUP does
		t.Fatal(err)
	}
	get(t, p.client(), o.URL+"/private/2")
	old, _ := os.ReadFile(path + ".1")
	cur, _ := os.ReadFile(path)
	if !strings.Contains(string(old), "/private/1") || !strings.Contains(string(cur), "/private/2") || strings.Contains(string(cur), "/private/1") {
		t.Errorf("rotated log:\n%s\ncurrent log:\n%s", old, cur)
	}
	if p.audit.String() != "" {
		t.Errorf("audit went to stdout too: %q", p.audit.String())
	}
}

// TestProxyUpstreamProxy sends proxied requests and robots.txt fetches
// through upstream.proxy, a counting forward proxy.
func TestProxyUpstreamProxy(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, testRobots, nil)
	var through sync.Map // path → true
	next := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		through.Store(r.URL.Path, true)
		if r.Header.Get("Proxy-Authorization") != "Basic dXA6c2VjcmV0" {
			http.Error(w, "want the upstream credentials", http.StatusProxyAuthRequired)
			return
		}
		r.RequestURI = ""
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(next.Close)
	cfg := loopbackConfig()
	cfg.Upstream.Proxy = strings.Replace(next.URL, "http://", "http://up:secret@", 1)
	p := startProxy(t, cfg)
	if resp, body := get(t, p.client(), o.URL+"/page"); resp.StatusCode != 200 || body != "page /page\n" {
		t.Fatalf("through upstream.proxy: %d %q", resp.StatusCode, body)
	}
	if resp, _ := get(t, p.client(), o.URL+"/private"); resp.StatusCode != 403 {
		t.Errorf("/private: %d; want 403", resp.StatusCode)
	}
	for _, path := range []string{"/robots.txt", "/page"} {
		if _, ok := through.Load(path); !ok {
			t.Errorf("%s did not go through upstream.proxy", path)
		}
	}
}

// TestProxyAuditWriteFailure: a failed audit write is reported on the
// operational log and the block stands.
func TestProxyAuditWriteFailure(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	o := newTestOrigin(t, testRobots, nil)
	cfg := loopbackConfig()
	cfg.Audit.File = "/dev/full" // every write fails with ENOSPC
	p := startProxy(t, cfg)
	if resp, _ := get(t, p.client(), o.URL+"/private"); resp.StatusCode != 403 {
		t.Errorf("with a failing audit log: %d; want 403", resp.StatusCode)
	}
	if !strings.Contains(p.log.String(), "audit log write failed") {
		t.Errorf("operational log does not report the failure:\n%s", p.log.String())
	}
	if o.count("/private") != 0 {
		t.Error("blocked request reached the origin")
	}
}
