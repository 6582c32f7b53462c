package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/pay"
)

// offerSite is a pay-per-crawl site on HTTPS, reached through a MITM
// proxy: a path with ?price=0.01 (or under /paid/, USD 0.005) is priced,
// charged to a crawler-max-price at or above the price or to the exact
// price, else answered 402 with its price (InvalidCrawlerMaxPrice to an
// offer below it); any other path is free, answered 200 whatever is
// offered, charging nothing. A path holding /slow/ is answered once
// release is closed; one holding /drop/ is read, then its connection
// closed unanswered.
type offerSite struct {
	*testOrigin
	base    string // https://shop.example:port
	release chan struct{}
	once    sync.Once

	mu   sync.Mutex
	seen []siteRequest
}

// siteRequest is what the site received of a request: its path, the
// price fields, and the connection it came on.
type siteRequest struct{ path, max, exact, conn string }

func newOfferSite(t *testing.T, pki *testPKI) *offerSite {
	t.Helper()
	o, port := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n", "shop.example")
	s := &offerSite{testOrigin: o, base: "https://shop.example:" + port, release: make(chan struct{})}
	o.handler = s.serve
	return s
}

func (s *offerSite) serve(w http.ResponseWriter, r *http.Request) {
	max, exact := r.Header.Get(pay.FieldMaxPrice), r.Header.Get(pay.FieldExactPrice)
	s.mu.Lock()
	s.seen = append(s.seen, siteRequest{r.URL.Path, max, exact, r.RemoteAddr})
	s.mu.Unlock()
	switch {
	case strings.Contains(r.URL.Path, "/drop/"):
		panic(http.ErrAbortHandler) // the connection closed unanswered
	case strings.Contains(r.URL.Path, "/slow/"):
		select {
		case <-s.release:
		case <-time.After(20 * time.Second): // a bound, not a measure: every test releases sooner
		}
	}
	price := r.URL.Query().Get("price")
	if price == "" && strings.HasPrefix(r.URL.Path, "/paid/") {
		price = "0.005"
	}
	if price == "" {
		io.WriteString(w, "free "+r.URL.Path+"\n")
		return
	}
	want, _ := pay.ParseAmount("USD " + price)
	offer, _ := pay.ParseAmount(max)
	if exact == want.String() || max != "" && offer.Nanos >= want.Nanos {
		w.Header().Set(pay.FieldCharged, want.String())
		io.WriteString(w, "paid "+r.URL.Path+"\n")
		return
	}
	w.Header().Set(pay.FieldPrice, want.String())
	if max != "" {
		w.Header().Set(pay.FieldError, "InvalidCrawlerMaxPrice")
	}
	w.WriteHeader(http.StatusPaymentRequired)
}

// free answers the slow paths: those waiting and those to come.
func (s *offerSite) free() { s.once.Do(func() { close(s.release) }) }

// requests returns what the site received for path, in order.
func (s *offerSite) requests(path string) []siteRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []siteRequest
	for _, r := range s.seen {
		if r.path == path {
			out = append(out, r)
		}
	}
	return out
}

// paidSite starts an offerSite and a MITM proxy that signs and pays up to
// maxPrice a request to it, within budget a day, and has the proxy pay
// for first (a path with its query; none for ""), so that its section
// charged today.
func paidSite(t *testing.T, maxPrice, budget, first string) (*offerSite, *testProxy) {
	t.Helper()
	pki := newTestPKI(t)
	site := newOfferSite(t, pki)
	p := startMITM(t, pki, func(c *config.Config) {
		c.Identity.SignatureAgent = testAgent
		c.Payments.MaxPrice, c.Payments.Budget = maxPrice, budget
	})
	if first != "" {
		if resp, body := get(t, p.mitmClient(t, nil, false), site.base+first); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %q; want it paid", first, resp.StatusCode, body)
		}
	}
	return site, p
}

// spentToday returns p's spending today, as its budget keeps it.
func spentToday(t *testing.T, p *testProxy) string {
	t.Helper()
	spent, err := p.srv.budget.Spent(t.Context(), pay.Day(time.Now()), "USD")
	if err != nil {
		t.Fatal(err)
	}
	return spent.String()
}

