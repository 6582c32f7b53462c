package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/answer"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// browserConfig is loopbackConfig with block_style "browser".
func browserConfig() *config.Config {
	cfg := loopbackConfig()
	cfg.Responses.BlockStyle = "browser"
	return cfg
}

// TestBrowserBlockStyle: through a real proxy, each kind of request for a
// disallowed URL gets its browser-style answer, with the X-Robots-Gate
// headers and no-store, counted once and audited with the status sent;
// the origin sees none of them.
func TestBrowserBlockStyle(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nDisallow: /private/\n", nil)
	p := startProxy(t, browserConfig())
	c := p.client()
	tests := []struct {
		path   string
		header []string
		status int
		ctype  string
		body   string // "" with page: checked below
		page   bool
	}{
		{"/private/app.js", []string{"Sec-Fetch-Dest", "script"}, 200, "text/javascript; charset=utf-8", "", false},
		{"/private/a.css", []string{"Sec-Fetch-Dest", "style"}, 200, "text/css; charset=utf-8", "", false},
		{"/private/a.png", []string{"Sec-Fetch-Dest", "image"}, 200, "image/gif", answer.TransparentGIF, false},
		{"/private/f.woff2", []string{"Sec-Fetch-Dest", "font"}, 200, "font/woff2", "", false},
		{"/private/api", []string{"Sec-Fetch-Dest", "empty", "Accept", "*/*"}, 204, "", "", false},
		{"/private/api", []string{"Sec-Fetch-Dest", "empty", "Accept", "application/json"}, 200, "application/json", "{}", false},
		{"/private/page", []string{"Sec-Fetch-Dest", "document", "Accept", "text/html"}, 403, "text/html; charset=utf-8", "", true},
		{"/private/x.js", nil, 200, "text/javascript; charset=utf-8", "", false},
		{"/private/page", []string{"Accept", "text/html,*/*;q=0.8"}, 403, "text/html; charset=utf-8", "", true},
		{"/private/page", nil, 403, "text/plain; charset=utf-8", "", false},
	}
	for _, tt := range tests {
		var resp *http.Response
		var body string
		countedOnce(t, p, policy.ActionDisallowed.String(), "http", func() { resp, body = get(t, c, o.URL+tt.path, tt.header...) })
		what := fmt.Sprintf("GET %s %q", tt.path, tt.header)
		if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != tt.ctype {
			t.Errorf("%s: %d %q; want %d %q", what, resp.StatusCode, resp.Header.Get("Content-Type"), tt.status, tt.ctype)
		}
		for k, want := range map[string]string{
			"X-Robots-Gate":      "disallowed",
			"X-Robots-Gate-Rule": "disallow: /private/ (line 2)",
			"Cache-Control":      "no-store",
		} {
			if got := resp.Header.Get(k); got != want {
				t.Errorf("%s: %s = %q; want %q", what, k, got, want)
			}
		}
		switch {
		case tt.page:
			for _, want := range []string{"<!DOCTYPE html>", o.URL + tt.path, "agent:      Go-http-client", o.URL + "/robots.txt", "disallow: /private/ (line 2)"} {
				if !strings.Contains(body, want) {
					t.Errorf("%s: page lacks %q:\n%s", what, want, body)
				}
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'none'") {
				t.Errorf("%s: Content-Security-Policy = %q", what, csp)
			}
		case tt.status == 403:
			if !strings.Contains(body, "is disallowed by robots.txt") {
				t.Errorf("%s: plain body:\n%s", what, body)
			}
		case body != tt.body:
			t.Errorf("%s: body %q; want %q", what, body, tt.body)
		}
		if rec := p.lastAudit(t); rec["status"] != float64(resp.StatusCode) || rec["msg"] != "blocked" || rec["decision"] != "disallowed" {
			t.Errorf("%s: audit = %v; want blocked, disallowed, status %d", what, rec, resp.StatusCode)
		}
		if n := o.count(tt.path); n != 0 {
			t.Errorf("%s: origin saw it %d times", what, n)
		}
	}
	// Allowed traffic is untouched.
	if resp, body := get(t, c, o.URL+"/open.js", "Sec-Fetch-Dest", "script"); resp.StatusCode != 200 || body != "page /open.js\n" || resp.Header.Get("X-Robots-Gate") != "" {
		t.Errorf("allowed: %d %q %v", resp.StatusCode, body, resp.Header)
	}
}

