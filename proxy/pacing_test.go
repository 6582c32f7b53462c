package proxy

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/pace"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// startLog records the start times the pacer gives requests, per host:
// exact, where the times requests reach an origin carry the jitter of
// forwarding them (a new connection for one, a kept one for the next).
type startLog struct {
	mu     sync.Mutex
	starts map[string][]time.Time
}

// logStarts hooks a startLog to p's pacer, before any request.
func logStarts(p *testProxy) *startLog {
	l := &startLog{starts: map[string][]time.Time{}}
	p.srv.pacer.Started = func(host string, at time.Time) {
		l.mu.Lock()
		l.starts[host] = append(l.starts[host], at)
		l.mu.Unlock()
	}
	return l
}

// count returns how many starts were given to requests for host.
func (l *startLog) count(host string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.starts[host])
}

// gaps returns the gaps between the starts given to requests for the
// host of rawURL.
func (l *startLog) gaps(t *testing.T, rawURL string) []time.Duration {
	t.Helper()
	o, err := fetch.ParseOrigin(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	st := slices.Clone(l.starts[o.Host])
	l.mu.Unlock()
	slices.SortFunc(st, func(a, b time.Time) int { return a.Compare(b) })
	var g []time.Duration
	for i := 1; i < len(st); i++ {
		g = append(g, st[i].Sub(st[i-1]))
	}
	return g
}

// checkGaps asserts that there are n gaps and that every one is at least
// want: these are the pacer's own start times, each read after the timer
// that released it fired, so it promises no less. There is no upper
// bound: a request that reaches the proxy late, on a busy machine,
// starts late, however right the pacer; that each gap is exactly want is
// held by proxy/pace's tests, on synctest's clock.
func checkGaps(t *testing.T, gaps []time.Duration, n int, want time.Duration) {
	t.Helper()
	if len(gaps) != n {
		t.Fatalf("%d gaps; want %d", len(gaps), n)
	}
	for i, g := range gaps {
		if g < want {
			t.Errorf("gap %d = %v; want %v at least", i, g, want)
		}
	}
}

func pacedConfig(mutate func(*config.PolitenessConfig)) *config.Config {
	cfg := loopbackConfig()
	mutate(&cfg.Politeness)
	return cfg
}

// fire sends n concurrent GETs of path and returns their statuses.
func fire(t *testing.T, c *http.Client, url string, n int) []int {
	t.Helper()
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get(url)
			if err != nil {
				codes[i] = -1
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	return codes
}

func TestPacingMinInterval(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	p := startProxy(t, pacedConfig(func(pc *config.PolitenessConfig) { pc.MinInterval = 150 * time.Millisecond }))
	starts := logStarts(p)
	codes := fire(t, p.client(), o.URL+"/page", 8)
	for _, c := range codes {
		if c != 200 {
			t.Fatalf("statuses %v; want all 200", codes)
		}
	}
	checkGaps(t, starts.gaps(t, o.URL), 7, 150*time.Millisecond)
}

func TestPacingFractionalCrawlDelay(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nCrawl-delay: 0.25\nDisallow: /private\n", nil)
	p := startProxy(t, pacedConfig(func(pc *config.PolitenessConfig) { pc.CrawlDelay = true }))
	starts := logStarts(p)
	fire(t, p.client(), o.URL+"/page", 4)
	checkGaps(t, starts.gaps(t, o.URL), 3, 250*time.Millisecond)
}

func TestPacingCrawlDelayCapped(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nCrawl-delay: 86400\n", nil)
	p := startProxy(t, pacedConfig(func(pc *config.PolitenessConfig) {
		pc.CrawlDelay, pc.MaxDelay, pc.MaxWait = true, 200*time.Millisecond, 5*time.Second
	}))
	starts := logStarts(p)
	fire(t, p.client(), o.URL+"/page", 3)
	checkGaps(t, starts.gaps(t, o.URL), 2, 200*time.Millisecond)
}

func TestPacing429(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	// Two requests ahead, each 2.5 s apart: the third would wait 5 s, past
	// max_wait (4 s, at least max_delay).
	p := startProxy(t, pacedConfig(func(pc *config.PolitenessConfig) {
		pc.MinInterval, pc.MaxDelay, pc.MaxWait = 2500*time.Millisecond, 2500*time.Millisecond, 4*time.Second
	}))
	if resp, _ := get(t, p.client(), o.URL+"/first"); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	held := make(chan int, 1)
	go func() { resp, _ := get(t, p.client(), o.URL+"/held"); held <- resp.StatusCode }()
	waitQueued(t, p.srv.pacer, "127.0.0.1", 1)
	resp, body := get(t, p.client(), o.URL+"/second")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Robots-Gate") != "paced" {
		t.Fatalf("second: %d %q; want 429 paced", resp.StatusCode, resp.Header.Get("X-Robots-Gate"))
	}
	if ra := resp.Header.Get("Retry-After"); ra != "5" { // the 5 s it would have waited
		t.Errorf("Retry-After = %q; want 5", ra)
	}
	if code := <-held; code != 200 {
		t.Errorf("the request held for its turn: %d; want 200", code)
	}
	if !strings.Contains(body, "paced") || o.count("/second") != 0 {
		t.Errorf("body %q, origin hits %d", body, o.count("/second"))
	}
	if rec := p.lastAudit(t); rec["msg"] != "paced" || rec["status"] != 429.0 {
		t.Errorf("audit = %v", rec)
	}
}

// waitQueued polls, bounded, until n requests wait for host o.
func waitQueued(t *testing.T, pc *pace.Pacer, o string, n int) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("%d requests waiting for their turn on %s", n, o), func() bool { return pc.Waiting(o) == n })
}

