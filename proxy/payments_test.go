package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity/identitytest"
	"github.com/robotsgate/robotsgate/proxy/pay"
)

// pricedOrigin is a pay-per-crawl site: /priced costs USD 0.01, paid by
// a signed request that accepts that price exactly, then charged;
// /expensive costs USD 5, /dear USD 0.04; /greedy asks again whatever is accepted;
// /free charges nothing once the price is accepted. dir returns the key
// directory its signatures are checked against.
func pricedOrigin(t *testing.T, dir func() []byte) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/robots.txt" {
			io.WriteString(w, "User-agent: *\nAllow: /\n")
			return
		}
		price := map[string]string{"/priced": "USD 0.01", "/expensive": "USD 5", "/greedy": "USD 0.01", "/free": "USD 0.01", "/overcharge": "USD 0.01", "/dear": "USD 0.04"}[r.URL.Path]
		sig, err := identitytest.Verify(r, dir(), time.Now())
		// The price accepted must be covered by the signature: it cannot
		// then be replayed with another.
		if err == nil && !slices.Contains(sig.Covered, `"crawler-exact-price"`) {
			err = errors.New("the price is not signed")
		}
		if price == "" || r.URL.Path == "/greedy" || err != nil || r.Header.Get("Crawler-Exact-Price") != price {
			w.Header().Set("Crawler-Price", price)
			w.WriteHeader(http.StatusPaymentRequired)
			io.WriteString(w, "pay first\n")
			return
		}
		switch r.URL.Path {
		case "/priced":
			w.Header().Set("Crawler-Charged", price)
		case "/overcharge":
			w.Header().Set("Crawler-Charged", "USD 0.02")
		}
		io.WriteString(w, "content "+r.URL.Path+"\n")
	}))
	t.Cleanup(o.Close)
	return o, &hits
}

// directoryOf fetches p's key directory.
func directoryOf(t *testing.T, p *testProxy) []byte {
	t.Helper()
	_, body := get(t, http.DefaultClient, p.url.String()+"/.well-known/http-message-signatures-directory")
	return []byte(body)
}

// payingProxy is a proxy that signs ([identity]) and pays up to maxPrice
// a request, within budget a day.
func payingProxy(t *testing.T, maxPrice, budget string) *testProxy {
	t.Helper()
	c := loopbackConfig()
	c.Identity.SignatureAgent = testAgent
	c.Payments.MaxPrice, c.Payments.Budget = maxPrice, budget
	return startProxy(t, c)
}

// TestPayPerCrawl: a price within max_price is paid once, signed, and the
// charge audited (log_allowed off) and counted; a price over max_price, a
// second 402, a request with content and a spent budget are answered 402
// price-refused with the price and the limits, nothing paid.
func TestPayPerCrawl(t *testing.T) {
	t.Parallel()
	var dir atomic.Value
	dir.Store([]byte(nil))
	o, _ := pricedOrigin(t, func() []byte { return dir.Load().([]byte) })
	p := payingProxy(t, "USD 0.02", "USD 0.03")
	dir.Store(directoryOf(t, p))
	c := p.client()

	refused := func(path, reason string) {
		t.Helper()
		resp, body := get(t, c, o.URL+path)
		if resp.StatusCode != 402 || resp.Header.Get("X-Robots-Gate") != "price-refused" || !strings.Contains(body, reason) ||
			!strings.Contains(body, "max_price:   USD 0.02") {
			t.Errorf("%s: %d %q\n%s; want 402 price-refused, %q", path, resp.StatusCode, resp.Header.Get("X-Robots-Gate"), body, reason)
		}
	}
	refused("/expensive", "USD 5.00 is more than max_price")
	refused("/greedy", "the site asked again (a second 402)")
	if resp, body := get(t, c, o.URL+"/free"); resp.StatusCode != 200 || body != "content /free\n" {
		t.Errorf("/free: %d %q; want its content, nothing charged", resp.StatusCode, body)
	}
	post, _ := http.NewRequest(http.MethodPost, o.URL+"/priced", strings.NewReader("form=1"))
	post.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err := c.Do(post); err != nil || resp.StatusCode != 402 || resp.Header.Get("X-Robots-Gate") != "price-refused" {
		t.Errorf("POST /priced: %v %v; want 402 price-refused (content is not sent twice)", resp, err)
	}
	// A site that charges more than the price accepted is counted at what
	// it charged, in the budget too.
	if resp, _ := get(t, c, o.URL+"/overcharge"); resp.StatusCode != 200 {
		t.Fatalf("/overcharge: %d", resp.StatusCode)
	}
	if rec := p.lastAudit(t); rec["charged"] != "USD 0.02" {
		t.Errorf("audit of an overcharged request = %v; want charged USD 0.02", rec)
	}
	// A client's own offer is removed, so that the payment still goes
	// through the budget.
	resp, body := get(t, c, o.URL+"/priced", "Crawler-Exact-Price", "USD 0.01")
	if resp.StatusCode != 200 || body != "content /priced\n" {
		t.Fatalf("/priced: %d %q; want paid content", resp.StatusCode, body)
	}
	if rec := p.lastAudit(t); rec["charged"] != "USD 0.01" || rec["decision"] != "allowed" {
		t.Errorf("audit of a paid request = %v; want charged USD 0.01", rec)
	}
	refused("/priced", "would take today's spending past the budget (USD 0.03 spent)")
	refused("/expensive", "budget left: USD 0.00 of USD 0.03 today")
	for result, want := range map[string]float64{"paid": 2, "over-price": 2, "over-budget": 1, "failed": 2} {
		if got := testutil.ToFloat64(p.srv.metrics.payments.WithLabelValues(result)); got != want {
			t.Errorf("robotsgate_payments_total{result=%q} = %v; want %v", result, got, want)
		}
	}
	if got := p.srv.spentToday(); got < 0.0299 || got > 0.0301 {
		t.Errorf("robotsgate_budget_spent_today = %v; want 0.03", got)
	}
	if got := testutil.ToFloat64(p.srv.metrics.spent); got < 0.0299 || got > 0.0301 {
		t.Errorf("robotsgate_spent_total{currency=USD} = %v; want 0.03", got)
	}
}

