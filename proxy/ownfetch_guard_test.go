package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// nextHop is a real forward proxy on loopback that logs every
// request-target it is asked for (absolute-form, and CONNECT
// authorities). It connects a name to 127.0.0.1 on the port asked, as a
// next hop whose resolver sends every test name to this machine would;
// it never connects to an IP literal (it answers 502), so that a test
// that fails reaches nothing private.
type nextHop struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newNextHop(t *testing.T) *nextHop {
	t.Helper()
	h := &nextHop{}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		},
		DisableCompression: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.seen = append(h.seen, r.Method+" "+r.RequestURI)
		h.mu.Unlock()
		host := r.URL.Hostname()
		if r.Method == http.MethodConnect {
			host, _, _ = net.SplitHostPort(r.Host)
		}
		if _, err := netip.ParseAddr(host); err == nil || host == "" {
			http.Error(w, "next hop: not connecting to a literal", http.StatusBadGateway)
			return
		}
		if r.Method == http.MethodConnect {
			h.tunnel(w, r)
			return
		}
		out, err := http.NewRequestWithContext(r.Context(), r.Method, r.RequestURI, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out.Header = r.Header.Clone()
		out.Header.Del("Proxy-Authorization")
		resp, err := tr.RoundTrip(out)
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
	t.Cleanup(h.Close)
	return h
}

// tunnel answers a CONNECT to a name: 200, then bytes both ways to
// 127.0.0.1 on its port.
func (h *nextHop) tunnel(w http.ResponseWriter, r *http.Request) {
	_, port, _ := net.SplitHostPort(r.Host)
	up, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", port), 5*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer up.Close()
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	go io.Copy(up, brw)
	io.Copy(c, up)
}

// targets returns the request-targets asked so far.
func (h *nextHop) targets() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

// privateTargets returns the targets asked that name a private address,
// or a name robotsgate's resolver places at one.
func (h *nextHop) privateTargets() []string {
	var out []string
	for _, s := range h.targets() {
		for _, bad := range []string{"169.254.", "127.", "[::1]", "10.", "inward.example", "0x", "2130706433"} {
			if strings.Contains(s, "//"+bad) || strings.Contains(s, " "+bad) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// publicLookup is robotsgate's resolver in these tests: inward.example is
// at a private address among public ones; every other name at
// 203.0.113.7 (TEST-NET-3, public to block_private), which only the next
// hop reaches (it connects names to loopback).
func publicLookup(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "inward.example" {
		return []netip.Addr{netip.MustParseAddr("203.0.113.8"), netip.MustParseAddr("10.0.0.1")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("203.0.113.7")}, nil
}

// startBehindNextHop runs robotsgate with block_private on (the default)
// and upstream.proxy = next, resolving with publicLookup.
func startBehindNextHop(t *testing.T, next *nextHop, mutate func(*config.Config)) *testProxy {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.TLS.StateDir = t.TempDir()
	cfg.Upstream.Proxy = next.URL
	if mutate != nil {
		mutate(cfg)
	}
	p, _ := startWithLookup(t, cfg, publicLookup)
	return p
}

// startWithLookup runs robotsgate for cfg on a loopback port, resolving
// with lookup; stop shuts it down and waits for it (a restart's first
// half), and is called at the end of the test anyway.
func startWithLookup(t *testing.T, cfg *config.Config, lookup func(context.Context, string, string) ([]netip.Addr, error)) (p *testProxy, stop func()) {
	t.Helper()
	if _, err := policy.Compile(cfg); err != nil {
		t.Fatal(err)
	}
	p = &testProxy{audit: &testkit.Buffer{}, log: &testkit.Buffer{}}
	srv, err := NewServer(cfg, Options{Logger: testLogger(p.log), AuditOut: p.audit, Version: "test", LookupNetIP: lookup})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := contextWithTimeout(5 * time.Second)
			defer cancel()
			srv.Shutdown(ctx)
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	p.srv = srv
	p.url = mustURL("http://" + ln.Addr().String())
	return p, stop
}

// TestOwnFetchesGuardedThroughNextHop: with upstream.proxy and
// block_private on, robotsgate never asks the next hop for a private
// address of its own accord: not a robots.txt redirect's (a literal, or a
// name its resolver places at one), nor an RSL licence a License line
// names, nor a tdmrep.json redirect's. Each is refused before it is sent,
// and answered as with no next hop, where the dialer refuses it: the file
// is unreachable (503 unreachable), the reason naming the private
// address. An origin that is not private is reached through the next hop
// all along.
func TestOwnFetchesGuardedThroughNextHop(t *testing.T) {
	t.Parallel()
	next := newNextHop(t)
	p := startBehindNextHop(t, next, nil)
	redirect := func(to string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to, http.StatusMovedPermanently) }
	}
	// Origins whose robots.txt, licences or tdmrep.json point inward.
	origin := func(robots http.HandlerFunc, robotsTxt string, tdm http.HandlerFunc) string {
		o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.URL.Path == "/robots.txt" && robots != nil:
				robots(w, r)
			case r.URL.Path == "/robots.txt":
				io.WriteString(w, robotsTxt)
			case r.URL.Path == "/.well-known/tdmrep.json" && tdm != nil:
				tdm(w, r)
			case r.URL.Path == "/.well-known/tdmrep.json":
				http.NotFound(w, r)
			default:
				io.WriteString(w, "page\n")
			}
		}))
		t.Cleanup(o.Close)
		_, port, _ := net.SplitHostPort(o.Listener.Addr().String())
		return port
	}
	open := "User-agent: *\nAllow: /\n"
	for _, tt := range []struct {
		name, host string
		port       string
		purpose    string
		status     int
		gate       string
		reason     string // in the body
	}{
		{name: "control", host: "plain.example", port: origin(nil, open, nil), purpose: "ai-train", status: 200},
		{name: "robots.txt redirect to [::1]", host: "docker.example", port: origin(redirect("http://[::1]:2375/containers/json"), "", nil),
			status: 503, gate: "unreachable", reason: "private-address"},
		{name: "robots.txt redirect to a name resolving inward", host: "rebind.example", port: origin(redirect("http://inward.example/robots.txt"), "", nil),
			status: 503, gate: "unreachable", reason: "private-address"},
		{name: "robots.txt redirect to https on the metadata service (a CONNECT)", host: "tls.example", port: origin(redirect("https://169.254.169.254/latest/api/token"), "", nil),
			status: 503, gate: "unreachable", reason: "private-address"},
		{name: "robots.txt redirect to 127.1", host: "short.example", port: origin(redirect("http://127.1:6379/"), "", nil),
			status: 503, gate: "unreachable", reason: "private-address"},
		{name: "License at the metadata service", host: "meta.example", port: origin(nil, open+"License: http://169.254.169.254/latest/meta-data/iam/security-credentials/\n", nil),
			purpose: "ai-train", status: 503, gate: "unreachable", reason: "private-address"},
		{name: "License at redis on loopback", host: "redis.example", port: origin(nil, open+"License: http://127.0.0.1:6379/\n", nil),
			purpose: "ai-input", status: 503, gate: "unreachable", reason: "private-address"},
		{name: "tdmrep.json redirect to 10.0.0.1", host: "tdm.example", port: origin(nil, open, redirect("http://10.0.0.1/.well-known/tdmrep.json")),
			purpose: "ai-train", status: 503, gate: "unreachable", reason: "private-address"},
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+tt.host+":"+tt.port+"/page", nil)
		if tt.purpose != "" {
			req.Header.Set("X-Robots-Gate-Purpose", tt.purpose)
		}
		resp, err := p.client().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || resp.Header.Get("X-Robots-Gate") != tt.gate || !strings.Contains(string(body), tt.reason) {
			t.Errorf("%s: %d %q %q; want %d %q, the body naming %q", tt.name, resp.StatusCode, resp.Header.Get("X-Robots-Gate"), body, tt.status, tt.gate, tt.reason)
		}
	}
	if bad := next.privateTargets(); len(bad) > 0 {
		t.Errorf("the next hop was asked for private targets: %q", bad)
	}
	if got := next.targets(); !contains(got, "/robots.txt") || !contains(got, "/page") {
		t.Errorf("next hop saw %q; want the control origin's robots.txt and page through it", got)
	}
}

