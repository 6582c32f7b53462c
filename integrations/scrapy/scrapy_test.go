// Package scrapy_test runs robotsgate_scrapy.py end to end: a real
// robotsgate process, real origins on loopback and a real Scrapy crawl
// through the proxy. It skips when /usr/bin/python3 has no Scrapy.
package scrapy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
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
)

// python is the interpreter Debian's python3-scrapy is installed for; the
// python3 first on PATH may be another one.
const python = "/usr/bin/python3"

// spider crawls its start URLs (space-separated) and every link on the
// pages it gets, and writes the URLs its callbacks saw, the failures its
// errback got, the reason it closed and the crawl's stats to out as JSON
// when the engine stops: after every spider_closed handler, the
// middleware's included, has run.
const spider = `
import json

import robotsgate_scrapy
import scrapy
from scrapy import signals


class GateSpider(scrapy.Spider):
    name = "gate"
    custom_settings = {
        "DOWNLOADER_MIDDLEWARES": {"robotsgate_scrapy.RobotsGateMiddleware": 555},
        "ROBOTSTXT_OBEY": False,  # robotsgate decides
        "USER_AGENT": "TestBot/1.0 (+https://example.org/bot)",
        "RETRY_TIMES": 2,
        "DOWNLOAD_TIMEOUT": 30,
        "TELNETCONSOLE_ENABLED": False,
        "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
        "LOG_LEVEL": "DEBUG",
    }

    def __init__(self, start, out, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = start.split()
        self.out = out
        self.seen = []
        self.held = []
        self.failed = []
        self.reason = None

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.write_out, signal=signals.engine_stopped)
        return spider

    def start_requests(self):
        for url in self.start_urls:
            yield scrapy.Request(url, callback=self.parse, errback=self.errback,
                                 dont_filter=True)

    def parse(self, response):
        self.seen.append(response.url)
        held = response.headers.get(b"X-Robots-Gate-Held")
        if held:
            self.held.append(held.decode())
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse, errback=self.errback)

    def errback(self, failure):
        self.failed.append(failure.request.url + " " + failure.type.__name__)

    def closed(self, reason):
        self.reason = reason

    def write_out(self):
        with open(self.out, "w") as f:
            json.dump({"reason": self.reason, "seen": self.seen,
                       "held": self.held, "failed": self.failed,
                       "module": robotsgate_scrapy.__file__,
                       "stats": self.crawler.stats.get_stats()}, f, default=str)
`

// hit is one request an origin received.
type hit struct {
	path string
	at   time.Time
}

// origin is an httptest origin that records every request it receives.
type origin struct {
	*httptest.Server
	mu   sync.Mutex
	hits []hit
}

func newOrigin(t *testing.T, serve func(w http.ResponseWriter, r *http.Request, n int)) *origin {
	t.Helper()
	o := &origin{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.hits = append(o.hits, hit{r.URL.Path, time.Now()})
		n := 0 // earlier requests for this path
		for _, h := range o.hits[:len(o.hits)-1] {
			if h.path == r.URL.Path {
				n++
			}
		}
		o.mu.Unlock()
		serve(w, r, n)
	}))
	t.Cleanup(o.Close)
	return o
}

// times is when each request for path arrived.
func (o *origin) times(path string) []time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ts []time.Time
	for _, h := range o.hits {
		if h.path == path {
			ts = append(ts, h.at)
		}
	}
	return ts
}

// last is when the origin's latest request arrived; the zero time if none.
func (o *origin) last() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.hits) == 0 {
		return time.Time{}
	}
	return o.hits[len(o.hits)-1].at
}

// linksPage is an HTML page linking to each of hrefs.
func linksPage(hrefs ...string) string {
	var b strings.Builder
	for _, h := range hrefs {
		fmt.Fprintf(&b, "<a href=%q>%s</a>\n", h, h)
	}
	return "<html><body>" + b.String() + "</body></html>"
}

