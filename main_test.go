package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"golang.org/x/crypto/bcrypt"
)

// runCmd runs the command line args with stdin and returns its outputs and
// exit status.
func runCmd(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runMain(t.Context(), args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

func TestCheck(t *testing.T) {
	t.Parallel()
	const robots = "testdata/check/simple.txt"
	tests := []struct {
		name     string
		args     []string
		stdin    string
		wantOut  string // exact stdout
		wantErr  string // substring of stderr
		wantCode int
	}{
		{
			name:     "disallowed",
			args:     []string{"check", "-robots", robots, "https://example.com/private/x"},
			wantOut:  "disallowed\thttps://example.com/private/x\tdisallowed by robots.txt; rule \"disallow: /private\" line 2; crawl-delay 2.5\n",
			wantCode: 1,
		},
		{
			name:     "allowed, no rule",
			args:     []string{"check", "-robots", robots, "https://example.com/public"},
			wantOut:  "allowed\thttps://example.com/public\tno rule matches; crawl-delay 2.5\n",
			wantCode: 0,
		},
		{
			name:     "normalised escape cannot slip past",
			args:     []string{"check", "-robots", robots, "https://example.com/%70rivate", "https://example.com/pub/../private"},
			wantOut:  "disallowed\thttps://example.com/%70rivate\tdisallowed by robots.txt; rule \"disallow: /private\" line 2; crawl-delay 2.5\ndisallowed\thttps://example.com/pub/../private\tdisallowed by robots.txt; rule \"disallow: /private\" line 2; crawl-delay 2.5\n",
			wantCode: 1,
		},
		{
			name:     "exact takes the URL as given",
			args:     []string{"check", "-exact", "-robots", robots, "https://example.com/%70rivate"},
			wantOut:  "allowed\thttps://example.com/%70rivate\tno rule matches; crawl-delay 2.5\n",
			wantCode: 0,
		},
		{
			name:     "robots.txt itself",
			args:     []string{"check", "-robots", robots, "http://example.com/robots.txt"},
			wantOut:  "allowed\thttp://example.com/robots.txt\trobots.txt itself is always allowed\n",
			wantCode: 0,
		},
		{
			name:     "token from a User-Agent header",
			args:     []string{"check", "-robots", robots, "-user-agent", "Mozilla/5.0 (compatible; FooBot/2.1; +https://foo.example/bot)", "https://example.com/private"},
			wantOut:  "allowed\thttps://example.com/private\tallowed by robots.txt; rule \"allow: /\" line 6\n",
			wantCode: 0,
		},
		{
			name:     "agent with a version: the product token, with a warning",
			args:     []string{"check", "-robots", robots, "-agent", "FooBot/2.1", "https://example.com/private"},
			wantOut:  "allowed\thttps://example.com/private\tallowed by robots.txt; rule \"allow: /\" line 6\n",
			wantErr:  `-agent "FooBot/2.1" is not a product token; deciding for "FooBot"`,
			wantCode: 0,
		},
		{
			name:     "agent with a version, exact: verbatim, as the reference",
			args:     []string{"check", "-exact", "-robots", robots, "-agent", "FooBot/2.1", "https://example.com/private"},
			wantOut:  "disallowed\thttps://example.com/private\tdisallowed by robots.txt; rule \"disallow: /private\" line 2; crawl-delay 2.5\n",
			wantCode: 1,
		},
		{
			name:     "robots from stdin, exact, no scheme",
			args:     []string{"check", "-exact", "-robots", "-", "-agent", "FooBot", "example.com?a"},
			stdin:    "user-agent: FooBot\ndisallow: /?a\n",
			wantOut:  "disallowed\texample.com?a\tdisallowed by robots.txt; rule \"disallow: /?a\" line 2\n",
			wantCode: 1,
		},
		{
			name:     "a bad URL is exit 2, the others still printed",
			args:     []string{"check", "-robots", robots, "not a url", "https://example.com/private"},
			wantOut:  "disallowed\thttps://example.com/private\tdisallowed by robots.txt; rule \"disallow: /private\" line 2; crawl-delay 2.5\n",
			wantErr:  "not an absolute URL",
			wantCode: 2,
		},
		{
			name:     "-agent and -user-agent are exclusive",
			args:     []string{"check", "-robots", robots, "-agent", "a", "-user-agent", "b", "https://example.com/"},
			wantErr:  "exclusive",
			wantCode: 2,
		},
		{
			name:     "unknown flag",
			args:     []string{"check", "-nope"},
			wantErr:  "flag provided but not defined",
			wantCode: 2,
		},
		{
			// A client must percent-encode these (the proxy refuses them raw),
			// so a rule written with them raw must match the encoded form.
			name: "rules with characters a URI cannot hold raw",
			args: []string{"check", "-robots", "testdata/check/rawchars.txt", "https://x.example/a%7Bb", "https://x.example/c%3cd", "https://x.example/e%22f",
				"https://x.example/g%7Ch", "https://x.example/k%5El", "https://x.example/m%60n", "https://x.example/p%5Cq"},
			wantOut: "disallowed\thttps://x.example/a%7Bb\tdisallowed by robots.txt; rule \"disallow: /a{b\" line 2\n" +
				"disallowed\thttps://x.example/c%3cd\tdisallowed by robots.txt; rule \"disallow: /c<d\" line 3\n" +
				"disallowed\thttps://x.example/e%22f\tdisallowed by robots.txt; rule \"disallow: /e\\\"f\" line 4\n" +
				"disallowed\thttps://x.example/g%7Ch\tdisallowed by robots.txt; rule \"disallow: /g|h\" line 5\n" +
				"disallowed\thttps://x.example/k%5El\tdisallowed by robots.txt; rule \"disallow: /k^l\" line 6\n" +
				"disallowed\thttps://x.example/m%60n\tdisallowed by robots.txt; rule \"disallow: /m`n\" line 7\n" +
				"disallowed\thttps://x.example/p%5Cq\tdisallowed by robots.txt; rule \"disallow: /p\\\\q\" line 8\n",
			wantCode: 1,
		},
		{
			// Servers read an escaped ":" "(" ";" "@" as the character:
			// rules written either way match both spellings.
			name: "reserved characters, escaped or not",
			args: []string{"check", "-robots", "testdata/check/reserved.txt", "https://x.example/wiki/Special%3ASearch", "https://x.example/paren%28x%29",
				"https://x.example/semi%3Bx", "https://x.example/enc(y)", "https://x.example/at%40x"},
			wantOut: "disallowed\thttps://x.example/wiki/Special%3ASearch\tdisallowed by robots.txt; rule \"disallow: /wiki/Special:\" line 2\n" +
				"disallowed\thttps://x.example/paren%28x%29\tdisallowed by robots.txt; rule \"disallow: /paren(x)\" line 3\n" +
				"disallowed\thttps://x.example/semi%3Bx\tdisallowed by robots.txt; rule \"disallow: /semi;x\" line 4\n" +
				"disallowed\thttps://x.example/enc(y)\tdisallowed by robots.txt; rule \"disallow: /enc%28y%29\" line 5\n" +
				"disallowed\thttps://x.example/at%40x\tdisallowed by robots.txt; rule \"disallow: /at@x\" line 6\n",
			wantCode: 1,
		},
		{
			name: "usage statements shown with no purpose",
			args: []string{"check", "-robots", "testdata/check/usage.txt", "https://example.com/open/x"},
			// attach-05: on /open/ the line for /open/ decides alone, and
			// says nothing of ai-use.
			wantOut:  "allowed\thttps://example.com/open/x\tno rule matches; usage: ai-train refused by \"content-signal: search=yes, ai-train=no\" line 1, search allowed by \"content-signal: search=yes, ai-train=no\" line 1\n",
			wantCode: 0,
		},
		{
			name:     "usage refused for a declared purpose",
			args:     []string{"check", "-robots", "testdata/check/usage.txt", "-purpose", "search", "-purpose", "ai-input", "https://example.com/x"},
			wantOut:  "usage-refused\thttps://example.com/x\tusage refused: the site refuses ai-input: content-usage: ai-use=n (line 4); rule \"content-usage: ai-use=n\" line 4; usage: ai-train refused by \"content-signal: search=yes, ai-train=no\" line 1, ai-input refused by \"content-usage: ai-use=n\" line 4, search allowed by \"content-signal: search=yes, ai-train=no\" line 1\n",
			wantCode: 1,
		},
		{
			name:     "unknown purpose",
			args:     []string{"check", "-robots", "testdata/check/usage.txt", "-purpose", "ai-train,training", "https://example.com/x"},
			wantErr:  `"training" is not a purpose: known purposes are ai-train, ai-input, search`,
			wantCode: 2,
		},
		{
			name:     "purpose with exact",
			args:     []string{"check", "-exact", "-robots", "testdata/check/usage.txt", "-purpose", "ai-train", "https://example.com/x"},
			wantErr:  "-purpose cannot go with -exact",
			wantCode: 2,
		},
		{
			name:     "missing robots file",
			args:     []string{"check", "-robots", "testdata/check/missing.txt", "https://example.com/"},
			wantErr:  "no such file",
			wantCode: 2,
		},
		{
			name:     "unknown command",
			args:     []string{"frobnicate"},
			wantErr:  "usage:",
			wantCode: 2,
		},
		{
			name:     "misspelled command",
			args:     []string{"chek", "https://example.com/"},
			wantErr:  "robotsgate: unknown command \"chek\"; did you mean check? (robotsgate help lists the commands)\n",
			wantCode: 2,
		},
		{
			name:     "misspelled command with a dash",
			args:     []string{"hashpassword"},
			wantErr:  "did you mean hash-password?",
			wantCode: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, errOut, code := runCmd(t, tt.stdin, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit status %d; want %d (stderr %q)", code, tt.wantCode, errOut)
			}
			if out != tt.wantOut {
				t.Errorf("stdout:\n%q\nwant:\n%q", out, tt.wantOut)
			}
			if !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("stderr %q; want it to contain %q", errOut, tt.wantErr)
			}
		})
	}
}

