package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
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
	testkit.Eventually(t, "both connections counted", func() bool { return p.srv.conns.count.Load() >= 2 })
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
	get(t, p.client(), o.URL+"/public") // from the cold tier
	get(t, p.client(), o.URL+"/public") // from the cold tier again, which offers it to the hot
	p.srv.cache.Wait()                  // ristretto applies it asynchronously
	get(t, p.client(), o.URL+"/public")
	_, body := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/metrics")
	for _, want := range []string{
		`robotsgate_requests_total{decision="disallowed",scheme="http"} 1`,
		`robotsgate_requests_total{decision="allowed",scheme="http"} 3`,
		`robotsgate_robots_fetches_total{outcome="fetched"} 1`,
		`robotsgate_cache_hits_total 3`,
		"robotsgate_cache_misses_total 1",
		"robotsgate_cache_evictions_total 0",
		"robotsgate_cache_bytes ",
		"robotsgate_cache_cold_hits_total 2", // the second and third requests; the third offered the origin to the hot tier
		"robotsgate_cache_hot_bytes ",
		"robotsgate_cache_cold_bytes ",
		"robotsgate_robots_fetch_duration_seconds_count 1",
		"robotsgate_upstream_duration_seconds_count 3",
		"robotsgate_open_connections ",
		"robotsgate_open_tunnels 0",
		"robotsgate_paced_wait_seconds_count 0", // pacing is on by default, but this robots.txt has no Crawl-delay: nothing to space
		`robotsgate_config_reloads_total{result="success"} 0`,
		"robotsgate_origin_backoffs_total 0",
		"robotsgate_evidence_dropped_total 0", // evidence is off without an audit file
		"robotsgate_evidence_bytes 0",
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
	if resp := <-done; resp != nil && (resp.StatusCode != 503 || resp.Header.Get("X-Robots-Gate") != "shutting-down" || resp.Header.Get("Retry-After") != "5") {
		t.Errorf("in-flight at shutdown: %d %v; want 503 shutting-down", resp.StatusCode, resp.Header)
	}
}

// TestShutdownAnswersHeld: requests still held when the drain time is up
// — for their turn under Crawl-delay (pacing is on by default), or by an
// origin's back-off — are answered 503 shutting-down with Retry-After,
// audited with that reason, and never sent; those whose turn came while
// draining were served.
func TestShutdownAnswersHeld(t *testing.T) {
	t.Parallel()
	paced := newTestOrigin(t, "User-agent: *\nCrawl-delay: 0.3\n", nil)
	// Another host (pacing and back-off are per host, whatever the port).
	var busyHits atomic.Int64
	busy := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			io.WriteString(w, "User-agent: *\nAllow: /\n")
			return
		}
		busyHits.Add(1)
		w.Header().Set("Retry-After", "60")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skip("no 127.0.0.2 on this machine's loopback:", err)
	}
	busy.Listener = ln
	busy.Start()
	t.Cleanup(busy.Close)
	p := startProxy(t, loopbackConfig())
	c := p.client()
	if resp, _ := get(t, c, busy.URL+"/first"); resp.StatusCode != 429 { // the origin's 429 backs it off for 60 s
		t.Fatalf("busy origin: %d", resp.StatusCode)
	}
	// 0.3 s apart, with a drain time of 1.5 s: the second's turn comes at
	// most 0.3 s into it, leaving a busy machine 1.2 s to serve it, and
	// a turn never comes early, so no more than 7 start and at least 3
	// are left to be answered shutting-down.
	const n = 10
	answers := make(chan heldAnswer, n+1)
	for i := range n {
		go sendHeld(c, fmt.Sprintf("%s/page/%d", paced.URL, i), answers)
	}
	go sendHeld(c, busy.URL+"/second", answers)
	// Every request is held (or started) before the shutdown begins: the
	// paced ones, and the one the back-off holds.
	if !testkit.Poll(5*time.Second, func() bool { return p.srv.pacer.Waiting("127.0.0.1") >= n-1 && p.srv.backoffs.Held("127.0.0.2") >= 1 }) {
		t.Fatalf("%d requests held for their turn, %d by the back-off; want %d and 1 before the shutdown",
			p.srv.pacer.Waiting("127.0.0.1"), p.srv.backoffs.Held("127.0.0.2"), n-1)
	}
	ctx, cancel := contextWithTimeout(1500 * time.Millisecond)
	defer cancel()
	p.srv.Shutdown(ctx)
	served, stopped := tallyHeld(t, answers, n+1)
	if served < 2 || stopped < 3 {
		t.Errorf("%d served while draining, %d answered shutting-down; want at least 2 and 3", served, stopped)
	}
	if busyHits.Load() != 1 {
		t.Error("a request held by the origin's back-off reached it")
	}
	reasons := map[string]int{}
	for _, rec := range p.auditLines(t) {
		if rec["decision"] == "shutting-down" {
			reasons[rec["reason"].(string)]++
			if rec["status"] != 503.0 {
				t.Errorf("audited with status %v; want 503", rec["status"])
			}
		}
	}
	cut := reasons[reasonCut]
	checkSentOnce(t, paced, n, served, cut)
	if cut > 1 || reasons["shutting down while it waited for its turn"] != stopped-1-cut ||
		reasons["shutting down while the origin's back-off ("+busy.URL+" answered 429 with Retry-After: 60) held it"] != 1 {
		t.Errorf("audited reasons %v; want %d held for their turn, 1 by the back-off, at most one cut", reasons, stopped-1)
	}
}