func TestScrapyMiddleware(t *testing.T) {
	requireScrapy(t)
	dir := t.TempDir()
	rg := startRobotsgate(t, dir, gateConfig{robotsRetryAfter: "1s"})

	// site's robots.txt disallows two kinds of path, and /slow answers 429
	// once. flaky's robots.txt fails once: robotsgate answers 503
	// unreachable with Retry-After: 1 until it may fetch it again.
	flaky := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch {
		case r.URL.Path == "/robots.txt" && n == 0:
			http.Error(w, "down for a moment", http.StatusInternalServerError)
		case r.URL.Path == "/robots.txt":
			fmt.Fprint(w, "User-agent: *\nDisallow:\n")
		default:
			fmt.Fprint(w, "<html><body>flaky page</body></html>")
		}
	})
	blocked := []string{"/private/one", "/private/two", "/secret.html"}
	allowed := []string{"/a", "/b", "/slow"}
	site := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.URL.Path {
		case "/robots.txt":
			fmt.Fprint(w, "User-agent: *\nDisallow: /private\nDisallow: /secret.html\n")
		case "/":
			fmt.Fprint(w, linksPage(slices.Concat(allowed, blocked, []string{flaky.URL + "/page"})...))
		case "/slow":
			if n == 0 {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "slow down", http.StatusTooManyRequests)
				return
			}
			fmt.Fprint(w, "<html><body>slow page</body></html>")
		default:
			fmt.Fprintf(w, "<html><body>page %s</body></html>", r.URL.Path)
		}
	})

	out := runCrawl(t, dir, rg.proxy(), []string{site.URL + "/"})
	if out.Reason != "finished" {
		t.Errorf("crawl closed %q; want finished", out.Reason)
	}

	// No blocked path reached the site, and no callback saw one.
	for _, p := range blocked {
		if n := len(site.times(p)); n != 0 {
			t.Errorf("the site received %s %d times; want 0 (disallowed)", p, n)
		}
		if slices.Contains(out.Seen, site.URL+p) {
			t.Errorf("a callback saw %s; want it dropped", p)
		}
	}
	// Every allowed page was seen, the 429'd one and the one whose
	// robots.txt was unreachable at first included.
	out.wantSeen(t, site.URL+"/", site.URL+"/a", site.URL+"/b", site.URL+"/slow", flaky.URL+"/page")
	// The errback got each block, and nothing of the retried 503.
	var wantFailed []string
	for _, p := range blocked {
		wantFailed = append(wantFailed, site.URL+p+" RobotsGateBlocked")
	}
	out.wantFailed(t, wantFailed...)

	wantStats := map[string]int{
		"robotsgate/disallowed": len(blocked),
		// One 503: the retry waited for Retry-After, so robotsgate could
		// fetch robots.txt again instead of answering 503 once more.
		"robotsgate/unreachable": 1,
		"robotsgate/paced":       0, // the 429 was the site's, not robotsgate's
		// The site's 429 (by RetryMiddleware) and robotsgate's 503 (by the
		// middleware), each retried once.
		"retry/count": 2,
		"retry/reason_count/robotsgate unreachable": 1,
	}
	for key, want := range wantStats {
		if got := out.stat(key); got != want {
			t.Errorf("stats[%q] = %d; want %d", key, got, want)
		}
	}
	for key := range out.Stats {
		if strings.HasPrefix(key, "robotsgate/") && !strings.HasPrefix(key, "robotsgate/held") && wantStats[key] == 0 {
			t.Errorf("stats[%q] = %v; want none", key, out.Stats[key])
		}
	}
	// The site's 429 holds its host for a second: what was sent meanwhile
	// (the retry of /slow, and what else was in flight) is held, and
	// counted as its answers say.
	out.checkHeld(t)

	// /slow was retried, after the second its 429 asked for: robotsgate
	// holds the host that long. flaky's page was asked for only once,
	// after robotsgate could fetch robots.txt again.
	if ts := site.times("/slow"); len(ts) != 2 {
		t.Errorf("the site received /slow %d times; want 2 (a 429, then the retry)", len(ts))
	} else if gap := ts[1].Sub(ts[0]); gap < 800*time.Millisecond {
		t.Errorf("/slow retried after %v; want about 1s (Retry-After: 1)", gap)
	}
	if n := len(flaky.times("/page")); n != 1 {
		t.Errorf("flaky received /page %d times; want 1", n)
	}
	if n := len(flaky.times("/robots.txt")); n != 2 {
		t.Errorf("flaky received /robots.txt %d times; want 2 (a 500, then 200)", n)
	}

	// One INFO line per blocked request, naming its rule.
	rules := map[string]string{
		"/private/one": "disallow: /private (line 2)",
		"/private/two": "disallow: /private (line 2)",
		"/secret.html": "disallow: /secret.html (line 3)",
	}
	lines := out.lines("robotsgate blocked")
	if len(lines) != len(blocked) {
		t.Errorf("%d log lines say robotsgate blocked; want %d:\n%s", len(lines), len(blocked), strings.Join(lines, "\n"))
	}
	for _, p := range blocked {
		want := fmt.Sprintf(`[robotsgate_scrapy] INFO: robotsgate blocked <403 %s%s>: disallowed, rule "%s"`, site.URL, p, rules[p])
		n := 0
		for _, l := range lines {
			if strings.HasSuffix(l, want) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d log lines end %q; want 1", n, want)
		}
	}
	// Scrapy itself says nothing of the dropped requests: no "Ignoring
	// response" from HttpErrorMiddleware, no error.
	for _, bad := range []string{"Ignoring response <403", "ERROR:", "Traceback"} {
		if strings.Contains(out.log, bad) {
			t.Errorf("Scrapy's log has %q", bad)
		}
	}

	// robotsgate's audit log has the same three blocks, and the 503.
	var auditBlocks []string
	unreachable := 0
	for _, rec := range readAudit(t, rg.audit) {
		switch rec.Decision {
		case "disallowed":
			auditBlocks = append(auditBlocks, rec.URL)
			if rec.Rule == "" || !strings.HasPrefix(rec.URL, site.URL) {
				t.Errorf("audit record %+v: want the site's URL and a rule", rec)
			}
		case "unreachable":
			unreachable++
		}
	}
	slices.Sort(auditBlocks)
	var wantBlocks []string
	for _, p := range blocked {
		wantBlocks = append(wantBlocks, site.URL+p)
	}
	slices.Sort(wantBlocks)
	if !slices.Equal(auditBlocks, wantBlocks) {
		t.Errorf("audit log blocks %q; want %q", auditBlocks, wantBlocks)
	}
	if unreachable != 1 {
		t.Errorf("audit log has %d unreachable records; want 1", unreachable)
	}
}