// TestBrowserBlockStyleReload: block_style is reloaded like other keys.
func TestBrowserBlockStyleReload(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nDisallow: /img/\n", nil)
	p := startProxy(t, loopbackConfig())
	if resp, _ := get(t, p.client(), o.URL+"/img/a.png", "Sec-Fetch-Dest", "image"); resp.StatusCode != 403 {
		t.Errorf("plain: %d; want 403", resp.StatusCode)
	}
	if err := p.srv.Reload(browserConfig()); err != nil {
		t.Fatal(err)
	}
	if resp, body := get(t, p.client(), o.URL+"/img/a.png", "Sec-Fetch-Dest", "image"); resp.StatusCode != 200 || body != answer.TransparentGIF {
		t.Errorf("after reload to browser: %d %q; want 200 and the GIF", resp.StatusCode, body)
	}
	if err := p.srv.Reload(loopbackConfig()); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, p.client(), o.URL+"/img/a.png", "Sec-Fetch-Dest", "image"); resp.StatusCode != 403 {
		t.Errorf("after reload to plain: %d; want 403", resp.StatusCode)
	}
}

// TestBlockStylePerAgent: one instance answers a scraper plainly and a
// browser browser-style, by an [[agents]] rule's block_style, which wins
// over [responses] either way; a rule with only a block style keeps the
// token of the User-Agent header.
func TestBlockStylePerAgent(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nDisallow: /img/\n\nUser-agent: Scrapy\nDisallow: /\n", nil)
	const chrome = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Safari/537.36"
	for _, tt := range []struct {
		global, rule  string
		chrome, other int // the statuses of a blocked image
	}{
		{"plain", "browser", 200, 403},
		{"browser", "plain", 403, 200},
	} {
		cfg := loopbackConfig()
		cfg.Responses.BlockStyle = tt.global
		cfg.Agents = []config.AgentRule{{UserAgent: "*Chrome/*", BlockStyle: tt.rule}}
		p := startProxy(t, cfg)
		c := p.client()
		resp, _ := get(t, c, o.URL+"/img/a.png", "Sec-Fetch-Dest", "image", "User-Agent", chrome)
		if resp.StatusCode != tt.chrome || resp.Header.Get("X-Robots-Gate") != "disallowed" {
			t.Errorf("global %s, rule %s: Chrome's image: %d %v; want %d", tt.global, tt.rule, resp.StatusCode, resp.Header, tt.chrome)
		}
		resp, _ = get(t, c, o.URL+"/img/a.png", "Sec-Fetch-Dest", "image", "User-Agent", "Scrapy/2.8 (+https://scrapy.org)")
		if resp.StatusCode != tt.other || resp.Header.Get("X-Robots-Gate-Rule") != "disallow: / (line 5)" {
			t.Errorf("global %s, rule %s: Scrapy's image: %d %v; want %d by Scrapy's own group", tt.global, tt.rule, resp.StatusCode, resp.Header, tt.other)
		}
		if rec := p.lastAudit(t); rec["token"] != "Scrapy" {
			t.Errorf("audit %v; want Scrapy's token", rec)
		}
	}
	if o.count("/img/a.png") != 0 {
		t.Error("a blocked image reached the origin")
	}
	// A bad style is named with its key.
	cfg := loopbackConfig()
	cfg.Agents = []config.AgentRule{{UserAgent: "*Chrome/*", BlockStyle: "fancy"}}
	if _, err := policy.Compile(cfg); err == nil || !strings.Contains(err.Error(), "agents[0].block_style") {
		t.Errorf("Compile(block_style = fancy) = %v; want an error naming agents[0].block_style", err)
	}
}

// TestBrowserBlockPageEscaped: the HTML page shows the URL as text, never
// as markup, wherever in it the markup was put.
func TestBrowserBlockPageEscaped(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nDisallow: /private\n", nil)
	p := startProxy(t, browserConfig())
	host := strings.TrimPrefix(o.URL, "http://")
	for _, target := range []string{
		"/private/%3Cscript%3Ealert(1)%3C/script%3E",
		"/private/x?q=<script>alert(1)</script>&a=\"'",
	} {
		resp, body := p.raw(t, "GET "+o.URL+target+" HTTP/1.1\r\nHost: "+host+"\r\nAccept: text/html\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != 403 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("%s: %d %q; want 403 text/html", target, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if strings.Contains(body, "<script") || strings.Contains(body, "q=<") {
			t.Errorf("%s: markup from the URL in the page:\n%s", target, body)
		}
		want := strings.NewReplacer("<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;", "&", "&amp;").Replace(o.URL + target)
		if !strings.Contains(body, want) {
			t.Errorf("%s: page lacks the escaped URL %q:\n%s", target, want, body)
		}
		if n := o.count("/private/x") + o.count("/private/%3Cscript%3Ealert(1)%3C/script%3E"); n != 0 {
			t.Errorf("origin reached %d times", n)
		}
	}
}

