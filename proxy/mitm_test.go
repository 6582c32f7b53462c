package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// testPKI is a throwaway CA for test origins, trusted by the proxy through
// upstream.ca.
type testPKI struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	pemPath string
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test origin CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	path := filepath.Join(t.TempDir(), "origin-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return &testPKI{cert: cert, key: key, pemPath: path}
}

// serverCert issues a certificate for names (DNS names or IPs).
func (p *testPKI) serverCert(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if a, err := netip.ParseAddr(n); err == nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsOrigin is an HTTPS test origin with a certificate from pki.
func tlsOrigin(t testing.TB, pki *testPKI, robotsTxt string, names ...string) (*testOrigin, string) {
	t.Helper()
	o := &testOrigin{}
	o.robots.Store(robotsTxt)
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := o.hits.LoadOrStore(r.URL.EscapedPath(), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		if r.URL.Path == "/robots.txt" {
			io.WriteString(w, o.robots.Load().(string))
			return
		}
		if o.handler != nil { // set before the first request
			o.handler(w, r)
			return
		}
		fmt.Fprintf(w, "secure page %s host %s\n", r.URL.Path, r.Host)
	}))
	o.TLS = &tls.Config{Certificates: []tls.Certificate{pki.serverCert(t, names...)}}
	o.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are what some tests are about
	o.StartTLS()
	t.Cleanup(o.Close)
	_, port, _ := net.SplitHostPort(o.Listener.Addr().String())
	return o, port
}

// loopbackLookup resolves every name to 127.0.0.1, so that test origins
// can be reached under real (IDN) host names.
func loopbackLookup(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// startMITM runs a MITM proxy whose upstream trusts pki, its config
// changed by mutate and its Options by each of opts (after the test's
// logger, audit buffer and loopback lookup are set).
func startMITM(t testing.TB, pki *testPKI, mutate func(*config.Config), opts ...func(*Options)) *testProxy {
	t.Helper()
	cfg := loopbackConfig()
	cfg.TLS.StateDir = t.TempDir()
	if pki != nil {
		cfg.Upstream.CA = pki.pemPath
	}
	if mutate != nil {
		mutate(cfg)
	}
	if _, err := policy.Compile(cfg); err != nil {
		t.Fatal(err)
	}
	p := &testProxy{audit: &testkit.Buffer{}, log: &testkit.Buffer{}}
	o := Options{Logger: testLogger(p.log), AuditOut: p.audit, LookupNetIP: loopbackLookup}
	for _, opt := range opts {
		opt(&o)
	}
	srv, err := NewServer(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := contextWithTimeout(5 * time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	p.srv = srv
	p.url = mustURL("http://" + ln.Addr().String())
	return p
}

// mitmClient trusts robotsgate's CA only (never InsecureSkipVerify) and
// counts its connections to the proxy.
func (p *testProxy) mitmClient(t *testing.T, dials *atomic.Int64, h2 bool) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.srv.CA().PEM()) {
		t.Fatal("CA certificate does not parse")
	}
	tr := &http.Transport{
		Proxy:              http.ProxyURL(p.url),
		TLSClientConfig:    &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2:  h2,
		MaxConnsPerHost:    1,
		DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials != nil {
				dials.Add(1)
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func TestMITMBlockedAndAllowedInOneTunnel(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "shop.example", "127.0.0.1")
	p := startMITM(t, pki, nil)
	var dials atomic.Int64
	c := p.mitmClient(t, &dials, false)
	base := "https://shop.example:" + port

	resp, body := get(t, c, base+"/private/a", "User-Agent", "ShopBot/1.0")
	if resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate") != "disallowed" || resp.Header.Get("X-Robots-Gate-Rule") != "disallow: /private (line 2)" {
		t.Errorf("blocked: %d %v\n%s", resp.StatusCode, resp.Header, body)
	}
	resp, body = get(t, c, base+"/public", "User-Agent", "ShopBot/1.0")
	if resp.StatusCode != 200 || body != "secure page /public host shop.example:"+port+"\n" {
		t.Errorf("allowed: %d %q", resp.StatusCode, body)
	}
	resp, _ = get(t, c, base+"/private/b", "User-Agent", "ShopBot/1.0")
	if resp.StatusCode != 403 {
		t.Errorf("second block on the tunnel: %d", resp.StatusCode)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("client opened %d connections to the proxy; want 1 kept-alive tunnel", n)
	}
	if o.count("/private/a") != 0 || o.count("/private/b") != 0 || o.count("/public") != 1 {
		t.Errorf("origin hits: /private/a %d, /private/b %d, /public %d", o.count("/private/a"), o.count("/private/b"), o.count("/public"))
	}
	rec := p.lastAudit(t)
	if rec["origin"] != "https://shop.example:"+port || rec["url"] != base+"/private/b" || rec["msg"] != "blocked" {
		t.Errorf("audit = %v", rec)
	}
}

func TestMITMLeafCertificates(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, port := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n", "a.example", "127.0.0.1")
	p := startMITM(t, pki, nil)
	ca := p.srv.CA()
	leafFor := func(host string) *x509.Certificate {
		c := p.mitmClient(t, nil, false)
		resp, err := c.Get("https://" + net.JoinHostPort(host, port) + "/x")
		if err != nil {
			t.Fatalf("GET via %s: %v", host, err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0]
	}
	asked := time.Now()
	leaf := leafFor("a.example")
	if leaf.Issuer.CommonName != ca.Cert.Subject.CommonName || len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "a.example" {
		t.Errorf("leaf: issuer %q, DNS names %v", leaf.Issuer.CommonName, leaf.DNSNames)
	}
	if _, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("leaf key is %T; want ECDSA", leaf.PublicKey)
	}
	// A week from when it was signed, between the request and now (in
	// whole seconds, as a certificate holds them), however long that was.
	if week := 7 * 24 * time.Hour; leaf.NotAfter.Before(asked.Add(week).Truncate(time.Second)) || leaf.NotAfter.After(time.Now().Add(week)) || leaf.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("leaf valid until %v; want a week from its signing (between %v and now), never past the CA's %v", leaf.NotAfter, asked, ca.Cert.NotAfter)
	}
	if again := leafFor("a.example"); again.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		t.Error("a second connection to the same host got a newly signed leaf; want the cached one")
	}
	if ip := leafFor("127.0.0.1"); len(ip.IPAddresses) != 1 || !ip.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("IP host: IP SANs %v", ip.IPAddresses)
	}
}

