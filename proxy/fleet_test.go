package proxy

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage/source"
)

// fleetSecret is the fleet tests' [cluster] secret.
const fleetSecret = "the fleet's test secret, 32 bytes or more"

// startFleet runs n proxies sharing one real Redis.
func startFleet(t *testing.T, r *redistest.Server, n int, mutate func(*config.Config)) []*testProxy {
	t.Helper()
	return startFleetWith(t, r, n, mutate, func(int) Options { return Options{} })
}

// startFleetWith runs n proxies sharing one real Redis, instance i with
// opts(i).
func startFleetWith(t *testing.T, r *redistest.Server, n int, mutate func(*config.Config), opts func(i int) Options) []*testProxy {
	t.Helper()
	var fleet []*testProxy
	for i := range n {
		cfg := loopbackConfig()
		cfg.Cluster.Redis, cfg.Cluster.KeyPrefix = r.URL(), "rgtest:"+t.Name()+":"
		cfg.Cluster.Secret = fleetSecret
		// A busy machine's Redis answers late, not never: a call cut at
		// the 250 ms default would open the breaker, and the instance
		// would go on alone, in tests that are about the fleet. The tests
		// of the bound itself set theirs.
		cfg.Cluster.OpTimeout = 10 * time.Second
		if mutate != nil {
			mutate(cfg)
		}
		fleet = append(fleet, startProxyWith(t, cfg, opts(i)))
	}
	return fleet
}

// TestFleetOneFetch: three instances asked at once about a cold origin
// fetch its robots.txt once between them, and all enforce it.
func TestFleetOneFetch(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	o := newTestOrigin(t, testRobots, nil)
	// robots.txt is answered once every instance has asked (one fetching
	// it, the others waiting for its result), not after a time that a
	// busy machine's instances might take to ask.
	hold := make(chan struct{})
	o.robotsHold.Store(&hold)
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release) // before o.Close, which waits for the handler
	fleet := startFleet(t, r, 3, nil)
	var wg sync.WaitGroup
	codes := make([]int, 9)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/public"
			if i%3 == 0 {
				path = "/private/x"
			}
			resp, _ := get(t, fleet[i%3].client(), o.URL+path)
			codes[i] = resp.StatusCode
		}()
	}
	asked := 0
	if !testkit.Poll(30*time.Second, func() bool {
		asked = 0
		for _, p := range fleet {
			if p.srv.cache.Stats().FetchesInFlight > 0 {
				asked++
			}
		}
		return asked == len(fleet)
	}) {
		release()
		wg.Wait()
		t.Fatalf("%d of %d instances asked for robots.txt within 30 s", asked, len(fleet))
	}
	release()
	wg.Wait()
	for i, c := range codes {
		if want := map[bool]int{true: 403, false: 200}[i%3 == 0]; c != want {
			t.Errorf("request %d: %d; want %d", i, c, want)
		}
	}
	if n := o.count("/robots.txt"); n != 1 {
		t.Errorf("robots.txt fetched %d times by the fleet; want 1", n)
	}

	// A purge on one instance is a purge for the fleet.
	resp, err := http.Post(fleet[0].url.String()+"/robots/purge?origin="+url.QueryEscape(o.URL), "", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("purge: %v %v", resp, err)
	}
	resp.Body.Close()
	origin := mustOrigin(t, o.URL)
	testkit.Eventually(t, "another instance to forget the purged origin", func() bool { _, held := fleet[2].srv.cache.Peek(origin); return !held })
	get(t, fleet[2].client(), o.URL+"/public")
	if n := o.count("/robots.txt"); n != 2 {
		t.Errorf("robots.txt fetched %d times; want a second fetch after the purge", n)
	}
}

