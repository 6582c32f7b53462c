package proxy

import (
	"bytes"
	"compress/gzip"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/proxy/upstream"
)

// benchConns is how many client connections drive each proxy.
const benchConns = 16

// BenchmarkProxyThroughput compares robotsgate (enforce mode, rules cached)
// with plain goproxy (no hooks) using the same tuned transport, in one run:
// each op is a round of benchRound requests through each proxy over
// benchConns kept-alive connections, the proxies alternating so that all
// see the same machine. Plain goproxy runs twice: in a default
// http.Server, as it is usually run, and in one with robotsgate's [limits]
// (header timeout, idle timeout, header size), which isolates the cost of
// enforcement from that of the server's hardening. It reports requests per
// second for each and robotsgate's ratio to both.
func BenchmarkProxyThroughput(b *testing.B) {
	const benchRound = 4000
	body := []byte("hello from the origin\n")
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			io.WriteString(w, "User-agent: *\nDisallow: /private\nDisallow: /*?session=\n\nUser-agent: GPTBot\nDisallow: /\n")
			return
		}
		w.Write(body)
	}))
	defer origin.Close()

	cfg := loopbackConfig()
	cfg.TLS.StateDir = b.TempDir()
	tr, err := upstream.NewTransport(upstream.Options{Timeout: cfg.Upstream.Timeout, MaxIdle: cfg.Limits.MaxConnections,
		MaxHeaderBytes: cfg.Limits.MaxHeaderBytes, Lookup: net.DefaultResolver.LookupNetIP})
	if err != nil {
		b.Fatal(err)
	}
	plain := goproxy.NewProxyHttpServer()
	plain.Tr = tr
	plain.ConnectDial = nil
	plain.Logger = log.New(io.Discard, "", 0)
	plain.KeepAcceptEncoding = true
	plainURL := serveBench(b, &http.Server{Handler: plain})
	limitedURL := serveBench(b, &http.Server{
		Handler:           plain,
		ReadHeaderTimeout: cfg.Limits.ReadHeaderTimeout,
		IdleTimeout:       cfg.Limits.IdleTimeout,
		MaxHeaderBytes:    cfg.Limits.MaxHeaderBytes,
	})

	_, rgURL := serveRobotsgate(b, cfg, Options{Version: "bench"})

	target := origin.URL + "/articles/2026/robots-and-proxies?page=2"
	run := func(proxy *url.URL) time.Duration {
		return driveProxy(b, proxy, target, benchRound)
	}
	run(plainURL) // warm connections and the robots.txt cache
	run(limitedURL)
	run(rgURL)

	// The order rotates, so that none always runs after the others'
	// garbage.
	urls := []*url.URL{plainURL, limitedURL, rgURL}
	var took [3]time.Duration
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		for k := range urls {
			j := (i + k) % len(urls)
			took[j] += run(urls[j])
		}
		i++
	}
	tPlain, tLimited, tRG := took[0], took[1], took[2]
	n := float64(b.N * benchRound)
	plainRPS, limitedRPS, rgRPS := n/tPlain.Seconds(), n/tLimited.Seconds(), n/tRG.Seconds()
	b.ReportMetric(plainRPS, "goproxy-req/s")
	b.ReportMetric(limitedRPS, "goproxy-limits-req/s")
	b.ReportMetric(rgRPS, "robotsgate-req/s")
	b.ReportMetric(rgRPS/plainRPS, "ratio")
	b.ReportMetric(rgRPS/limitedRPS, "ratio-limits")
}

// serveRobotsgate runs robotsgate with cfg on a loopback port.
func serveRobotsgate(b *testing.B, cfg *config.Config, o Options) (*Server, *url.URL) {
	b.Helper()
	rg, err := NewServer(cfg, o)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go rg.Serve(ln)
	b.Cleanup(func() { rg.Shutdown(b.Context()) })
	return rg, &url.URL{Scheme: "http", Host: ln.Addr().String()}
}