// rawTunnel opens a CONNECT tunnel to authority and, unless plain, speaks
// TLS in it with serverName, trusting robotsgate's CA.
func (p *testProxy) rawTunnel(t *testing.T, authority, serverName string, plain bool) (net.Conn, *bufio.Reader) {
	t.Helper()
	resp, c, br := connect(t, p, authority)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v", authority, resp.Status)
	}
	if plain {
		return c, br
	}
	tc := tlsClient(t, c, p.srv.CA().PEM(), serverName)
	return tc, bufio.NewReader(tc)
}

func roundTripRaw(t *testing.T, c net.Conn, br *bufio.Reader, request string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("response to %q: %v", request, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestMITMMisdirectedAndPlainHTTPInTunnel(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "a.example")
	p := startMITM(t, pki, nil)
	c, br := p.rawTunnel(t, "a.example:"+port, "a.example", false)
	resp, body := roundTripRaw(t, c, br, "GET /public HTTP/1.1\r\nHost: b.example:"+port+"\r\n\r\n")
	if resp.StatusCode != http.StatusMisdirectedRequest || resp.Header.Get("X-Robots-Gate") != "misdirected" {
		t.Errorf("other host in tunnel: %d %q %q", resp.StatusCode, resp.Header.Get("X-Robots-Gate"), body)
	}
	resp, body = roundTripRaw(t, c, br, "GET https://b.example:"+port+"/public HTTP/1.1\r\nHost: b.example:"+port+"\r\n\r\n")
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("absolute-form to another host: %d %q", resp.StatusCode, body)
	}
	resp, body = roundTripRaw(t, c, br, "GET /public HTTP/1.1\r\nHost: A.EXAMPLE:"+port+"\r\n\r\n")
	if resp.StatusCode != 200 || !strings.Contains(body, "/public") {
		t.Errorf("same origin, other spelling, same tunnel: %d %q", resp.StatusCode, body)
	}
	if o.count("/public") != 1 {
		t.Errorf("origin saw /public %d times; want 1", o.count("/public"))
	}
	if rec := p.auditLines(t)[0]; rec["msg"] != "refused" || rec["decision"] != "misdirected" || rec["status"] != 421.0 {
		t.Errorf("audit = %v", rec)
	}

	// Plain HTTP inside a CONNECT is decided as http.
	plain := newTestOrigin(t, testRobots, nil)
	_, pport, _ := net.SplitHostPort(strings.TrimPrefix(plain.URL, "http://"))
	pc, pbr := p.rawTunnel(t, "127.0.0.1:"+pport, "", true)
	resp, _ = roundTripRaw(t, pc, pbr, "GET /private HTTP/1.1\r\nHost: 127.0.0.1:"+pport+"\r\n\r\n")
	if resp.StatusCode != 403 {
		t.Errorf("plain HTTP in tunnel, disallowed path: %d; want 403", resp.StatusCode)
	}
	if rec := p.lastAudit(t); rec["origin"] != "http://127.0.0.1:"+pport {
		t.Errorf("plain HTTP in tunnel: origin %v; want http://127.0.0.1:%s", rec["origin"], pport)
	}
	resp, _ = roundTripRaw(t, pc, pbr, "GET /ok HTTP/1.1\r\nHost: 127.0.0.1:"+pport+"\r\n\r\n")
	if resp.StatusCode != 200 || plain.count("/ok") != 1 {
		t.Errorf("plain HTTP in tunnel, allowed path: %d, origin hits %d", resp.StatusCode, plain.count("/ok"))
	}
}