// TestPayBudgetBelowMaxPrice: a budget below max_price is valid, and caps
// each price: with budget USD 0.03 and max_price USD 0.05, a USD 0.01
// price is paid and a USD 0.04 one refused as over the budget.
func TestPayBudgetBelowMaxPrice(t *testing.T) {
	t.Parallel()
	var dir atomic.Value
	dir.Store([]byte(nil))
	o, _ := pricedOrigin(t, func() []byte { return dir.Load().([]byte) })
	p := payingProxy(t, "USD 0.05", "USD 0.03")
	dir.Store(directoryOf(t, p))
	c := p.client()
	if resp, body := get(t, c, o.URL+"/priced"); resp.StatusCode != 200 || body != "content /priced\n" {
		t.Errorf("/priced (USD 0.01): %d %q; want paid content", resp.StatusCode, body)
	}
	resp, body := get(t, c, o.URL+"/dear")
	if resp.StatusCode != 402 || !strings.Contains(body, "USD 0.04 would take today's spending past the budget (USD 0.01 spent)") {
		t.Errorf("/dear (USD 0.04): %d %q; want 402 over the budget", resp.StatusCode, body)
	}
}

// TestPayPerCrawlFleet: with [cluster] the day's budget is the fleet's:
// two instances paying at once spend it once between them.
func TestPayPerCrawlFleet(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	var dir atomic.Value
	dir.Store([]byte(nil))
	o, _ := pricedOrigin(t, func() []byte { return dir.Load().([]byte) })
	dirs := t.TempDir() // one key for the fleet, as an operator deploys it
	fleet := startFleet(t, r, 2, func(c *config.Config) {
		c.TLS.StateDir = dirs
		c.Identity.SignatureAgent = testAgent
		c.Payments.MaxPrice, c.Payments.Budget = "USD 0.01", "USD 0.05"
		c.Payments.KeyPrefix = "rgtest:" + t.Name() + ":"
	})
	dir.Store(directoryOf(t, fleet[0]))
	codes := map[int]int{}
	for i := range 8 {
		resp, _ := get(t, fleet[i%2].client(), o.URL+"/priced")
		codes[resp.StatusCode]++
	}
	if codes[200] != 5 || codes[402] != 3 {
		t.Errorf("answers %v; want 5 paid (USD 0.05 at 0.01), then 402 from either instance", codes)
	}
}

// lossyPricedOrigin is a pay-per-crawl site on a raw socket that loses
// its answers to paid requests (a price accepted or offered): /paid is
// answered 402 with a price (an
// empty body, so that the connection goes back to the proxy's pool); a
// request that accepts the price is read, counted, and its connection
// closed without an answer, as a site that drops a kept-alive connection
// after reading does. /warm answers once warm requests are all in
// flight, so that the proxy keeps as many connections to the site.
type lossyPricedOrigin struct {
	addr string
	warm int
	ln   net.Listener
	// refuse, when set, closes the listener once a 402 is sent: the paid
	// request's connection is refused.
	refuse bool

	mu      sync.Mutex
	paid    []string // the request heads that accepted the price, as received
	arrived int      // /warm requests so far
	all     chan struct{}
}

func newLossyPricedOrigin(t *testing.T, warm int) *lossyPricedOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &lossyPricedOrigin{addr: ln.Addr().String(), warm: warm, ln: ln, all: make(chan struct{})}
	serveConns(t, ln, o.serve)
	return o
}

