package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/robotsgate/robotsgate/proxy/upstream"
)

// mapCertStore is the leaf-certificate cache plain goproxy needs not to
// sign a certificate for every CONNECT.
type mapCertStore struct {
	mu sync.Mutex
	m  map[string]*tls.Certificate
}

func (s *mapCertStore) Fetch(host string, gen func() (*tls.Certificate, error)) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.m[host]; ok {
		return c, nil
	}
	c, err := gen()
	if err == nil {
		s.m[host] = c
	}
	return c, err
}

// mitmBench sets up an HTTPS origin, robotsgate in MITM mode, and plain
// goproxy MITM (no hooks, the same tuned transport) with and without a
// leaf-certificate cache, and with a cache and AllowHTTP2 (goproxyH2,
// which serves h2 to a client offering it and HTTP/1.1 to the others),
// all on loopback.
type mitmBench struct {
	target                             string
	rg, goproxyStore, plain, goproxyH2 *url.URL
	pool                               *x509.CertPool
}

func newMITMBench(b *testing.B) *mitmBench {
	b.Helper()
	pki := newTestPKI(b)
	_, port := tlsOrigin(b, pki, "User-agent: *\nDisallow: /private\n", "shop.example")

	cfg := loopbackConfig()
	cfg.TLS.StateDir = b.TempDir()
	cfg.Upstream.CA = pki.pemPath
	rg, rgURL := serveRobotsgate(b, cfg, Options{LookupNetIP: loopbackLookup})

	newGoproxy := func(store goproxy.CertStorage, h2 bool) *url.URL {
		tr, err := upstream.NewTransport(upstream.Options{Timeout: cfg.Upstream.Timeout, CA: cfg.Upstream.CA, MaxIdle: cfg.Limits.MaxConnections,
			MaxHeaderBytes: cfg.Limits.MaxHeaderBytes, Lookup: loopbackLookup})
		if err != nil {
			b.Fatal(err)
		}
		gp := goproxy.NewProxyHttpServer()
		gp.Tr, gp.ConnectDial, gp.KeepAcceptEncoding = tr, nil, true
		gp.Logger = log.New(io.Discard, "", 0)
		gp.CertStore = store
		gp.AllowHTTP2 = h2
		gp.OnRequest().HandleConnect(goproxy.AlwaysMitm)
		return serveBench(b, &http.Server{Handler: gp})
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(rg.CA().PEM())
	pool.AddCert(goproxy.GoproxyCa.Leaf)
	return &mitmBench{
		target:       "https://shop.example:" + port + "/articles/2026/robots?page=2",
		rg:           rgURL,
		goproxyStore: newGoproxy(&mapCertStore{m: map[string]*tls.Certificate{}}, false),
		plain:        newGoproxy(nil, false),
		goproxyH2:    newGoproxy(&mapCertStore{m: map[string]*tls.Certificate{}}, true),
		pool:         pool,
	}
}

// drive sends n GETs through proxy over benchConns workers; keepAlive
// false makes every request a new CONNECT and TLS handshake.
func (m *mitmBench) drive(b *testing.B, proxy *url.URL, n int, keepAlive bool) time.Duration {
	return driveClient(b, &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyURL(proxy),
		TLSClientConfig:     &tls.Config{RootCAs: m.pool},
		MaxIdleConnsPerHost: benchConns,
		DisableKeepAlives:   !keepAlive,
		DisableCompression:  true,
	}}, m.target, n)
}

// BenchmarkMITMThroughput: requests per second through robotsgate MITM on
// kept-alive connections vs plain goproxy MITM with a leaf-certificate
// cache and the same tuned transport, alternating in one run.
func BenchmarkMITMThroughput(b *testing.B) {
	const round = 2000
	m := newMITMBench(b)
	m.drive(b, m.goproxyStore, round/4, true)
	m.drive(b, m.rg, round/4, true)
	var tGP, tRG time.Duration
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			tGP += m.drive(b, m.goproxyStore, round, true)
			tRG += m.drive(b, m.rg, round, true)
		} else {
			tRG += m.drive(b, m.rg, round, true)
			tGP += m.drive(b, m.goproxyStore, round, true)
		}
		i++
	}
	n := float64(b.N * round)
	b.ReportMetric(n/tGP.Seconds(), "goproxy-req/s")
	b.ReportMetric(n/tRG.Seconds(), "robotsgate-req/s")
	b.ReportMetric(tGP.Seconds()/tRG.Seconds(), "ratio")
}

