// Package crawlee_test runs robotsgate-crawlee (index.js) end to end: a real
// robotsgate process, real origins on loopback, and real Crawlee crawls
// (the crawlee package from npm, installed here by `npm ci`) through the
// proxy, run by node from testdata/crawl.mjs. It skips when node or
// node_modules is missing, and fails instead when ROBOTSGATE_NODE_REQUIRED
// is set, as .ci/run sets it.
package crawlee_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"golang.org/x/crypto/bcrypt"
)

// origin is an httptest origin that counts the requests it receives by
// path.
type origin struct {
	*httptest.Server
	mu   sync.Mutex
	hits map[string]int
}

// scheme is how an origin is reached.
type scheme int

const (
	plainHTTP      scheme = iota
	httpsIP               // https://127.0.0.1:port/, httptest's certificate
	httpsLocalhost        // https://localhost:port/, a certificate for localhost
)

// newOrigin starts an origin that hands each request to serve with n, the
// number of earlier requests for the same path.
func newOrigin(t *testing.T, how scheme, serve func(w http.ResponseWriter, r *http.Request, n int)) *origin {
	t.Helper()
	o := &origin{hits: map[string]int{}}
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		n := o.hits[r.URL.Path]
		o.hits[r.URL.Path]++
		o.mu.Unlock()
		serve(w, r, n)
	}))
	switch how {
	case plainHTTP:
		o.Start()
	case httpsIP:
		o.StartTLS()
	case httpsLocalhost:
		o.TLS = &tls.Config{Certificates: []tls.Certificate{localhostCert(t)}}
		o.StartTLS()
		o.URL = strings.Replace(o.URL, "127.0.0.1", "localhost", 1)
	}
	t.Cleanup(o.Close)
	return o
}

// localhostCert is a self-signed certificate for localhost.
func localhostCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// count is how many requests for path the origin received.
func (o *origin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hits[path]
}

// site answers robots with robotsTxt, each of pages with its HTML, and
// anything else 403 with no X-Robots-Gate: a site's own refusal.
func site(robotsTxt string, pages map[string]string) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/robots.txt" {
			fmt.Fprint(w, robotsTxt)
			return
		}
		page, ok := pages[r.URL.Path]
		if !ok {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, "<html><body>the site says no</body></html>")
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, page)
	}
}

// links is an HTML page linking to each of hrefs.
func links(hrefs ...string) string {
	var b strings.Builder
	b.WriteString("<html><body>")
	for _, h := range hrefs {
		fmt.Fprintf(&b, "<a href=%q>%s</a> ", h, h)
	}
	b.WriteString("</body></html>")
	return b.String()
}

// result is what testdata/crawl.mjs writes.
type result struct {
	Seen   []string `json:"seen"`
	Failed []struct {
		URL        string `json:"url"`
		Name       string `json:"name"`
		Message    string `json:"message"`
		Decision   string `json:"decision"`
		Rule       string `json:"rule"`
		RetryCount int    `json:"retryCount"`
	} `json:"failed"`
	Gate struct {
		Answers    map[string]int `json:"answers"`
		Blocked    int            `json:"blocked"`
		Retries    int            `json:"retries"`
		WaitedSecs float64        `json:"waitedSecs"`
		GaveUp     int            `json:"gaveUp"`
		Held       int            `json:"held"`
		HeldSecs   float64        `json:"heldSecs"`
	} `json:"gate"`
	Crawlee struct {
		RequestsFinished int `json:"requestsFinished"`
		RequestsFailed   int `json:"requestsFailed"`
	} `json:"crawlee"`
	Sessions struct {
		Retired     int       `json:"retired"`
		ErrorScores []float64 `json:"errorScores"`
	} `json:"sessions"`
	log string
}

// wantSeen checks the request handler saw exactly urls, in any order.
func (r *result) wantSeen(t *testing.T, urls ...string) {
	t.Helper()
	got := slices.Sorted(slices.Values(r.Seen))
	want := slices.Sorted(slices.Values(urls))
	if !slices.Equal(got, want) {
		t.Errorf("the request handler saw %q; want %q", got, want)
	}
}

// lines are the log's lines holding s.
func (r *result) lines(s string) []string {
	var ls []string
	for line := range strings.Lines(r.log) {
		if strings.Contains(line, s) {
			ls = append(ls, strings.TrimSpace(line))
		}
	}
	return ls
}