// TestFleetPurgeUsageFiles: the usage files one instance fetched are
// shared with the fleet, and a purge on one instance is a purge of them
// for the fleet: Redis's copies deleted, every instance's own forgotten,
// so that the next request through any instance reads the new licence.
func TestFleetPurgeUsageFiles(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	var license atomic.Value
	license.Store(`<rsl><content url="/"><license><permits type="usage">all</permits></license></content></rsl>`)
	o := newTestOrigin(t, "", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/license.xml":
			w.Header().Set("Cache-Control", "max-age=3600")
			io.WriteString(w, license.Load().(string))
		case "/.well-known/tdmrep.json":
			w.Header().Set("Cache-Control", "max-age=3600")
			io.WriteString(w, `[]`)
		default:
			io.WriteString(w, "page\n")
		}
	})
	o.robots.Store("User-agent: *\nAllow: /\nLicense: " + o.URL + "/license.xml\n")
	fleet := startFleet(t, r, 2, nil)
	train := func(p *testProxy) *http.Response {
		t.Helper()
		resp, _ := get(t, p.client(), o.URL+"/page", policy.PurposeHeader, "ai-train")
		return resp
	}
	for i, p := range fleet {
		if resp := train(p); resp.StatusCode != 200 {
			t.Fatalf("instance %d, licence permitting all: %d %v", i, resp.StatusCode, resp.Header)
		}
		if i == 0 {
			// A fetched file is answered before it is saved to Redis (the
			// save is not the request's to wait for): on a busy machine the
			// other instance could ask before it lands, and fetch it again.
			waitStored(t, p, o.URL+"/license.xml", o.URL+"/.well-known/tdmrep.json")
		}
	}
	if n := o.count("/license.xml") + o.count("/.well-known/tdmrep.json"); n != 2 {
		t.Errorf("%d fetches of the usage files by two instances; want 2 (one each, shared)", n)
	}

	license.Store(`<rsl><content url="/"><license><prohibits type="usage">ai-train</prohibits></license></content></rsl>`)
	resp, err := http.Post(fleet[0].url.String()+"/robots/purge?origin="+url.QueryEscape(o.URL), "", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("purge: %v %v", resp, err)
	}
	resp.Body.Close()
	testkit.Eventually(t, "the other instance to forget the purged licence", func() bool {
		_, held := fleet[1].srv.files.Peek(source.KindRSL, o.URL+"/license.xml")
		return !held
	})
	want := "rsl " + o.URL + "/license.xml: prohibits usage ai-train"
	if resp := train(fleet[1]); resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate-Rule") != want {
		t.Errorf("after the purge, through the other instance: %d %q; want 403 %q", resp.StatusCode, resp.Header.Get("X-Robots-Gate-Rule"), want)
	}
	if n := o.count("/license.xml"); n != 2 {
		t.Errorf("licence fetched %d times; want 2 (once more after the purge)", n)
	}
}

// waitStored waits for p to have saved urls in the fleet's Redis.
func waitStored(t *testing.T, p *testProxy, urls ...string) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("%v in the fleet's store", urls), func() bool {
		for _, u := range urls {
			if sd, err := p.srv.cluster.LoadDoc(t.Context(), u); err != nil || sd == nil {
				return false
			}
		}
		return true
	})
}