func TestCheckJSON(t *testing.T) {
	t.Parallel()
	out, _, code := runCmd(t, "", "check", "-json", "-robots", "testdata/check/simple.txt", "https://Example.COM:443/private?x=1", "https://example.com/ok")
	if code != 1 {
		t.Fatalf("exit status %d; want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines; want 2:\n%s", len(lines), out)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"url": "https://Example.COM:443/private?x=1", "origin": "https://example.com:443", "agent": []any{"*"},
		"allowed": false, "decision": "disallowed", "reason": "disallowed by robots.txt",
		"robots_url": "https://example.com/robots.txt", "rule": "disallow: /private", "line": 2.0,
		"fetch": nil, "crawl_delay": 2.5, "purpose": []any{}, "copies": []any{}, // a file given, not fetched: no copy of the site's
		"unseen": nil, // no purpose declared: nothing check cannot see refuses it
		"usage": map[string]any{"purposes": map[string]any{
			"ai-train": map[string]any{"state": "unstated", "statement": "", "line": 0},
			"ai-input": map[string]any{"state": "unstated", "statement": "", "line": 0},
			"search":   map[string]any{"state": "unstated", "statement": "", "line": 0},
		}, "statements": []any{}},
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("field %q missing", k)
			continue
		}
		if gb, _ := json.Marshal(g); string(gb) != mustJSON(t, w) {
			t.Errorf("%s = %s; want %s", k, gb, mustJSON(t, w))
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d fields; want %d: %v", len(got), len(want), got)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCheckExactConformance runs "check -exact -json" on every case of
// Google's conformance data, as a user checking the command would.
func TestCheckExactConformance(t *testing.T) {
	t.Parallel()
	n := 0
	for _, file := range []string{"robots/testdata/google-robotstxt-tests.jsonl", "robots/testdata/google-spec-test.jsonl"} {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var c struct {
				Name, Robots, RobotsB64 string `json:"-"`
				Agent, URL              string
				Allowed                 bool
			}
			var raw map[string]any
			if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
				t.Fatal(err)
			}
			c.Name, _ = raw["name"].(string)
			c.Robots, _ = raw["robots"].(string)
			c.Agent, _ = raw["agent"].(string)
			c.URL, _ = raw["url"].(string)
			c.Allowed, _ = raw["allowed"].(bool)
			if b64, ok := raw["robots_b64"].(string); ok {
				b, err := base64.StdEncoding.DecodeString(b64)
				if err != nil {
					t.Fatal(err)
				}
				c.Robots = string(b)
			}
			out, errOut, code := runCmd(t, c.Robots, "check", "-exact", "-json", "-robots", "-", "-agent", c.Agent, "--", c.URL)
			var got struct{ Allowed bool }
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%s: output %q (stderr %q): %v", c.Name, out, errOut, err)
			}
			wantCode := 0
			if !c.Allowed {
				wantCode = 1
			}
			if got.Allowed != c.Allowed || code != wantCode {
				t.Errorf("%s: check -exact -agent %q %q: allowed %v, exit %d; want %v, %d", c.Name, c.Agent, c.URL, got.Allowed, code, c.Allowed, wantCode)
			}
			n++
		}
		f.Close()
	}
	if n != 545 {
		t.Errorf("ran %d cases; want 545", n)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"version", "--version", "-version"} {
		out, _, code := runCmd(t, "", arg)
		if code != 0 || !strings.HasPrefix(out, "robotsgate dev go1.") {
			t.Errorf("%s = %q, exit %d; want \"robotsgate dev go1...\", 0", arg, out, code)
		}
	}
}