// crawl runs testdata/crawl.mjs with settings (out is added), with extra
// environment variables, and returns what it wrote. Crawlee's log is logged
// if the test fails.
func crawl(t *testing.T, settings map[string]any, env ...string) *result {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.json")
	settings["out"] = out
	arg, err := json.Marshal(settings)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "crawl.mjs"), string(arg))
	cmd.Env = append(nodeEnv(), env...)
	cmd.WaitDelay = 10 * time.Second
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	start := time.Now()
	err = cmd.Run()
	r := &result{log: log.String()}
	t.Logf("crawl %v took %v", settings["crawler"], time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Crawlee's log (%s):\n%s", arg, r.log)
		}
	})
	if err != nil {
		t.Fatalf("node testdata/crawl.mjs: %v\n%s", err, r.log)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the crawl wrote no results: %v", err)
	}
	if err := json.Unmarshal(data, r); err != nil {
		t.Fatalf("results: %v\n%s", err, data)
	}
	return r
}

// nodeEnv is this process's environment without proxy variables or
// Crawlee's and Node's own settings, colour off.
func nodeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		upper := strings.ToUpper(name)
		if strings.HasSuffix(upper, "_PROXY") || strings.HasPrefix(upper, "CRAWLEE_") || strings.HasPrefix(upper, "NODE_") || strings.HasPrefix(upper, "APIFY_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "NO_COLOR=1", "FORCE_COLOR=0", "CRAWLEE_LOG_LEVEL=INFO")
}

// requireCrawlee skips the test unless node and the crawlee package
// (npm ci here) are installed, or fails it when ROBOTSGATE_NODE_REQUIRED is
// set.
func requireCrawlee(t *testing.T) {
	t.Helper()
	requireNode(t)
	for _, pkg := range []string{"crawlee", "playwright"} {
		if _, err := os.Stat(filepath.Join("node_modules", pkg, "package.json")); err != nil {
			missing(t, "%s is not installed here: run (cd integrations/crawlee && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci): %v", pkg, err)
		}
	}
}

// requireNode skips the test without node, or fails it when
// ROBOTSGATE_NODE_REQUIRED is set.
func requireNode(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		missing(t, "node: %v (apt-get install nodejs npm)", err)
	}
}

// missing skips the test for what it lacks, or fails it when
// ROBOTSGATE_NODE_REQUIRED is set (CI sets it).
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("ROBOTSGATE_NODE_REQUIRED") != "" {
		t.Fatalf("%s (ROBOTSGATE_NODE_REQUIRED is set)", msg)
	}
	t.Skip(msg)
}