func (o *lossyPricedOrigin) serve(c net.Conn) {
	c.SetDeadline(time.Now().Add(20 * time.Second)) // every test ends sooner
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		switch {
		case req.URL.Path == "/robots.txt":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 22\r\n\r\nUser-agent: *\nAllow: /")
		case req.URL.Path == "/warm":
			o.mu.Lock()
			if o.arrived++; o.arrived == o.warm {
				close(o.all)
			}
			o.mu.Unlock()
			select {
			case <-o.all:
			case <-time.After(5 * time.Second): // a bound, not an assertion: fewer connections then
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
		case req.Header.Get("Crawler-Exact-Price") != "", req.Header.Get("Crawler-Max-Price") != "":
			var head strings.Builder
			req.Header.Write(&head)
			o.mu.Lock()
			o.paid = append(o.paid, req.Method+" "+req.RequestURI+"\n"+head.String())
			o.mu.Unlock()
			return // read, then dropped unanswered
		default:
			if o.refuse {
				o.ln.Close()
			}
			io.WriteString(c, "HTTP/1.1 402 Payment Required\r\nCrawler-Price: USD 0.01\r\nContent-Length: 0\r\n\r\n")
		}
	}
}

func (o *lossyPricedOrigin) paidRequests() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.paid)
}

// TestPayFleetCounterRewound: a Redis writer that resets the fleet's
// spending counter (deletes it, or writes a lower value, as a failover
// that lost its last writes would) does not have the fleet pay again:
// the instance that saw the counter pays nothing more that day, says why
// in its refusal, logs it and counts it.
func TestPayFleetCounterRewound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		reset []string // the writer's command; "KEY" is the counter's key
	}{
		{"vanished", []string{"DEL", "KEY"}},
		{"reset to zero", []string{"SET", "KEY", "0"}},
		{"written lower", []string{"HSET", "KEY", "reserved", "10000000", "refunded", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := redistest.Start(t)
			var dir atomic.Value
			dir.Store([]byte(nil))
			o, _ := pricedOrigin(t, func() []byte { return dir.Load().([]byte) })
			prefix := "rgtest:" + strings.ReplaceAll(t.Name(), " ", "_") + ":"
			p := startFleet(t, r, 1, func(c *config.Config) {
				c.Identity.SignatureAgent = testAgent
				c.Payments.MaxPrice, c.Payments.Budget = "USD 0.01", "USD 0.02"
				c.Payments.KeyPrefix = prefix
			})[0]
			dir.Store(directoryOf(t, p))
			c := p.client()
			for i := range 2 {
				if resp, body := get(t, c, o.URL+"/priced"); resp.StatusCode != 200 {
					t.Fatalf("payment %d: %d %q; want paid", i+1, resp.StatusCode, body)
				}
			}
			key := prefix + "spent:{USD:" + pay.Day(time.Now()) + "}"
			cmd := slices.Clone(tc.reset)
			cmd[1] = key
			if _, err := r.Do(cmd...); err != nil {
				t.Fatalf("%v: %v", cmd, err)
			}
			resp, body := get(t, c, o.URL+"/priced")
			if resp.StatusCode != 402 || resp.Header.Get("X-Robots-Gate") != "price-refused" || !strings.Contains(body, "spending counter went backwards or vanished") {
				t.Errorf("after the counter was reset: %d %q; want 402 price-refused, the counter named", resp.StatusCode, body)
			}
			if got := testutil.ToFloat64(p.srv.metrics.payments.WithLabelValues("counter-rewound")); got != 1 {
				t.Errorf("robotsgate_payments_total{result=\"counter-rewound\"} = %v; want 1", got)
			}
			if got := testutil.ToFloat64(p.srv.metrics.clusterErrors); got < 1 {
				t.Errorf("robotsgate_cluster_errors_total = %v; want the counter counted", got)
			}
			if log := p.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "went backwards or vanished") {
				t.Errorf("the log does not say the counter went backwards:\n%s", log)
			}
			// It stays stopped for the day, though the counter looks fine now.
			if resp, _ := get(t, c, o.URL+"/priced"); resp.StatusCode != 402 {
				t.Errorf("a later request: %d; want 402 (no payment for the rest of the day)", resp.StatusCode)
			}
			if rec := p.lastAudit(t); !strings.Contains(rec["reason"].(string), "went backwards") {
				t.Errorf("audit reason = %q; want the counter named", rec["reason"])
			}
		})
	}
}