func TestPacingPerSiteOverride(t *testing.T) {
	t.Parallel()
	paced := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	free := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	cfg := loopbackConfig()
	cfg.Sites = []config.SiteRule{{Host: "localhost", Policy: "robots", MinInterval: 200 * time.Millisecond}}
	p := startProxy(t, cfg)
	starts := logStarts(p)
	pacedURL := strings.Replace(paced.URL, "127.0.0.1", "localhost", 1)
	fire(t, p.client(), free.URL+"/x", 4)
	// Unpaced: its pacer was never asked for a start (timing the four
	// would say nothing a busy machine could not also make them say).
	if n := starts.count(mustOrigin(t, free.URL).Host); n != 0 {
		t.Errorf("an origin without min_interval: %d of its 4 requests given a start by the pacer; want them unpaced", n)
	}
	fire(t, p.client(), pacedURL+"/x", 3)
	checkGaps(t, starts.gaps(t, pacedURL), 2, 200*time.Millisecond)
}

// TestPacingOriginsInParallel: each host has its own queue. While a
// request to one host waits for its turn (an hour away), ten others
// through one MITM proxy are served, paced each on its own: proven by
// order, not by how long it took, which a busy machine decides.
func TestPacingOriginsInParallel(t *testing.T) {
	t.Parallel()
	// Ten hosts (every name resolves to 127.0.0.1 here), each its own
	// queue, and one whose queue is held.
	var urls []string
	for i := range 11 {
		o := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
		urls = append(urls, strings.Replace(o.URL, "127.0.0.1", fmt.Sprintf("host%d.test", i), 1))
	}
	held, urls := urls[0], urls[1:]
	p := startMITM(t, nil, func(c *config.Config) {
		c.Politeness.MinInterval, c.Politeness.MaxDelay, c.Politeness.MaxWait = 200*time.Millisecond, 2*time.Hour, 2*time.Hour
		c.Sites = []config.SiteRule{{Host: "host0.test", Policy: "robots", MinInterval: time.Hour}}
	})
	starts := logStarts(p)
	c := p.client()
	if resp, _ := get(t, c, held+"/first"); resp.StatusCode != 200 {
		t.Fatalf("%s/first: %d", held, resp.StatusCode)
	}
	ctx, cancel := context.WithCancel(t.Context())
	waited := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, held+"/second", nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		waited <- err
	}()
	waitQueued(t, p.srv.pacer, "host0.test", 1)
	var wg sync.WaitGroup
	for _, u := range urls {
		wg.Go(func() {
			if codes := fire(t, c, u+"/x", 3); !slices.Equal(codes, []int{200, 200, 200}) {
				t.Errorf("%s: statuses %v; want 200s", u, codes)
			}
		})
	}
	wg.Wait()
	// With one queue for all, none of them would have started before
	// host0's second request, an hour from its first.
	if n, w := starts.count("host0.test"), p.srv.pacer.Waiting("host0.test"); n != 1 || w != 1 {
		t.Errorf("host0.test: %d starts, %d waiting, once the others were served; want 1 and 1 (hosts do not wait on each other)", n, w)
	}
	cancel()
	if err := <-waited; err == nil {
		t.Errorf("%s/second: answered; want it still waiting for its turn when its client left", held)
	}
	for _, u := range urls {
		checkGaps(t, starts.gaps(t, u), 2, 200*time.Millisecond)
	}
}