// TestCrawlee crawls through robotsgate with the gate's options and checks
// what reached the site, what robotsgate was asked, and what the crawl
// reported.
func TestCrawlee(t *testing.T) {
	requireCrawlee(t)

	// A block is sent once, never reaches the site, is never retried,
	// fails the request once with its rule and leaves the sessions alone;
	// the site's own 403 is still Crawlee's (retried, sessions retired).
	// The same crawl without the gate shows what it prevents.
	for _, gated := range []bool{true, false} {
		t.Run(map[bool]string{true: "cheerio", false: "cheerio without the gate"}[gated], func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			rg := startRobotsgate(t, dir, "")
			o := newOrigin(t, plainHTTP, site("User-agent: *\nDisallow: /private\n", map[string]string{
				"/":          links("/page", "/private/a", "/forbidden"),
				"/page":      "<html><body>a page</body></html>",
				"/private/a": "<html><body>never to be sent</body></html>",
			}))
			r := crawl(t, map[string]any{"proxy": rg.proxy(), "starts": []string{o.URL + "/"}, "plain": !gated, "maxRequestRetries": 2})
			blocked := o.URL + "/private/a"
			if n := o.count("/private/a"); n != 0 {
				t.Errorf("the site received /private/a %d times; want 0", n)
			}
			if n := o.count("/forbidden"); n != 3 {
				t.Errorf("the site received /forbidden %d times; want 3 (its own 403, retried twice by Crawlee)", n)
			}
			asked := rg.asked(t, blocked, userAgent)
			r.wantSeen(t, o.URL+"/", o.URL+"/page")
			if !gated {
				// Crawlee retries the block and retires a session each time.
				if asked != 3 || r.Sessions.Retired != 6 {
					t.Errorf("without the gate robotsgate was asked %d times and %d sessions retired; want 3 and 6 (the test no longer shows what the gate prevents)", asked, r.Sessions.Retired)
				}
				return
			}
			if asked != 1 {
				t.Errorf("robotsgate was asked for %s %d times; want 1 (never retried)", blocked, asked)
			}
			wantFailed := map[string]string{blocked: "RobotsGateBlocked disallowed disallow: /private (line 2) 0", o.URL + "/forbidden": "Error   2"}
			for _, f := range r.Failed {
				got := fmt.Sprintf("%s %s %s %d", f.Name, f.Decision, f.Rule, f.RetryCount)
				if wantFailed[f.URL] != got {
					t.Errorf("failedRequestHandler got %s: %q; want %q", f.URL, got, wantFailed[f.URL])
				}
				delete(wantFailed, f.URL)
			}
			if len(wantFailed) != 0 {
				t.Errorf("failedRequestHandler never got %v", wantFailed)
			}
			if r.Gate.Answers["disallowed"] != 1 || len(r.Gate.Answers) != 1 || r.Gate.Blocked != 1 || r.Gate.Retries != 0 {
				t.Errorf("gate stats %+v; want one disallowed answer, blocked 1, no retries", r.Gate)
			}
			if r.Crawlee.RequestsFinished != 2 || r.Crawlee.RequestsFailed != 2 {
				t.Errorf("Crawlee finished %d and failed %d requests; want 2 and 2", r.Crawlee.RequestsFinished, r.Crawlee.RequestsFailed)
			}
			// The site's three 403s retired three sessions; robotsgate's
			// 403 neither retired one nor marked one bad.
			if r.Sessions.Retired != 3 {
				t.Errorf("%d sessions retired; want 3 (the site's own 403s only)", r.Sessions.Retired)
			}
			for _, s := range r.Sessions.ErrorScores {
				if s != 0 && s < 3 {
					t.Errorf("a session still in use has error score %v; want 0", s)
				}
			}
			if ls := r.lines(`robotsgate blocked ` + blocked + `: disallowed, rule "disallow: /private (line 2)"; not retried`); len(ls) != 1 {
				t.Errorf("Crawlee's log names the block %d times; want once: %q", len(ls), ls)
			}
		})
	}

	// robotsgate paces requests Crawl-delay: 1 apart, answering 429 paced
	// with Retry-After: 2 to those that would wait over max_wait (1 s); a
	// site whose robots.txt fails once is answered 503 unreachable with
	// Retry-After: 1 ([robots] retry_after). Each is waited for and retried,
	// and every page is crawled. The three pages are asked for together
	// (minConcurrency 4): Crawlee's pool runs one request at a time while it
	// finds the machine busy, and one after another they are only held.
	t.Run("paced and unreachable", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		rg := startRobotsgate(t, dir, "[robots]\nretry_after = \"1s\"\n[politeness]\ncrawl_delay = true\nmax_delay = \"1s\"\nmax_wait = \"1s\"\n")
		flaky := newOrigin(t, plainHTTP, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.URL.Path == "/robots.txt" && n == 0 {
				http.Error(w, "broken", http.StatusInternalServerError)
				return
			}
			fmt.Fprint(w, "<html><body>flaky</body></html>")
		})
		pages := map[string]string{"/": links("/p1", "/p2", "/p3")}
		for _, p := range []string{"/p1", "/p2", "/p3"} {
			pages[p] = "<html><body>" + p + "</body></html>"
		}
		slow := newOrigin(t, plainHTTP, site("User-agent: *\nCrawl-delay: 1\n", pages))
		r := crawl(t, map[string]any{"proxy": rg.proxy(), "starts": []string{slow.URL + "/", flaky.URL + "/x"}, "maxRequestRetries": 4, "minConcurrency": 4})
		r.wantSeen(t, slow.URL+"/", slow.URL+"/p1", slow.URL+"/p2", slow.URL+"/p3", flaky.URL+"/x")
		if len(r.Failed) != 0 {
			t.Errorf("failed: %+v; want none", r.Failed)
		}
		paced, unreachable := r.Gate.Answers["paced"], r.Gate.Answers["unreachable"]
		if paced == 0 || unreachable != 1 || r.Gate.Retries != paced+unreachable || r.Gate.Blocked != 0 {
			t.Errorf("gate stats %+v; want at least one paced, one unreachable, each retried", r.Gate)
		}
		// Each retry came after its Retry-After: the audit log has each
		// paced or unreachable answer and the request that followed it.
		checked := 0
		byURL := map[string][]auditRecord{}
		for _, rec := range readAudit(t, rg.audit) {
			byURL[rec.URL] = append(byURL[rec.URL], rec)
		}
		for u, recs := range byURL {
			for i, rec := range recs {
				wait := map[string]time.Duration{"paced": 2 * time.Second, "unreachable": time.Second}[rec.Decision]
				if wait == 0 {
					continue
				}
				if i+1 == len(recs) {
					t.Errorf("%s: %s at %v, never retried", u, rec.Decision, rec.Time)
					continue
				}
				// Retry-After is whole seconds rounded up: a paced
				// answer's is 2 s at most here, 1 s at least.
				gap := recs[i+1].Time.Sub(rec.Time)
				if gap < time.Second-50*time.Millisecond || gap > wait+20*time.Second {
					t.Errorf("%s: %s, retried after %v; want after its Retry-After", u, rec.Decision, gap)
				}
				checked++
			}
		}
		if checked != paced+unreachable {
			t.Errorf("the audit log has %d paced or unreachable answers; the gate counted %d", checked, paced+unreachable)
		}
		if r.Sessions.Retired != 0 {
			t.Errorf("%d sessions retired; want 0", r.Sessions.Retired)
		}
	})

	// Two pages of a site asking Crawl-delay: 3, asked for at once: robotsgate
	// sends one and holds the other for its slot (max_wait is 10 s), whose
	// allowed answer says for how long in X-Robots-Gate-Held. Together
	// (minConcurrency 2): one after the other on a busy machine, the second
	// could come after the first's 3 s.
	t.Run("held", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		rg := startRobotsgate(t, dir, "[politeness]\ncrawl_delay = true\nmax_delay = \"3s\"\nmax_wait = \"10s\"\n")
		o := newOrigin(t, plainHTTP, site("User-agent: *\nCrawl-delay: 3\n", map[string]string{
			"/a": "<html></html>", "/b": "<html></html>",
		}))
		r := crawl(t, map[string]any{"proxy": rg.proxy(), "starts": []string{o.URL + "/a", o.URL + "/b"}, "minConcurrency": 2})
		r.wantSeen(t, o.URL+"/a", o.URL+"/b")
		if r.Gate.Held != 1 || r.Gate.HeldSecs <= 0 || r.Gate.HeldSecs > 3.1 || len(r.Gate.Answers) != 0 {
			t.Errorf("gate stats %+v; want one request held, for up to 3 s, and no answer of robotsgate's own", r.Gate)
		}
	})

	// An answer Crawlee fails before any hook sees it (robotsgate's 407, a
	// text/plain body whose status is neither 5xx nor a blocked status
	// code) is not retried either, and the gate counts it and logs its
	// decision and reason.
	t.Run("auth required", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		rg := startRobotsgate(t, dir, "[[auth.users]]\nname = \"etl\"\npassword_hash = "+strconv.Quote(string(hash))+"\n")
		o := newOrigin(t, plainHTTP, site("User-agent: *\nDisallow:\n", map[string]string{"/": "<html></html>"}))
		r := crawl(t, map[string]any{"proxy": rg.proxy(), "starts": []string{o.URL + "/"}, "maxRequestRetries": 2})
		if n := rg.asked(t, o.URL+"/", userAgent); n != 1 {
			t.Errorf("robotsgate was asked for %s/ %d times; want 1", o.URL, n)
		}
		if r.Gate.Answers["auth-required"] != 1 || r.Gate.Blocked != 1 || len(r.Failed) != 1 || r.Failed[0].RetryCount != 0 {
			t.Errorf("gate stats %+v, failed %+v; want one auth-required answer, blocked, not retried", r.Gate, r.Failed)
		}
		if ls := r.lines("robotsgate answered " + o.URL + "/: auth-required (407), reason"); len(ls) != 1 {
			t.Errorf("the log explains the 407 %d times; want once: %q", len(ls), ls)
		}
		if o.count("/") != 0 {
			t.Errorf("the site received / %d times; want 0", o.count("/"))
		}
	})

	// PlaywrightCrawler with Debian's chromium through the proxy: the same
	// block, once, and an HTTPS site through the MITM tunnel, the browser
	// trusting robotsgate's CA by its own HOME's NSS store, as the README
	// says; with an empty store the same page is refused.
	t.Run("playwright", func(t *testing.T) {
		t.Parallel()
		browser := testkit.Browser()
		if browser == "" {
			t.Skip("no chromium on PATH (apt-get install chromium)")
		}
		dir := t.TempDir()
		o := newOrigin(t, httpsIP, site("User-agent: *\nDisallow: /private\n", map[string]string{
			"/":          links("/page", "/private/a"),
			"/page":      "<html><body>a page</body></html>",
			"/private/a": "<html><body>never to be sent</body></html>",
		}))
		rg := startRobotsgate(t, dir, "[upstream]\nca = "+strconv.Quote(writeCert(t, dir, o))+"\n")
		settings := func(home string, retries int) map[string]any {
			return map[string]any{
				"crawler": "playwright", "chromium": browser, "proxy": rg.proxy(),
				"starts": []string{o.URL + "/"}, "maxRequestRetries": retries, "browserHome": home,
			}
		}
		// Without the CA in its store, Chromium refuses robotsgate's
		// certificate: the trust below is the store's, nothing else's.
		r := crawl(t, settings(t.TempDir(), 0))
		if len(r.Seen) != 0 || len(r.Failed) != 1 || !strings.Contains(r.log, "ERR_CERT_AUTHORITY_INVALID") {
			t.Fatalf("with an empty NSS store: saw %q, failed %+v; want the page refused, ERR_CERT_AUTHORITY_INVALID", r.Seen, r.Failed)
		}
		r = crawl(t, settings(rg.browserHome(t), 2))
		blocked := o.URL + "/private/a"
		r.wantSeen(t, o.URL+"/", o.URL+"/page")
		if n := o.count("/private/a"); n != 0 {
			t.Errorf("the site received /private/a %d times; want 0", n)
		}
		if asked := rg.asked(t, blocked, userAgent); asked != 1 {
			t.Errorf("robotsgate was asked for %s %d times; want 1", blocked, asked)
		}
		if len(r.Failed) != 1 || r.Failed[0].Name != "RobotsGateBlocked" || r.Failed[0].Rule != "disallow: /private (line 2)" {
			t.Errorf("failed %+v; want one RobotsGateBlocked for %s", r.Failed, blocked)
		}
		if r.Gate.Blocked != 1 || r.Sessions.Retired != 0 {
			t.Errorf("gate stats %+v, %d sessions retired; want blocked 1, none retired", r.Gate, r.Sessions.Retired)
		}
		// With no --proxy-bypass-list, Chromium's own requests come
		// through robotsgate too, as the crawl's: what the README's list
		// keeps out ("playwright, the README's bypass list" below).
		// Chromium makes them a second or two after it starts, on its own
		// schedule: a crawl that ends sooner sees none, which says nothing
		// of the README, so only their absence is logged.
		if own := rg.browsersOwn(t); len(own) == 0 {
			t.Logf("robotsgate saw none of Chromium's own requests (%s) during this crawl: the browser had not made them yet", strings.Join(browserHosts, ", "))
		}
	})

	// The README's PlaywrightCrawler example's --proxy-bypass-list, as
	// given there, on a crawl of a loopback site: the site's pages go
	// through robotsgate (the disallowed one blocked, audited, never sent;
	// without <-loopback> Chromium sent them around it), and Chromium's own
	// requests to Google's hosts do not reach it.
	t.Run("playwright, the README's bypass list", func(t *testing.T) {
		t.Parallel()
		browser := testkit.Browser()
		if browser == "" {
			t.Skip("no chromium on PATH (apt-get install chromium)")
		}
		bypass := readmeBypassList(t)
		dir := t.TempDir()
		o := newOrigin(t, plainHTTP, site("User-agent: *\nDisallow: /private\n", map[string]string{
			"/":          links("/page", "/private/a"),
			"/page":      "<html><body>a page</body></html>",
			"/private/a": "<html><body>never to be sent</body></html>",
		}))
		rg := startRobotsgate(t, dir, "")
		// The CA trusted, so that any request of Chromium's own to an
		// https:// host would be decrypted, decided and audited.
		r := crawl(t, map[string]any{
			"crawler": "playwright", "chromium": browser, "proxy": rg.proxy(), "starts": []string{o.URL + "/"},
			"maxRequestRetries": 2, "browserHome": rg.browserHome(t), "chromiumArgs": []string{bypass},
		})
		blocked := o.URL + "/private/a"
		r.wantSeen(t, o.URL+"/", o.URL+"/page")
		if n := o.count("/private/a"); n != 0 {
			t.Errorf("the site received /private/a %d times; want 0 (with %s)", n, bypass)
		}
		if asked := rg.asked(t, blocked, userAgent); asked != 1 {
			t.Errorf("robotsgate was asked for %s %d times; want 1 (with %s)", blocked, asked, bypass)
		}
		if len(r.Failed) != 1 || r.Failed[0].Name != "RobotsGateBlocked" || r.Failed[0].Decision != "disallowed" {
			t.Errorf("failed %+v; want one RobotsGateBlocked, disallowed, for %s", r.Failed, blocked)
		}
		if own := rg.browsersOwn(t); len(own) != 0 {
			t.Errorf("Chromium's own requests reached robotsgate with %s: %q", bypass, own)
		}
	})

	// CheerioCrawler with certificate checks on (ignoreSslErrors: false;
	// Crawlee's default skips them) trusts robotsgate's CA by
	// NODE_EXTRA_CA_CERTS, as the README says. The site has a host name
	// (on an IP address: "cheerio https IP" below).
	t.Run("cheerio https", func(t *testing.T) {
		t.Parallel()
		o, rg := twoPagesTrusted(t, httpsLocalhost)
		settings := func() map[string]any {
			return map[string]any{"proxy": rg.proxy(), "starts": []string{o.URL + "/"}, "ignoreSslErrors": false, "maxRequestRetries": 0}
		}
		r := crawl(t, settings(), "NODE_EXTRA_CA_CERTS="+rg.caFile(t))
		r.wantSeen(t, o.URL+"/", o.URL+"/page")
		// Without it the certificate is refused: the check is on.
		r = crawl(t, settings())
		if len(r.Seen) != 0 || len(r.Failed) != 1 {
			t.Errorf("without NODE_EXTRA_CA_CERTS: saw %q, failed %+v; want the one request failed", r.Seen, r.Failed)
		}
	})

	// An https:// site on an IP address, with CheerioCrawler: over HTTP/2,
	// which robotsgate offers in its tunnels, got-scraping's client fails
	// ("Requested origin ... does not match server undefined", its own
	// limit, as the README says); with the README's http2 = false the
	// crawl goes through.
	t.Run("cheerio https IP", func(t *testing.T) {
		t.Parallel()
		o, rg := twoPagesTrusted(t, httpsIP)
		r := crawl(t, map[string]any{"proxy": rg.proxy(), "starts": []string{o.URL + "/"}, "maxRequestRetries": 0})
		want := "Requested origin " + o.URL + " does not match server undefined"
		if len(r.Seen) != 0 || len(r.Failed) != 1 || r.Failed[0].Message != want {
			t.Errorf("over HTTP/2: saw %q, failed %+v; want the one request failed with %q (else the README's limit is out of date)", r.Seen, r.Failed, want)
		}
		r = crawl(t, map[string]any{"proxy": rg.proxy(), "starts": []string{o.URL + "/"}, "maxRequestRetries": 0, "http2": false})
		r.wantSeen(t, o.URL+"/", o.URL+"/page")
	})

	// A site whose certificate robotsgate cannot verify (no upstream.ca for
	// it): robotsgate answers 502 upstream-error, no Retry-After, saying
	// retrying will not help; the gate fails the request at once.
	t.Run("certificate failure", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		o := newOrigin(t, httpsLocalhost, site("User-agent: *\nDisallow:\n", map[string]string{"/": "<html></html>"}))
		rg := startRobotsgate(t, dir, "")
		r := crawl(t, map[string]any{"proxy": rg.proxy(), "starts": []string{o.URL + "/"}, "maxRequestRetries": 3})
		if n := rg.asked(t, o.URL+"/", userAgent); n != 1 {
			t.Errorf("robotsgate was asked for %s/ %d times; want 1 (not retried)", o.URL, n)
		}
		if len(r.Failed) != 1 || r.Failed[0].Name != "RobotsGateBlocked" || r.Failed[0].Decision != "upstream-error" ||
			!strings.Contains(r.Failed[0].Message, "tls-verify") || r.Failed[0].RetryCount != 0 {
			t.Errorf("failed %+v; want one RobotsGateBlocked, upstream-error naming tls-verify, not retried", r.Failed)
		}
		if r.Gate.Answers["upstream-error"] != 1 || r.Gate.Blocked != 1 || r.Gate.Retries != 0 {
			t.Errorf("gate stats %+v; want one upstream-error, blocked, no retries", r.Gate)
		}
	})
}

