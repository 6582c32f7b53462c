package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/answer"
	"github.com/robotsgate/robotsgate/proxy/config"
)

// countingRelay listens on loopback and relays each connection to
// target, counting them: how many connections a client opened.
func countingRelay(t *testing.T, target string) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, up)
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &n
}

// h2BrowserPage has 50 images, 10 of them disallowed; its title says how
// many loaded, and how many failed, once the page has.
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
	var ok = 0, bad = 0;
	for (const img of document.images) { if (img.complete && img.naturalWidth > 0) ok++; else bad++; }
	document.title = "ok " + ok + " bad " + bad;
});</script></body></html>`)
	return b.String()
}

// TestH2Chromium: headless Chromium loads a page of 50 images (10
// disallowed, answered browser-style with a 1×1 GIF) through the MITM
// proxy, over h2 and over HTTP/1.1 (tls.http2 = false): every image
// loads either way, the disallowed ones never reach the origin, and over
// h2 the browser opens fewer connections to the proxy.
func TestH2Chromium(t *testing.T) {
	t.Parallel()
	browser := testkit.Browser()
	if browser == "" {
		t.Skip("no headless browser (chromium) on PATH: install the Debian package chromium to run this test")
	}
	pki := newTestPKI(t)
	page := h2BrowserPage()
	o, port := tlsOrigin(t, pki, "User-agent: *\nDisallow: /private/\n", "shop.example")
	o.handler = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, page)
			return
		}
		w.Header().Set("Content-Type", "image/gif")
		io.WriteString(w, answer.TransparentGIF) // what the blocked ones become too
	}
	title := regexp.MustCompile(`<title>([^<]*)</title>`)
	load := func(h2 bool) (string, int64, time.Duration) {
		p := startMITM(t, pki, func(c *config.Config) { c.TLS.HTTP2 = h2; c.Responses.BlockStyle = "browser" })
		// Chromium trusts the proxy's leaf for the site by its key.
		c, _ := p.rawTunnel(t, "shop.example:"+port, "shop.example", false)
		spki := sha256.Sum256(c.(*tls.Conn).ConnectionState().PeerCertificates[0].RawSubjectPublicKeyInfo)
		c.Close()
		relay, conns := countingRelay(t, p.url.Host)
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu",
			"--proxy-server="+relay, "--ignore-certificate-errors-spki-list="+base64.StdEncoding.EncodeToString(spki[:]),
			"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", "https://shop.example:"+port+"/")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now()
		out, err := cmd.Output()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s --dump-dom (h2 %v): %v\n%.2000s", browser, h2, err, stderr.String())
		}
		m := title.FindStringSubmatch(string(out))
		if m == nil {
			t.Fatalf("h2 %v: no title in the page:\n%.2000s", h2, out)
		}
		return m[1], conns.Load(), took
	}
	got2, conns2, took2 := load(true)
	got1, conns1, took1 := load(false)
	t.Logf("h2: %q, %d connections, %v; HTTP/1.1: %q, %d connections, %v", got2, conns2, took2, got1, conns1, took1)
	for _, got := range []string{got2, got1} {
		if got != "ok 50 bad 0" {
			t.Errorf("page title %q; want every image loaded (the 10 disallowed as GIFs)", got)
		}
	}
	if conns2 >= conns1 {
		t.Errorf("h2: %d connections to the proxy; want fewer than HTTP/1.1's %d", conns2, conns1)
	}
	for i := 0; i < 50; i += 5 {
		if n := o.count(fmt.Sprintf("/private/%d.png", i)); n != 0 {
			t.Errorf("/private/%d.png reached the origin %d times", i, n)
		}
	}
}