// TestBrowserBlockStyleOtherDecisions: site denies, private targets and
// unreachable robots.txt are answered in the browser style too (the HTML
// page keeps 503 and Retry-After); a CONNECT, a WebSocket handshake and a
// 407 keep their answers.
func TestBrowserBlockStyleOtherDecisions(t *testing.T) {
	t.Parallel()
	down := closedAddr(t)
	cfg := browserConfig()
	cfg.Sites = []config.SiteRule{{Host: "denied.example", Policy: "deny", Reason: "asked us to stop"}}
	p := startProxy(t, cfg)
	c := p.client()

	resp, body := get(t, c, "http://"+down+"/app.js", "Sec-Fetch-Dest", "script")
	if resp.StatusCode != 200 || resp.Header.Get("X-Robots-Gate") != "unreachable" || resp.Header.Get("Retry-After") != "" || body != "" {
		t.Errorf("unreachable script: %d %v %q; want 200, unreachable, no Retry-After, empty", resp.StatusCode, resp.Header, body)
	}
	resp, body = get(t, c, "http://"+down+"/page", "Sec-Fetch-Dest", "document")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "robots.txt could not be fetched") ||
		resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("unreachable document: %d %v:\n%s", resp.StatusCode, resp.Header, body)
	}
	if rec := p.lastAudit(t); rec["status"] != 503.0 || rec["decision"] != "unreachable" {
		t.Errorf("audit = %v", rec)
	}

	resp, body = get(t, c, "http://denied.example/a.png", "Sec-Fetch-Dest", "image")
	if resp.StatusCode != 200 || resp.Header.Get("X-Robots-Gate") != "denied" || body != answer.TransparentGIF {
		t.Errorf("denied image: %d %q", resp.StatusCode, resp.Header.Get("X-Robots-Gate"))
	}
	resp, body = get(t, c, "http://denied.example/", "Sec-Fetch-Dest", "document")
	if resp.StatusCode != 403 || !strings.Contains(body, "asked us to stop") || !strings.Contains(body, "Denied by a site rule") {
		t.Errorf("denied document: %d:\n%s", resp.StatusCode, body)
	}
	if rec := p.lastAudit(t); rec["status"] != 403.0 || rec["msg"] != "override" || rec["decision"] != "denied" {
		t.Errorf("audit = %v", rec)
	}

	// A WebSocket handshake is never answered 200.
	resp, _ = p.raw(t, "GET http://denied.example/ws HTTP/1.1\r\nHost: denied.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-Fetch-Dest: script\r\n\r\n")
	if resp.StatusCode != 403 {
		t.Errorf("WebSocket handshake: %d; want 403", resp.StatusCode)
	}

	// block_private: a private target.
	q := startProxy(t, func() *config.Config {
		c := config.Default()
		c.Listen = "127.0.0.1:0"
		c.Responses.BlockStyle = "browser"
		return c
	}())
	resp, body = get(t, q.client(), "http://127.0.0.1:1/a.css", "Sec-Fetch-Dest", "style")
	if resp.StatusCode != 200 || resp.Header.Get("X-Robots-Gate") != "private-address" || resp.Header.Get("Content-Type") != "text/css; charset=utf-8" || body != "" {
		t.Errorf("private style sheet: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if rec := q.lastAudit(t); rec["status"] != 200.0 || rec["msg"] != "refused" {
		t.Errorf("audit = %v", rec)
	}
	// A CONNECT is never answered 200 by a block: that would open the tunnel.
	resp, _, _ = connect(t, q, "127.0.0.1:443", "Sec-Fetch-Dest: image\r\n")
	if resp.StatusCode != 403 {
		t.Errorf("CONNECT to a private address: %d; want 403", resp.StatusCode)
	}
}

// TestBrowserBlockStyleStatusesKept: a 407 is not a block: it keeps its
// status in the browser style.
func TestBrowserBlockStyleStatusesKept(t *testing.T) {
	t.Parallel()
	cfg := browserConfig()
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Auth.Users = []config.AuthUser{{Name: "etl", PasswordHash: string(hash)}}
	p := startProxy(t, cfg)
	resp, _ := get(t, p.client(), "http://example.com/a.png", "Sec-Fetch-Dest", "image")
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("no credentials: %d; want 407", resp.StatusCode)
	}
}