// TestPayOnceWhenTheAnswerIsLost: a paid request whose connection the
// site closes after reading it reaches the site exactly once, though the
// proxy holds idle connections to it that net/http's Transport would
// resend an idempotent request on; the client gets 502, and the price is
// counted as spent: in the budget, the audit's charged field and
// robotsgate_spent_total.
func TestPayOnceWhenTheAnswerIsLost(t *testing.T) {
	t.Parallel()
	const warm = 4
	o := newLossyPricedOrigin(t, warm)
	p := payingProxy(t, "USD 0.01", "USD 1")
	c := p.client()
	c.Transport.(*http.Transport).MaxIdleConnsPerHost = warm
	// Connections to the site in the proxy's pool, idle once answered.
	var wg sync.WaitGroup
	for range warm {
		wg.Go(func() {
			if resp, err := c.Get("http://" + o.addr + "/warm"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()

	resp, body := get(t, c, "http://"+o.addr+"/paid")
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("GET /paid: %d %q; want 502 (the paid answer was lost)", resp.StatusCode, body)
	}
	if got := o.paidRequests(); len(got) != 1 {
		t.Errorf("the site received %d paid requests; want exactly 1:\n%s", len(got), strings.Join(got, "\n"))
	}
	spent, err := p.srv.budget.Spent(t.Context(), pay.Day(time.Now()), "USD")
	if err != nil || spent.String() != "USD 0.01" {
		t.Errorf("budget spent = %v, %v; want USD 0.01 (a lost answer counts as spent)", spent, err)
	}
	if rec := p.lastAudit(t); rec["charged"] != "USD 0.01" || rec["status"] != float64(502) {
		t.Errorf("audit = %v; want status 502, charged USD 0.01", rec)
	}
	if got := testutil.ToFloat64(p.srv.metrics.spent); got < 0.0099 || got > 0.0101 {
		t.Errorf("robotsgate_spent_total{currency=USD} = %v; want 0.01", got)
	}
}

// TestPayBudgetFileIsAStateFile: pay-budget.json is read as the other
// state files are: a FIFO in its place stops the start at once (it is not
// waited on), and so does a symbolic link, even to a budget file, which
// is not followed (nor is a 300 MiB file it names read).
func TestPayBudgetFileIsAStateFile(t *testing.T) {
	t.Parallel()
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 300<<20); err != nil { // sparse: costs no disk
		t.Fatal(err)
	}
	valid := filepath.Join(t.TempDir(), "elsewhere.json")
	if err := os.WriteFile(valid, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"fifo", func(path string) error { return syscall.Mkfifo(path, 0o600) }, "not a regular file"},
		{"symlink to a budget", func(path string) error { return os.Symlink(valid, path) }, "symbolic link"},
		{"symlink to 300 MiB", func(path string) error { return os.Symlink(big, path) }, "symbolic link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := loopbackConfig()
			c.TLS.StateDir = t.TempDir()
			c.Identity.SignatureAgent = testAgent
			c.Payments.MaxPrice, c.Payments.Budget = "USD 0.01", "USD 1"
			if err := tc.make(filepath.Join(c.TLS.StateDir, "pay-budget.json")); err != nil {
				t.Skip(err)
			}
			done := make(chan error, 1)
			go func() {
				srv, err := NewServer(c, Options{Logger: testLogger(io.Discard), AuditOut: io.Discard})
				if err == nil {
					ctx, cancel := contextWithTimeout(5 * time.Second)
					srv.Shutdown(ctx)
					cancel()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "pay-per-crawl budget") || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("NewServer with pay-budget.json a %s: %v; want an error naming the budget, %q", tc.name, err, tc.want)
				}
			case <-time.After(20 * time.Second): // a bound on a hang, not a measure of speed
				t.Fatalf("NewServer with pay-budget.json a %s: still starting after 20 s (waiting on it)", tc.name)
			}
		})
	}
}

// TestPayNotCountedWhenNeverSent: a paid request that never left (its
// connection refused) cannot have been charged: the client gets 502, and
// the reservation is given back.
func TestPayNotCountedWhenNeverSent(t *testing.T) {
	t.Parallel()
	o := newLossyPricedOrigin(t, 0)
	o.refuse = true
	p := payingProxy(t, "USD 0.01", "USD 1")
	if resp, body := get(t, p.client(), "http://"+o.addr+"/paid"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("GET /paid: %d %q; want 502 (the paid request's connection was refused)", resp.StatusCode, body)
	}
	if got := o.paidRequests(); len(got) != 0 {
		t.Errorf("the site received %d paid requests; want none", len(got))
	}
	spent, err := p.srv.budget.Spent(t.Context(), pay.Day(time.Now()), "USD")
	if err != nil || spent.Nanos != 0 {
		t.Errorf("budget spent = %v, %v; want nothing (the request never left)", spent, err)
	}
	if rec := p.lastAudit(t); rec["charged"] != "" {
		t.Errorf("audit = %v; want nothing charged", rec)
	}
}

// TestPayPerCrawlMITM: inside a MITM tunnel the paid request goes to the
// HTTPS site once, over HTTP/1.1 on a connection of its own, and its
// answer reaches the client.
func TestPayPerCrawlMITM(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n", "shop.example")
	var paid atomic.Int64
	o.handler = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Crawler-Exact-Price") != "USD 0.01" {
			w.Header().Set("Crawler-Price", "USD 0.01")
			w.WriteHeader(http.StatusPaymentRequired)
			return
		}
		paid.Add(1)
		w.Header().Set("Crawler-Charged", "USD 0.01")
		io.WriteString(w, "paid "+r.Proto+"\n")
	}
	p := startMITM(t, pki, func(c *config.Config) {
		c.Identity.SignatureAgent = testAgent
		c.Payments.MaxPrice, c.Payments.Budget = "USD 0.01", "USD 1"
	})
	resp, body := get(t, p.mitmClient(t, nil, false), "https://shop.example:"+port+"/article")
	if resp.StatusCode != 200 || body != "paid HTTP/1.1\n" || paid.Load() != 1 {
		t.Errorf("GET /article: %d %q, %d paid requests; want the paid answer, one paid request over HTTP/1.1", resp.StatusCode, body, paid.Load())
	}
	if rec := p.lastAudit(t); rec["charged"] != "USD 0.01" {
		t.Errorf("audit = %v; want charged USD 0.01", rec)
	}
}