// TestFleetCrawlDelay: requests to one site through three instances at
// once start Crawl-delay apart, as through one. It asserts on the starts
// the instances decided (their pacers' start logs), not on when requests
// reached the origin, which carries the jitter of a busy machine.
func TestFleetCrawlDelay(t *testing.T) {
	t.Parallel()
	const gap = 400 * time.Millisecond
	r := redistest.Start(t)
	o := newTestOrigin(t, "User-agent: *\nCrawl-delay: 0.4\n", nil)
	fleet := startFleet(t, r, 3, func(c *config.Config) { c.Politeness.CrawlDelay = true })
	logs := make([]*startLog, len(fleet))
	reservations := make([]*reservationLog, len(fleet))
	for i, p := range fleet {
		logs[i], reservations[i] = logStarts(p), logReservations(p)
	}
	get(t, fleet[0].client(), o.URL+"/warm") // robots.txt cached by the fleet
	for round := range 2 {
		var wg sync.WaitGroup
		for i := range fleet {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if resp, _ := get(t, fleet[i].client(), fmt.Sprintf("%s/r%d-%d", o.URL, round, i)); resp.StatusCode != 200 {
					t.Errorf("round %d instance %d: %d", round, i, resp.StatusCode)
				}
			}()
		}
		wg.Wait()
	}

	// Each start, as its instance decided it (the time it waited for,
	// recorded by its pacer), beside the earliest its slot in the fleet
	// could be. Redis reserves slots gap apart on its own clock (the
	// machine's, here), in whole milliseconds: a slot is the wait it
	// returned after Redis read its clock, which it did after the call
	// was sent (less a millisecond, truncated), and the instance starts
	// no sooner than that wait from when the answer came. So of any two
	// starts, one is at least gap after the earliest the other's slot
	// could be, however slow the machine (which only delays answers);
	// an instance pacing alone would start beside another.
	type start struct {
		instance int
		at       time.Time // decided
		earliest time.Time // its slot's
	}
	host := mustOrigin(t, o.URL).Host
	var starts []start
	for i := range fleet {
		logs[i].mu.Lock()
		at := slices.Clone(logs[i].starts[host])
		logs[i].mu.Unlock()
		res := reservations[i].all()
		if len(at) != len(res) {
			t.Fatalf("instance %d recorded %d starts and made %d reservations; want one for each", i, len(at), len(res))
		}
		// An instance reserves its starts to a host one at a time, and
		// records each before the next: in the same order.
		for j, rs := range res {
			if rs.err != nil || !rs.ok {
				t.Fatalf("instance %d, reservation %d: %v %v; want a slot (the test's requests fit within max_wait)", i, j, rs.ok, rs.err)
			}
			starts = append(starts, start{i, at[j], rs.sent.Add(rs.wait - time.Millisecond)})
		}
	}
	if len(starts) != 7 {
		t.Fatalf("%d starts; want 7", len(starts))
	}
	for i, a := range starts {
		for _, b := range starts[i+1:] {
			if b.at.Sub(a.earliest) < gap && a.at.Sub(b.earliest) < gap {
				t.Errorf("a start on instance %d at %s and one on instance %d at %s (slots no sooner than %s and %s): neither %v after the other's slot",
					a.instance, a.at.Format(".000"), b.instance, b.at.Format(".000"), a.earliest.Format(".000"), b.earliest.Format(".000"), gap)
			}
		}
	}
}

// reservationLog records the reservations an instance asks the fleet
// for: when each was sent, and what the fleet answered.
type reservationLog struct {
	policy.FleetPacer
	mu   sync.Mutex
	made []reservation
}

type reservation struct {
	sent time.Time
	wait time.Duration
	ok   bool
	err  error
}

// logReservations records p's reservations with its fleet, before any
// request.
func logReservations(p *testProxy) *reservationLog {
	sn := *p.srv.snap.Load()
	l := &reservationLog{FleetPacer: sn.env.Fleet}
	sn.env.Fleet = l
	p.srv.snap.Store(&sn)
	return l
}

func (l *reservationLog) Reserve(ctx context.Context, host string, gap, maxWait, local time.Duration) (time.Duration, bool, error) {
	sent := time.Now()
	wait, ok, err := l.FleetPacer.Reserve(ctx, host, gap, maxWait, local)
	l.mu.Lock()
	l.made = append(l.made, reservation{sent, wait, ok, err})
	l.mu.Unlock()
	return wait, ok, err
}

func (l *reservationLog) all() []reservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.made)
}