// TestDecideAPIPrivateLiteralNotFetched: /v1/decide answers
// private-address for a private literal without a fetch of its
// robots.txt, through the next hop or otherwise; a public origin in the
// same call is fetched through the next hop.
func TestDecideAPIPrivateLiteralNotFetched(t *testing.T) {
	t.Parallel()
	next := newNextHop(t)
	p := startBehindNextHop(t, next, nil)
	pub := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	_, port, _ := net.SplitHostPort(pub.Listener.Addr().String())
	urls := []string{"http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:6379/", "http://[::1]:2375/containers/json",
		"http://10.0.0.1/x", "http://0xa9fea9fe/latest", "http://public.example:" + port + "/ok"}
	body, _ := json.Marshal(map[string]any{"agent": "DataBot", "purpose": []string{"ai-train"}, "urls": urls})
	code, out := postDecide(t, p, string(body))
	results, _ := out["results"].([]any)
	if code != 200 || len(results) != len(urls) {
		t.Fatalf("status %d, %d results: %v", code, len(results), out)
	}
	for i, r := range results {
		want := "private-address"
		if i == len(urls)-1 {
			want = "allowed"
		}
		if got := r.(map[string]any)["decision"]; got != want {
			t.Errorf("%s: decision %v; want %s", urls[i], got, want)
		}
	}
	if bad := next.privateTargets(); len(bad) > 0 {
		t.Errorf("the next hop was asked for private targets: %q", bad)
	}
	if st := p.srv.cache.Stats(); st.Fetches != 1 || st.Origins != 1 {
		t.Errorf("the cache made %d fetches for %d origins; want one fetch, of the public origin", st.Fetches, st.Origins)
	}
	if pub.count("/robots.txt") != 1 {
		t.Errorf("the public origin's robots.txt fetched %d times; want once, through the next hop", pub.count("/robots.txt"))
	}
}

func contains(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestOwnFetchRebindingWithoutNextHop: with no next hop the dialer still
// checks the address it dials, whatever the guard was told: a name that
// resolved to a public address at step 2 (and for the fetch's guard,
// which asks the same remembered lookup) but to loopback when its
// robots.txt is dialled reaches nothing, and the page is refused.
func TestOwnFetchRebindingWithoutNextHop(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	_, port, _ := net.SplitHostPort(o.Listener.Addr().String())
	var mu sync.Mutex
	lookups := 0
	rebinding := func(_ context.Context, _, host string) ([]netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		lookups++
		if lookups == 1 {
			return []netip.Addr{netip.MustParseAddr("203.0.113.7")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	cfg := config.Default() // block_private on, no next hop
	cfg.Listen = "127.0.0.1:0"
	cfg.TLS.StateDir = t.TempDir()
	p, _ := startWithLookup(t, cfg, rebinding)
	resp, err := p.client().Get("http://rebind.example:" + port + "/page")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "private-address") {
		t.Errorf("a name rebound to loopback after step 2: %d %q; want 503, robots.txt refused as private-address", resp.StatusCode, body)
	}
	if n := o.count("/robots.txt") + o.count("/page"); n != 0 {
		t.Errorf("the origin was reached %d times; want never", n)
	}
}