// TestPayNeverForFreePaths: the paths Cloudflare never charges for are
// never paid for, whoever asks and however the path is spelt: the site's
// 402 reaches the client as the site sent it (as a 402 that names no
// price does), nothing is spent, and the answer is audited though
// log_allowed is off. Another path at the same site is paid.
func TestPayNeverForFreePaths(t *testing.T) {
	t.Parallel()
	var paidHits atomic.Int64
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Crawler-Exact-Price") == "USD 0.01" {
			paidHits.Add(1)
			w.Header().Set("Crawler-Charged", "USD 0.01")
			io.WriteString(w, "paid "+r.URL.Path+"\n")
			return
		}
		w.Header().Set("Crawler-Price", "USD 0.01")
		w.WriteHeader(http.StatusPaymentRequired)
		io.WriteString(w, "the site's own 402\n")
	}))
	t.Cleanup(o.Close)
	p := payingProxy(t, "USD 0.01", "USD 1")
	c := p.client()
	for _, target := range []string{"/robots.txt", "/robots.txt?x=1", "/%72obots.txt", "/sitemap.xml", "/security.txt",
		"/.well-known/security.txt", "/.well-known/%73ecurity.txt", "/crawlers.json", "/a/../crawlers.json"} {
		resp, body := get(t, c, o.URL+target)
		if resp.StatusCode != 402 || body != "the site's own 402\n" || resp.Header.Get("Crawler-Price") != "USD 0.01" {
			t.Errorf("GET %s: %d %q; want the site's own 402 passed on", target, resp.StatusCode, body)
		}
		rec := p.lastAudit(t)
		if reason, _ := rec["reason"].(string); !strings.Contains(reason, "never paid for") || rec["charged"] != "" || rec["status"] != float64(402) {
			t.Errorf("GET %s: audit %v; want a 402, the reason naming a path never paid for, nothing charged", target, rec)
		}
	}
	if n := paidHits.Load(); n != 0 {
		t.Errorf("%d paid requests for paths never paid for; want none", n)
	}
	spent, err := p.srv.budget.Spent(t.Context(), pay.Day(time.Now()), "USD")
	if err != nil || spent.Nanos != 0 {
		t.Errorf("budget spent = %v, %v; want nothing", spent, err)
	}
	if resp, body := get(t, c, o.URL+"/ROBOTS.TXT"); resp.StatusCode != 200 || body != "paid /ROBOTS.TXT\n" {
		t.Errorf("GET /ROBOTS.TXT: %d %q; want it paid (paths are case-sensitive)", resp.StatusCode, body)
	}
}

// errorOrigin is a pay-per-crawl site that answers with crawler-error
// codes: /forbidden 403 CrawlerForbidden; /payfail a price and
// PaymentFailed; /missing a price and MissingCrawlerPrice (the first
// 402's usual code), then paid; /refused a price, and the paid request
// 403 PaymentFailed; /flaky a price, the first paid request 500
// InternalError, the second paid; /broken a price, every paid request
// 500 InternalError; /broken402 likewise, 402 InternalError. paid counts
// the paid requests by path.
func errorOrigin(t *testing.T) (*httptest.Server, func(path string) int) {
	var mu sync.Mutex
	paid := map[string]int{}
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(status int, code string) {
			w.Header().Set("Crawler-Error", code)
			w.WriteHeader(status)
			io.WriteString(w, "the site's "+code+"\n")
		}
		if r.URL.Path == "/forbidden" {
			fail(403, "CrawlerForbidden")
			return
		}
		if r.Header.Get("Crawler-Exact-Price") != "USD 0.01" {
			w.Header().Set("Crawler-Price", "USD 0.01")
			code := map[string]string{"/payfail": "PaymentFailed", "/missing": "MissingCrawlerPrice"}[r.URL.Path]
			if code == "" {
				code = "MissingCrawlerPrice"
			}
			fail(402, code)
			return
		}
		mu.Lock()
		paid[r.URL.Path]++
		n := paid[r.URL.Path]
		mu.Unlock()
		switch {
		case r.URL.Path == "/refused":
			fail(403, "PaymentFailed")
		case r.URL.Path == "/broken", r.URL.Path == "/flaky" && n == 1:
			fail(500, "InternalError")
		case r.URL.Path == "/broken402":
			fail(402, "InternalError")
		default:
			w.Header().Set("Crawler-Charged", "USD 0.01")
			io.WriteString(w, "paid "+r.URL.Path+"\n")
		}
	}))
	t.Cleanup(o.Close)
	return o, func(path string) int { mu.Lock(); defer mu.Unlock(); return paid[path] }
}