// twoPagesTrusted starts an https:// origin of two pages, / linking to
// /page, and a robotsgate whose upstream.ca holds its certificate.
func twoPagesTrusted(t *testing.T, how scheme) (*origin, gate) {
	t.Helper()
	dir := t.TempDir()
	o := newOrigin(t, how, site("User-agent: *\nDisallow: /private\n", map[string]string{
		"/":     links("/page"),
		"/page": "<html><body>a page</body></html>",
	}))
	return o, startRobotsgate(t, dir, "[upstream]\nca = "+strconv.Quote(writeCert(t, dir, o))+"\n")
}

// TestBypassListsKeepLoopback checks every --proxy-bypass-list the docs
// give keeps <-loopback>: without it Chromium sends every loopback site
// around robotsgate (a new user's trial of issue 38 crawled a local site's
// disallowed pages so, with nothing audited).
func TestBypassListsKeepLoopback(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	flag := regexp.MustCompile(`--proxy-bypass-list=['"]?([^'"\x60\s\]]+)`)
	n := 0
	for _, path := range append(docs, filepath.Join("..", "..", "README.md"), "README.md") {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range flag.FindAllStringSubmatch(string(data), -1) {
			n++
			if !slices.Contains(strings.FieldsFunc(m[1], func(r rune) bool { return r == ';' || r == ',' }), "<-loopback>") {
				t.Errorf("%s: %s has no <-loopback>: Chromium would send loopback sites around robotsgate", path, m[0])
			}
		}
	}
	if n == 0 {
		t.Error("no --proxy-bypass-list in the docs: the test checks nothing")
	}
}

