// Package scrapy_test runs robotsgate_scrapy.py end to end: a real
// robotsgate process, real origins on loopback and a real Scrapy crawl
// through the proxy. It skips when /usr/bin/python3 has no Scrapy.
package scrapy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
)

// python is the interpreter Debian's python3-scrapy is installed for; the
// python3 first on PATH may be another one.
const python = "/usr/bin/python3"

// spider crawls start and every link on it, and writes the URLs its
// callbacks saw and the crawl's stats to out as JSON when it closes.
const spider = `
import json

import scrapy


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
        self.start_urls = [start]
        self.out = out
        self.seen = []

    def parse(self, response):
        self.seen.append(response.url)
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse_page)

    def parse_page(self, response):
        self.seen.append(response.url)

    def closed(self, reason):
        with open(self.out, "w") as f:
            json.dump({"reason": reason, "seen": self.seen,
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

func TestScrapyMiddleware(t *testing.T) {
	probe, cancelProbe := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancelProbe()
	if out, err := exec.CommandContext(probe, python, "-c", "import scrapy").CombinedOutput(); err != nil {
		t.Skipf("Scrapy is not installed for %s (apt-get install python3-scrapy): %v\n%s", python, err, out)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rg := startRobotsgate(t, filepath.Join(here, "..", ".."), dir)

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
			var b strings.Builder
			for _, p := range slices.Concat(allowed, blocked) {
				fmt.Fprintf(&b, "<a href=%q>%s</a>\n", p, p)
			}
			fmt.Fprintf(&b, "<a href=%q>flaky</a>\n", flaky.URL+"/page")
			fmt.Fprintf(w, "<html><body>%s</body></html>", b.String())
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

	spiderPath := filepath.Join(dir, "gate_spider.py")
	if err := os.WriteFile(spiderPath, []byte(spider), 0o644); err != nil {
		t.Fatal(err)
	}
	outPath := filepath.Join(dir, "out.json")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "scrapy", "runspider", spiderPath,
		"-a", "start="+site.URL+"/", "-a", "out="+outPath)
	cmd.Dir = dir
	cmd.Env = scrapyEnv(here, "http://"+rg.addr)
	cmd.WaitDelay = 5 * time.Second
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("scrapy runspider: %v\n%s", err, log.String())
	}
	t.Logf("crawl took %v", time.Since(start).Round(time.Millisecond))
	var out struct {
		Reason string         `json:"reason"`
		Seen   []string       `json:"seen"`
		Stats  map[string]any `json:"stats"`
	}
	data, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatalf("the spider wrote no results: %v\n%s", err, log.String())
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("results: %v\n%s", err, data)
	}
	defer func() {
		if t.Failed() {
			t.Logf("Scrapy's log:\n%s", log.String())
		}
	}()
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
	for _, u := range []string{site.URL + "/", site.URL + "/a", site.URL + "/b", site.URL + "/slow", flaky.URL + "/page"} {
		if !slices.Contains(out.Seen, u) {
			t.Errorf("callbacks never saw %s; saw %q", u, out.Seen)
		}
	}

	stat := func(key string) int {
		v, _ := out.Stats[key].(float64)
		return int(v)
	}
	wantStats := map[string]int{
		"robotsgate/disallowed": len(blocked),
		// One 503: the retry waited for Retry-After, so robotsgate could
		// fetch robots.txt again instead of answering 503 once more.
		"robotsgate/unreachable": 1,
		"robotsgate/paced":       0, // the 429 was the site's, not robotsgate's
		// The site's 429 and robotsgate's 503, each retried once.
		"retry/count": 2,
	}
	for key, want := range wantStats {
		if got := stat(key); got != want {
			t.Errorf("stats[%q] = %d; want %d", key, got, want)
		}
	}
	for key := range out.Stats {
		if strings.HasPrefix(key, "robotsgate/") && wantStats[key] == 0 {
			t.Errorf("stats[%q] = %v; want none", key, out.Stats[key])
		}
	}

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
	var lines []string
	for line := range strings.Lines(log.String()) {
		if strings.Contains(line, "robotsgate blocked") {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
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
		if strings.Contains(log.String(), bad) {
			t.Errorf("Scrapy's log has %q", bad)
		}
	}

	// robotsgate's audit log has the same three blocks, and the 503.
	audit := readAudit(t, rg.audit)
	var auditBlocks []string
	unreachable := 0
	for _, rec := range audit {
		switch rec["decision"] {
		case "disallowed":
			auditBlocks = append(auditBlocks, fmt.Sprint(rec["url"]))
			if u, _ := rec["url"].(string); rec["rule"] == "" || !strings.HasPrefix(u, site.URL) {
				t.Errorf("audit record %v: want the site's URL and a rule", rec)
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

// gate is a running robotsgate process.
type gate struct {
	addr  string // host:port it listens on
	audit string // its audit log
}

// startRobotsgate builds robotsgate from the module at root, starts it on a
// loopback port with a config in dir, and stops it when the test ends.
func startRobotsgate(t *testing.T, root, dir string) gate {
	t.Helper()
	bin := filepath.Join(dir, "robotsgate")
	buildCtx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	build := exec.CommandContext(buildCtx, "go", "build", "-o", bin, ".")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	g := gate{audit: filepath.Join(dir, "audit.jsonl")}
	cfg := filepath.Join(dir, "robotsgate.toml")
	err := os.WriteFile(cfg, []byte(fmt.Sprintf(`mode = "enforce"
[tls]
state_dir = %s
[upstream]
block_private = false # the origins are on loopback
[robots]
retry_after = "1s" # refetch a failed robots.txt after a second
[audit]
file = %s
[politeness]
crawl_delay = false
`, strconv.Quote(filepath.Join(dir, "state")), strconv.Quote(g.audit))), 0o644)
	if err != nil {
		t.Fatal(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "serve", "-config", cfg, "-listen", "127.0.0.1:0")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		logMu sync.Mutex
		logs  strings.Builder
	)
	addrc := make(chan string, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		listen := regexp.MustCompile(`msg="robotsgate listening" .*addr=(127\.0\.0\.1:\d+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := listen.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		stop()
		cmd.Wait() // the context's error: it was stopped
		<-readDone
		if code := cmd.ProcessState.ExitCode(); code != 0 || t.Failed() {
			logMu.Lock()
			t.Logf("robotsgate (exit %d):\n%s", code, logs.String())
			logMu.Unlock()
		}
	})
	select {
	case g.addr = <-addrc:
	case <-readDone:
		t.Fatal("robotsgate exited before listening")
	case <-time.After(15 * time.Second):
		t.Fatal("robotsgate did not listen within 15s")
	}
	return g
}

// scrapyEnv is the environment Scrapy runs in: this process's, with no
// proxy variable and no Python or Scrapy setting of its own, then the
// proxy and a PYTHONPATH holding the middleware.
func scrapyEnv(middlewareDir, proxy string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		upper := strings.ToUpper(name)
		if strings.HasSuffix(upper, "_PROXY") || strings.HasPrefix(upper, "PYTHON") || strings.HasPrefix(upper, "SCRAPY") {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"http_proxy="+proxy, "HTTP_PROXY="+proxy,
		"PYTHONPATH="+middlewareDir,
		"PYTHONDONTWRITEBYTECODE=1", // no __pycache__ in the source tree
	)
}

// readAudit decodes robotsgate's audit log, one JSON object per line.
func readAudit(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	for line := range bytes.Lines(data) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		recs = append(recs, rec)
	}
	return recs
}