// TestScrapyRetryAfter checks that a retry waiting for a temporary
// answer's Retry-After holds none of Scrapy's CONCURRENT_REQUESTS and does
// not hold up a closing spider: robotsgate's own unreachable (503) and
// paced (429) answers, through a real crawl.
func TestScrapyRetryAfter(t *testing.T) {
	requireScrapy(t)

	// down's robots.txt fails, so robotsgate answers each of its 8 pages
	// 503 unreachable, Retry-After: 10; ROBOTSGATE_MAX_RETRY_AFTER cuts
	// that to 3 s. With 4 CONCURRENT_REQUESTS, a wait holding a slot would
	// have every slot taken by down's retries for 3 s, and other's pages,
	// asked for after down's, would wait behind them.
	t.Run("unreachable", func(t *testing.T) {
		dir := t.TempDir()
		rg := startRobotsgate(t, dir, gateConfig{robotsRetryAfter: "10s"})
		down := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.URL.Path == "/robots.txt" {
				http.Error(w, "broken", http.StatusInternalServerError)
				return
			}
			fmt.Fprint(w, "<html><body>never asked for</body></html>")
		})
		var pages []string
		for i := range 10 {
			pages = append(pages, fmt.Sprintf("/o%d", i+1))
		}
		other := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
			switch r.URL.Path {
			case "/robots.txt":
				fmt.Fprint(w, "User-agent: *\nDisallow:\n")
			case "/":
				fmt.Fprint(w, linksPage(pages...))
			default:
				fmt.Fprintf(w, "<html><body>page %s</body></html>", r.URL.Path)
			}
		})
		var starts, downURLs []string
		for i := range 8 {
			downURLs = append(downURLs, fmt.Sprintf("%s/u%d", down.URL, i+1))
		}
		starts = append(starts, downURLs...)
		starts = append(starts, other.URL+"/")

		out := runCrawl(t, dir, rg.proxy(), starts,
			"CONCURRENT_REQUESTS=4", "RETRY_TIMES=1", "ROBOTSGATE_MAX_RETRY_AFTER=3")
		t.Logf("crawl took %v", out.took())
		if out.Reason != "finished" {
			t.Errorf("crawl closed %q; want finished", out.Reason)
		}
		var want []string
		for _, p := range append([]string{"/"}, pages...) {
			want = append(want, other.URL+p)
		}
		out.wantSeen(t, want...)
		// The errback got each of down's pages once, when its retries were
		// spent (HttpErrorMiddleware's HttpError for the last 503), not for
		// the 503 that was retried.
		var wantFailed []string
		for _, u := range downURLs {
			if slices.Contains(out.Seen, u) {
				t.Errorf("a callback saw %s; want its 503s dropped", u)
			}
			wantFailed = append(wantFailed, u+" HttpError")
		}
		out.wantFailed(t, wantFailed...)

		if n := len(down.times("/robots.txt")); n != 1 {
			t.Errorf("down received /robots.txt %d times; want 1", n)
		}

		// Each of down's pages: the 503, then one retry (RETRY_TIMES=1) after
		// the 3 s cap, not the 10 s robotsgate asked for.
		attempts := map[string][]auditRecord{}
		var lastAnswer time.Time
		for _, rec := range readAudit(t, rg.audit) {
			if strings.HasPrefix(rec.URL, down.URL) {
				attempts[rec.URL] = append(attempts[rec.URL], rec)
				if rec.Decision != "unreachable" {
					t.Errorf("audit record %+v: want unreachable", rec)
				}
				if rec.Time.After(lastAnswer) {
					lastAnswer = rec.Time
				}
			}
		}
		var firstRetry time.Time
		for _, u := range downURLs {
			as := attempts[u]
			if len(as) != 2 {
				t.Errorf("%s was asked for %d times; want 2 (the 503, one retry)", u, len(as))
				continue
			}
			// Under 10 s: the wait was cut (a machine's stall may add to
			// it, so the bound is the uncut wait, not the cut one).
			if gap := as[1].Time.Sub(as[0].Time); gap < 2900*time.Millisecond || gap >= 10*time.Second {
				t.Errorf("%s retried after %v; want 3s or a little more (Retry-After: 10, cut to 3)", u, gap)
			}
			if firstRetry.IsZero() || as[1].Time.Before(firstRetry) {
				firstRetry = as[1].Time
			}
		}
		// other's pages were all fetched while down's retries waited, not
		// after them.
		if last := other.last(); !firstRetry.IsZero() && !last.Before(firstRetry) {
			t.Errorf("other's last page came %v after down's first retry; want every page of other fetched while down's retries waited", last.Sub(firstRetry).Round(time.Millisecond))
		}
		retrying := regexp.MustCompile(`unreachable, Retry-After: (\d+); retrying in 3\.0 s`)
		if m := retrying.FindAllStringSubmatch(out.log, -1); len(m) != len(downURLs) {
			t.Errorf("%d log lines say the 503 is retried in 3.0 s; want %d", len(m), len(downURLs))
		} else {
			for _, sm := range m {
				if ra, _ := strconv.Atoi(sm[1]); ra <= 3 {
					t.Errorf("a 503 had Retry-After: %d; want more than the 3 s cap", ra)
				}
			}
		}
		for key, want := range map[string]int{
			"robotsgate/unreachable":                    2 * len(downURLs),
			"retry/count":                               len(downURLs),
			"retry/reason_count/robotsgate unreachable": len(downURLs),
			"retry/max_reached":                         len(downURLs),
		} {
			if got := out.stat(key); got != want {
				t.Errorf("stats[%q] = %d; want %d", key, got, want)
			}
		}
		// Given up on once each: RetryMiddleware (550) did not give up on the
		// same answer again.
		if n := len(out.lines("Gave up retrying")); n != len(downURLs) {
			t.Errorf("%d log lines say Gave up retrying; want %d", n, len(downURLs))
		}
		if strings.Contains(out.log, "Traceback") {
			t.Error("Scrapy's log has a traceback")
		}
		// The spider closed as soon as nothing was left: no wait pending.
		if d := out.end.Sub(lastAnswer); d > 5*time.Second {
			t.Errorf("Scrapy exited %v after down's last answer; want within 5s", d.Round(time.Millisecond))
		}
	})

	// paced's robots.txt asks for a Crawl-delay of 1 s and robotsgate holds
	// a request at most 1 s (max_wait), so of its 4 pages asked for at once
	// some are answered 429 paced with a Retry-After; each is retried after
	// it, and every page is fetched in the end.
	t.Run("paced", func(t *testing.T) {
		dir := t.TempDir()
		rg := startRobotsgate(t, dir, gateConfig{
			robotsRetryAfter: "10s",
			politeness:       "crawl_delay = true\nmax_delay = \"1s\"\nmax_wait = \"1s\"\n",
		})
		pages := []string{"/p1", "/p2", "/p3", "/p4"}
		paced := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
			switch r.URL.Path {
			case "/robots.txt":
				fmt.Fprint(w, "User-agent: *\nCrawl-delay: 1\nDisallow:\n")
			case "/":
				fmt.Fprint(w, linksPage(pages...))
			default:
				fmt.Fprintf(w, "<html><body>page %s</body></html>", r.URL.Path)
			}
		})
		out := runCrawl(t, dir, rg.proxy(), []string{paced.URL + "/"}, "RETRY_TIMES=5")
		t.Logf("crawl took %v", out.took())
		if out.Reason != "finished" {
			t.Errorf("crawl closed %q; want finished", out.Reason)
		}
		var want []string
		for _, p := range append([]string{"/"}, pages...) {
			want = append(want, paced.URL+p)
			if n := len(paced.times(p)); n != 1 {
				t.Errorf("paced received %s %d times; want 1", p, n)
			}
		}
		out.wantSeen(t, want...)
		out.wantFailed(t)

		n := out.stat("robotsgate/paced")
		if n == 0 {
			t.Fatal("robotsgate answered no request paced; the test paces nothing")
		}
		for key, want := range map[string]int{
			"retry/count":                         n,
			"retry/reason_count/robotsgate paced": n,
			"retry/max_reached":                   0,
		} {
			if got := out.stat(key); got != want {
				t.Errorf("stats[%q] = %d; want %d", key, got, want)
			}
		}

		// Each paced answer was retried no sooner than its Retry-After:
		// robotsgate's "would wait" rounded up to whole seconds, at least 1.
		wouldWait := regexp.MustCompile(`would wait (\S+) for its turn`)
		byURL := map[string][]auditRecord{}
		for _, rec := range readAudit(t, rg.audit) {
			byURL[rec.URL] = append(byURL[rec.URL], rec)
		}
		checked := 0
		for u, recs := range byURL {
			for i, rec := range recs {
				if rec.Decision != "paced" {
					continue
				}
				m := wouldWait.FindStringSubmatch(rec.Reason)
				if m == nil {
					t.Errorf("paced record %+v: no wait in its reason", rec)
					continue
				}
				wait, err := time.ParseDuration(m[1])
				if err != nil {
					t.Errorf("paced record %+v: %v", rec, err)
					continue
				}
				retryAfter := time.Duration(max(1, math.Ceil(wait.Seconds()))) * time.Second
				if i+1 == len(recs) {
					t.Errorf("%s: paced at %v, never retried", u, rec.Time)
					continue
				}
				gap := recs[i+1].Time.Sub(rec.Time)
				if gap < retryAfter-50*time.Millisecond || gap > retryAfter+10*time.Second { // an upper bound a stall cannot reach: no second wait
					t.Errorf("%s: paced (Retry-After: %v), retried after %v; want just after its Retry-After", u, retryAfter, gap)
				}
				checked++
			}
		}
		if checked != n {
			t.Errorf("audit log has %d paced records; Scrapy counted %d", checked, n)
		}
	})

	// A spider closing (here CLOSESPIDER_TIMEOUT, as for a first Ctrl-C)
	// does not wait for retries waiting out a 30 s Retry-After. With a
	// JOBDIR they are saved, and the resumed crawl sends them, waiting no
	// longer than its own ROBOTSGATE_MAX_RETRY_AFTER (1 s), and within the
	// same RETRY_TIMES.
	t.Run("close and resume", func(t *testing.T) {
		dir := t.TempDir()
		rg := startRobotsgate(t, dir, gateConfig{robotsRetryAfter: "30s"})
		down := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.URL.Path == "/robots.txt" {
				http.Error(w, "broken", http.StatusInternalServerError)
				return
			}
			fmt.Fprint(w, "<html><body>never asked for</body></html>")
		})
		downURLs := []string{down.URL + "/u1", down.URL + "/u2", down.URL + "/u3"}
		// index links to down's pages, so a resumed crawl does not ask for
		// them again: the job's duplicate filter has them.
		index := newOrigin(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if r.URL.Path == "/robots.txt" {
				fmt.Fprint(w, "User-agent: *\nDisallow:\n")
				return
			}
			fmt.Fprint(w, linksPage(downURLs...))
		})
		job := filepath.Join(dir, "job")
		starts := []string{index.URL + "/"}

		first := runCrawl(t, dir, rg.proxy(), starts, "JOBDIR="+job, "CLOSESPIDER_TIMEOUT=3")
		t.Logf("first crawl took %v", first.took())
		if first.Reason != "closespider_timeout" {
			t.Errorf("first crawl closed %q; want closespider_timeout", first.Reason)
		}
		var firstAnswers []time.Time
		for _, rec := range readAudit(t, rg.audit) {
			if strings.HasPrefix(rec.URL, down.URL) {
				firstAnswers = append(firstAnswers, rec.Time)
			}
		}
		if len(firstAnswers) == 0 {
			t.Fatal("the first crawl never asked for down's pages")
		}
		if d := first.end.Sub(slices.MinFunc(firstAnswers, time.Time.Compare)); d > 10*time.Second {
			t.Errorf("the first crawl exited %v after down's first 503; want within 10s (CLOSESPIDER_TIMEOUT=3), not held by the 30s Retry-After", d.Round(time.Millisecond))
		}
		if len(firstAnswers) != len(downURLs) {
			t.Errorf("the first crawl asked for down's pages %d times; want %d (no retry sent)", len(firstAnswers), len(downURLs))
		}
		closing := fmt.Sprintf("robotsgate: %d retries waiting for Retry-After were not sent: the spider closed (closespider_timeout); %d of them are saved in the job's spider state, to be sent when the crawl resumes", len(downURLs), len(downURLs))
		if len(first.lines(closing)) != 1 {
			t.Errorf("the first crawl's log has no line %q", closing)
		}
		first.wantFailed(t) // the retries were neither sent nor given up on
		for key, want := range map[string]int{
			"robotsgate/unreachable":  len(downURLs),
			"retry/count":             len(downURLs),
			"robotsgate/retry/unsent": len(downURLs),
		} {
			if got := first.stat(key); got != want {
				t.Errorf("first crawl: stats[%q] = %d; want %d", key, got, want)
			}
		}

		second := runCrawl(t, dir, rg.proxy(), starts, "JOBDIR="+job, "ROBOTSGATE_MAX_RETRY_AFTER=1")
		t.Logf("second crawl took %v", second.took())
		if second.Reason != "finished" {
			t.Errorf("second crawl closed %q; want finished", second.Reason)
		}
		resuming := fmt.Sprintf("robotsgate: resuming %d retries that were waiting for Retry-After", len(downURLs))
		if len(second.lines(resuming)) != 1 {
			t.Errorf("the second crawl's log has no line %q", resuming)
		}
		// robotsgate still answers 503 (robots.txt is not fetched again for
		// 30 s): the resumed retry (retry_times 1), one more (2), then
		// RETRY_TIMES=2 is spent.
		for key, want := range map[string]int{
			"robotsgate/retry/resumed": len(downURLs),
			"robotsgate/unreachable":   2 * len(downURLs),
			"retry/count":              len(downURLs),
			"retry/max_reached":        len(downURLs),
		} {
			if got := second.stat(key); got != want {
				t.Errorf("second crawl: stats[%q] = %d; want %d", key, got, want)
			}
		}
		// The resumed retries kept their errback.
		var wantFailed []string
		for _, u := range downURLs {
			wantFailed = append(wantFailed, u+" HttpError")
		}
		second.wantFailed(t, wantFailed...)
		attempts := map[string][]time.Time{}
		for _, rec := range readAudit(t, rg.audit) {
			if strings.HasPrefix(rec.URL, down.URL) && rec.Time.After(second.start) {
				attempts[rec.URL] = append(attempts[rec.URL], rec.Time)
			}
		}
		for _, u := range downURLs {
			as := attempts[u]
			if len(as) != 2 {
				t.Errorf("the second crawl asked for %s %d times; want 2", u, len(as))
				continue
			}
			// The saved due time is about 27 s off; the cap on reading
			// sends it within a second of the spider opening.
			if d := as[0].Sub(second.start); d > 10*time.Second {
				t.Errorf("the resumed retry of %s came %v after the second crawl started; want within ROBOTSGATE_MAX_RETRY_AFTER=1s of its start-up", u, d.Round(time.Millisecond))
			}
			if gap := as[1].Sub(as[0]); gap < 900*time.Millisecond || gap > 9*time.Second { // uncapped, it is the site's 30 s Retry-After
				t.Errorf("%s retried after %v; want about 1s (the cap)", u, gap)
			}
		}
		if n := len(down.times("/robots.txt")); n != 1 {
			t.Errorf("down received /robots.txt %d times; want 1", n)
		}
		for _, c := range []*crawl{first, second} {
			if strings.Contains(c.log, "Traceback") {
				t.Error("Scrapy's log has a traceback")
			}
		}
	})
}