// TestFleetBackoffShared: an origin's 429 to one instance holds its host
// on the others too.
func TestFleetBackoffShared(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	var busy atomic.Int64
	o := newTestOrigin(t, "User-agent: *\nDisallow:\n", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" && busy.Add(1) == 1 {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte("ok"))
	})
	fleet := startFleet(t, r, 2, func(c *config.Config) {
		c.Politeness.MaxWait, c.Politeness.MaxDelay = 100*time.Millisecond, 100*time.Millisecond
	})
	if resp, _ := get(t, fleet[0].client(), o.URL+"/busy"); resp.StatusCode != 429 || resp.Header.Get("X-Robots-Gate") != "" {
		t.Fatalf("the origin's own 429: %d %v", resp.StatusCode, resp.Header)
	}
	host := "127.0.0.1"
	testkit.Eventually(t, "the other instance to learn of the back-off", func() bool { until, _ := fleet[1].srv.backoffs.Hold(host); return !until.IsZero() })
	resp, body := get(t, fleet[1].client(), o.URL+"/other")
	if resp.StatusCode != 429 || resp.Header.Get("X-Robots-Gate") != policy.ActionPaced.String() || !strings.Contains(body, "another instance") {
		t.Errorf("the other instance: %d %v %q; want its own 429, paced by the shared back-off", resp.StatusCode, resp.Header, body)
	}
	if n := o.count("/other"); n != 0 {
		t.Errorf("the origin was sent %d requests while it asked for none", n)
	}
}

// TestFleetRedisDown: cached origins cost no Redis call at all, so that
// with Redis killed mid-traffic each instance goes on with its own state
// at once, never letting a disallowed request through; /healthz and
// /status.json say so; once Redis is back the instances rejoin.
func TestFleetRedisDown(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	warm := newTestOrigin(t, testRobots, nil)
	cold := newTestOrigin(t, testRobots, nil)
	fleet := startFleet(t, r, 2, func(c *config.Config) {
		// A cold origin that waited for a fetch lock nobody can take would
		// wait peer_wait (fetch_timeout + 2 s) for each request: an hour,
		// past the client's timeout and the test's, so that the answers
		// coming at all prove no such wait, and no bound on how long they
		// took (which a busy machine decides) is needed.
		c.Robots.FetchTimeout = time.Hour
	})
	for _, p := range fleet {
		get(t, p.client(), warm.URL+"/public")
	}
	p := fleet[1]
	p.srv.cache.Wait()
	errs := func() float64 { return testutil.ToFloat64(p.srv.metrics.clusterErrors) }

	// Counted by Redis itself while it is up: every command it ran, not
	// the instance's failed calls, which include the watcher's pings
	// (every 5 s, whatever the traffic; a slow machine's test spans one)
	// and miss those the breaker skips.
	before := requestCommands(t, r)
	for i := range 5 {
		if resp, _ := get(t, p.client(), warm.URL+"/private/x"); resp.StatusCode != 403 {
			t.Errorf("warm origin, disallowed path (%d): %d; want 403", i, resp.StatusCode)
		}
	}
	if after := requestCommands(t, r); !maps.Equal(after, before) {
		t.Errorf("Redis commands before five requests for a cached origin %v, after %v; want none run for them", before, after)
	}
	if st := p.srv.cluster.Status(); !st.Up {
		t.Errorf("cluster status %+v while Redis was up; want up (a breaker open would have skipped calls unseen)", st)
	}

	r.Stop()
	for i := range 5 {
		if resp, _ := get(t, p.client(), warm.URL+"/private/x"); resp.StatusCode != 403 {
			t.Errorf("warm origin, disallowed path, Redis down (%d): %d; want 403", i, resp.StatusCode)
		}
	}
	if resp, _ := get(t, p.client(), cold.URL+"/private/x"); resp.StatusCode != 403 {
		t.Errorf("cold origin, disallowed path, Redis down: %d; want 403", resp.StatusCode)
	}
	if resp, _ := get(t, p.client(), cold.URL+"/public"); resp.StatusCode != 200 {
		t.Errorf("cold origin, allowed path, Redis down: %d; want 200", resp.StatusCode)
	}
	if errs() < 1 {
		t.Error("robotsgate_cluster_errors_total did not count the failure")
	}
	resp, body := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/healthz")
	if resp.StatusCode != 200 || !strings.Contains(body, "cluster: redis down") {
		t.Errorf("/healthz with Redis down: %d %q", resp.StatusCode, body)
	}
	if st := getStatus(t, p); st.Cluster == nil || st.Cluster.Up {
		t.Errorf("/status.json cluster = %+v; want down", st.Cluster)
	}
	if !strings.Contains(p.log.String(), "redis lost") {
		t.Error("the loss of Redis was not logged")
	}

	r.Restart()
	fresh := newTestOrigin(t, testRobots, nil)
	for deadline := time.Now().Add(15 * time.Second); ; {
		get(t, p.client(), fresh.URL+"/public") // a miss: the store is tried again
		p.srv.cache.Purge(mustOrigin(t, fresh.URL))
		if _, body := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/healthz"); strings.Contains(body, "redis up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the instance did not rejoin after Redis came back")
		}
		time.Sleep(100 * time.Millisecond) // three requests at each turn: paced, bounded by the deadline
	}
	if !strings.Contains(p.log.String(), "redis regained") {
		t.Error("the return of Redis was not logged")
	}
}

