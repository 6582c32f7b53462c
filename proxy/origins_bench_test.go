package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/upstream"
)

// originsRobots is the median real robots.txt of the corpus (bbc.co.uk,
// 2,643 bytes); each origin serves its own copy, with one line of its own.
func originsRobots(b *testing.B) string {
	b.Helper()
	body, err := os.ReadFile("../robots/testdata/corpus/bbc.co.uk.txt")
	if err != nil {
		b.Fatal(err)
	}
	return string(body)
}

// BenchmarkOrigins pushes many distinct origins through a real proxy, one
// allowed and (for every tenth) one disallowed request each, and reports
// how the process's resident size grows with the number of origins. Each
// origin (o<N>.example, resolved to a loopback address) serves a distinct
// copy of the median real robots.txt: bbc.co.uk's, with a line naming the
// origin. The proxy runs on its defaults (state_dir store included) but
// block_private, which loopback origins need off, and no memory limit is
// set. ROBOTSGATE_ORIGINS sets the number (default 100,000); checkpoints
// along the way are logged. Answers are checked: every allowed request
// gets the origin's page, every disallowed one robotsgate's 403.
func BenchmarkOrigins(b *testing.B) {
	n := originsFromEnv(b, 100_000)
	origins := serveOrigins(b, true)
	originURL := origins.url
	_, proxyURL := originsProxy(b, origins.lookup, nil)
	client := &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyURL(proxyURL),
		MaxIdleConnsPerHost: 16,
	}}
	defer client.CloseIdleConnections()

	var wrong atomic.Int64
	var firstWrong atomic.Value
	visit := func(i int) {
		check := func(path string, want int) {
			resp, err := client.Get(originURL(i) + path)
			if err != nil {
				wrong.Add(1)
				firstWrong.CompareAndSwap(nil, err.Error())
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				wrong.Add(1)
				firstWrong.CompareAndSwap(nil, fmt.Sprintf("%s%s: %d, want %d", originURL(i), path, resp.StatusCode, want))
			}
		}
		check("/news/world-"+strconv.Itoa(i), http.StatusOK)
		if i%10 == 0 {
			check(fmt.Sprintf("/only-o%d.example/x", i), http.StatusForbidden)
			check("/iplayer/search?q=x", http.StatusForbidden)
		}
	}
	visit(0) // the servers, the proxy and the client, warmed
	settle := func() (rss, live uint64) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return residentBytes(b), ms.HeapAlloc
	}
	rss0, live0 := settle()
	checkpoints := []int{10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_000_000}
	b.ResetTimer()
	start := time.Now()
	next := 1
	var rss, live uint64
	var peak uint64
	for _, cp := range checkpoints {
		if cp > n {
			cp = n
		}
		if cp < next {
			break
		}
		var wg sync.WaitGroup
		work := make(chan int)
		for range 8 {
			wg.Go(func() {
				for i := range work {
					visit(i)
				}
			})
		}
		for i := next; i <= cp; i++ {
			work <- i
			if i%5000 == 0 {
				peak = max(peak, residentBytes(b))
			}
		}
		close(work)
		wg.Wait()
		next = cp + 1
		peak = max(peak, residentBytes(b))
		rss, live = settle()
		b.Logf("%9d origins: RSS +%6.1f MiB (%5.0f B/origin, peak %5.0f B/origin), live heap %5.0f B/origin, %4.0f origins/s",
			cp, float64(rss-rss0)/(1<<20), float64(rss-rss0)/float64(cp), float64(peak-rss0)/float64(cp),
			float64(int64(live)-int64(live0))/float64(cp), float64(cp)/time.Since(start).Seconds())
		if cp == n {
			break
		}
	}
	b.StopTimer()
	if path := os.Getenv("ROBOTSGATE_ORIGINS_HEAPPROFILE"); path != "" {
		// What is live while the origins are held (b's own profile is
		// written after the proxy has shut down).
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		pprof.WriteHeapProfile(f)
		f.Close()
	}
	if w := wrong.Load(); w > 0 {
		b.Fatalf("%d wrong answers; first: %v", w, firstWrong.Load())
	}
	b.ReportMetric(float64(rss-rss0)/float64(n), "rss-B/origin")
	b.ReportMetric(float64(peak-rss0)/float64(n), "peak-rss-B/origin")
	b.ReportMetric(float64(int64(live)-int64(live0))/float64(n), "live-B/origin")
	b.ReportMetric(float64(n), "origins")
}