// TestPayOffersOnlyWhereCharged: once a site charged for a page under
// /paid/, its later requests under /paid/ offer crawler-max-price and go
// as paid requests do (each once, on a connection of its own), while its
// images, elsewhere, are never offered a price and share one pooled
// connection, as to a site that never charged.
func TestPayOffersOnlyWhereCharged(t *testing.T) {
	t.Parallel()
	site, p := paidSite(t, "USD 0.01", "USD 1", "/paid/a")
	c := p.mitmClient(t, nil, false)
	for _, path := range []string{"/paid/b", "/paid/c"} {
		if resp, body := get(t, c, site.base+path); resp.StatusCode != 200 || body != "paid "+path+"\n" {
			t.Fatalf("GET %s: %d %q; want it paid", path, resp.StatusCode, body)
		}
	}
	const images = 12
	for i := range images {
		if resp, body := get(t, c, site.base+"/img/1.png"); resp.StatusCode != 200 || body != "free /img/1.png\n" {
			t.Fatalf("image %d: %d %q", i+1, resp.StatusCode, body)
		}
	}
	if got := site.requests("/paid/a"); len(got) != 2 || got[0].max != "" || got[1].exact != "USD 0.005" {
		t.Errorf("/paid/a: the site received %+v; want its 402, then the exact-price retry", got)
	}
	offered := map[string]bool{}
	for _, path := range []string{"/paid/b", "/paid/c"} {
		got := site.requests(path)
		if len(got) != 1 || got[0].max != "USD 0.01" {
			t.Errorf("%s: the site received %+v; want one request offering USD 0.01", path, got)
			continue
		}
		offered[got[0].conn] = true
	}
	conns := map[string]bool{}
	for _, r := range site.requests("/img/1.png") {
		if r.max != "" || r.exact != "" {
			t.Errorf("an image was offered a price: %+v", r)
		}
		conns[r.conn] = true
	}
	if len(conns) != 1 || len(offered) != 2 {
		t.Errorf("%d images came on %d connections, the 2 offers on %d; want 1 pooled connection, and one each for the offers", images, len(conns), len(offered))
	}
	for conn := range conns {
		if offered[conn] {
			t.Errorf("an offer shared the images' pooled connection %s", conn)
		}
	}
	if got := spentToday(t, p); got != "USD 0.015" {
		t.Errorf("spent %s; want USD 0.015", got)
	}
}

// TestPayRootLayout: a site that charges for pages at its root
// (/<slug>, a blog's or a news site's layout) has its later pages there
// offered crawler-max-price, each once on a connection of its own, but
// not its favicon, stylesheet, script and logo beside them, nor what a
// request says is a sub-resource (Sec-Fetch-Dest: image, a stylesheet's
// Accept): those share one pooled connection, unpriced. An asset the site
// prices is paid after its 402, and its kind (.jpg) is then offered.
func TestPayRootLayout(t *testing.T) {
	t.Parallel()
	site, p := paidSite(t, "USD 0.01", "USD 1", "/story-1?price=0.005")
	c := p.mitmClient(t, nil, false)
	const navigation = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
	for _, tt := range []struct {
		path   string
		header []string
		body   string
	}{
		{"/story-2?price=0.005", nil, "paid /story-2\n"},
		{"/favicon.ico", nil, "free /favicon.ico\n"},
		{"/main.css", []string{"Accept", "text/css,*/*;q=0.1", "Sec-Fetch-Dest", "style"}, "free /main.css\n"},
		{"/app.js?v=3", nil, "free /app.js\n"},
		{"/logo.png", nil, "free /logo.png\n"},
		{"/logo", []string{"Sec-Fetch-Dest", "image"}, "free /logo\n"},
		{"/theme", []string{"Accept", "text/css,*/*;q=0.1"}, "free /theme\n"},
		{"/story-3?price=0.005", []string{"Accept", navigation, "Sec-Fetch-Dest", "document"}, "paid /story-3\n"},
		{"/hero-1.jpg?price=0.005", nil, "paid /hero-1.jpg\n"},
		{"/hero-2.jpg?price=0.005", nil, "paid /hero-2.jpg\n"},
		{"/favicon.ico", nil, "free /favicon.ico\n"},
		{"/logo.png", nil, "free /logo.png\n"},
	} {
		if resp, body := get(t, c, site.base+tt.path, tt.header...); resp.StatusCode != 200 || body != tt.body {
			t.Fatalf("GET %s: %d %q; want %q", tt.path, resp.StatusCode, body, tt.body)
		}
	}
	offered := map[string]bool{}
	for _, path := range []string{"/story-2", "/story-3", "/hero-2.jpg"} {
		got := site.requests(path)
		if len(got) != 1 || got[0].max != "USD 0.01" {
			t.Errorf("%s: the site received %+v; want one request offering USD 0.01", path, got)
			continue
		}
		if offered[got[0].conn] {
			t.Errorf("%s: two offers on one connection, %s", path, got[0].conn)
		}
		offered[got[0].conn] = true
	}
	if got := site.requests("/hero-1.jpg"); len(got) != 2 || got[0].max != "" || got[1].exact != "USD 0.005" {
		t.Errorf("/hero-1.jpg: the site received %+v; want its 402, then the exact-price retry", got)
	}
	conns := map[string]bool{}
	assets := 0
	for _, path := range []string{"/favicon.ico", "/main.css", "/app.js", "/logo.png", "/logo", "/theme"} {
		for _, r := range site.requests(path) {
			if r.max != "" || r.exact != "" {
				t.Errorf("%s was offered a price: %+v", path, r)
			}
			conns[r.conn] = true
			assets++
		}
	}
	if assets != 8 || len(conns) != 1 {
		t.Errorf("%d asset requests reached the site on %d connections; want 8 on 1, pooled", assets, len(conns))
	}
	for conn := range conns {
		if offered[conn] {
			t.Errorf("an offer shared the assets' pooled connection %s", conn)
		}
	}
	if got := spentToday(t, p); got != "USD 0.025" {
		t.Errorf("spent %s; want USD 0.025, five pages and images at USD 0.005", got)
	}
}