func TestMITMGarbageInTunnelIsClosed(t *testing.T) {
	t.Parallel()
	p := startMITM(t, nil, nil)
	c, br := p.rawTunnel(t, "a.example:443", "", true)
	io.WriteString(c, "\x00\x01 this is neither TLS nor HTTP\r\n\r\n")
	// The proxy closes the tunnel at once: the client reads its end (EOF),
	// with nothing before it, well before the idle timeout would.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, br)
	if err != nil || n != 0 {
		t.Fatalf("after garbage: read %d bytes, then %v; want the tunnel closed (EOF) at once", n, err)
	}
	waitForLog(t, p.log, "neither TLS nor HTTP/1.x: closed")
}

func waitForLog(t *testing.T, log *testkit.Buffer, want string) {
	t.Helper()
	if !testkit.Poll(5*time.Second, func() bool { return strings.Contains(log.String(), want) }) {
		t.Errorf("log never said %q:\n%s", want, log.String())
	}
}

func TestMITMUntrustedUpstream(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, port := tlsOrigin(t, pki, testRobots, "a.example")
	p := startMITM(t, nil, nil) // upstream.ca not set: the origin's CA is unknown
	c := p.mitmClient(t, nil, false)
	resp, body := get(t, c, "https://a.example:"+port+"/robots.txt")
	want := "upstream a.example:" + port + ": tls-verify: certificate signed by an unknown authority\n"
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("X-Robots-Gate") != "upstream-error" || body != want {
		t.Errorf("robots.txt of an untrusted origin: %d %q; want 502 %q", resp.StatusCode, body, want)
	}
	// Retrying cannot help: 502 naming the problem and upstream.ca, no
	// Retry-After (it was 503 unreachable, with one).
	resp, body = get(t, c, "https://a.example:"+port+"/page")
	if resp.StatusCode != 502 || resp.Header.Get("X-Robots-Gate") != "upstream-error" || resp.Header.Get("Retry-After") != "" ||
		!strings.Contains(body, "tls-verify") || !strings.Contains(body, "upstream.ca") {
		t.Errorf("page of an untrusted origin: %d %q Retry-After %q; want 502 upstream-error naming tls-verify and upstream.ca:\n%s",
			resp.StatusCode, resp.Header.Get("X-Robots-Gate"), resp.Header.Get("Retry-After"), body)
	}
}