// TestCheckLive fetches robots.txt from real loopback origins, through the
// same fetcher and cache as the proxy.
func TestCheckLive(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/robots.txt":
			hits.Add(1)
			fmt.Fprint(w, "User-agent: *\nDisallow: /private\nCrawl-delay: 1.5\n")
		default:
			t.Errorf("check fetched %s; want only /robots.txt", r.URL.Path)
		}
	}))
	t.Cleanup(origin.Close)
	missing := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(missing.Close)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)

	out, errOut, code := runCmd(t, "", "check", origin.URL+"/private/a", origin.URL+"/public", missing.URL+"/private", down.URL+"/x")
	if code != 1 {
		t.Errorf("exit status %d; want 1 (stderr %q)", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	want := []string{
		"disallowed\t" + origin.URL + "/private/a\tdisallowed by robots.txt; rule \"disallow: /private\" line 2; " + origin.URL + "/robots.txt fetched 200 age 0s; crawl-delay 1.5",
		"allowed\t" + origin.URL + "/public\tno rule matches; " + origin.URL + "/robots.txt fetched 200 age 0s; crawl-delay 1.5",
		"allowed\t" + missing.URL + "/private\trobots.txt unavailable: no restrictions; " + missing.URL + "/robots.txt unavailable 404 age 0s",
		"unreachable\t" + down.URL + "/x\trobots.txt unreachable and no copy held: disallowing all (status 503); " + down.URL + "/robots.txt unreachable 503",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines; want %d:\n%s", len(lines), len(want), out)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got %q\nwant %q", i, lines[i], want[i])
		}
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("robots.txt fetched %d times for two URLs of one origin; want 1", n)
	}

	out, _, code = runCmd(t, "", "check", "-json", origin.URL+"/private")
	var got struct {
		Fetch struct {
			Outcome   string
			Status    int
			FetchedAt *string  `json:"fetched_at"`
			AgeS      *float64 `json:"age_s"`
		}
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 1 {
		t.Fatalf("check -json: %q, exit %d: %v", out, code, err)
	}
	if got.Fetch.Outcome != "fetched" || got.Fetch.Status != 200 || got.Fetch.FetchedAt == nil || got.Fetch.AgeS == nil {
		t.Errorf("fetch = %+v; want fetched 200 with a time and an age", got.Fetch)
	}
}

