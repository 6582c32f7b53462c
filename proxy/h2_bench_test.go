package proxy

import (
	"crypto/tls"
	"net/http"
	"runtime"
	"testing"
	"time"
)

// BenchmarkMITMH2NewConnections: what a tunnel's HTTP/2 server costs per
// connection: a new CONNECT, TLS handshake and h2 connection for every
// request (DisableKeepAlives), beside the same over HTTP/1.1, alternating
// in one run through robotsgate. It reports each protocol's connections
// per second and mallocs per connection (the whole process: client,
// proxy and origin), and the ratio h2/HTTP/1.1.
func BenchmarkMITMH2NewConnections(b *testing.B) {
	const round = 400
	m := newMITMBench(b)
	client := func(h2 bool) *http.Client {
		return &http.Client{Transport: &http.Transport{
			Proxy:              http.ProxyURL(m.rg),
			TLSClientConfig:    &tls.Config{RootCAs: m.pool},
			DisableKeepAlives:  true,
			ForceAttemptHTTP2:  h2,
			DisableCompression: true,
		}}
	}
	m.checkProto(b, m.rg, true)
	driveClient(b, client(true), m.target, 50)
	driveClient(b, client(false), m.target, 50)
	var took [2]time.Duration
	var mallocs [2]uint64
	var ms runtime.MemStats
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		for k := range 2 {
			j := (i + k) % 2
			runtime.ReadMemStats(&ms)
			before := ms.Mallocs
			took[j] += driveClient(b, client(j == 0), m.target, round)
			runtime.ReadMemStats(&ms)
			mallocs[j] += ms.Mallocs - before
		}
		i++
	}
	n := float64(b.N * round)
	b.ReportMetric(n/took[0].Seconds(), "h2-conn/s")
	b.ReportMetric(n/took[1].Seconds(), "h1-conn/s")
	b.ReportMetric(float64(mallocs[0])/n, "h2-allocs/conn")
	b.ReportMetric(float64(mallocs[1])/n, "h1-allocs/conn")
	b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "ratio-h2-h1")
}
