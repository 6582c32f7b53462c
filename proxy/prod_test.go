package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// TestProxyStreamsSlowBodies: bytes a stalling origin did send (and the
// headers before them) reach the client at once, not when a buffer fills.
func TestProxyStreamsSlowBodies(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release) // before the proxy's cleanup, which waits for the answer to end
	o := newTestOrigin(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	p := startProxy(t, loopbackConfig())
	c, err := net.DialTimeout("tcp", p.url.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c, "GET "+o.URL+"/slow HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("headers of a stalling response did not arrive: %v", err)
	}
	b := make([]byte, 7)
	if _, err := io.ReadFull(resp.Body, b); err != nil || string(b) != "partial" {
		t.Errorf("first bytes of a stalling response: %q %v", b, err)
	}
}

func TestProxySendsNoDefaultUserAgent(t *testing.T) {
	t.Parallel()
	got := make(chan []string, 1)
	o := newTestOrigin(t, "", func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Values("User-Agent")
	})
	p := startProxy(t, loopbackConfig())
	p.raw(t, "GET "+o.URL+"/noua HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if ua := <-got; len(ua) != 0 {
		t.Errorf("origin got User-Agent %q from a client that sent none", ua)
	}
}

func TestProxyReportModeLabels(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, testRobots, nil)
	cfg := loopbackConfig()
	cfg.Mode = "report"
	p := startProxy(t, cfg)
	resp, _ := get(t, p.client(), o.URL+"/private")
	if resp.Header.Get("X-Robots-Gate") != "would-block" || resp.Header.Get("X-Robots-Gate-Rule") != "disallow: /private (line 2)" {
		t.Errorf("would-block: %v; want the rule header too", resp.Header)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	// The rules of a closed port are unreachable: would-block, forwarded,
	// and the forward fails: the answer is robotsgate's own upstream error.
	resp, body := get(t, p.client(), "http://"+addr+"/x")
	if resp.StatusCode != 502 || resp.Header.Get("X-Robots-Gate") != "upstream-error" {
		t.Errorf("upstream error in report mode: %d %q %q; want 502 upstream-error", resp.StatusCode, resp.Header.Get("X-Robots-Gate"), body)
	}
}

func TestProxyRefusesSpecialRanges(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	p := startProxy(t, cfg)
	for _, host := range []string{"100.64.0.1", "0.1.2.3", "224.0.0.1", "[::ffff:10.0.0.1]", "[fe80::1]", "[fc00::1]", "169.254.169.254"} {
		resp, _ := get(t, p.client(), "http://"+host+"/")
		if resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate") != "private-address" {
			t.Errorf("%s: %d %q; want 403 private-address", host, resp.StatusCode, resp.Header.Get("X-Robots-Gate"))
		}
	}
}

func TestProxyConnectionLimit(t *testing.T) {
	t.Parallel()
	cfg := loopbackConfig()
	cfg.Limits.MaxConnections = 2
	p := startProxy(t, cfg)
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", p.url.Host)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// The tracker counts a connection once accepted: wait for both.
	for deadline := time.Now().Add(5 * time.Second); p.srv.conns.count.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	c, err := net.Dial("tcp", p.url.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 503 || resp.Header.Get("X-Robots-Gate") != "overloaded" {
		t.Fatalf("third connection: %v %v; want 503 overloaded", resp, err)
	}
	waitForLog(t, p.audit, `"decision":"overloaded"`)
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, testRobots, nil)
	p := startProxy(t, loopbackConfig())
	get(t, p.client(), o.URL+"/private")
	get(t, p.client(), o.URL+"/public") // from the cold tier, which offers it to the hot
	p.srv.cache.Wait()                  // ristretto applies it asynchronously
	get(t, p.client(), o.URL+"/public")
	_, body := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/metrics")
	for _, want := range []string{
		`robotsgate_requests_total{decision="disallowed",scheme="http"} 1`,
		`robotsgate_requests_total{decision="allowed",scheme="http"} 2`,
		`robotsgate_robots_fetches_total{outcome="fetched"} 1`,
		`robotsgate_cache_hits_total 2`,
		"robotsgate_cache_misses_total 1",
		"robotsgate_cache_evictions_total 0",
		"robotsgate_cache_bytes ",
		"robotsgate_cache_cold_hits_total 1", // the second request, which offered the origin to the hot tier
		"robotsgate_cache_hot_bytes ",
		"robotsgate_cache_cold_bytes ",
		"robotsgate_robots_fetch_duration_seconds_count 1",
		"robotsgate_upstream_duration_seconds_count 2",
		"robotsgate_open_connections ",
		"robotsgate_open_tunnels 0",
		"robotsgate_paced_wait_seconds_count 2", // pacing is on by default: both forwarded requests were paced, with no wait
		`robotsgate_config_reloads_total{result="success"} 0`,
		"robotsgate_origin_backoffs_total 0",
		"go_goroutines ", // the standard collectors every dashboard expects
		"go_memstats_heap_inuse_bytes ",
		"process_resident_memory_bytes ",
		"process_open_fds ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, bad := range []string{o.URL, "127.0.0.1", "Go-http-client"} {
		if strings.Contains(body, bad) {
			t.Errorf("/metrics has an unbounded label value %q", bad)
		}
	}
}

// TestShutdownAnswersInFlight: a request still waiting on its origin when
// the drain time is up gets a 503, not a closed connection.
func TestShutdownAnswersInFlight(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	started := make(chan struct{}, 1)
	o := newTestOrigin(t, "", func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	p := startProxy(t, loopbackConfig())
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := p.client().Get(o.URL + "/slow")
		if err != nil {
			t.Errorf("in-flight request: %v; want a response", err)
		}
		done <- resp
	}()
	<-started
	ctx, cancel := contextWithTimeout(200 * time.Millisecond)
	defer cancel()
	p.srv.Shutdown(ctx)
	if resp := <-done; resp != nil && (resp.StatusCode != 503 || resp.Header.Get("X-Robots-Gate") != "overloaded") {
		t.Errorf("in-flight at shutdown: %d %q; want 503", resp.StatusCode, resp.Header.Get("X-Robots-Gate"))
	}
}