// TestPayCrawlerError: a site's crawler-error codes are audited (the
// reason names the code, log_allowed off), shown in robotsgate's own 402
// or 403, and never retried, but for InternalError, retried once: the
// answer after the retry, and its audit record, say that it was (a
// second InternalError is answered as any code is: a 402 by robotsgate's
// own price-refused, a 500 passed on).
func TestPayCrawlerError(t *testing.T) {
	t.Parallel()
	o, paid := errorOrigin(t)
	p := payingProxy(t, "USD 0.01", "USD 1")
	c := p.client()
	for _, tt := range []struct {
		path   string
		status int
		gate   string // X-Robots-Gate: "price-refused" for robotsgate's own answer
		body   string // in the answer
		reason string // in the audit record's reason
		paid   int    // paid requests the site received
		spent  bool
	}{
		{"/forbidden", 403, "", "the site's CrawlerForbidden", "crawler-error CrawlerForbidden (the site owner blocks this crawler)", 0, false},
		{"/payfail", 402, "price-refused", "crawler-error: PaymentFailed (", "the site's 402 says crawler-error PaymentFailed", 0, false},
		{"/missing", 200, "", "paid /missing", "", 1, true},
		{"/refused", 403, "price-refused", "crawler-error: PaymentFailed (", "answered the paid request 403, crawler-error PaymentFailed", 1, false},
		{"/flaky", 200, "", "paid /flaky", "pay-per-crawl: the paid request was retried once, the site's first answer to it being 500, crawler-error InternalError", 2, true},
		{"/broken", 500, "", "the site's InternalError", "the site answered 500, crawler-error InternalError (the site failed on its side); pay-per-crawl: the paid request was retried once, the site's first answer to it being 500", 2, false},
		{"/broken402", 402, "price-refused", "reason:      the site answered the paid request 402, crawler-error InternalError (the site failed on its side), after one retry (its first answer: 402, crawler-error InternalError): not retried again\n",
			"after one retry (its first answer: 402, crawler-error InternalError): not retried again", 2, false},
	} {
		before, _ := p.srv.budget.Spent(t.Context(), pay.Day(time.Now()), "USD")
		resp, body := get(t, c, o.URL+tt.path)
		if resp.StatusCode != tt.status || resp.Header.Get("X-Robots-Gate") != tt.gate || !strings.Contains(body, tt.body) {
			t.Errorf("GET %s: %d %q %q; want %d %q, %q in the body", tt.path, resp.StatusCode, resp.Header.Get("X-Robots-Gate"), body, tt.status, tt.gate, tt.body)
		}
		if tt.gate != "" && resp.Header.Get("Crawler-Error") == "" {
			t.Errorf("GET %s: robotsgate's answer does not name the crawler-error", tt.path)
		}
		rec := p.lastAudit(t)
		if reason, _ := rec["reason"].(string); tt.reason != "" && !strings.Contains(reason, tt.reason) {
			t.Errorf("GET %s: audit reason %q; want %q in it", tt.path, reason, tt.reason)
		}
		if got := paid(tt.path); got != tt.paid {
			t.Errorf("GET %s: the site received %d paid requests; want %d", tt.path, got, tt.paid)
		}
		after, _ := p.srv.budget.Spent(t.Context(), pay.Day(time.Now()), "USD")
		if spent := after.Nanos - before.Nanos; (spent == 10_000_000) != tt.spent || spent != 0 && spent != 10_000_000 {
			t.Errorf("GET %s: spent %d billionths; want the price spent: %v", tt.path, spent, tt.spent)
		}
	}

	// Without pay-per-crawl, a crawler-error is audited all the same.
	q := startProxy(t, loopbackConfig())
	if resp, _ := get(t, q.client(), o.URL+"/forbidden"); resp.StatusCode != 403 {
		t.Errorf("GET /forbidden, payments off: %d; want the site's 403", resp.StatusCode)
	}
	if reason, _ := q.lastAudit(t)["reason"].(string); !strings.Contains(reason, "crawler-error CrawlerForbidden") {
		t.Errorf("audit reason, payments off: %q; want the code named", reason)
	}
}