// TestServe runs "robotsgate serve" as a user would: it starts on a config
// file, says where it listens, blocks by robots.txt, reloads on SIGHUP and
// drains on a signal (a cancelled context here).
func TestServe(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			fmt.Fprint(w, "User-agent: *\nDisallow: /private\n")
			return
		}
		fmt.Fprint(w, "page")
	}))
	t.Cleanup(origin.Close)
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", dir) // the CA goes here, not in the real home
	cfgPath := dir + "/robotsgate.toml"
	writeFile := func(s string) {
		if err := os.WriteFile(cfgPath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeFile("[upstream]\nblock_private = false\n")

	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr testkit.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runMain(ctx, []string{"serve", "-config", cfgPath, "-listen", "127.0.0.1:0"}, strings.NewReader(""), &stdout, &stderr)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve's stderr:\n%s", stderr.String())
		}
	})
	addr := ""
	testkit.Eventually(t, "the listen address in the startup lines", func() bool {
		if m := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	// The startup lines follow the listening one: wait for the last.
	testkit.Eventually(t, "the startup line on pacing", func() bool { return strings.Contains(stderr.String(), "pacing on") })
	for _, want := range []string{"mode=enforce", "config=" + cfgPath, "HTTP_PROXY=http://" + addr,
		`msg="pacing on: requests to one site start no closer than its Crawl-delay or min_interval" crawl_delay="honoured, at most 30s"`} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("startup lines lack %q:\n%s", want, stderr.String())
		}
	}
	proxyURL, _ := url.Parse("http://" + addr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 10 * time.Second}
	status := func(path string) int {
		resp, err := client.Get(origin.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := status("/private"); s != 403 {
		t.Errorf("/private: %d; want 403", s)
	}
	if s := status("/page"); s != 200 {
		t.Errorf("/page: %d; want 200", s)
	}
	if !strings.Contains(stdout.String(), `"msg":"blocked"`) {
		t.Errorf("audit log on stdout lacks the block:\n%s", stdout.String())
	}

	// SIGHUP: a bad config is refused and the old one stays; a good one applies.
	writeFile("[upstream]\nblock_private = false\nbogus = 1\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	testkit.Eventually(t, "a refused reload", func() bool { return strings.Contains(stderr.String(), "reload failed") })
	if s := status("/page"); s != 200 {
		t.Errorf("after a bad reload /page: %d; want 200 (old config kept)", s)
	}
	writeFile("[upstream]\nblock_private = false\n[[sites]]\nhost = \"127.0.0.1\"\npolicy = \"deny\"\nreason = \"test\"\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	testkit.Eventually(t, "a reload", func() bool { return strings.Contains(stderr.String(), "config reloaded") })
	if !strings.Contains(stderr.String(), `msg="config reloaded" config=`+cfgPath+" changed=sites") {
		t.Errorf("the reload line does not name the key that changed:\n%s", stderr.String())
	}
	if s := status("/page"); s != 403 {
		t.Errorf("after reload /page: %d; want 403 (site deny)", s)
	}

	cancel() // what SIGINT or SIGTERM does
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exited %d; want 0:\n%s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	if out, errOut, code := runCmd(t, "", "validate", "-config", "config.toml"); code != 0 || out != "config.toml: ok\n" {
		t.Errorf("validate config.toml: %q %q exit %d", out, errOut, code)
	}
	_, errOut, code := runCmd(t, "", "validate", "-config", "proxy/config/testdata/bad.toml")
	if code != 2 || strings.Count(errOut, "bad.toml:") < 10 {
		t.Errorf("validate bad.toml: exit %d, stderr:\n%s\nwant exit 2 and every error", code, errOut)
	}
	if _, _, code := runCmd(t, "", "serve", "-mode", "sometimes", "-listen", "127.0.0.1:0"); code != 2 {
		t.Errorf("serve -mode sometimes: exit %d; want 2", code)
	}
}

func TestHealthcheck(t *testing.T) {
	t.Parallel()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			fmt.Fprint(w, "ok\n")
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(ok.Close)
	if out, errOut, code := runCmd(t, "", "healthcheck", "-url", ok.URL+"/healthz"); code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Errorf("healthy: %q %q exit %d", out, errOut, code)
	}
	if _, errOut, code := runCmd(t, "", "healthcheck", "-url", ok.URL+"/nope"); code != 1 || !strings.Contains(errOut, "404") {
		t.Errorf("404: exit %d %q; want 1 (Docker's unhealthy)", code, errOut)
	}
	if _, _, code := runCmd(t, "", "healthcheck", "-url", "http://127.0.0.1:1/healthz"); code != 1 {
		t.Errorf("nothing listening: exit %d; want 1", code)
	}
}

func TestHashPassword(t *testing.T) {
	t.Parallel()
	out, _, code := runCmd(t, "secret\r\n", "hash-password")
	hash := strings.TrimSpace(out)
	if code != 0 || bcrypt.CompareHashAndPassword([]byte(hash), []byte("secret")) != nil {
		t.Fatalf("hash-password: %q exit %d", out, code)
	}
	if cost, _ := bcrypt.Cost([]byte(hash)); cost != 12 {
		t.Errorf("cost %d; want 12", cost)
	}
	for _, in := range []string{"", "\n", strings.Repeat("x", 73) + "\n"} {
		if _, _, code := runCmd(t, in, "hash-password"); code != 2 {
			t.Errorf("hash-password with %q: exit %d; want 2", in, code)
		}
	}
}

func TestCACommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := dir + "/c.toml"
	os.WriteFile(cfg, []byte("[tls]\nstate_dir = \""+dir+"/state\"\n"), 0o644)
	out, errOut, code := runCmd(t, "", "ca", "-config", cfg)
	if code != 0 || out != dir+"/state/ca.pem\n" {
		t.Fatalf("ca: %q exit %d", out, code)
	}
	for _, want := range []string{"curl --cacert", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "update-ca-certificates", "Dockerfile",
		"certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n robotsgate -i " + dir + "/state/ca.pem", "http://127.0.0.1:8080/ca.pem",
		"the CA of state directory " + dir + "/state (" + cfg + ")", "WARNING: there was no CA there, so a new one was made just now"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("trust help lacks %q:\n%s", want, errOut)
		}
	}
	// The second time, the CA is there: no warning.
	if _, errOut, code := runCmd(t, "", "ca", "-config", cfg); code != 0 || strings.Contains(errOut, "WARNING") {
		t.Errorf("ca again: exit %d\n%s", code, errOut)
	}
	// Given files are named as the config's.
	given := dir + "/given.toml"
	os.WriteFile(given, []byte("[tls]\nca_cert = \""+dir+"/state/ca.pem\"\nca_key = \""+dir+"/state/ca-key.pem\"\n"), 0o644)
	if _, errOut, code := runCmd(t, "", "ca", "-config", given); code != 0 || !strings.Contains(errOut, "the CA of [tls] ca_cert and ca_key of "+given) {
		t.Errorf("ca with given files: exit %d\n%s", code, errOut)
	}
}