// requireScrapy skips the test unless python has Scrapy; with
// ROBOTSGATE_SCRAPY_REQUIRED set (CI sets it), it fails instead.
func requireScrapy(t *testing.T) {
	t.Helper()
	probe, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(probe, python, "-c", "import scrapy").CombinedOutput(); err != nil {
		missing(t, err, out, "python3-scrapy")
	}
}

// missing skips the test for the Debian packages python lacks (err and
// out say how it failed), or fails it when ROBOTSGATE_SCRAPY_REQUIRED is
// set.
func missing(t *testing.T, err error, out []byte, packages ...string) {
	t.Helper()
	msg := fmt.Sprintf("%s: %v (apt-get install %s)\n%s", python, err, strings.Join(packages, " "), out)
	if os.Getenv("ROBOTSGATE_SCRAPY_REQUIRED") != "" {
		t.Fatalf("%s\nROBOTSGATE_SCRAPY_REQUIRED is set", msg)
	}
	t.Skip(msg)
}

// crawl is the outcome of one Scrapy run: what the spider wrote, and
// Scrapy's log.
type crawl struct {
	Reason     string         `json:"reason"`
	Seen       []string       `json:"seen"`
	Held       []string       `json:"held"`   // the X-Robots-Gate-Held of each answer its callbacks saw held
	Module     string         `json:"module"` // where robotsgate_scrapy was imported from
	Failed     []string       `json:"failed"` // "URL ExceptionName" per errback call
	Stats      map[string]any `json:"stats"`
	log        string
	start, end time.Time // when the scrapy process was started and ended
}