// TestBrowserBlockStyleInTunnel: inside a MITM tunnel a blocked image is
// the GIF too.
func TestBrowserBlockStyleInTunnel(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "shop.example")
	p := startMITM(t, pki, func(c *config.Config) { c.Responses.BlockStyle = "browser" })
	c := p.mitmClient(t, nil, false)
	resp, body := get(t, c, "https://shop.example:"+port+"/private/a.png", "Sec-Fetch-Dest", "image")
	if resp.StatusCode != 200 || body != answer.TransparentGIF || resp.Header.Get("X-Robots-Gate") != "disallowed" {
		t.Errorf("blocked image in a tunnel: %d %v", resp.StatusCode, resp.Header)
	}
	if rec := p.lastAudit(t); rec["status"] != 200.0 || rec["url"] != "https://shop.example:"+port+"/private/a.png" {
		t.Errorf("audit = %v", rec)
	}
	if n := o.count("/private/a.png"); n != 0 {
		t.Errorf("origin reached %d times", n)
	}
}

// browserTestPage loads a disallowed script and image; its title says
// which error handlers fired, or "loaded" when none did.
const browserTestPage = `<!DOCTYPE html>
<html><head><title>start</title>
<script>var errs = []; function failed(what) { errs.push(what); document.title = errs.join(" "); }</script>
<script src="/js/app.js" onerror="failed('script-error')"></script>
</head><body>
<img id="img" src="/img/a.png" onerror="failed('img-error')">
<script>
window.addEventListener("load", function () {
	var img = document.getElementById("img");
	document.body.setAttribute("data-img", img.naturalWidth + "x" + img.naturalHeight);
	if (errs.length === 0) document.title = "loaded";
});
</script>
</body></html>
`

// TestBrowserBlockStyleInChromium loads a page whose script and image are
// disallowed in headless Chromium through the proxy: with block_style
// "browser" no error handler fires, and with "plain" both do (so the test
// can fail). Neither blocked URL reaches the origin.
func TestBrowserBlockStyleInChromium(t *testing.T) {
	t.Parallel()
	browser := testkit.Browser()
	if browser == "" {
		t.Skip("no headless browser (chromium) on PATH: install the Debian package chromium to run this test")
	}
	o := newTestOrigin(t, "User-agent: *\nDisallow: /js/\nDisallow: /img/\n", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, browserTestPage)
	})
	title := regexp.MustCompile(`<title>([^<]*)</title>`)
	load := func(style string) (string, string, *testProxy) {
		cfg := loopbackConfig()
		cfg.Responses.BlockStyle = style
		p := startProxy(t, cfg)
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu",
			"--proxy-server="+p.url.String(), "--proxy-bypass-list=<-loopback>",
			"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", o.URL+"/")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) || ctx.Err() != nil {
				t.Fatalf("%s --dump-dom (%s): %v\n%.2000s", browser, style, err, stderr.String())
			}
			t.Fatalf("%s: %v", browser, err)
		}
		m := title.FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("%s: no title in the page:\n%.2000s", style, out)
		}
		return m[1], string(out), p
	}

	got, dom, p := load("browser")
	if got != "loaded" {
		t.Errorf("browser style: title %q; want \"loaded\" (no error handler fired)", got)
	}
	if !strings.Contains(dom, `data-img="1x1"`) {
		t.Errorf("browser style: the blocked image is not the 1×1 GIF:\n%.2000s", dom)
	}
	var blocks []map[string]any
	for _, rec := range p.auditLines(t) {
		if rec["decision"] == policy.ActionDisallowed.String() {
			blocks = append(blocks, rec)
		}
	}
	if len(blocks) != 2 {
		t.Errorf("browser style: %d blocks audited; want 2: %v", len(blocks), blocks)
	}
	for _, rec := range blocks {
		if rec["status"] != 200.0 || rec["msg"] != "blocked" {
			t.Errorf("browser style: audit = %v; want blocked with status 200", rec)
		}
	}

	got, _, p = load("plain")
	if !strings.Contains(got, "script-error") || !strings.Contains(got, "img-error") {
		t.Errorf("plain style: title %q; want both error handlers fired (script-error img-error)", got)
	}
	if n := len(p.auditLines(t)); n < 2 {
		t.Errorf("plain style: %d audit lines; want the 2 blocks", n)
	}
	if n := o.count("/js/app.js") + o.count("/img/a.png"); n != 0 {
		t.Errorf("the origin saw the blocked script or image %d times", n)
	}
	if o.count("/") != 2 {
		t.Errorf("the page was loaded %d times; want 2", o.count("/"))
	}
}