// requestCommands returns how many times r has run each command that an
// instance sends for a request (a read, a write, a script), from INFO
// commandstats: not the liveness checks (PING: the watcher's, the
// subscriptions'), INFO (this function's) or what a connection or a
// subscription sends to set itself up.
func requestCommands(t *testing.T, r *redistest.Server) map[string]string {
	t.Helper()
	info, err := r.Info("commandstats")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]string{}
	for line := range strings.Lines(info) {
		name, stats, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
		if !ok {
			continue
		}
		// A connection's own set-up (a new one may be dialed at any time,
		// on a slow machine too), the watcher's pings and this count
		// itself: none is run for a request.
		switch {
		case name == "ping", name == "info", name == "hello", name == "auth", name == "select", name == "subscribe",
			strings.HasPrefix(name, "client|"):
			continue
		}
		n, _, _ := strings.Cut(stats, ",")
		calls[name] = strings.TrimPrefix(n, "calls=")
	}
	return calls
}

// TestRestartKeepsLastGoodCopy: an instance restarted on the same
// state_dir while the origin answers 503 keeps enforcing the rules it
// fetched before, without fetching again.
func TestRestartKeepsLastGoodCopy(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, testRobots, nil)
	dir := t.TempDir()
	cfg := loopbackConfig()
	cfg.TLS.StateDir = dir
	first := startProxy(t, cfg)
	get(t, first.client(), o.URL+"/public")
	first.srv.Shutdown(t.Context()) // writes what it fetched

	o.robotsStatus.Store(http.StatusServiceUnavailable)
	cfg2 := loopbackConfig()
	cfg2.TLS.StateDir = dir
	second := startProxy(t, cfg2)
	if resp, _ := get(t, second.client(), o.URL+"/private/x"); resp.StatusCode != 403 {
		t.Errorf("after a restart while robots.txt answers 503: %d; want 403 from the last good copy", resp.StatusCode)
	}
	if resp, _ := get(t, second.client(), o.URL+"/public"); resp.StatusCode != 200 {
		t.Errorf("allowed path after the restart: %d; want 200", resp.StatusCode)
	}
	if n := o.count("/robots.txt"); n != 1 {
		t.Errorf("robots.txt fetched %d times; want once, before the restart (the copy is fresh)", n)
	}
}

func mustOrigin(t *testing.T, u string) fetch.Origin {
	t.Helper()
	o, err := fetch.ParseOrigin(u)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestFleetPurgeRedisDown: a purge while Redis cannot be reached forgets
// the origin here and says the fleet was not told (503, to retry), rather
// than claim a purge the other instances never heard of.
func TestFleetPurgeRedisDown(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	o := newTestOrigin(t, testRobots, nil)
	p := startFleet(t, r, 1, nil)[0]
	get(t, p.client(), o.URL+"/public")
	r.Stop()
	resp, err := http.Post(p.url.String()+"/robots/purge?origin="+url.QueryEscape(o.URL), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "the fleet was not told") {
		t.Errorf("purge with Redis down: %d %q; want 503 saying the fleet was not told", resp.StatusCode, body)
	}
	if _, held := p.srv.cache.Peek(mustOrigin(t, o.URL)); held {
		t.Error("the origin is still held here after the purge")
	}
}