// TestPacingPerHost: an origin's scheme and port do not make it another
// server: two origins on one host share its queue.
func TestPacingPerHost(t *testing.T) {
	t.Parallel()
	a := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	b := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	p := startProxy(t, pacedConfig(func(pc *config.PolitenessConfig) { pc.MinInterval = 200 * time.Millisecond }))
	starts := logStarts(p)
	var wg sync.WaitGroup
	for _, u := range []string{a.URL, b.URL} {
		wg.Add(1)
		go func() { defer wg.Done(); fire(t, p.client(), u+"/x", 2) }()
	}
	wg.Wait()
	checkGaps(t, starts.gaps(t, a.URL), 3, 200*time.Millisecond) // 4 starts on 127.0.0.1
}

// TestPacingScrapyLoseNoPage: a client like Scrapy on its defaults (8
// concurrent requests to a domain, 429s retried twice at once, Retry-After
// ignored) through an origin with a Crawl-delay loses no page: requests are
// held for their turn (max_wait 2m by default), not refused. The eighth
// waits 10.5 s: past the old 10 s max_wait, it was refused three times.
func TestPacingScrapyLoseNoPage(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nCrawl-delay: 0.5\n", nil)
	p := startProxy(t, pacedConfig(func(pc *config.PolitenessConfig) { pc.CrawlDelay = true }))
	starts := logStarts(p)
	client := p.client()
	client.Timeout = 30 * time.Second
	var wg sync.WaitGroup
	lost := make(chan string, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := fmt.Sprintf("%s/page%d", o.URL, i)
			for range 3 { // the first try and two retries
				resp, err := client.Get(u)
				if err != nil {
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return
				}
			}
			lost <- u
		}()
	}
	wg.Wait()
	close(lost)
	for u := range lost {
		t.Errorf("lost %s", u)
	}
	checkGaps(t, starts.gaps(t, o.URL), 7, 500*time.Millisecond)
}

// TestPacingNothingToSpace: with pacing on (crawl_delay, the default) and
// no interval set, requests to an origin whose robots.txt has no
// Crawl-delay at all are neither held nor remembered, so that a broad
// crawl keeps no state per host; once the file has a Crawl-delay for any
// token, every start to that host is remembered again, so that the token
// it names keeps its gap after the others' starts too.
func TestPacingNothingToSpace(t *testing.T) {
	t.Parallel()
	plain := newTestOrigin(t, "User-agent: *\nDisallow: /private\n", nil)
	delayed := newTestOrigin(t, "User-agent: SlowBot\nCrawl-delay: 0.3\n\nUser-agent: *\nAllow: /\n", nil)
	p := startProxy(t, pacedConfig(func(pc *config.PolitenessConfig) { pc.CrawlDelay = true }))
	starts := logStarts(p)
	c := p.client()
	for i := range 5 {
		if codes := fire(t, c, fmt.Sprintf("%s/page-%d", plain.URL, i), 2); codes[0] != http.StatusOK || codes[1] != http.StatusOK {
			t.Fatalf("GET %s/page-%d: %v; want 200s", plain.URL, i, codes)
		}
	}
	if n := p.srv.pacer.Hosts(); n != 0 {
		t.Errorf("after 10 requests to an origin with no Crawl-delay, the pacer remembers %d hosts; want 0", n)
	}
	if g := starts.gaps(t, plain.URL); len(g) != 0 {
		t.Errorf("starts recorded for an origin with no Crawl-delay: gaps %v; want none", g)
	}

	// FooBot has no delay of its own, but the file has one for SlowBot:
	// FooBot's start is remembered and SlowBot's request keeps its gap
	// after it.
	get := func(agent string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, delayed.URL+"/x", nil)
		req.Header.Set("User-Agent", agent)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d; want 200", agent, resp.StatusCode)
		}
	}
	get("FooBot/1.0")
	get("SlowBot/1.0")
	checkGaps(t, starts.gaps(t, delayed.URL), 1, 300*time.Millisecond)
}