// originsProxy runs robotsgate on its defaults (the state_dir store
// included) but block_private, which loopback origins need off, resolving
// names with lookup, and sending through next (nil: direct).
func originsProxy(b *testing.B, lookup upstream.LookupFunc, next *url.URL) (*config.Config, *url.URL) {
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Upstream.BlockPrivate = false
	if next != nil {
		cfg.Upstream.Proxy = next.String()
	}
	cfg.TLS.StateDir = b.TempDir()
	_, u := serveRobotsgate(b, cfg, Options{LookupNetIP: lookup, AuditOut: io.Discard})
	return cfg, u
}

// originsFromEnv is the number of origins ROBOTSGATE_ORIGINS asks for, or
// def.
func originsFromEnv(b *testing.B, def int) int {
	s := os.Getenv("ROBOTSGATE_ORIGINS")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1000 {
		b.Fatalf("ROBOTSGATE_ORIGINS=%q: want a number of at least 1000", s)
	}
	return n
}

// benchOrigins are the origins o<N>.example that serveOrigins serves.
type benchOrigins struct {
	handler http.Handler                                                        // serves every origin, by r.Host
	lookup  func(_ context.Context, network, host string) ([]netip.Addr, error) // sends each name to its server
	url     func(i int) string                                                  // origin i's URL
}

// serveOrigins serves origins o<N>.example on eight loopback addresses
// (a new connection per origin would otherwise run out of ports on one),
// each with its own copy of the median robots.txt: bbc.co.uk's, with a
// group of its own ("Disallow: /only-o<N>.example/"). closeConns: every
// answer closes its connection, so that nothing is held per origin on
// either side.
func serveOrigins(b *testing.B, closeConns bool) benchOrigins {
	robotsTxt := originsRobots(b)
	var addrs []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if closeConns {
			w.Header().Set("Connection", "close")
		}
		if r.URL.Path == "/robots.txt" {
			host, _, _ := strings.Cut(r.Host, ":")
			io.WriteString(w, robotsTxt)
			fmt.Fprintf(w, "\nUser-agent: *\nDisallow: /only-%s/\n", host)
			return
		}
		io.WriteString(w, "page")
	})
	for i := 1; i <= 8; i++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:0", i))
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: handler}
		go srv.Serve(ln)
		b.Cleanup(func() { srv.Close() })
		addrs = append(addrs, ln.Addr().String())
	}
	return benchOrigins{
		handler: handler,
		lookup: func(_ context.Context, _, host string) ([]netip.Addr, error) {
			i, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(host, "o"), ".example"))
			ap := netip.MustParseAddrPort(addrs[i%len(addrs)])
			return []netip.Addr{ap.Addr()}, nil
		},
		url: func(i int) string {
			_, port, _ := net.SplitHostPort(addrs[i%len(addrs)])
			return fmt.Sprintf("http://o%d.example:%s", i, port)
		},
	}
}