func (c *crawl) took() time.Duration { return c.end.Sub(c.start).Round(time.Millisecond) }

// stat is the stats' value for key; 0 if none.
func (c *crawl) stat(key string) int {
	v, _ := c.Stats[key].(float64)
	return int(v)
}

// lines are the log's lines holding s.
func (c *crawl) lines(s string) []string {
	var ls []string
	for line := range strings.Lines(c.log) {
		if strings.Contains(line, s) {
			ls = append(ls, strings.TrimSpace(line))
		}
	}
	return ls
}

// wantFailed checks the errback got exactly want ("URL ExceptionName"), in
// any order.
func (c *crawl) wantFailed(t *testing.T, want ...string) {
	t.Helper()
	got := slices.Sorted(slices.Values(c.Failed))
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("the errback got %q; want %q", got, want)
	}
}

func (c *crawl) wantSeen(t *testing.T, urls ...string) {
	t.Helper()
	for _, u := range urls {
		if !slices.Contains(c.Seen, u) {
			t.Errorf("callbacks never saw %s; saw %q", u, c.Seen)
		}
	}
}

// runCrawl runs the spider in dir through proxy, starting from starts,
// with each of settings (NAME=VALUE) given to Scrapy with -s, and logs
// Scrapy's log if the test fails. The middleware is this directory's, on
// PYTHONPATH.
func runCrawl(t *testing.T, dir, proxy string, starts []string, settings ...string) *crawl {
	t.Helper()
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	return runCrawlWith(t, interpreter{python, here}, dir, proxy, starts, settings...)
}