// BenchmarkMITMNewConnections: a new CONNECT and TLS handshake for every
// request, robotsgate against plain goproxy with its defaults (a leaf
// signed per CONNECT) and with a leaf-certificate cache.
func BenchmarkMITMNewConnections(b *testing.B) {
	const round = 400
	m := newMITMBench(b)
	proxies := []*url.URL{m.plain, m.goproxyStore, m.rg}
	for _, p := range proxies {
		m.drive(b, p, 50, false)
	}
	var took [3]time.Duration
	i := 0
	for b.Loop() {
		for k := range proxies {
			j := (i + k) % len(proxies)
			took[j] += m.drive(b, proxies[j], round, false)
		}
		i++
	}
	n := float64(b.N * round)
	b.ReportMetric(n/took[0].Seconds(), "goproxy-conn/s")
	b.ReportMetric(n/took[1].Seconds(), "goproxy-cached-conn/s")
	b.ReportMetric(n/took[2].Seconds(), "robotsgate-conn/s")
	b.ReportMetric(took[0].Seconds()/took[2].Seconds(), "ratio")
	b.ReportMetric(took[1].Seconds()/took[2].Seconds(), "ratio-cached")
}

// h2Client is the client every mode of BenchmarkMITMH2Goproxy uses, the
// one BenchmarkMITMH2Throughput uses: h2 offered (ForceAttemptHTTP2) or
// HTTP/1.1 only, benchConns idle connections per host.
func (m *mitmBench) h2Client(proxy *url.URL, h2 bool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyURL(proxy),
		TLSClientConfig:     &tls.Config{RootCAs: m.pool},
		MaxIdleConnsPerHost: benchConns,
		ForceAttemptHTTP2:   h2,
		DisableCompression:  true,
	}}
}

// checkProto fails b unless a GET through proxy is answered over HTTP/major
// inside the tunnel: the h2 modes really are h2, the others HTTP/1.1.
func (m *mitmBench) checkProto(b *testing.B, proxy *url.URL, h2 bool) {
	b.Helper()
	c := m.h2Client(proxy, h2)
	defer c.CloseIdleConnections()
	resp, err := c.Get(m.target)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	want := 1
	if h2 {
		want = 2
	}
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != want {
		b.Fatalf("GET through %s (h2 offered %v): %s over %s; want 200 over HTTP/%d", proxy, h2, resp.Status, resp.Proto, want)
	}
}

// BenchmarkMITMH2Goproxy: kept-alive requests through a MITM tunnel, four
// modes in rotation in one run against the same origin with the same
// client: robotsgate over h2 (benchConns streams on one connection) and
// over HTTP/1.1 (benchConns connections), and goproxy MITM with a
// leaf-certificate cache and AllowHTTP2 over each. It reports each mode's
// requests per second and mallocs per request (the whole process: client,
// proxy and origin, which are the same for all four), and the ratios
// robotsgate h2 / goproxy h2, robotsgate h2 / robotsgate HTTP/1.1 and
// robotsgate HTTP/1.1 / goproxy HTTP/1.1.
func BenchmarkMITMH2Goproxy(b *testing.B) {
	const round = 2000
	m := newMITMBench(b)
	modes := []struct {
		name  string
		proxy *url.URL
		h2    bool
	}{
		{"rg-h2", m.rg, true}, {"rg-h1", m.rg, false},
		{"gp-h2", m.goproxyH2, true}, {"gp-h1", m.goproxyH2, false},
	}
	for _, md := range modes {
		m.checkProto(b, md.proxy, md.h2)
		driveClient(b, m.h2Client(md.proxy, md.h2), m.target, round/4)
	}
	var took [4]time.Duration
	var mallocs [4]uint64
	var ms runtime.MemStats
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		for k := range modes {
			j := (i + k) % len(modes)
			runtime.ReadMemStats(&ms)
			before := ms.Mallocs
			took[j] += driveClient(b, m.h2Client(modes[j].proxy, modes[j].h2), m.target, round)
			runtime.ReadMemStats(&ms)
			mallocs[j] += ms.Mallocs - before
		}
		i++
	}
	n := float64(b.N * round)
	for j, md := range modes {
		b.ReportMetric(n/took[j].Seconds(), md.name+"-req/s")
		b.ReportMetric(float64(mallocs[j])/n, md.name+"-allocs/req")
	}
	b.ReportMetric(took[2].Seconds()/took[0].Seconds(), "ratio-h2-gp")
	b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "ratio-h2-h1")
	b.ReportMetric(took[3].Seconds()/took[1].Seconds(), "ratio-h1-gp")
}