// TestPayPriceWaitsForOffers: a page whose price fits the budget once the
// offers in flight (free pages of a section that charged) are given back
// waits for them, rather than being refused over-budget; no new offer is
// made while it waits (another free page goes unpriced), and it is then
// paid.
func TestPayPriceWaitsForOffers(t *testing.T) {
	t.Parallel()
	site, p := paidSite(t, "USD 0.01", "USD 0.03", "/s/first?price=0.005")
	// Two slow free pages hold USD 0.01 each, USD 0.025 with what is spent.
	defer site.free() // the slow pages answered, whatever ends the test
	var wg sync.WaitGroup
	for _, path := range []string{"/s/slow/1", "/s/slow/2"} {
		c := p.mitmClient(t, nil, false)
		wg.Go(func() {
			if status, body, err := getAway(c, site.base+path); status != 200 {
				t.Errorf("GET %s: %d %q %v", path, status, body, err)
			}
		})
	}
	testkit.Eventually(t, "the slow pages to reach the site", func() bool {
		return len(site.requests("/s/slow/1"))+len(site.requests("/s/slow/2")) == 2
	})
	type answer struct {
		status int
		body   string
		err    error
	}
	real := make(chan answer, 1)
	rc := p.mitmClient(t, nil, false)
	go func() {
		status, body, err := getAway(rc, site.base+"/s/real?price=0.01")
		real <- answer{status, body, err}
	}()
	testkit.Eventually(t, "the price to wait for the offers", func() bool { return p.srv.holds.Waiting() == 1 })
	// USD 0.005 is left, but a price waits: nothing is offered.
	if resp, _ := get(t, p.mitmClient(t, nil, false), site.base+"/s/free"); resp.StatusCode != 200 {
		t.Errorf("GET /s/free: %d", resp.StatusCode)
	}
	if got := site.requests("/s/free"); len(got) != 1 || got[0].max != "" {
		t.Errorf("/s/free, while a price waits: the site received %+v; want it unpriced", got)
	}
	site.free()
	wg.Wait()
	var a answer
	select {
	case a = <-real:
	case <-time.After(20 * time.Second): // a bound on a hang
		t.Fatal("GET /s/real: no answer after 20 s")
	}
	if a.status != 200 || a.body != "paid /s/real\n" {
		t.Errorf("GET /s/real: %d %q %v; want it paid once the offers were given back", a.status, a.body, a.err)
	}
	if got := site.requests("/s/real"); len(got) != 2 || got[0].max != "USD 0.005" || got[1].exact != "USD 0.01" {
		t.Errorf("/s/real: the site received %+v; want the offer of what was left, then the exact price", got)
	}
	if got := spentToday(t, p); got != "USD 0.015" {
		t.Errorf("spent %s; want USD 0.015 (the offers given back)", got)
	}
}

