package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/identity/identitytest"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// received keeps what an origin received: each request's path and a copy
// of it, to verify as the origin would.
type received struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (rc *received) record(r *http.Request) {
	c := r.Clone(r.Context())
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, c)
	rc.mu.Unlock()
}

func (rc *received) all() []*http.Request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*http.Request(nil), rc.reqs...)
}

const testAgent = "https://bot.example/.well-known/http-message-signatures-directory"

// TestIdentitySignsEverything: with [identity], every request robotsgate
// sends carries a signature an independent verifier accepts with the key
// directory robotsgate serves: forwarded requests, plain and inside a MITM
// tunnel (a client's own Signature fields replaced), the robots.txt fetch
// and the redirect hop it follows, and the usage files' fetches; each is
// counted. The key is made on first start, mode 0600.
func TestIdentitySignsEverything(t *testing.T) {
	t.Parallel()
	var got received
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.record(r)
		switch r.URL.Path {
		case "/robots.txt":
			http.Redirect(w, r, "/moved-robots.txt", http.StatusMovedPermanently)
		case "/moved-robots.txt":
			io.WriteString(w, "User-agent: *\nDisallow: /private\n")
		case "/.well-known/tdmrep.json":
			io.WriteString(w, "[]")
		default:
			io.WriteString(w, "page\n")
		}
	}))
	t.Cleanup(o.Close)
	pki := newTestPKI(t)
	tlsO, port := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n", "shop.example")
	var tlsGot received
	tlsO.handler = func(w http.ResponseWriter, r *http.Request) { tlsGot.record(r); io.WriteString(w, "secure\n") }
	p := startMITM(t, pki, func(c *config.Config) { c.Identity.SignatureAgent = testAgent })

	// The directory, as a site would fetch it where it is published.
	resp, body := get(t, http.DefaultClient, p.url.String()+"/.well-known/http-message-signatures-directory")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != identity.DirectoryType ||
		!strings.Contains(resp.Header.Get("Signature-Input"), `tag="http-message-signatures-directory"`) {
		t.Fatalf("directory: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	dir := []byte(body)

	c := p.client()
	req, _ := http.NewRequest(http.MethodGet, o.URL+"/page", nil)
	req.Header.Set("Signature", "sig1=:Y2xpZW50:")
	req.Header.Set("Signature-Input", `sig1=("@method");created=1`)
	req.Header.Set("Signature-Agent", `sig1="https://impostor.example"`)
	req.Header.Set(policy.PurposeHeader, "ai-train")
	if resp, err := c.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /page: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if resp, _ := get(t, p.mitmClient(t, nil, false), "https://shop.example:"+port+"/secure"); resp.StatusCode != 200 {
		t.Fatalf("GET in a MITM tunnel: %d", resp.StatusCode)
	}

	paths := map[string]bool{}
	for _, r := range append(got.all(), tlsGot.all()...) {
		paths[r.URL.Path] = true
		sig, err := identitytest.Verify(r, dir, time.Now())
		if err != nil {
			t.Errorf("%s: %v\n%v", r.URL.Path, err, r.Header)
			continue
		}
		if sig.Agent != testAgent {
			t.Errorf("%s: agent %q; want %q", r.URL.Path, sig.Agent, testAgent)
		}
		if n := len(r.Header.Values("Signature")); n != 1 {
			t.Errorf("%s: %d Signature fields; want 1 (the client's replaced)", r.URL.Path, n)
		}
	}
	for _, want := range []string{"/robots.txt", "/moved-robots.txt", "/.well-known/tdmrep.json", "/page", "/secure"} {
		if !paths[want] {
			t.Errorf("the origin saw no signed %s (saw %v)", want, paths)
		}
	}
	if n := testutil.ToFloat64(p.srv.metrics.signed); n < 5 {
		t.Errorf("robotsgate_signed_requests_total = %v; want at least 5", n)
	}
	fi, err := os.Stat(filepath.Join(p.srv.started.TLS.StateDir, "identity-key.pem"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("identity key: %v, mode %v; want made, 0600", err, fi.Mode())
	}
}

// TestIdentityOff: without [identity] nothing is signed, a client's own
// signature passes as it sent it, and there is no key directory.
func TestIdentityOff(t *testing.T) {
	t.Parallel()
	var got received
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", func(w http.ResponseWriter, r *http.Request) { got.record(r) })
	p := startProxy(t, loopbackConfig())
	if resp, _ := get(t, p.client(), o.URL+"/page", "Signature", "sig1=:Y2xpZW50:"); resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	for _, r := range got.all() {
		if r.Header.Get("Signature") != "sig1=:Y2xpZW50:" || r.Header.Get("Signature-Agent") != "" {
			t.Errorf("%s arrived with %v; want the client's own signature only", r.URL.Path, r.Header)
		}
	}
	if resp, _ := get(t, http.DefaultClient, p.url.String()+"/.well-known/http-message-signatures-directory"); resp.StatusCode != 404 {
		t.Errorf("directory without [identity]: %d; want 404", resp.StatusCode)
	}
}

// TestIdentityStripsEverySpelling: a client's signature and price fields
// are never forwarded under robotsgate's signature, in any spelling a
// site may read as them (Signature_Input, crawler_max_price): a raw client
// sends them, and the raw origin's log shows robotsgate's own fields
// only, plain and inside a MITM tunnel.
func TestIdentityStripsEverySpelling(t *testing.T) {
	t.Parallel()
	const clients = "Signature_Input: sig1=(\"@method\");created=1\r\n" +
		"signature_agent: sig1=\"https://impostor.example\"\r\n" +
		"SIGNATURE: sig1=:Y2xpZW50:\r\n" +
		"Crawler_Exact_Price: USD 9.99\r\n" +
		"crawler_max_price: USD 9.98\r\n" +
		"CRAWLER-MAX-PRICE: USD 9.97\r\n"
	for _, e := range entryPaths[:2] { // plain, and inside a MITM tunnel
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			p, o := e.setUp(t, func(c *config.Config) {
				c.Upstream.BlockPrivate = false
				c.Identity.SignatureAgent = testAgent
				c.Payments.MaxPrice, c.Payments.Budget = "USD 0.01", "USD 1"
			})
			conn, br := e.open(t, p, o)
			resp, body := send(t, conn, br, "GET "+e.target(o, "/page")+" HTTP/1.1\r\nHost: "+o.addr+"\r\n"+clients+"\r\n")
			if resp.StatusCode != 200 {
				t.Fatalf("GET /page: %d %q", resp.StatusCode, body)
			}
			got := o.received()
			page := got[strings.Index(got, "GET /page"):]
			page = page[:strings.Index(page, "\r\n\r\n")]
			for _, v := range []string{"impostor", "Y2xpZW50", `("@method")`, "9.99", "9.98", "9.97"} {
				if strings.Contains(page, v) {
					t.Errorf("the origin received the client's %q:\n%s", v, page)
				}
			}
			lower := strings.ToLower(page)
			for _, f := range []string{"\nsignature-input:", "\nsignature-agent:", "\nsignature:"} {
				if n := strings.Count(lower, f); n != 1 {
					t.Errorf("the origin received %d %s fields; want robotsgate's one:\n%s", n, f[1:], page)
				}
			}
			if strings.Contains(lower, "crawler") {
				t.Errorf("the origin received a price field:\n%s", page)
			}
		})
	}
}

