package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// TestReloadAppliesUpstream: started without the site's CA, a page of an
// HTTPS origin gets 502 tls-verify; a reload that adds upstream.ca
// fetches its robots.txt at once (not after retry_after), and requests
// then reach the site: inside the MITM tunnel opened before the reload,
// as a plain proxy request for an https URL, and as a paid request. A
// reload whose upstream.ca is not a CA file is refused, naming the key,
// and the running config goes on working.
func TestReloadAppliesUpstream(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, "User-agent: *\nDisallow: /private\n", "secure.example")
	var paid atomic.Int64
	o.handler = func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != "/article":
			io.WriteString(w, "secure page "+r.URL.Path+"\n")
		case r.Header.Get("Crawler-Exact-Price") != "USD 0.01":
			w.Header().Set("Crawler-Price", "USD 0.01")
			w.WriteHeader(http.StatusPaymentRequired)
		default:
			paid.Add(1)
			w.Header().Set("Crawler-Charged", "USD 0.01")
			io.WriteString(w, "paid\n")
		}
	}
	site := "https://secure.example:" + port
	stateDir := t.TempDir()
	configFor := func(ca string) *config.Config {
		cfg := loopbackConfig()
		cfg.TLS.StateDir = stateDir
		cfg.Upstream.CA = ca
		cfg.Identity.SignatureAgent = testAgent
		cfg.Payments.MaxPrice, cfg.Payments.Budget = "USD 0.01", "USD 1"
		return cfg
	}
	p, _ := startWithLookup(t, configFor(""), loopbackLookup)
	c := p.mitmClient(t, nil, false) // one connection: the tunnel outlives the reload

	if code, gate, body := getBody(t, c, site+"/page"); code != http.StatusBadGateway || gate != "upstream-error" || !strings.Contains(body, "tls-verify") {
		t.Fatalf("without the site's CA: %d %q %q; want 502 upstream-error naming tls-verify", code, gate, body)
	}
	if err := p.srv.Reload(configFor(pki.pemPath)); err != nil {
		t.Fatalf("Reload with upstream.ca: %v", err)
	}
	if code, gate, body := getBody(t, c, site+"/page"); code != http.StatusOK || body != "secure page /page\n" {
		t.Errorf("after the reload, in the tunnel opened before it: %d %q %q; want 200, robots.txt fetched at once", code, gate, body)
	}
	if code, gate, _ := getBody(t, c, site+"/private/x"); code != http.StatusForbidden || gate != "disallowed" {
		t.Errorf("after the reload, a disallowed path: %d %q; want 403 disallowed", code, gate)
	}
	if n := o.count("/robots.txt"); n != 1 {
		t.Errorf("robots.txt served %d times; want once, fetched at the first request after the reload", n)
	}
	// Absolute-form, as a plain proxy request: sent with the proxy's own
	// transport, which now trusts upstream.ca.
	resp, body := p.raw(t, "GET "+site+"/plain HTTP/1.1\r\nHost: secure.example:"+port+"\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != http.StatusOK || body != "secure page /plain\n" {
		t.Errorf("a plain proxy request for %s/plain after the reload: %d %q; want 200", site, resp.StatusCode, body)
	}
	if code, _, body := getBody(t, c, site+"/article"); code != http.StatusOK || body != "paid\n" || paid.Load() != 1 {
		t.Errorf("a paid request after the reload: %d %q, %d paid; want 200, paid once", code, body, paid.Load())
	}

	// A CA file that is no CA file: the reload is refused, naming the key,
	// and the running config (with the good CA) is kept.
	bad := filepath.Join(t.TempDir(), "not-a-ca.pem")
	if err := os.WriteFile(bad, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := p.srv.Reload(configFor(bad))
	if err == nil || !strings.Contains(err.Error(), "upstream.ca") {
		t.Errorf("Reload with a bad upstream.ca = %v; want an error naming upstream.ca", err)
	}
	other, oport := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n", "other.example")
	if code, gate, body := getBody(t, p.mitmClient(t, nil, false), "https://other.example:"+oport+"/page"); code != http.StatusOK || other.count("/robots.txt") != 1 {
		t.Errorf("after a refused reload, a new origin: %d %q %q; want 200 (the CA of the config kept)", code, gate, body)
	}
}