// residentBytes is the process's resident set size (VmRSS).
func residentBytes(b *testing.B) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status: resident size unknown")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// BenchmarkSkew is the proxy's throughput on a skewed load beside a
// single origin's, in one run, and the same for plain goproxy (no hooks)
// as the baseline. Many origins are warmed first (each fetched and decided
// once: the cold tier holds them); then requests go 99% to the hottest 1%
// of them, 1% spread over all, and the single-origin load sends as many to
// one. ROBOTSGATE_ORIGINS sets the number of origins (default 10,000; the
// issue's figure is 100,000). It runs two ways:
//
//   - direct: each origin is its own server name, so each has its own
//     upstream connections, kept alive, as on the internet. Both proxies
//     pay for the fan-out over many connections (new ones for the spread
//     1%, idle ones held for the hot 1%), which no cache can save.
//   - next-hop: every request leaves through one next-hop proxy
//     (upstream.proxy), as a fleet behind an egress proxy does, so that
//     both loads share the same upstream connections and what is left of
//     the gap is robotsgate's own work per origin: its cache tiers, its
//     pacing and counters. This is what the two tiers must keep within 5%.
func BenchmarkSkew(b *testing.B) {
	for _, nextHop := range []bool{false, true} {
		name := "direct"
		if nextHop {
			name = "next-hop"
		}
		b.Run(name, func(b *testing.B) { benchmarkSkew(b, nextHop) })
	}
}

func benchmarkSkew(b *testing.B, nextHop bool) {
	n := originsFromEnv(b, 10_000)
	origins := serveOrigins(b, false)
	var next *url.URL
	if nextHop {
		// The origins' handler serves absolute-form requests too: r.Host
		// names the origin asked for.
		next = serveBench(b, &http.Server{Handler: origins.handler})
	}
	cfg, rgURL := originsProxy(b, origins.lookup, next)
	tr, err := upstream.NewTransport(upstream.Options{Timeout: cfg.Upstream.Timeout, MaxIdle: cfg.Limits.MaxConnections,
		MaxHeaderBytes: cfg.Limits.MaxHeaderBytes, Lookup: origins.lookup, Proxy: next})
	if err != nil {
		b.Fatal(err)
	}
	plain := goproxy.NewProxyHttpServer()
	plain.Tr = tr
	plain.Logger = log.New(io.Discard, "", 0)
	plain.KeepAcceptEncoding = true
	plainURL := serveBench(b, &http.Server{Handler: plain})
	originURL := origins.url

	var wrong atomic.Int64
	// run sends count requests through proxy from 8 goroutines, the i-th
	// to target(i), and returns requests per second.
	run := func(proxy *url.URL, count int, target func(i int) string) float64 {
		client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), MaxIdleConnsPerHost: 16}}
		defer client.CloseIdleConnections()
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range 8 {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < count; i = int(next.Add(1)) - 1 {
					resp, err := client.Get(target(i))
					if err != nil {
						wrong.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						wrong.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return float64(count) / time.Since(start).Seconds()
	}
	hot := max(n/100, 1)
	const count = 40_000
	spread := func(i int) uint64 { // a fixed spread: the same load each run
		x := uint64(i)*0x9E3779B97F4A7C15 + 1
		x ^= x >> 31
		return x * 0xBF58476D1CE4E5B9
	}
	skewed := func(i int) string {
		r := spread(i)
		if r%100 == 0 {
			return originURL(int(r>>8)%n) + "/news/a"
		}
		return originURL(int(r>>8)%hot) + "/news/a"
	}
	single := func(int) string { return originURL(0) + "/news/a" }
	for _, u := range []*url.URL{rgURL, plainURL} {
		run(u, n, func(i int) string { return originURL(i) + "/news/warm" })
		run(u, count/4, skewed) // the hot origins promoted, connections open
	}
	b.ResetTimer()
	var rate [2][2]float64 // [robotsgate, plain][single, skew]
	for b.Loop() {
		for k, u := range []*url.URL{rgURL, plainURL} {
			rate[k][0] += run(u, count, single)
			rate[k][1] += run(u, count, skewed)
		}
	}
	if w := wrong.Load(); w > 0 {
		b.Fatalf("%d requests failed or were not 200", w)
	}
	b.ReportMetric(rate[0][1]/rate[0][0], "skew/single")
	b.ReportMetric(rate[1][1]/rate[1][0], "goproxy-skew/single")
	b.ReportMetric(rate[0][1]/rate[1][1], "skew-vs-goproxy")
	b.ReportMetric(rate[0][0]/rate[1][0], "single-vs-goproxy")
}