// TestMITMHTTP2Client: a client that offers h2 gets it inside the
// tunnel ([tls] http2 is on by default), and every stream is still
// decided (see h2_test.go; TestH2Off for http2 = false).
func TestMITMHTTP2Client(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "a.example")
	p := startMITM(t, pki, nil)
	c := p.mitmClient(t, nil, true)
	resp, _ := get(t, c, "https://a.example:"+port+"/private")
	if resp.StatusCode != 403 || resp.ProtoMajor != 2 {
		t.Errorf("h2-offering client: %d over %s; want 403 over HTTP/2", resp.StatusCode, resp.Proto)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.srv.CA().PEM())
	c2, _ := p.rawTunnel(t, "a.example:"+port, "a.example", true)
	tc := tls.Client(c2, &tls.Config{RootCAs: pool, ServerName: "a.example", NextProtos: []string{"h2", "http/1.1"}})
	if err := tc.Handshake(); err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
		t.Errorf("handshake offering h2 and http/1.1: %v, chose %q; want h2", err, tc.ConnectionState().NegotiatedProtocol)
	}
	if o.count("/private") != 0 {
		t.Error("blocked request reached the origin")
	}
}

func TestMITMIDNHost(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "xn--mller-kva.test")
	p := startMITM(t, pki, nil)
	// CONNECT authorities are ASCII (net/http refuses others with 400):
	// clients send the punycode form, in any case.
	for _, host := range []string{"xn--mller-kva.test", "XN--MLLER-KVA.TEST", "xn--mller-kva.test."} {
		c, br := p.rawTunnel(t, host+":"+port, "xn--mller-kva.test", false)
		resp, _ := roundTripRaw(t, c, br, "GET /private HTTP/1.1\r\nHost: xn--mller-kva.test:"+port+"\r\n\r\n")
		if resp.StatusCode != 403 {
			t.Errorf("CONNECT %s, /private: %d; want 403", host, resp.StatusCode)
		}
		resp, body := roundTripRaw(t, c, br, "GET /ok HTTP/1.1\r\nHost: XN--MLLER-KVA.test:"+port+"\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Errorf("CONNECT %s, /ok with the Host in capitals: %d %q; want 200", host, resp.StatusCode, body)
		}
		if rec := p.lastAudit(t); rec["origin"] != "https://xn--mller-kva.test:"+port {
			t.Errorf("CONNECT %s: origin %v", host, rec["origin"])
		}
	}
	if n := o.count("/robots.txt"); n != 1 {
		t.Errorf("robots.txt fetched %d times for one origin under three spellings; want 1", n)
	}
	// A Host that is not ASCII is malformed HTTP (clients send punycode).
	c, br := p.rawTunnel(t, "xn--mller-kva.test:"+port, "xn--mller-kva.test", false)
	if resp, _ := roundTripRaw(t, c, br, "GET /ok HTTP/1.1\r\nHost: müller.test:"+port+"\r\n\r\n"); resp.StatusCode != 400 {
		t.Errorf("Unicode Host inside a tunnel: %d; want 400", resp.StatusCode)
	}
}