// TestReloadCAFileRenewed: a reload with the same upstream.ca path whose
// file now holds the site's CA (the operator replaced its content)
// trusts it at once, as a new path would.
func TestReloadCAFileRenewed(t *testing.T) {
	t.Parallel()
	pki, unrelated := newTestPKI(t), newTestPKI(t)
	o, port := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n", "secure.example")
	ca := filepath.Join(t.TempDir(), "ca.pem")
	copyFile := func(from string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(ca, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(unrelated.pemPath)
	cfg := loopbackConfig()
	cfg.TLS.StateDir = t.TempDir()
	cfg.Upstream.CA = ca
	p, _ := startWithLookup(t, cfg, loopbackLookup)
	c := p.mitmClient(t, nil, false)
	if code, _, body := getBody(t, c, "https://secure.example:"+port+"/page"); code != http.StatusBadGateway || !strings.Contains(body, "tls-verify") {
		t.Fatalf("with an unrelated CA: %d %q; want 502 tls-verify", code, body)
	}
	copyFile(pki.pemPath)
	same := *cfg
	if err := p.srv.Reload(&same); err != nil {
		t.Fatal(err)
	}
	if code, gate, body := getBody(t, c, "https://secure.example:"+port+"/page"); code != http.StatusOK || o.count("/robots.txt") != 1 {
		t.Errorf("after the CA file was renewed and reloaded: %d %q %q, robots.txt served %d times; want 200, fetched once", code, gate, body, o.count("/robots.txt"))
	}
}

// TestReloadChangesNextHop: a reload that changes upstream.proxy sends
// what is decided from then on through the new next hop, and nothing
// more through the old one: plain requests, requests inside MITM tunnels
// (the tunnel opened before the reload too), CONNECTs in tunnel mode, and
// robotsgate's own robots.txt fetches.
func TestReloadChangesNextHop(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	plain := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	_, pport, _ := strings.Cut(strings.TrimPrefix(plain.URL, "http://127.0.0.1"), ":")
	_, tport := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n", "secure.example")
	for _, mode := range []string{"mitm", "tunnel"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			first, second := newNextHop(t), newNextHop(t)
			configFor := func(next *nextHop) *config.Config {
				cfg := config.Default()
				cfg.Listen = "127.0.0.1:0"
				cfg.TLS.StateDir = t.TempDir()
				cfg.TLS.Mode = mode
				cfg.Upstream.Proxy = next.URL
				cfg.Upstream.CA = pki.pemPath
				return cfg
			}
			p, _ := startWithLookup(t, configFor(first), publicLookup)
			var c *http.Client
			if mode == "mitm" {
				c = p.mitmClient(t, nil, false)
			} else {
				pool := x509.NewCertPool()
				pool.AddCert(pki.cert)
				c = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
					Proxy: http.ProxyURL(p.url), TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true,
				}}
			}
			plainURL := func(path string) string { return "http://plain.example:" + pport + path }
			secureURL := func(path string) string { return "https://secure.example:" + tport + path }
			for _, u := range []string{plainURL("/before"), secureURL("/before")} {
				if code, gate, body := getBody(t, c, u); code != http.StatusOK {
					t.Fatalf("GET %s through the first next hop: %d %q %q; want 200", u, code, gate, body)
				}
			}
			if err := p.srv.Reload(configFor(second)); err != nil {
				t.Fatalf("Reload with another upstream.proxy: %v", err)
			}
			// An origin not seen before: its robots.txt is fetched now.
			fresh := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
			_, fport, _ := strings.Cut(strings.TrimPrefix(fresh.URL, "http://127.0.0.1"), ":")
			for _, u := range []string{plainURL("/after"), secureURL("/after"), "http://fresh.example:" + fport + "/after"} {
				if code, gate, body := getBody(t, c, u); code != http.StatusOK {
					t.Errorf("GET %s after the reload: %d %q %q; want 200", u, code, gate, body)
				}
			}
			want := []string{
				"GET http://plain.example:" + pport + "/after",
				"GET http://fresh.example:" + fport + "/robots.txt",
				"GET http://fresh.example:" + fport + "/after",
				"CONNECT secure.example:" + tport,
			}
			got := second.targets()
			for _, w := range want {
				if !slices.Contains(got, w) {
					t.Errorf("the new next hop was asked %q; want it to include %q", got, w)
				}
			}
			for _, s := range first.targets() {
				if strings.Contains(s, "/after") || strings.Contains(s, "fresh.example") {
					t.Errorf("the old next hop was asked %q after the reload", s)
				}
			}
		})
	}
}

// TestReloadSaysRobotsNeedsRestart: the robots.txt cache and its fetchers
// are built at start, so a reload that changes [robots] says a restart
// applies it, and one that changes only [upstream] does not. A reload
// that leaves [upstream] and upstream.ca's file as they were (a SIGHUP
// to reopen the audit file) keeps the connections to origins.
func TestReloadSaysRobotsNeedsRestart(t *testing.T) {
	t.Parallel()
	cfg := loopbackConfig()
	cfg.TLS.StateDir = t.TempDir()
	p, _ := startWithLookup(t, cfg, loopbackLookup)
	next := *cfg
	next.Upstream.Timeout = 10 * time.Second
	if err := p.srv.Reload(&next); err != nil {
		t.Fatal(err)
	}
	if log := p.log.String(); strings.Contains(log, "restart to apply") || !strings.Contains(log, "[upstream] applied") {
		t.Errorf("a reload changing upstream.timeout logged:\n%s\nwant [upstream] applied, no restart", log)
	}
	out := p.srv.snap.Load().out
	next.Robots.FetchTimeout = 5 * time.Second
	if err := p.srv.Reload(&next); err != nil {
		t.Fatal(err)
	}
	if p.srv.snap.Load().out != out {
		t.Error("a reload that left [upstream] as it was replaced the egress; want it kept, with its connections")
	}
	if log := p.log.String(); !strings.Contains(log, "[robots] changed: restart to apply") {
		t.Errorf("a reload changing robots.fetch_timeout logged:\n%s\nwant [robots] changed: restart to apply", log)
	}
}