// TestKeysCommand: keys makes the signing key once (mode 0600) and prints
// the directory; -rotate retires it, still listed; -remove takes a retired
// key out, never the signing one.
func TestKeysCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := dir + "/c.toml"
	os.WriteFile(cfg, []byte("[tls]\nstate_dir = \""+dir+"/state\"\n[identity]\nsignature_agent = \"https://bot.example\"\n"), 0o644)
	out, errOut, code := runCmd(t, "", "keys", "-config", cfg)
	if code != 0 || strings.Count(out, `"kty":"OKP"`) != 1 || !strings.Contains(errOut, "made a signing key in "+dir+"/state/identity-key.pem") ||
		!strings.Contains(errOut, "publish the directory below at https://bot.example") {
		t.Fatalf("keys: exit %d\n%s\n%s", code, out, errOut)
	}
	if fi, err := os.Stat(dir + "/state/identity-key.pem"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if again, errOut, code := runCmd(t, "", "keys", "-config", cfg); code != 0 || again != out || strings.Contains(errOut, "made") {
		t.Errorf("keys again: exit %d, %q; want the same directory\n%s", code, again, errOut)
	}
	signing := func(errOut string) (cur, retired string) {
		for _, l := range strings.Split(errOut, "\n") {
			f := strings.Fields(l)
			if len(f) == 2 && f[1] == "signing" {
				cur = f[0]
			} else if len(f) == 2 && f[1] == "retired" {
				retired = f[0]
			}
		}
		return
	}
	first, _ := signing(errOut)
	out, errOut, code = runCmd(t, "", "keys", "-config", cfg, "-rotate")
	cur, retired := signing(errOut)
	if code != 0 || strings.Count(out, `"kty":"OKP"`) != 2 || retired != first || cur == first {
		t.Fatalf("keys -rotate: exit %d, signing %s, retired %s (was %s)\n%s", code, cur, retired, first, errOut)
	}
	if _, errOut, code := runCmd(t, "", "keys", "-config", cfg, "-remove", cur); code != 2 || !strings.Contains(errOut, "is the signing key") {
		t.Errorf("keys -remove of the signing key: exit %d\n%s", code, errOut)
	}
	if out, _, code := runCmd(t, "", "keys", "-config", cfg, "-remove", first); code != 0 || strings.Count(out, `"kty":"OKP"`) != 1 {
		t.Errorf("keys -remove: exit %d, %s", code, out)
	}
}