func TestTunnelMode(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	closed, cport := tlsOrigin(t, pki, "User-agent: *\nDisallow: /\n", "closed.example")
	partial, pport := tlsOrigin(t, pki, "User-agent: *\nDisallow: /private\n", "partial.example")
	allowed, aport := tlsOrigin(t, pki, "User-agent: *\nDisallow: /\nAllow: /public\n", "allowed.example")
	p := startMITM(t, pki, func(c *config.Config) { c.TLS.Mode = "tunnel" })
	connect := func(authority string) *http.Response {
		c, err := net.DialTimeout("tcp", p.url.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: ShopBot/1.0\r\n\r\n", authority, authority)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("CONNECT %s: %v", authority, err)
		}
		return resp
	}
	if resp := connect("closed.example:" + cport); resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate") != "disallowed" {
		t.Errorf("whole origin disallowed: %d %q; want 403 disallowed", resp.StatusCode, resp.Header.Get("X-Robots-Gate"))
	}
	if rec := p.lastAudit(t); rec["url"] != "closed.example:"+cport || rec["origin"] != "https://closed.example:"+cport || rec["msg"] != "blocked" {
		t.Errorf("audit = %v", rec)
	}
	for _, a := range []string{"partial.example:" + pport, "allowed.example:" + aport} {
		if resp := connect(a); resp.StatusCode != 200 {
			t.Errorf("CONNECT %s: %d; want the tunnel opened", a, resp.StatusCode)
		}
	}
	// Through the tunnel the path is not seen: a disallowed path passes.
	pool := x509.NewCertPool()
	pool.AddCert(pki.cert)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(p.url), TLSClientConfig: &tls.Config{RootCAs: pool},
		DialTLSContext: nil}, Timeout: 10 * time.Second}
	c.Transport.(*http.Transport).DialContext = (&net.Dialer{}).DialContext
	// The client resolves nothing itself: it asks the proxy for partial.example.
	resp, _ := get(t, c, "https://partial.example:"+pport+"/private")
	if resp.StatusCode != 200 {
		t.Errorf("tunnelled /private: %d; want 200 (tunnel mode cannot see paths)", resp.StatusCode)
	}
	_, _, _ = closed, partial, allowed
	// Unreachable with no copy: 503.
	down := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	down.TLS = &tls.Config{Certificates: []tls.Certificate{pki.serverCert(t, "down.example")}}
	down.StartTLS()
	t.Cleanup(down.Close)
	_, dport, _ := net.SplitHostPort(down.Listener.Addr().String())
	if resp := connect("down.example:" + dport); resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("unreachable origin: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestCONNECTPrivateAddress(t *testing.T) {
	t.Parallel()
	p := startMITM(t, nil, func(c *config.Config) { c.Upstream.BlockPrivate = true })
	c, err := net.DialTimeout("tcp", p.url.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "CONNECT internal.example:443 HTTP/1.1\r\nHost: internal.example:443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate") != "private-address" {
		t.Fatalf("CONNECT to a name resolving to loopback: %v %v; want 403 private-address", resp, err)
	}
	if rec := p.lastAudit(t); rec["url"] != "internal.example:443" || rec["msg"] != "refused" {
		t.Errorf("audit = %v", rec)
	}
}

// TestTunnelIdleTimeout: an idle tunnel is closed after
// tunnel_idle_timeout; one with traffic keeps going past it. (Tunnel mode
// relays TLS only: plain HTTP in a tunnel is decided request by request.)
func TestTunnelIdleTimeout(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	echo, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pki.serverCert(t, "127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	// A plain-HTTP origin at the same address would be needed for robots.txt
	// in tunnel mode; a [[sites]] allow skips it.
	p := startMITM(t, nil, func(c *config.Config) {
		c.TLS.Mode = "tunnel"
		// Long enough that a TLS handshake under -race, or a stall of the
		// test's pings, on a loaded machine does not look idle.
		c.Limits.TunnelIdleTimeout = 3 * time.Second
		c.Sites = []config.SiteRule{{Host: "127.0.0.1", Policy: "allow", Reason: "echo"}}
	})
	open := func() (net.Conn, *bufio.Reader) {
		c, err := net.DialTimeout("tcp", p.url.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n", echo.Addr())
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(pki.cert)
		tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("TLS through the tunnel: %v", err)
		}
		return tc, bufio.NewReader(tc)
	}
	busy, busyR := open()
	_, idleR := open()
	idleEnded := make(chan error, 1)
	go func() {
		_, err := idleR.ReadByte() // EOF when the proxy closes it; the 30 s deadline otherwise
		idleEnded <- err
	}()
	// Traffic on the busy tunnel until the idle one, opened after it, is
	// closed, and 5 pings more: the busy one has then lived past the
	// timeout, whatever the machine's speed.
	after := -1
	for i := 0; after < 0 || i <= after+5; i++ {
		if after < 0 && i == 200 { // 20 s and more: within the connections' 30 s deadline
			t.Fatal("the idle tunnel was not closed within 200 pings of the busy one")
		}
		fmt.Fprintf(busy, "ping %d\n", i)
		if line, err := busyR.ReadString('\n'); err != nil || line != fmt.Sprintf("ping %d\n", i) {
			t.Fatalf("busy tunnel cut at ping %d: %q %v", i, line, err)
		}
		if after < 0 {
			select {
			case err := <-idleEnded:
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("idle tunnel still open after its timeout: %v", err)
				}
				after = i
			default:
			}
		}
		time.Sleep(100 * time.Millisecond) // pacing the traffic, not waiting for state
	}
}

