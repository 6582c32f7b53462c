package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/answer"
	"github.com/robotsgate/robotsgate/proxy/config"
)

// connectRelay listens on loopback and relays each connection to target,
// counting those whose first line is a CONNECT to authority: the TLS
// connections a browser opened to one site, leaving out its own
// background traffic (update and sign-in hosts), which goes through the
// proxy too.
func connectRelay(t testing.TB, target, authority string) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	want := "CONNECT " + authority + " "
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				first, _ := br.ReadSlice('\n')
				if strings.HasPrefix(string(first), want) {
					n.Add(1)
				}
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { up.Write(first); io.Copy(up, br); up.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, up)
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &n
}

// h2BrowserPage has 50 images, 10 of them disallowed. Once it has loaded,
// its title says how many images loaded and how many failed, how long the
// page took to its load event as the browser measured it (Navigation
// Timing: loadEventStart from the navigation's start, which leaves out
// the browser's own start-up), and the protocols the page and its images
// came over ("ok 50 bad 0 ms 212.4 proto h2").
func h2BrowserPage() string {
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html><html><head><title>start</title></head><body>`)
	for i := range 50 {
		dir := "img"
		if i%5 == 0 {
			dir = "private"
		}
		fmt.Fprintf(&b, `<img src="/%s/%d.png">`, dir, i)
	}
	b.WriteString(`<script>window.addEventListener("load", function () {
	var ok = 0, bad = 0, protos = {};
	for (const img of document.images) { if (img.complete && img.naturalWidth > 0) ok++; else bad++; }
	const nav = performance.getEntriesByType("navigation")[0];
	for (const e of [nav].concat(performance.getEntriesByType("resource"))) protos[e.nextHopProtocol || "none"] = 1;
	document.title = "ok " + ok + " bad " + bad + " ms " + (nav.loadEventStart - nav.startTime).toFixed(1) +
		" proto " + Object.keys(protos).sort().join(",");
});</script></body></html>`)
	return b.String()
}

// chromiumSite is the HTTPS origin whose page (h2BrowserPage) headless
// Chromium loads through robotsgate: robots.txt disallows /private/, and
// every image is a 1×1 GIF, which is what the disallowed ones become
// too when answered browser-style.
type chromiumSite struct {
	browser   string
	pki       *testPKI
	origin    *testOrigin
	authority string // shop.example:port, the page's CONNECT authority
}

// newChromiumSite starts the site; t is skipped when no headless
// Chromium is on PATH.
func newChromiumSite(t testing.TB) *chromiumSite {
	t.Helper()
	browser := testkit.Browser()
	if browser == "" {
		t.Skip("no headless browser (chromium) on PATH: install the Debian package chromium to run this test")
	}
	pki := newTestPKI(t)
	page := h2BrowserPage()
	o, port := tlsOrigin(t, pki, "User-agent: *\nDisallow: /private/\n", "shop.example")
	o.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if r.URL.Path == "/" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, page)
			return
		}
		w.Header().Set("Content-Type", "image/gif")
		io.WriteString(w, answer.TransparentGIF)
	}
	return &chromiumSite{browser: browser, pki: pki, origin: o, authority: "shop.example:" + port}
}

// chromiumProxy is robotsgate in MITM mode answering blocks
// browser-style, with tls.http2 as asked, and the relay in front of it
// that counts the browser's connections to the site.
type chromiumProxy struct {
	h2       bool
	relay    string
	connects *atomic.Int64
	spki     string // base64 SHA-256 of robotsgate's CA key, which Chromium is told to trust
}

// startProxy starts a proxy for the site, HTTP/2 offered or not.
func (s *chromiumSite) startProxy(t testing.TB, h2 bool) *chromiumProxy {
	t.Helper()
	p := startMITM(t, s.pki, func(c *config.Config) { c.TLS.HTTP2 = h2; c.Responses.BlockStyle = "browser" })
	relay, connects := connectRelay(t, p.url.Host, s.authority)
	// The CA's certificate is in every leaf's chain; Chromium trusts a
	// chain holding a key on --ignore-certificate-errors-spki-list.
	spki := sha256.Sum256(p.srv.CA().Cert.RawSubjectPublicKeyInfo)
	return &chromiumProxy{h2: h2, relay: relay, connects: connects, spki: base64.StdEncoding.EncodeToString(spki[:])}
}

// pageLoad is what one load of the page showed.
type pageLoad struct {
	ok, bad int
	ms      float64 // the page's load time, as Chromium measured it
	protos  string  // the protocols the page and its images came over, sorted, comma-separated
	conns   int64   // TLS connections Chromium opened to the site
}

var pageTitle = regexp.MustCompile(`<title>ok (\d+) bad (\d+) ms ([0-9.]+) proto ([^<]*)</title>`)

// load runs a new headless Chromium, with an empty profile, that loads
// the page through p and prints it once it has loaded.
func (s *chromiumSite) load(t testing.TB, p *chromiumProxy) pageLoad {
	t.Helper()
	profile, err := os.MkdirTemp(t.TempDir(), "profile")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(profile)
	before := p.connects.Load()
	// Generous: a busy machine, and a proxy built with -race.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.browser, "--headless", "--no-sandbox", "--disable-gpu",
		"--proxy-server="+p.relay, "--ignore-certificate-errors-spki-list="+p.spki,
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+profile, "--virtual-time-budget=5000", "--dump-dom", "https://"+s.authority+"/")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --dump-dom (h2 %v): %v\n%.2000s", s.browser, p.h2, err, stderr.String())
	}
	m := pageTitle.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("h2 %v: the page did not say it had loaded:\n%.2000s", p.h2, out)
	}
	l := pageLoad{protos: m[4], conns: p.connects.Load() - before}
	l.ok, _ = strconv.Atoi(m[1])
	l.bad, _ = strconv.Atoi(m[2])
	l.ms, _ = strconv.ParseFloat(m[3], 64)
	return l
}

// check fails t unless every image loaded (the disallowed ones as GIFs)
// over the protocol p offers.
func (p *chromiumProxy) check(t testing.TB, l pageLoad) {
	t.Helper()
	want := "http/1.1"
	if p.h2 {
		want = "h2"
	}
	if l.ok != 50 || l.bad != 0 || l.protos != want {
		t.Errorf("h2 %v: %d images loaded, %d failed, over %q; want 50, none failed, all over %s", p.h2, l.ok, l.bad, l.protos, want)
	}
}

// TestH2Chromium: headless Chromium loads a page of 50 images (10
// disallowed, answered browser-style with a 1×1 GIF) through the MITM
// proxy, over h2 and over HTTP/1.1 (tls.http2 = false): every image
// loads either way, over the protocol offered, the disallowed ones never
// reach the origin, and over h2 the browser opens fewer connections to
// the site.
func TestH2Chromium(t *testing.T) {
	t.Parallel()
	site := newChromiumSite(t)
	p2, p1 := site.startProxy(t, true), site.startProxy(t, false)
	l2, l1 := site.load(t, p2), site.load(t, p1)
	t.Logf("h2: %+v; HTTP/1.1: %+v", l2, l1)
	p2.check(t, l2)
	p1.check(t, l1)
	if l2.conns >= l1.conns {
		t.Errorf("h2: %d connections to the site; want fewer than HTTP/1.1's %d", l2.conns, l1.conns)
	}
	for i := 0; i < 50; i += 5 {
		if n := site.origin.count(fmt.Sprintf("/private/%d.png", i)); n != 0 {
			t.Errorf("/private/%d.png reached the origin %d times", i, n)
		}
	}
}

// BenchmarkH2Chromium: headless Chromium loads TestH2Chromium's page
// through robotsgate over h2 and over HTTP/1.1, a new browser with an
// empty profile per load, and reports the page's load time as Chromium
// measured it (ms/page; not the browser's start-up, which ns/op counts)
// and the TLS connections it opened to the site (conns/page). One load
// before timing fetches robots.txt and checks the protocol.
func BenchmarkH2Chromium(b *testing.B) {
	site := newChromiumSite(b)
	for _, h2 := range []bool{true, false} {
		name := "h1"
		if h2 {
			name = "h2"
		}
		b.Run(name, func(b *testing.B) {
			p := site.startProxy(b, h2)
			p.check(b, site.load(b, p))
			var ms float64
			var conns int64
			for b.Loop() {
				l := site.load(b, p)
				p.check(b, l)
				ms += l.ms
				conns += l.conns
			}
			b.ReportMetric(ms/float64(b.N), "ms/page")
			b.ReportMetric(float64(conns)/float64(b.N), "conns/page")
		})
	}
}