// maxPriceOrigin is a pay-per-crawl site that takes crawler-max-price:
// a signed offer (the offer covered) at or above the price is charged at
// once; one below it is answered 402 InvalidCrawlerMaxPrice; both price
// fields at once are answered 400. /dear costs USD 0.04, anything else
// USD 0.01; /ignores takes crawler-exact-price only. seen lists each
// request as "path max=... exact=...".
func maxPriceOrigin(t *testing.T, dir func() []byte) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var seen []string
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			io.WriteString(w, "User-agent: *\nAllow: /\n")
			return
		}
		maxOffer, exact := r.Header.Get("Crawler-Max-Price"), r.Header.Get("Crawler-Exact-Price")
		mu.Lock()
		seen = append(seen, r.URL.Path+" max="+maxOffer+" exact="+exact)
		mu.Unlock()
		price := "USD 0.01"
		if r.URL.Path == "/dear" {
			price = "USD 0.04"
		}
		sig, err := identitytest.Verify(r, dir(), time.Now())
		charge := func() {
			w.Header().Set("Crawler-Charged", price)
			io.WriteString(w, "content "+r.URL.Path+"\n")
		}
		offer, _ := pay.ParseAmount(maxOffer)
		want, _ := pay.ParseAmount(price)
		switch {
		case maxOffer != "" && exact != "":
			w.Header().Set("Crawler-Error", "ConflictingPriceHeaders")
			w.WriteHeader(400)
		case exact == price && err == nil && slices.Contains(sig.Covered, `"crawler-exact-price"`):
			charge()
		case maxOffer != "" && r.URL.Path != "/ignores" && err == nil && slices.Contains(sig.Covered, `"crawler-max-price"`) && offer.Nanos >= want.Nanos:
			charge()
		default:
			code := "MissingCrawlerPrice"
			if maxOffer != "" {
				code = "InvalidCrawlerMaxPrice"
			}
			w.Header().Set("Crawler-Price", price)
			w.Header().Set("Crawler-Error", code)
			w.WriteHeader(http.StatusPaymentRequired)
		}
	}))
	t.Cleanup(o.Close)
	return o, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(seen) }
}

// TestPayMaxPrice: once an origin has charged today, its later requests
// offer crawler-max-price (the lower of max_price and the budget left,
// signed), and are charged at once, in one round trip; an offer below
// the price, or a site that answers 402 anyway, falls back to the
// exact-price retry; a budget spent offers nothing.
func TestPayMaxPrice(t *testing.T) {
	t.Parallel()
	var dir atomic.Value
	dir.Store([]byte(nil))
	o, seen := maxPriceOrigin(t, func() []byte { return dir.Load().([]byte) })
	p := payingProxy(t, "USD 0.02", "USD 0.05")
	dir.Store(directoryOf(t, p))
	checkMaxPrice(t, p, o, seen)
}

// TestPayMaxPriceFleet: the offers are reserved from the fleet's budget,
// in Redis, as the exact-price retries are.
func TestPayMaxPriceFleet(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	var dir atomic.Value
	dir.Store([]byte(nil))
	o, seen := maxPriceOrigin(t, func() []byte { return dir.Load().([]byte) })
	p := startFleet(t, r, 1, func(c *config.Config) {
		c.Identity.SignatureAgent = testAgent
		c.Payments.MaxPrice, c.Payments.Budget = "USD 0.02", "USD 0.05"
		c.Payments.KeyPrefix = "rgtest:" + t.Name() + ":"
	})[0]
	dir.Store(directoryOf(t, p))
	checkMaxPrice(t, p, o, seen)
}

// checkMaxPrice runs TestPayMaxPrice's requests through p, with
// max_price USD 0.02 and budget USD 0.05, to o (maxPriceOrigin).
func checkMaxPrice(t *testing.T, p *testProxy, o *httptest.Server, seen func() []string) {
	t.Helper()
	c := p.client()
	for i, tt := range []struct {
		path   string
		status int
		seen   []string // what the site received
		spent  string   // the budget after
	}{
		{"/a", 200, []string{"/a max= exact=", "/a max= exact=USD 0.01"}, "USD 0.01"},
		{"/b", 200, []string{"/b max=USD 0.02 exact="}, "USD 0.02"},
		{"/dear", 402, []string{"/dear max=USD 0.02 exact="}, "USD 0.02"},
		{"/ignores", 200, []string{"/ignores max=USD 0.02 exact=", "/ignores max= exact=USD 0.01"}, "USD 0.03"},
		{"/c", 200, []string{"/c max=USD 0.02 exact="}, "USD 0.04"},
		{"/d", 200, []string{"/d max=USD 0.01 exact="}, "USD 0.05"}, // the budget left, below max_price
		{"/e", 402, []string{"/e max= exact="}, "USD 0.05"},         // nothing left: nothing offered
	} {
		before := len(seen())
		resp, body := get(t, c, o.URL+tt.path)
		if resp.StatusCode != tt.status {
			t.Errorf("%d. GET %s: %d %q; want %d", i+1, tt.path, resp.StatusCode, body, tt.status)
		}
		if got := seen()[before:]; !slices.Equal(got, tt.seen) {
			t.Errorf("%d. GET %s: the site received %q; want %q", i+1, tt.path, got, tt.seen)
		}
		if spent, err := p.srv.budget.Spent(t.Context(), pay.Day(time.Now()), "USD"); err != nil || spent.String() != tt.spent {
			t.Errorf("%d. GET %s: spent %v, %v; want %s", i+1, tt.path, spent, err, tt.spent)
		}
		if rec := p.lastAudit(t); tt.status == 200 && rec["charged"] != "USD 0.01" {
			t.Errorf("%d. GET %s: audit %v; want charged USD 0.01", i+1, tt.path, rec)
		}
	}
	if got := testutil.ToFloat64(p.srv.metrics.payments.WithLabelValues("paid")); got != 5 {
		t.Errorf("robotsgate_payments_total{result=\"paid\"} = %v; want 5", got)
	}
}