// interpreter is the Python a crawl runs with, and the directory on its
// PYTHONPATH ("": none, the middleware installed in it).
type interpreter struct {
	python, path string
}

// runCrawlWith is runCrawl with py.
func runCrawlWith(t *testing.T, py interpreter, dir, proxy string, starts []string, settings ...string) *crawl {
	t.Helper()
	spiderPath := filepath.Join(dir, "gate_spider.py")
	if err := os.WriteFile(spiderPath, []byte(spider), 0o644); err != nil {
		t.Fatal(err)
	}
	outFile, err := os.CreateTemp(dir, "out-*.json")
	if err != nil {
		t.Fatal(err)
	}
	outFile.Close()
	outPath := outFile.Name()
	args := []string{"-m", "scrapy", "runspider", spiderPath,
		"-a", "start=" + strings.Join(starts, " "), "-a", "out=" + outPath}
	for _, s := range settings {
		args = append(args, "-s", s)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py.python, args...)
	cmd.Dir = dir
	cmd.Env = scrapyEnv(py.path, proxy)
	cmd.WaitDelay = 5 * time.Second
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	c := &crawl{start: time.Now()}
	err = cmd.Run()
	c.end = time.Now()
	c.log = log.String()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Scrapy's log (%s):\n%s", strings.Join(settings, " "), c.log)
		}
	})
	if err != nil {
		t.Fatalf("scrapy runspider: %v", err)
	}
	data, err := os.ReadFile(outPath)
	if err != nil || len(data) == 0 {
		t.Fatalf("the spider wrote no results: %v", err)
	}
	if err := json.Unmarshal(data, c); err != nil {
		t.Fatalf("results: %v\n%s", err, data)
	}
	return c
}