func serveBench(b *testing.B, srv *http.Server) *url.URL {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}
}

// driveProxy sends n GETs for target through proxy over benchConns
// kept-alive connections and returns how long they took.
func driveProxy(b *testing.B, proxy *url.URL, target string, n int) time.Duration {
	client := &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyURL(proxy),
		MaxIdleConnsPerHost: benchConns,
		DisableCompression:  true,
	}}
	return driveClient(b, client, target, n)
}

// driveClient sends n GETs for target with client from benchConns workers,
// as a python-requests scraper, and returns how long they took.
func driveClient(b *testing.B, client *http.Client, target string, n int) time.Duration {
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	start := time.Now()
	for w := range benchConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += benchConns {
				req, _ := http.NewRequest(http.MethodGet, target, nil)
				req.Header.Set("User-Agent", "python-requests/2.31.0")
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkHeadLookAhead is what reading an HTML page's head costs a
// request that declares a purpose, beside the same request with none, in
// one run: a real 60 KB page (its head of 2 KB), gzip-encoded or not,
// through robotsgate from benchConns clients; the site's tdmrep.json and
// licence are cached after the first request. It reports each mode's
// requests per second and the ratio.
func BenchmarkHeadLookAhead(b *testing.B) {
	const round = 2000
	head := "<!doctype html><html><head><meta charset=utf-8><title>A page</title>" +
		strings.Repeat(`<link rel="preload" href="/static/app.css" as="style">`, 30) +
		`<meta name="robots" content="index, follow"></head><body>`
	page := []byte(head + strings.Repeat("<p>Some text of the article, as real pages have it.</p>\n", 1000) + "</body></html>")
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(page)
	zw.Close()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/robots.txt":
			io.WriteString(w, "User-agent: *\nDisallow: /private\n")
		case "/.well-known/tdmrep.json":
			io.WriteString(w, `[{"location": "/private/*", "tdm-reservation": 1}]`)
		case "/page.gz":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(zb.Bytes())
		default:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write(page)
		}
	}))
	defer origin.Close()
	cfg := loopbackConfig()
	cfg.TLS.StateDir = b.TempDir()
	_, rgURL := serveRobotsgate(b, cfg, Options{Version: "bench", AuditOut: io.Discard})
	for _, path := range []string{"/page", "/page.gz"} {
		b.Run(strings.TrimPrefix(path, "/"), func(b *testing.B) {
			run := func(purpose string) time.Duration {
				client := &http.Client{Transport: &http.Transport{
					Proxy: http.ProxyURL(rgURL), MaxIdleConnsPerHost: benchConns, DisableCompression: true,
				}}
				defer client.CloseIdleConnections()
				var wg sync.WaitGroup
				start := time.Now()
				for w := range benchConns {
					wg.Go(func() {
						for i := w; i < round; i += benchConns {
							req, _ := http.NewRequest(http.MethodGet, origin.URL+path, nil)
							req.Header.Set("Accept-Encoding", "gzip")
							if purpose != "" {
								req.Header.Set(policy.PurposeHeader, purpose)
							}
							resp, err := client.Do(req)
							if err != nil {
								b.Error(err)
								return
							}
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							if resp.StatusCode != 200 {
								b.Errorf("%s for %q: %d", path, purpose, resp.StatusCode)
								return
							}
						}
					})
				}
				wg.Wait()
				return time.Since(start)
			}
			run("")
			run("ai-train") // the files fetched and cached
			var none, declared time.Duration
			for b.Loop() {
				none += run("")
				declared += run("ai-train")
			}
			n := float64(b.N * round)
			b.ReportMetric(n/none.Seconds(), "no-purpose-req/s")
			b.ReportMetric(n/declared.Seconds(), "ai-train-req/s")
			b.ReportMetric(none.Seconds()/declared.Seconds(), "ratio")
			b.ReportMetric(float64(declared-none)/n/1e3, "added-µs/req")
		})
	}
}