// TestShutdownAnswersFetchWait: a request waiting on its origin's
// robots.txt when the drain time is up is answered shutting-down too.
func TestShutdownAnswersFetchWait(t *testing.T) {
	t.Parallel()
	// Its robots.txt is answered once the test is done (or the fetch
	// gives up), not after a time a busy machine's shutdown might outlast.
	asked, release := make(chan struct{}, 1), make(chan struct{})
	var pages atomic.Int64
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/robots.txt" {
			pages.Add(1)
			return
		}
		select {
		case asked <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "User-agent: *\nAllow: /\n")
	}))
	t.Cleanup(o.Close)
	t.Cleanup(func() { close(release) }) // before o.Close, which waits for the handler
	p := startProxy(t, loopbackConfig())
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := p.client().Get(o.URL + "/page")
		if err != nil {
			t.Errorf("request waiting on robots.txt: %v; want an answer", err)
		}
		done <- resp
	}()
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("robots.txt never asked for")
	}
	ctx, cancel := contextWithTimeout(100 * time.Millisecond)
	defer cancel()
	p.srv.Shutdown(ctx)
	if resp := <-done; resp == nil || resp.StatusCode != 503 || resp.Header.Get("X-Robots-Gate") != "shutting-down" {
		t.Fatalf("waiting on robots.txt at shutdown: %v; want 503 shutting-down", resp)
	}
	if rec := p.lastAudit(t); rec["reason"] != "shutting down while its robots.txt was being fetched" || pages.Load() != 0 {
		t.Errorf("audit %v, /page sent %d times", rec, pages.Load())
	}
}

// TestShutdownAnswersHeldInTunnels: requests held inside MITM tunnels are
// waited for while the drain time lasts, and those still held when it is
// up get 503 shutting-down, not a cut connection (http.Server.Shutdown
// does not see tunnels).
func TestShutdownAnswersHeldInTunnels(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, "User-agent: *\nCrawl-delay: 0.3\n", "127.0.0.1")
	p := startMITM(t, pki, nil)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.srv.CA().PEM()) {
		t.Fatal("CA certificate does not parse")
	}
	// A tunnel per request: each is held in its own.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(p.url), TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true,
	}}
	base := "https://127.0.0.1:" + port
	if resp, _ := get(t, c, base+"/warm"); resp.StatusCode != 200 { // robots.txt fetched, the first start taken
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	// 0.3 s apart, with a drain time of 1.5 s: the first turn comes at
	// most 0.3 s into it, and no more than 7 start (see
	// TestShutdownAnswersHeld).
	const n = 10
	answers := make(chan heldAnswer, n)
	for i := range n {
		go sendHeld(c, fmt.Sprintf("%s/page/%d", base, i), answers)
	}
	if !testkit.Poll(5*time.Second, func() bool { return p.srv.pacer.Waiting("127.0.0.1") >= n-1 }) {
		t.Fatalf("%d requests held; want %d before the shutdown", p.srv.pacer.Waiting("127.0.0.1"), n-1)
	}
	ctx, cancel := contextWithTimeout(1500 * time.Millisecond)
	defer cancel()
	p.srv.Shutdown(ctx)
	served, stopped := tallyHeld(t, answers, n)
	if served < 1 || stopped < 3 {
		t.Errorf("%d served while draining, %d answered shutting-down; want at least 1 and 3", served, stopped)
	}
	waitForLog(t, p.audit, `"decision":"shutting-down"`)
	cut := 0
	for _, rec := range p.auditLines(t) {
		if rec["reason"] == reasonCut {
			cut++
		}
	}
	checkSentOnce(t, o, n, served, cut)
}

// reasonCut is the audited reason of a request the end of a shutdown's
// drain cut on its way to the origin.
const reasonCut = "shutting down before the origin answered"

// checkSentOnce fails t unless each of o's /page/0 to /page/n-1 reached
// it once at most (a request cut by the shutdown is never sent again),
// every one of the served did, and of the cut (a turn that came as the
// drain time ran out, cut before or after it reached the origin) no
// more than were cut.
func checkSentOnce(t *testing.T, o *testOrigin, n, served, cut int) {
	t.Helper()
	sent := int64(0)
	for i := range n {
		hits := o.count(fmt.Sprintf("/page/%d", i))
		if hits > 1 {
			t.Errorf("/page/%d reached the origin %d times; want once at most (a request cut by the shutdown sent again)", i, hits)
		}
		sent += hits
	}
	if sent < int64(served) || sent > int64(served+cut) {
		t.Errorf("%d pages reached the origin; want the %d served, and at most the %d cut by the end of the drain", sent, served, cut)
	}
}

// heldAnswer is what a request held at shutdown got.
type heldAnswer struct {
	code        int
	gate, retry string
	err         error
}

// sendHeld sends a GET of u with c and hands its answer to answers.
func sendHeld(c *http.Client, u string, answers chan<- heldAnswer) {
	resp, err := c.Get(u)
	if err != nil {
		answers <- heldAnswer{err: err}
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	answers <- heldAnswer{resp.StatusCode, resp.Header.Get("X-Robots-Gate"), resp.Header.Get("Retry-After"), nil}
}

// tallyHeld reads n answers of requests held at shutdown and counts those
// served (200) and those answered 503 shutting-down; any other answer, or
// none, fails t.
func tallyHeld(t *testing.T, answers <-chan heldAnswer, n int) (served, stopped int) {
	t.Helper()
	for range n {
		switch a := <-answers; {
		case a.err != nil:
			t.Errorf("a held request got no answer: %v", a.err)
		case a.code == 200:
			served++
		case a.code == 503 && a.gate == "shutting-down" && a.retry == "5":
			stopped++
		default:
			t.Errorf("held request: %d %q Retry-After %q; want 200, or 503 shutting-down", a.code, a.gate, a.retry)
		}
	}
	return served, stopped
}