// gate is a running robotsgate process.
type gate struct {
	addr  string // host:port it listens on
	audit string // its audit log
}

// proxy is the proxy URL Scrapy is given.
func (g gate) proxy() string { return "http://" + g.addr }

// gateConfig is what a test's robotsgate config sets.
type gateConfig struct {
	robotsRetryAfter string // [robots] retry_after: how long a failed robots.txt is remembered
	politeness       string // the [politeness] table's lines; "": pacing off
}

// binary builds robotsgate once for every test.
var binary testkit.Binary

func TestMain(m *testing.M) {
	code := m.Run()
	binary.Remove()
	os.Exit(code)
}

// startRobotsgate starts robotsgate on a loopback port with a config in
// dir, and stops it when the test ends.
func startRobotsgate(t *testing.T, dir string, c gateConfig) gate {
	t.Helper()
	bin := binary.Path(t, filepath.Join("..", ".."))
	politeness := c.politeness
	if politeness == "" {
		politeness = "crawl_delay = false\n"
	}
	g := gate{audit: filepath.Join(dir, "audit.jsonl")}
	cfg := filepath.Join(dir, "robotsgate.toml")
	err := os.WriteFile(cfg, []byte(fmt.Sprintf(`mode = "enforce"
[tls]
state_dir = %s
[upstream]
block_private = false # the origins are on loopback
[robots]
retry_after = %q # refetch a failed robots.txt after this
[audit]
file = %s
log_allowed = true
[politeness]
%s`, strconv.Quote(filepath.Join(dir, "state")), c.robotsRetryAfter, strconv.Quote(g.audit), politeness)), 0o644)
	if err != nil {
		t.Fatal(err)
	}

	g.addr = testkit.Serve(t, bin, cfg, dir)
	return g
}