// TestHealthcheckConfig is the image's HEALTHCHECK form: the config's
// listen address, 0.0.0.0 asked on loopback.
func TestHealthcheckConfig(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok\n") }))
	t.Cleanup(srv.Close)
	_, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")
	cfg := t.TempDir() + "/c.toml"
	os.WriteFile(cfg, []byte("listen = \"0.0.0.0:"+port+"\"\n"), 0o644)
	if out, errOut, code := runCmd(t, "", "healthcheck", "-config", cfg); code != 0 || out != "ok: http://127.0.0.1:"+port+"/healthz\n" {
		t.Errorf("healthcheck -config: %q %q exit %d", out, errOut, code)
	}
	if _, _, code := runCmd(t, "", "healthcheck", "-url", "not a url"); code != 2 {
		t.Errorf("healthcheck -url 'not a url': exit %d; want 2", code)
	}
}

// TestCheckJSONUsage: the usage object lists every statement that applies
// to the token, with what it says, and the verdict for each purpose.
func TestCheckJSONUsage(t *testing.T) {
	t.Parallel()
	out, _, code := runCmd(t, "", "check", "-json", "-purpose", "ai-train", "-robots", "testdata/check/usage.txt", "https://example.com/open/x")
	if code != 1 {
		t.Fatalf("exit status %d; want 1", code)
	}
	var got struct {
		Decision string   `json:"decision"`
		Purpose  []string `json:"purpose"`
		Rule     string   `json:"rule"`
		Line     int      `json:"line"`
		Usage    struct {
			Purposes   map[string]struct{ State, Statement string } `json:"purposes"`
			Statements []struct {
				Field, Path, Value string
				Line               int
				Prefs              map[string]string
			} `json:"statements"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Decision != "usage-refused" || len(got.Purpose) != 1 || got.Rule != "content-signal: search=yes, ai-train=no" || got.Line != 1 {
		t.Errorf("decision %q purpose %v rule %q line %d", got.Decision, got.Purpose, got.Rule, got.Line)
	}
	if v := got.Usage.Purposes["ai-train"]; v.State != "refused" || v.Statement != "content-signal: search=yes, ai-train=no" {
		t.Errorf("usage ai-train = %+v", v)
	}
	if st := got.Usage.Statements; len(st) != 3 || st[1].Path != "/open/" || st[1].Prefs["ai-train"] != "allowed" || st[0].Field != "content-signal" {
		t.Errorf("statements = %+v", st)
	}
}

func TestReport(t *testing.T) {
	t.Parallel()
	const audit, malformed = "report/testdata/audit.jsonl", "report/testdata/malformed.jsonl"
	stdin, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	htmlFile := filepath.Join(t.TempDir(), "report.html")
	tests := []struct {
		name     string
		args     []string
		stdin    string
		wantOut  []string // substrings of stdout
		wantErr  string   // substring of stderr; "" for none at all
		wantCode int
	}{
		{"text", []string{"report", audit}, "", []string{"files      " + audit + "\n", "records    10\n", "blocked    5 (50.0%;", "malformed  0 lines skipped\n", "disallowed               2   20.0%\n"}, "", 0},
		{"json, flag after the file", []string{"report", audit, "-json"}, "", []string{`"total": 10,`, `"blocked": 5,`, `"from": "2026-11-23T08:41:38.637Z",`}, "", 0},
		{"stdin", []string{"report", "-json", "-"}, string(stdin), []string{`"total": 10,`, `"files": [` + "\n" + `    "-"`}, "", 0},
		{"since a time", []string{"report", "-json", "-since", "2026-11-23T10:00:00Z", audit}, "", []string{`"total": 6,`}, "", 0},
		{"since a duration", []string{"report", "-since", "876000h", audit}, "", []string{"records    10\n", "since      "}, "", 0},
		{"html", []string{"report", "-html", htmlFile, audit}, "", []string{"records    10\n"}, "", 0},
		{"malformed lines", []string{"report", malformed}, "", []string{"records    2\n", "malformed  7 lines skipped\n"}, "malformed lines skipped: 7 (first: " + malformed + " line 2: not a JSON object)", 0},
		{"a missing file: the others reported, exit 2", []string{"report", "-json", audit, "report/testdata/nope.jsonl"}, "", []string{`"total": 10,`}, "nope.jsonl: no such file", 2},
		{"no file", []string{"report", "-json"}, "", nil, "no audit file given", 2},
		{"bad -since", []string{"report", "-since", "last week", audit}, "", nil, `-since "last week": neither an RFC 3339 time`, 2},
		{"help", []string{"report", "-h"}, "", nil, "  disallowed, denied, usage-refused, private-address, unreachable\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runCmd(t, tt.stdin, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit status %d; want %d (stderr %q)", code, tt.wantCode, errOut)
			}
			for _, want := range tt.wantOut {
				if !strings.Contains(out, want) {
					t.Errorf("stdout has no %q:\n%s", want, out)
				}
			}
			if tt.wantErr == "" && errOut != "" || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("stderr %q; want %q", errOut, tt.wantErr)
			}
		})
	}
	page, err := os.ReadFile(htmlFile)
	if err != nil || !bytes.Contains(page, []byte("<svg")) || !bytes.Contains(page, []byte("https://docs.example:443")) {
		t.Errorf("-html wrote %d bytes (%v); want a page with the chart and the origins", len(page), err)
	}
}

// TestReportNothingRead holds report to printing nothing, and writing no
// HTML page, when no audit file could be read: an empty report would read
// as an empty log.
func TestReportNothingRead(t *testing.T) {
	t.Parallel()
	htmlFile := filepath.Join(t.TempDir(), "report.html")
	tests := []struct {
		name    string
		args    []string
		wantErr []string
	}{
		{"a missing file", []string{"report", "report/testdata/nope.jsonl"}, []string{"nope.jsonl: no such file", "no audit file read: nothing to report"}},
		{"two missing files, json", []string{"report", "-json", "report/testdata/nope.jsonl", "report/testdata/nope2.jsonl"}, []string{"nope.jsonl: no such file", "nope2.jsonl: no such file", "nothing to report"}},
		{"html", []string{"report", "-html", htmlFile, "report/testdata/nope.jsonl"}, []string{"nothing to report"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runCmd(t, "", tt.args...)
			if code != 2 || out != "" {
				t.Errorf("exit status %d, stdout %q; want 2 and nothing", code, out)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr %q; want %q", errOut, want)
				}
			}
		})
	}
	if _, err := os.Stat(htmlFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("-html with nothing read: %v; want no page", err)
	}
}

// TestCommandsDispatched holds commands, the names a misspelling is
// suggested from, to run's switch: each is a command (its usage error is
// its own, never "unknown command") and the usage names each.
func TestCommandsDispatched(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		t.Run(c, func(t *testing.T) {
			t.Parallel()
			if c == "serve" || c == "healthcheck" {
				// Would listen, or wait on a proxy: the usage names them.
				if !strings.Contains(usage, c) {
					t.Errorf("usage does not name %s", c)
				}
				return
			}
			_, errOut, _ := runCmd(t, "", c, "-no-such-flag")
			if strings.Contains(errOut, "unknown command") {
				t.Errorf("robotsgate %s: %q", c, errOut)
			}
			if c != "help" && !strings.Contains(usage, "robotsgate "+c) {
				t.Errorf("usage does not name %s", c)
			}
		})
	}
}