// TestPayRefusalNamesHeld: a price that would not fit even once the
// offers in flight are given back is refused at once, and the 402 and its
// audit record say what is spent and what the offers hold, apart.
func TestPayRefusalNamesHeld(t *testing.T) {
	t.Parallel()
	site, p := paidSite(t, "USD 0.015", "USD 0.02", "/s/first?price=0.015")
	c := p.mitmClient(t, nil, false)
	defer site.free()
	slow := make(chan int, 1)
	sc := p.mitmClient(t, nil, false)
	go func() {
		status, _, _ := getAway(sc, site.base+"/s/slow/1")
		slow <- status
	}()
	testkit.Eventually(t, "the slow page to reach the site", func() bool { return len(site.requests("/s/slow/1")) == 1 })
	resp, body := get(t, c, site.base+"/s/real?price=0.01")
	const held = "USD 0.015 spent, USD 0.005 held by crawler-max-price offers in flight"
	if resp.StatusCode != 402 || resp.Header.Get("X-Robots-Gate") != "price-refused" ||
		!strings.Contains(body, "budget left: USD 0.00 of USD 0.02 today (UTC); "+held+"\n") ||
		!strings.Contains(body, "reason:      USD 0.01 would take today's spending past the budget ("+held+")\n") {
		t.Errorf("GET /s/real: %d\n%s\nwant 402 price-refused, what is spent and held apart", resp.StatusCode, body)
	}
	if rec := p.lastAudit(t); !strings.Contains(rec["reason"].(string), held) {
		t.Errorf("audit reason %q; want %q in it", rec["reason"], held)
	}
	site.free()
	if status := <-slow; status != 200 {
		t.Errorf("GET /s/slow/1: %d", status)
	}
	if got := spentToday(t, p); got != "USD 0.015" {
		t.Errorf("spent %s; want USD 0.015", got)
	}
}

// TestPayLostOfferStopsOffers: an offer whose answer is lost after it
// reached the site is counted as spent (the site may have charged it),
// audited so, and the site is offered nothing more that day: its later
// requests, lost too, cost nothing, and its priced pages are paid after
// their 402, as before it first charged.
func TestPayLostOfferStopsOffers(t *testing.T) {
	t.Parallel()
	site, p := paidSite(t, "USD 0.01", "USD 1", "")
	c := p.mitmClient(t, nil, false)
	for _, tt := range []struct {
		path    string
		status  int
		offered string // the first request's crawler-max-price
		charged string // in the audit record
		spent   string // the day's, after
	}{
		{"/paid/first", 200, "", "USD 0.005", "USD 0.005"},
		{"/paid/drop/1", 502, "USD 0.01", "USD 0.01", "USD 0.015"},
		{"/paid/drop/2", 502, "", "", "USD 0.015"},
		{"/paid/second", 200, "", "USD 0.005", "USD 0.02"},
		{"/paid/third", 200, "", "USD 0.005", "USD 0.025"},
	} {
		resp, body := get(t, c, site.base+tt.path)
		if resp.StatusCode != tt.status {
			t.Errorf("GET %s: %d %q; want %d", tt.path, resp.StatusCode, body, tt.status)
		}
		if got := site.requests(tt.path); len(got) == 0 || got[0].max != tt.offered {
			t.Errorf("GET %s: the site received %+v; want %q offered first", tt.path, got, tt.offered)
		}
		rec := p.lastAudit(t)
		if rec["charged"] != tt.charged {
			t.Errorf("GET %s: audit %v; want charged %q", tt.path, rec, tt.charged)
		}
		if reason := rec["reason"].(string); tt.offered != "" && !strings.Contains(reason, "the offer USD 0.01 is counted as spent, and this origin is offered nothing more today") {
			t.Errorf("GET %s: audit reason %q; want the lost offer named", tt.path, reason)
		}
		if got := spentToday(t, p); got != tt.spent {
			t.Errorf("GET %s: spent %s; want %s", tt.path, got, tt.spent)
		}
	}
}

// TestPaySpentTotalExact: robotsgate_spent_total is summed in
// billionths, as the budget is: USD 0.1, 0.2 and 0.005 read 0.305 on
// /metrics, where a float counter reads 0.30500000000000005.
func TestPaySpentTotalExact(t *testing.T) {
	t.Parallel()
	site, p := paidSite(t, "USD 0.2", "USD 1", "")
	c := p.mitmClient(t, nil, false)
	for _, price := range []string{"0.1", "0.2", "0.005"} {
		if resp, _ := get(t, c, site.base+"/priced?price="+price); resp.StatusCode != 200 {
			t.Fatalf("GET /priced?price=%s: %d; want it paid", price, resp.StatusCode)
		}
	}
	_, metrics := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/metrics")
	if want := "\nrobotsgate_spent_total{currency=\"USD\"} 0.305\n"; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %q:\n%s", want, grepLines(metrics, "spent"))
	}
}

// getAway is get for a goroutine other than the test's: it returns
// the error rather than ending the test.
func getAway(c *http.Client, u string) (int, string, error) {
	resp, err := c.Get(u)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// grepLines returns the lines of s holding sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