// readmeBypassList is the --proxy-bypass-list argument the README's
// PlaywrightCrawler example gives Chromium.
func readmeBypassList(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`args: \['(--proxy-bypass-list=[^']+)'\]`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md's PlaywrightCrawler example gives no --proxy-bypass-list in its args")
	}
	return string(m[1])
}

// browserHosts are the hosts headless Chromium asks of its own accord, which
// the README's --proxy-bypass-list sends around robotsgate.
var browserHosts = []string{"update.googleapis.com", "clients2.google.com", "accounts.google.com", "safebrowsing.googleapis.com"}

// TestUnit runs testdata/unit.test.mjs with node's test runner: what
// index.js reads of robotsgate's answers (Retry-After's forms, a got and a
// Playwright response), and what its handlers do with the session.
func TestUnit(t *testing.T) {
	requireNode(t) // index.js needs nothing from npm
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--test", filepath.Join("testdata", "unit.test.mjs"))
	cmd.Env = nodeEnv()
	cmd.WaitDelay = 10 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
}

// TestReadmeExample runs the README's first example, the CheerioCrawler,
// as written but for the proxy's address and the site, and the import of
// this package by path (node resolves crawlee from here).
func TestReadmeExample(t *testing.T) {
	requireCrawlee(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```js\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no js example")
	}
	dir := t.TempDir()
	o := newOrigin(t, httpsLocalhost, site("User-agent: *\nDisallow: /private\n", map[string]string{
		"/":     links("/page", "/private/a"),
		"/page": "<html><head><title>a page</title></head></html>",
	}))
	rg := startRobotsgate(t, dir, "[upstream]\nca = "+strconv.Quote(writeCert(t, dir, o))+"\n")
	example := strings.NewReplacer(
		"'http://127.0.0.1:8080'", strconv.Quote(rg.proxy()),
		"'https://site.example/'", strconv.Quote(o.URL+"/"),
		"'robotsgate-crawlee'", "'../index.js'",
	).Replace(string(m[1]))
	f, err := os.CreateTemp("testdata", "readme-*.mjs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if _, err := f.WriteString(example); err != nil {
		t.Fatal(err)
	}
	f.Close()
	script, err := filepath.Abs(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = dir // Crawlee's ./storage
	cmd.Env = nodeEnv()
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, out)
	}
	for _, want := range []string{
		"skipped " + o.URL + "/private/a: disallow: /private (line 2)",
		"blocked: 1",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the example's output has no %q:\n%s", want, out)
		}
	}
	if n := o.count("/private/a"); n != 0 || rg.asked(t, o.URL+"/private/a", "AcmeBot/1.0 (+https://acme.example/bot)") != 1 {
		t.Errorf("the site received /private/a %d times; want 0, and robotsgate asked once", n)
	}
	if o.count("/page") != 1 {
		t.Errorf("the site received /page %d times; want 1", o.count("/page"))
	}
}

// writeCert writes the origin's certificate as PEM, for robotsgate's
// upstream.ca, and returns its path.
func writeCert(t *testing.T, dir string, o *origin) string {
	t.Helper()
	path := filepath.Join(dir, "origin.pem")
	data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: o.Certificate().Raw})
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// gate is a running robotsgate process.
type gate struct {
	addr  string // host:port it listens on
	audit string // its audit log
	dir   string
}

func (g gate) proxy() string { return "http://" + g.addr }

// caFile fetches the proxy's CA from /ca.pem into a file and returns its
// path.
func (g gate) caFile(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(g.proxy() + "/ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ca.pem: %v %v", resp.Status, err)
	}
	path := filepath.Join(g.dir, "robotsgate-ca.pem")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// browserHome makes a HOME for Chromium whose NSS store trusts robotsgate's
// CA, with the README's commands, and returns its path.
func (g gate) browserHome(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("certutil"); err != nil {
		missing(t, "no certutil on PATH (apt-get install libnss3-tools): %v", err)
	}
	home := filepath.Join(g.dir, "browser-home")
	db := filepath.Join(home, ".pki", "nssdb")
	if err := os.MkdirAll(db, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-d", "sql:" + db, "-N", "--empty-password"},
		{"-d", "sql:" + db, "-A", "-t", "C,,", "-n", "robotsgate", "-i", g.caFile(t)},
	} {
		if out, err := exec.Command("certutil", args...).CombinedOutput(); err != nil {
			t.Fatalf("certutil %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return home
}

// browsersOwn are the URLs robotsgate audited on browserHosts: Chromium's
// own requests.
func (g gate) browsersOwn(t *testing.T) []string {
	t.Helper()
	var own []string
	for _, rec := range readAudit(t, g.audit) {
		u, err := url.Parse(rec.URL)
		if err == nil && slices.Contains(browserHosts, u.Hostname()) {
			own = append(own, rec.URL)
		}
	}
	return own
}

// asked is how many audit records robotsgate wrote for url, each checked
// to be for the user agent ua.
func (g gate) asked(t *testing.T, url, ua string) int {
	t.Helper()
	n := 0
	for _, rec := range readAudit(t, g.audit) {
		if rec.URL == url {
			n++
			if rec.UserAgent != ua {
				t.Errorf("robotsgate was asked for %s as %q; want %q", url, rec.UserAgent, ua)
			}
		}
	}
	return n
}

// userAgent is the User-Agent testdata/crawl.mjs sends.
const userAgent = "TestBot/1.0 (+https://example.org/bot)"

// binary builds robotsgate once for every test.
var binary testkit.Binary

func TestMain(m *testing.M) {
	code := m.Run()
	binary.Remove()
	os.Exit(code)
}

// startRobotsgate starts robotsgate on a loopback port with a config in
// dir (enforce mode, every decision audited, pacing off unless extra's
// tables say otherwise) and stops it when the test ends.
func startRobotsgate(t *testing.T, dir, extra string) gate {
	t.Helper()
	bin := binary.Path(t, filepath.Join("..", ".."))
	g := gate{audit: filepath.Join(dir, "audit.jsonl"), dir: dir}
	if !strings.Contains(extra, "[politeness]") {
		extra += "[politeness]\ncrawl_delay = false\n"
	}
	upstream := "[upstream]\nblock_private = false # the origins are on loopback\n"
	if strings.Contains(extra, "[upstream]\n") {
		upstream, extra = "", strings.Replace(extra, "[upstream]\n", "[upstream]\nblock_private = false\n", 1)
	}
	cfg := filepath.Join(dir, "robotsgate.toml")
	err := os.WriteFile(cfg, []byte(fmt.Sprintf("mode = \"enforce\"\n[tls]\nstate_dir = %s\n%s[audit]\nfile = %s\nlog_allowed = true\n%s",
		strconv.Quote(filepath.Join(dir, "state")), upstream, strconv.Quote(g.audit), extra)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	g.addr = testkit.Serve(t, bin, cfg, dir)
	return g
}

// auditRecord is what the tests read of an audit record.
type auditRecord struct {
	Time      time.Time `json:"time"`
	URL       string    `json:"url"`
	Decision  string    `json:"decision"`
	UserAgent string    `json:"user_agent"`
}

// readAudit decodes robotsgate's audit log, in the order written: the
// records that name a URL.
func readAudit(t *testing.T, path string) []auditRecord {
	t.Helper()
	var recs []auditRecord
	for _, rec := range testkit.JSONLines[auditRecord](t, path) {
		if rec.URL != "" {
			recs = append(recs, rec)
		}
	}
	return recs
}