// scrapyEnv is the environment Scrapy runs in: this process's, with no
// proxy variable and no Python, pip or Scrapy setting of its own, then the
// proxy and a PYTHONPATH holding the middleware (none when middlewareDir
// is "").
func scrapyEnv(middlewareDir, proxy string) []string {
	env := append(cleanEnv(),
		"http_proxy="+proxy, "HTTP_PROXY="+proxy,
		"PYTHONDONTWRITEBYTECODE=1", // no __pycache__ in the source tree
	)
	if middlewareDir != "" {
		env = append(env, "PYTHONPATH="+middlewareDir)
	}
	return env
}

// cleanEnv is this process's environment without its proxy variables and
// Python, pip, virtualenv or Scrapy settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		upper := strings.ToUpper(name)
		if strings.HasSuffix(upper, "_PROXY") || strings.HasPrefix(upper, "PYTHON") || strings.HasPrefix(upper, "SCRAPY") ||
			strings.HasPrefix(upper, "PIP_") || upper == "VIRTUAL_ENV" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// auditRecord is what the tests read of an audit record.
type auditRecord struct {
	Time     time.Time `json:"time"`
	URL      string    `json:"url"`
	Decision string    `json:"decision"`
	Rule     string    `json:"rule"`
	Reason   string    `json:"reason"`
}

// readAudit decodes robotsgate's audit log, in the order written.
func readAudit(t *testing.T, path string) []auditRecord {
	t.Helper()
	return testkit.JSONLines[auditRecord](t, path)
}