// TestIdentityDirectoryAuthority: the key directory is signed for the
// signature agent's authority, where it is published, whatever Host a
// client names: asked with Host: evil.example, its signature verifies
// for bot.example and not for evil.example. The agent's authority is
// written as every origin's is: an IDNA host in lower-case ASCII, an
// IPv4 address in dotted decimal.
func TestIdentityDirectoryAuthority(t *testing.T) {
	t.Parallel()
	for agent, authority := range map[string]string{
		"https://Bot.Example:443/.well-known/http-message-signatures-directory":       "bot.example",
		"https://XN--Bcher-KVA.Example/.well-known/http-message-signatures-directory": "xn--bcher-kva.example",
		"https://127.1:8443/.well-known/http-message-signatures-directory":            "127.0.0.1:8443",
	} {
		p := startProxy(t, func() *config.Config {
			c := loopbackConfig()
			c.Identity.SignatureAgent = agent
			return c
		}())
		for _, host := range []string{"evil.example", authority, p.url.Host} {
			resp, body := p.raw(t, "GET /.well-known/http-message-signatures-directory HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
			if resp.StatusCode != 200 {
				t.Fatalf("directory asked as %s: %d %q", host, resp.StatusCode, body)
			}
			if err := identitytest.VerifyDirectory(resp.Header, []byte(body), authority, time.Now()); err != nil {
				t.Errorf("agent %s, directory asked as %s: for %s: %v", agent, host, authority, err)
			}
			if err := identitytest.VerifyDirectory(resp.Header, []byte(body), host, time.Now()); host != authority && err == nil {
				t.Errorf("agent %s, directory asked as %s: verifies for %s; want for the signature agent's authority only", agent, host, host)
			}
		}
	}
}
