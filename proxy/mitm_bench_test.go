package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/url"
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
// leaf-certificate cache, all on loopback.
type mitmBench struct {
	target                  string
	rg, goproxyStore, plain *url.URL
	pool                    *x509.CertPool
}

func newMITMBench(b *testing.B) *mitmBench {
	b.Helper()
	pki := newTestPKI(b)
	_, port := tlsOrigin(b, pki, "User-agent: *\nDisallow: /private\n", "shop.example")

	cfg := loopbackConfig()
	cfg.TLS.StateDir = b.TempDir()
	cfg.Upstream.CA = pki.pemPath
	rg, rgURL := serveRobotsgate(b, cfg, Options{LookupNetIP: loopbackLookup})

	newGoproxy := func(store goproxy.CertStorage) *url.URL {
		tr, err := upstream.NewTransport(upstream.Options{Timeout: cfg.Upstream.Timeout, CA: cfg.Upstream.CA, MaxIdle: cfg.Limits.MaxConnections,
			MaxHeaderBytes: cfg.Limits.MaxHeaderBytes, Lookup: loopbackLookup})
		if err != nil {
			b.Fatal(err)
		}
		gp := goproxy.NewProxyHttpServer()
		gp.Tr, gp.ConnectDial, gp.KeepAcceptEncoding = tr, nil, true
		gp.Logger = log.New(io.Discard, "", 0)
		gp.CertStore = store
		gp.OnRequest().HandleConnect(goproxy.AlwaysMitm)
		return serveBench(b, &http.Server{Handler: gp})
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(rg.CA().PEM())
	pool.AddCert(goproxy.GoproxyCa.Leaf)
	return &mitmBench{
		target:       "https://shop.example:" + port + "/articles/2026/robots?page=2",
		rg:           rgURL,
		goproxyStore: newGoproxy(&mapCertStore{m: map[string]*tls.Certificate{}}),
		plain:        newGoproxy(nil),
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