func TestMITMWebSocket(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			io.WriteString(w, "User-agent: *\nDisallow: /ws-private\n")
			return
		}
		wsEcho(w, r)
	}))
	o.TLS = &tls.Config{Certificates: []tls.Certificate{pki.serverCert(t, "ws.example")}}
	o.StartTLS()
	t.Cleanup(o.Close)
	_, port, _ := net.SplitHostPort(o.Listener.Addr().String())
	p := startMITM(t, pki, nil)
	checkWebSocket(t, func(path string) (net.Conn, *bufio.Reader, *http.Response) {
		c, br := p.rawTunnel(t, "ws.example:"+port, "ws.example", false)
		fmt.Fprintf(c, wsUpgrade, path, "ws.example:"+port)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c, br, resp
	})
}

// TestOpenTunnelsGauge: the tunnels gauge goes back to 0 when MITM and
// plain tunnels close.
func TestOpenTunnelsGauge(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, port := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n", "a.example")
	p := startMITM(t, pki, nil)
	for range 3 {
		c, br := p.rawTunnel(t, "a.example:"+port, "a.example", false)
		roundTripRaw(t, c, br, "GET /x HTTP/1.1\r\nHost: a.example:"+port+"\r\nConnection: close\r\n\r\n")
		c.Close()
	}
	if testkit.Poll(5*time.Second, func() bool { return p.srv.conns.tunnels.Load() == 0 && p.srv.conns.count.Load() == 0 }) {
		return
	}
	t.Errorf("after the tunnels closed: open_tunnels %d, open_connections %d; want 0, 0", p.srv.conns.tunnels.Load(), p.srv.conns.count.Load())
}

// TestMITMReuse: tunnels opened one after another share robotsgate's side
// of the work: a client that reconnects resumes its TLS session (one
// config, one set of ticket keys, for every tunnel), and the requests of
// clients that close their connections after each one ("Connection:
// close", as clients without keep-alive send) still share one upstream
// connection, which that header does not concern.
func TestMITMReuse(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "reuse.example")
	var mu sync.Mutex
	remotes := map[string]bool{}
	o.handler = func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes[r.RemoteAddr] = true
		mu.Unlock()
		io.WriteString(w, "ok")
	}
	p := startMITM(t, pki, nil)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.srv.CA().PEM())
	sessions := tls.NewLRUClientSessionCache(8)
	var resumed int
	for i := range 5 {
		resp, c, _ := connect(t, p, "reuse.example:"+port)
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT %d: %d", i, resp.StatusCode)
		}
		tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "reuse.example", ClientSessionCache: sessions})
		resp, body := roundTripRaw(t, tc, bufio.NewReader(tc), "GET /page HTTP/1.1\r\nHost: reuse.example:"+port+"\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if tc.ConnectionState().DidResume {
			resumed++
		}
		tc.Close()
	}
	if resumed < 4 {
		t.Errorf("%d of 5 tunnels resumed their TLS session; want every one after the first", resumed)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(remotes) != 1 {
		t.Errorf("the origin saw %d connections for 5 requests; want 1, reused", len(remotes))
	}
}

// TestCAServed: the proxy's own listener serves the CA it signs with at
// /ca.pem, to any client and from any page (a certificate is public); a
// client that trusts only what it fetched there gets through a tunnel.
// In tunnel mode there is no CA, and /ca.pem says so.
func TestCAServed(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, port := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n", "a.example", "127.0.0.1")
	p := startMITM(t, pki, nil)
	req, _ := http.NewRequest(http.MethodGet, p.url.String()+"/ca.pem", nil)
	req.Header.Set("Origin", "https://elsewhere.example") // a page of another site may link it
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	pemBytes, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-pem-file" || !bytes.Equal(pemBytes, p.srv.CA().PEM()) {
		t.Fatalf("/ca.pem: %d %v\n%s", resp.StatusCode, resp.Header, pemBytes)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatal("/ca.pem does not parse")
	}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(p.url), TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	if resp, body := get(t, c, "https://a.example:"+port+"/x"); resp.StatusCode != 200 {
		t.Errorf("through the tunnel with the served CA: %d %q", resp.StatusCode, body)
	}

	tp := startMITM(t, pki, func(c *config.Config) { c.TLS.Mode = "tunnel" })
	resp, err = http.Get(tp.url.String() + "/ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(body), "tunnel") {
		t.Errorf("/ca.pem in tunnel mode: %d %q", resp.StatusCode, body)
	}
}