// TestPayOfferOnceWhenTheAnswerIsLost: a request that offers
// crawler-max-price (its origin charged today) is sent once, as a paid
// request is: its answer lost, the client gets 502 and the offer is
// counted as spent.
func TestPayOfferOnceWhenTheAnswerIsLost(t *testing.T) {
	t.Parallel()
	o := newLossyPricedOrigin(t, 0)
	p := payingProxy(t, "USD 0.01", "USD 1")
	for range 2 { // the first pays after a 402; the second offers at once
		if resp, body := get(t, p.client(), "http://"+o.addr+"/paid"); resp.StatusCode != http.StatusBadGateway {
			t.Errorf("GET /paid: %d %q; want 502 (the answer was lost)", resp.StatusCode, body)
		}
	}
	got := o.paidRequests()
	if len(got) != 2 || !strings.Contains(got[1], "Crawler-Max-Price: USD 0.01") {
		t.Errorf("the site received %d paid requests; want 2, the second offering USD 0.01:\n%s", len(got), strings.Join(got, "\n"))
	}
	spent, err := p.srv.budget.Spent(t.Context(), pay.Day(time.Now()), "USD")
	if err != nil || spent.String() != "USD 0.02" {
		t.Errorf("budget spent = %v, %v; want USD 0.02 (each lost answer counted)", spent, err)
	}
	if rec := p.lastAudit(t); rec["charged"] != "USD 0.01" || rec["status"] != float64(502) {
		t.Errorf("audit = %v; want status 502, charged USD 0.01", rec)
	}
}

// BenchmarkPaidRequest: a paid page through the proxy, signed and
// charged, to a site that takes crawler-max-price ("max-price": one
// round trip, on a connection of its own) and to one that answers 402
// anyway ("402-then-exact": the offer, its 402, then the exact-price
// retry, as every paid page cost before crawler-max-price); and a free
// page (an image, never priced) of a site that charged for a page today
// ("free-after-charge"); and a free stylesheet at the root of a site
// that charged for a page at its root ("root-asset": /main.css beside
// /max-price, the layout of a blog or news site that prices /<slug>).
// The signatures are not checked: what is measured is robotsgate's path.
func BenchmarkPaidRequest(b *testing.B) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/img/") || r.URL.Path == "/main.css" {
			io.WriteString(w, "free\n")
			return
		}
		takesMax := r.URL.Path == "/max-price" && r.Header.Get("Crawler-Max-Price") != ""
		if !takesMax && r.Header.Get("Crawler-Exact-Price") != "USD 0.000000001" {
			w.Header().Set("Crawler-Price", "USD 0.000000001")
			w.WriteHeader(http.StatusPaymentRequired)
			return
		}
		w.Header().Set("Crawler-Charged", "USD 0.000000001")
		io.WriteString(w, "content\n")
	}))
	b.Cleanup(o.Close)
	p := startProxy(b, func() *config.Config {
		c := loopbackConfig()
		c.Identity.SignatureAgent = testAgent
		c.Payments.MaxPrice, c.Payments.Budget = "USD 0.000000001", "USD 1000"
		return c
	}())
	c := p.client()
	names := map[string]string{"/img/1.png": "free-after-charge", "/main.css": "root-asset"}
	for _, path := range []string{"/max-price", "/402-then-exact", "/img/1.png", "/main.css"} {
		name := names[path]
		if name == "" {
			name = path[1:]
		}
		b.Run(name, func(b *testing.B) {
			// The site charged today (whichever of these runs alone).
			if resp, err := c.Get(o.URL + "/max-price"); err != nil || resp.StatusCode != 200 {
				b.Fatalf("GET /max-price: %v %v", resp, err)
			} else {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.Get(o.URL + path)
				if err != nil || resp.StatusCode != 200 {
					b.Fatalf("GET %s: %v %v", path, resp, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// TestPayAuditReasonOfAPaidPage: a 402 that is paid is the protocol's
// first step, not an error: its MissingCrawlerPrice does not become the
// paid request's audit reason.
func TestPayAuditReasonOfAPaidPage(t *testing.T) {
	t.Parallel()
	o, _ := errorOrigin(t)
	p := payingProxy(t, "USD 0.01", "USD 1")
	if resp, _ := get(t, p.client(), o.URL+"/missing"); resp.StatusCode != 200 {
		t.Fatalf("GET /missing: %d; want it paid", resp.StatusCode)
	}
	if rec := p.lastAudit(t); rec["charged"] != "USD 0.01" || strings.Contains(rec["reason"].(string), "crawler-error") {
		t.Errorf("audit of a paid page = %v; want charged, no crawler-error in the reason", rec)
	}
}
