package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// innerOrigin is an HTTPS origin for the tests of requests inside a
// tunnel: /private is disallowed; /echo answers the request's body,
// /stream sends a piece and the rest only once release is closed,
// /trailer sends a trailer, anything else a page.
func innerOrigin(t *testing.T, pki *testPKI, release chan struct{}) (*testOrigin, string) {
	t.Helper()
	o, port := tlsOrigin(t, pki, "User-agent: *\nDisallow: /private\nCrawl-delay: 1\n", "127.0.0.1")
	o.handler = func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "echo %s", b)
		case "/stream":
			io.WriteString(w, "first\n")
			w.(http.Flusher).Flush()
			select { // not a timer: the test's read proves the order
			case <-release:
			case <-r.Context().Done():
			}
			io.WriteString(w, "second\n")
		case "/trailer":
			w.Header().Set("Trailer", "X-Sum")
			w.(http.Flusher).Flush() // chunked, whatever the size
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "42")
		default:
			fmt.Fprintf(w, "page %s", r.URL.Path)
		}
	}
	return o, port
}

// TestInnerRequests: the requests inside a MITM tunnel are served as
// net/http's server served them: pipelined ones in order, Expect:
// 100-continue, HTTP/1.0 clients, streamed bodies piece by piece,
// trailers, and a blocked request's unread body never read as a request.
func TestInnerRequests(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	release := make(chan struct{})
	o, port := innerOrigin(t, pki, release)
	p := startMITM(t, pki, nil)
	authority := "127.0.0.1:" + port
	host := "Host: " + authority + "\r\n"
	tunnel := func() (net.Conn, *bufio.Reader) { return p.rawTunnel(t, authority, "127.0.0.1", false) }
	read := func(br *bufio.Reader, method string) (*http.Response, string) {
		t.Helper()
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("response: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}

	t.Run("pipelined", func(t *testing.T) {
		c, br := tunnel()
		io.WriteString(c, "GET /a HTTP/1.1\r\n"+host+"\r\nGET /private/x HTTP/1.1\r\n"+host+"\r\nHEAD /b HTTP/1.1\r\n"+host+"\r\n")
		for _, want := range []struct {
			method string
			status int
			body   string
		}{{"GET", 200, "page /a"}, {"GET", 403, ""}, {"HEAD", 200, ""}} {
			resp, body := read(br, want.method)
			if resp.StatusCode != want.status || want.body != "" && body != want.body || want.method == "HEAD" && (body != "" || resp.ContentLength != int64(len("page /b"))) {
				t.Errorf("%s: %d %q (length %d); want %d %q", want.method, resp.StatusCode, body, resp.ContentLength, want.status, want.body)
			}
		}
	})

	t.Run("expect 100-continue", func(t *testing.T) {
		c, br := tunnel()
		io.WriteString(c, "POST /echo HTTP/1.1\r\n"+host+"Expect: 100-continue\r\nContent-Length: 5\r\n\r\n")
		// The client waits for the interim answer before its body.
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusContinue {
			t.Fatalf("before the body: %v %v; want 100 Continue", resp, err)
		}
		io.WriteString(c, "hello")
		if resp, body := read(br, "POST"); resp.StatusCode != 200 || body != "echo hello" || resp.Close {
			t.Errorf("POST with Expect: %d %q close=%v; want 200 \"echo hello\", kept alive", resp.StatusCode, body, resp.Close)
		}
	})

	t.Run("blocked body is not a request", func(t *testing.T) {
		c, br := tunnel()
		smuggled := "GET /smuggled HTTP/1.1\r\n" + host + "\r\n"
		fmt.Fprintf(c, "POST /private/form HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s", host, len(smuggled), smuggled)
		// The body is read and dropped, as net/http's server drops up to
		// 256 KiB: the connection carries on, with the next request.
		if resp, _ := read(br, "POST"); resp.StatusCode != 403 || resp.Close {
			t.Errorf("blocked POST: %d close=%v; want 403, kept alive", resp.StatusCode, resp.Close)
		}
		if resp, body := roundTripRaw(t, c, br, "GET /after HTTP/1.1\r\n"+host+"\r\n"); resp.StatusCode != 200 || body != "page /after" {
			t.Errorf("after a blocked POST: %d %q", resp.StatusCode, body)
		}
		if n, ok := o.hits.Load("/smuggled"); ok {
			t.Errorf("the body of a blocked request was served as a request (%d hits)", n.(*atomic.Int64).Load())
		}
	})

	t.Run("blocked large body", func(t *testing.T) {
		c, br := tunnel()
		const size = 4 << 20 // past what is read and dropped
		fmt.Fprintf(c, "POST /private/upload HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n", host, size)
		// A client that sends all before it reads, as Python requests
		// does: it still gets the answer, then the connection closes.
		go func() {
			chunk := make([]byte, 64<<10)
			for sent := 0; sent < size; sent += len(chunk) {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if resp, _ := read(br, "POST"); resp.StatusCode != 403 || !resp.Close {
			t.Errorf("blocked 4 MiB POST: %d close=%v; want 403 and Connection: close", resp.StatusCode, resp.Close)
		}
	})

	t.Run("HTTP/1.0", func(t *testing.T) {
		c, br := tunnel()
		io.WriteString(c, "GET /a HTTP/1.0\r\n"+host+"Connection: keep-alive\r\n\r\n")
		if resp, body := read(br, "GET"); resp.StatusCode != 200 || body != "page /a" || resp.Close {
			t.Errorf("HTTP/1.0 keep-alive: %d %q close=%v", resp.StatusCode, body, resp.Close)
		}
		// A body of unknown length: sent until the connection closes.
		io.WriteString(c, "GET /trailer HTTP/1.0\r\n"+host+"\r\n")
		if resp, body := read(br, "GET"); resp.StatusCode != 200 || body != "body" || !resp.Close {
			t.Errorf("HTTP/1.0, unknown length: %d %q close=%v; want the body, then the connection closed", resp.StatusCode, body, resp.Close)
		}
	})

	t.Run("CONNECT inside", func(t *testing.T) {
		c, br := tunnel()
		io.WriteString(c, "CONNECT "+authority+" HTTP/1.1\r\n"+host+"\r\n")
		if resp, _ := read(br, "CONNECT"); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("a CONNECT inside a tunnel: %d; want 400 (no tunnel in a tunnel)", resp.StatusCode)
		}
	})

	t.Run("ALPN http/1.0", func(t *testing.T) {
		// curl --http1.0 offers only "http/1.0": refusing it failed the
		// handshake.
		resp, raw, _ := connect(t, p, authority)
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(p.srv.CA().PEM())
		c := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.0"}})
		if err := c.Handshake(); err != nil {
			t.Fatalf("handshake offering http/1.0 only: %v", err)
		}
		if resp, body := roundTripRaw(t, c, bufio.NewReader(c), "GET /a HTTP/1.0\r\n"+host+"\r\n"); resp.StatusCode != 200 || body != "page /a" {
			t.Errorf("HTTP/1.0 after ALPN http/1.0: %d %q", resp.StatusCode, body)
		}
	})

	t.Run("trailers", func(t *testing.T) {
		c, br := tunnel()
		io.WriteString(c, "GET /trailer HTTP/1.1\r\n"+host+"\r\n")
		if resp, body := read(br, "GET"); body != "body" || resp.Trailer.Get("X-Sum") != "42" {
			t.Errorf("trailer: %q %v; want body and X-Sum: 42", body, resp.Trailer)
		}
	})

	t.Run("streamed", func(t *testing.T) {
		c, br := tunnel()
		io.WriteString(c, "GET /stream HTTP/1.1\r\n"+host+"\r\n")
		// A hang guard: the origin holds the rest until release, so an
		// answer held back whole would never come.
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The first piece arrives while the origin still holds the rest.
		first, err := bufio.NewReader(resp.Body).ReadString('\n')
		close(release)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if err != nil || first != "first\n" {
			t.Errorf("first piece before the rest: %q %v", first, err)
		}
		resp.Body.Close()
	})
}

// progressSize is the answer of TestInnerEarlyAnswer's /progress.
const progressSize = 1 << 20

// TestInnerEarlyAnswer: an origin that answers an upload before reading
// it, with the client still sending: the answer reaches the client, and
// the Transport's reading of the body ends before the
// connection's reader is reused (under -race this raced, and in a normal
// build it crashed the process).
func TestInnerEarlyAnswer(t *testing.T) {
	t.Parallel()
	ln := serveRawTCP(t, func(c net.Conn, br *bufio.Reader) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if r.URL.Path == "/robots.txt" {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 24\r\n\r\nUser-agent: *\nAllow: /\n\n")
			return
		}
		if r.URL.Path == "/switch" { // a 101 nobody asked for
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nraw bytes")
			time.Sleep(time.Second) // kept open: the 502 must come from the 101 itself, not from a close
			return
		}
		if r.URL.Path == "/progress" {
			// The head and all but the last byte of a long body at
			// once, while the upload is still read: none of it may be
			// lost, nor the upload cut. The last byte waits for the
			// whole upload: an answer complete before it would let the
			// Transport close the connection (Connection: close) and
			// cut the upload itself, and a client that has read its
			// answer may leave with its upload unsent.
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", progressSize)
			got := make(chan int64, 1)
			go func() { n, _ := io.Copy(io.Discard, r.Body); got <- n }()
			time.Sleep(50 * time.Millisecond) // the head first, alone, while the upload goes on
			c.Write(bytes.Repeat([]byte("x"), progressSize-1))
			select {
			case n := <-got:
				if n != r.ContentLength {
					t.Errorf("the origin got %d bytes of a %d-byte upload", n, r.ContentLength)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("the upload stopped coming once the answer was under way")
			}
			c.Write([]byte("x"))
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nearly")
		io.Copy(io.Discard, br)
	})
	p := startMITM(t, nil, nil)
	authority := ln.Addr().String()
	for i := range 20 { // the race was there in most runs of a few
		c, br := p.rawTunnel(t, authority, "", true)
		const size = 2 << 20
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", authority, size)
		go func() {
			chunk := make([]byte, 32<<10)
			for sent := 0; sent < size; sent += len(chunk) {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("upload %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "early" {
			t.Errorf("upload %d: %d %q; want the early answer", i, resp.StatusCode, body)
		}
		c.Close()
	}
	for i := range 5 {
		c, br := p.rawTunnel(t, authority, "", true)
		const size = 200 << 10
		fmt.Fprintf(c, "POST /progress HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", authority, size)
		go func() {
			chunk := make([]byte, 8<<10)
			for sent := 0; sent < size; sent += len(chunk) {
				if _, err := c.Write(chunk); err != nil {
					return
				}
				time.Sleep(time.Millisecond) // still uploading when the answer comes
			}
		}()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("progress %d: %v", i, err)
		}
		if n, err := io.Copy(io.Discard, resp.Body); n != progressSize {
			t.Errorf("progress %d: %d of %d bytes of the answer: %v", i, n, progressSize, err)
		}
		c.Close()
	}
	// A 101 to a request that asked for no upgrade is the origin's
	// failure: 502, in a tunnel and as a plain request, not a hang.
	c, br := p.rawTunnel(t, authority, "", true)
	if resp, _ := roundTripRaw(t, c, br, "GET /switch HTTP/1.1\r\nHost: "+authority+"\r\n\r\n"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("unasked 101 in a tunnel: %d; want 502", resp.StatusCode)
	}
	if resp, _ := p.raw(t, "GET http://"+authority+"/switch HTTP/1.1\r\nHost: "+authority+"\r\n\r\n"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("unasked 101 to a plain request: %d; want 502", resp.StatusCode)
	}
	// The proxy is still there.
	c, br = p.rawTunnel(t, authority, "", true)
	if resp, _ := roundTripRaw(t, c, br, "POST /upload HTTP/1.1\r\nHost: "+authority+"\r\nContent-Length: 2\r\n\r\nhi"); resp.StatusCode != 200 {
		t.Errorf("after the uploads: %d", resp.StatusCode)
	}
}

// TestInnerHeadLimits: inside a tunnel, a request head gets the listener's
// limits: too large (431), malformed (400), too slow or idle (closed).
func TestInnerHeadLimits(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, port := innerOrigin(t, pki, nil)
	p := startMITM(t, pki, func(c *config.Config) {
		c.Limits.MaxHeaderBytes = 4 << 10
		c.Limits.ReadHeaderTimeout = time.Second // also the TLS handshake's bound: room for a busy machine's
		c.Limits.TunnelIdleTimeout = 2 * time.Second
	})
	authority := "127.0.0.1:" + port
	for _, tt := range []struct {
		name, send string
		status     int // 0: closed without an answer
	}{
		{"oversized", "GET /a HTTP/1.1\r\nHost: " + authority + "\r\nX-Big: " + strings.Repeat("a", 16<<10) + "\r\n\r\n", 431},
		{"malformed", "GET /a HTTP/1.1\r\nHost: " + authority + "\r\nBad Header\r\n\r\n", 400},
		{"no Host", "GET /a HTTP/1.1\r\n\r\n", 400},
		{"two Hosts", "GET /a HTTP/1.1\r\nHost: " + authority + "\r\nHost: " + authority + "\r\n\r\n", 400},
		{"bad Expect", "GET /a HTTP/1.1\r\nHost: " + authority + "\r\nExpect: magic\r\n\r\n", 417},
		{"HTTP/2 line", "GET /a HTTP/2.0\r\nHost: " + authority + "\r\n\r\n", 505},
		{"bad target", "GET /a\x01b HTTP/1.1\r\nHost: " + authority + "\r\n\r\n", 400},
		{"upgrade with a body", "GET /ws HTTP/1.1\r\nHost: " + authority + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 3\r\n\r\nabc", 400},
		{"slow head", "GET /a HTTP/1.1\r\nHost: ", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, br := p.rawTunnel(t, authority, "127.0.0.1", false)
			io.WriteString(c, tt.send)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			switch {
			case tt.status == 0 && err == nil:
				t.Errorf("%s: %d; want the connection closed", tt.name, resp.StatusCode)
			case tt.status != 0 && (err != nil || resp.StatusCode != tt.status || !resp.Close):
				t.Errorf("%s: %v %v; want %d and Connection: close", tt.name, resp, err, tt.status)
			}
		})
	}
	t.Run("idle", func(t *testing.T) {
		c, br := p.rawTunnel(t, authority, "127.0.0.1", false)
		io.WriteString(c, "GET /a HTTP/1.1\r\nHost: "+authority+"\r\n\r\n")
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("first request: %v %v", resp, err)
		}
		// Until the idle tunnel is closed (EOF: nil), or the connection's
		// own deadline, 10 s after it opened (an error).
		if _, err := io.Copy(io.Discard, br); err != nil {
			t.Errorf("an idle tunnel stayed open: %v", err)
		}
	})
}

// TestInnerClientLeavesWhilePaced: a request inside a tunnel that waits
// for its turn is dropped when its client leaves: it leaves the queue
// (its turn goes to the next request: the pacer's own tests show that on
// a virtual clock), the origin never gets it, and a request that waits
// longer than the head's deadline is not taken for one whose client left.
// Each step waits for what the proxy recorded (the pacer's queue, the
// audit log), never for time to pass.
func TestInnerClientLeavesWhilePaced(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, "User-agent: *\nCrawl-delay: 3\n", "127.0.0.1")
	p := startMITM(t, pki, func(c *config.Config) {
		c.Politeness.CrawlDelay = true
		// Shorter than the third request's wait, which must not be taken
		// for its client leaving; long enough for a TLS handshake on a
		// busy machine.
		c.Limits.ReadHeaderTimeout = time.Second
	})
	authority := "127.0.0.1:" + port
	host := "Host: " + authority + "\r\n"
	c1, br1 := p.rawTunnel(t, authority, "127.0.0.1", false)
	if resp, _ := roundTripRaw(t, c1, br1, "GET /first HTTP/1.1\r\n"+host+"\r\n"); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	// The second waits for the crawl delay (3 s); its client leaves.
	c2, _ := p.rawTunnel(t, authority, "127.0.0.1", false)
	io.WriteString(c2, "GET /left HTTP/1.1\r\n"+host+"\r\n")
	waitQueued(t, p.srv.pacer, "127.0.0.1", 1)
	c2.Close()
	waitQueued(t, p.srv.pacer, "127.0.0.1", 0) // it left the queue: no turn kept
	waitForLog(t, p.audit, "client left while waiting for its turn")
	// The third waits for the turn the second left, past the head's
	// deadline, and is served.
	if resp, _ := roundTripRaw(t, c1, br1, "GET /third HTTP/1.1\r\n"+host+"\r\n"); resp.StatusCode != 200 {
		t.Fatalf("third: %d", resp.StatusCode)
	}
	if o.count("/left") != 0 || o.count("/third") != 1 {
		t.Errorf("origin hits: /left %d, /third %d; want 0 and 1", o.count("/left"), o.count("/third"))
	}
}
