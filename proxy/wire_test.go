package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// wireRobots is the robots.txt of the wire-level tests.
const wireRobots = "User-agent: *\nDisallow: /private\n"

// wireOrigin is an origin that logs every byte it receives and reads
// requests as careless servers do: it reads request heads only, skipping
// the content of GET, HEAD, DELETE, TRACE and OPTIONS requests (as
// Python's http.server does) or, with ignoreAll, of every request, so that
// content holding a request is read as one; it keeps every connection
// open and answers each head "answer to <target>", in order. The answer
// to a head under /private waits until the connection carries more (the
// next request), as a slow page's would: so that on a pooled connection
// it is taken for the answer to that next request.
type wireOrigin struct {
	addr      string // host:port
	ignoreAll atomic.Bool

	mu     sync.Mutex
	got    bytes.Buffer // every byte received, on every connection (decrypted)
	raw    bytes.Buffer // every byte received on the wire, before any TLS
	heads  []string     // request lines read
	closed atomic.Int64 // connections the peer closed
	extra  string       // header lines added to every answer
}

// newWireOrigin starts one on a loopback port; TLS with a certificate
// from pki for names when pki is set.
func newWireOrigin(t testing.TB, pki *testPKI, names ...string) *wireOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startWireOrigin(t, ln, pki, names...)
}

// port80Hosts hands each test that needs port 80 a loopback address of
// its own (127.0.81.1, 127.0.81.2, ...), so that they run in parallel.
var port80Hosts atomic.Int64

// newWireOrigin80 starts a plain one on port 80 of a loopback address of
// its own: tunnel mode decides a CONNECT to any other port by its https
// robots.txt. Root (as CI runs) may bind it; elsewhere the test is
// skipped.
func newWireOrigin80(t testing.TB) *wireOrigin {
	t.Helper()
	n := port80Hosts.Add(1)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.81.%d:80", n))
	if err != nil {
		t.Skipf("cannot listen on port 80 here (%v): a tunnel-mode test of plain HTTP needs it", err)
	}
	return startWireOrigin(t, ln, nil)
}

// startWireOrigin serves a wireOrigin on ln.
func startWireOrigin(t testing.TB, ln net.Listener, pki *testPKI, names ...string) *wireOrigin {
	o := &wireOrigin{addr: ln.Addr().String()}
	ln = &rawLogListener{Listener: ln, o: o}
	if pki != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{pki.serverCert(t, names...)}})
	}
	serveConns(t, ln, o.serve)
	return o
}

// serveConns hands each connection ln accepts to serve, on a goroutine of
// its own, until the test ends; then it closes ln and every connection
// still open (the proxy may keep one to the origin in its pool: closed
// here, not waited for until its deadline), and waits for them.
func serveConns(t testing.TB, ln net.Listener, serve func(net.Conn)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(c)
			}()
		}
	}()
}

// port is the origin's port.
func (o *wireOrigin) port() string {
	_, port, _ := net.SplitHostPort(o.addr)
	return port
}

// rawLogListener logs every byte its connections receive into o.raw.
type rawLogListener struct {
	net.Listener
	o *wireOrigin
}

func (l *rawLogListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &rawLogConn{Conn: c, o: l.o}, nil
}

type rawLogConn struct {
	net.Conn
	o *wireOrigin
}

func (c *rawLogConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.o.mu.Lock()
	c.o.raw.Write(p[:n])
	c.o.mu.Unlock()
	return n, err
}

// receivedRaw returns every byte received on the wire so far.
func (o *wireOrigin) receivedRaw() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.raw.String()
}

type logWriter struct{ o *wireOrigin }

func (w logWriter) Write(p []byte) (int, error) {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	return w.o.got.Write(p)
}

func (o *wireOrigin) serve(c net.Conn) {
	c.SetDeadline(time.Now().Add(20 * time.Second)) // every test ends sooner
	br := bufio.NewReader(io.TeeReader(c, logWriter{o}))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			o.closed.Add(1)
			return
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			continue // the blank line after a body read as a head's end
		}
		h := http.Header{}
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				o.closed.Add(1)
				return
			}
			l = strings.TrimRight(l, "\r\n")
			if l == "" {
				break
			}
			k, v, _ := strings.Cut(l, ":")
			h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
		method, rest, _ := strings.Cut(line, " ")
		target, _, _ := strings.Cut(rest, " ")
		o.mu.Lock()
		o.heads = append(o.heads, line)
		o.mu.Unlock()
		if !o.ignoreAll.Load() && !policy.ContentWithoutMeaning(method, h.Get("Content-Type") != "") {
			switch {
			case strings.EqualFold(h.Get("Transfer-Encoding"), "chunked"):
				if _, err := io.Copy(io.Discard, httputil.NewChunkedReader(br)); err != nil {
					o.closed.Add(1)
					return
				}
				for { // the trailer, up to its blank line
					l, err := br.ReadString('\n')
					if err != nil || strings.TrimRight(l, "\r\n") == "" {
						break
					}
				}
			case h.Get("Content-Length") != "":
				n, _ := strconv.Atoi(h.Get("Content-Length"))
				if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
					o.closed.Add(1)
					return
				}
			}
		}
		if strings.Contains(target, "/private") && br.Buffered() == 0 {
			if _, err := br.Peek(1); err != nil { // the connection ended: the answer reaches nobody
				o.closed.Add(1)
				return
			}
		}
		body := "answer to " + target + "\n"
		if strings.HasSuffix(target, "/robots.txt") {
			body = wireRobots
		}
		o.mu.Lock()
		extra := o.extra
		o.mu.Unlock()
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n%sContent-Length: %d\r\n\r\n%s", extra, len(body), body)
	}
}

// received returns every byte received so far.
func (o *wireOrigin) received() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.got.String()
}

// entryPath is one way a request reaches robotsgate: a client connection
// on which to write raw requests, and how to name a path in them.
type entryPath struct {
	name string
	// open returns a new client connection, ready for requests to o.
	open func(t *testing.T, p *testProxy, o *wireOrigin) (net.Conn, *bufio.Reader)
	// target is how a request line names path on o (absolute-form for a
	// plain proxy request).
	target func(o *wireOrigin, path string) string
	tls    bool // the origin speaks TLS
	tunnel bool // needs [tls] mode = "tunnel"
}

// entryPaths are the ways in: plain proxy requests, requests inside a
// MITM tunnel, and plain HTTP inside a CONNECT in MITM and tunnel mode.
var entryPaths = []entryPath{
	{
		name: "plain",
		open: func(t *testing.T, p *testProxy, _ *wireOrigin) (net.Conn, *bufio.Reader) {
			c, err := net.Dial("tcp", p.url.Host)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c, bufio.NewReader(c)
		},
		target: func(o *wireOrigin, path string) string { return "http://" + o.addr + path },
	},
	{
		name: "mitm",
		open: func(t *testing.T, p *testProxy, o *wireOrigin) (net.Conn, *bufio.Reader) {
			return p.rawTunnel(t, o.addr, "127.0.0.1", false)
		},
		target: func(_ *wireOrigin, path string) string { return path },
		tls:    true,
	},
	{
		name: "http-in-connect",
		open: func(t *testing.T, p *testProxy, o *wireOrigin) (net.Conn, *bufio.Reader) {
			return p.rawTunnel(t, o.addr, "", true)
		},
		target: func(_ *wireOrigin, path string) string { return path },
	},
	{
		name: "http-in-connect-tunnel-mode",
		open: func(t *testing.T, p *testProxy, o *wireOrigin) (net.Conn, *bufio.Reader) {
			return p.rawTunnel(t, o.addr, "", true)
		},
		target: func(_ *wireOrigin, path string) string { return path },
		tunnel: true,
	},
}

// setUp starts an origin and a proxy for e.
func (e *entryPath) setUp(t *testing.T, mutate func(*config.Config)) (*testProxy, *wireOrigin) {
	t.Helper()
	var pki *testPKI
	if e.tls {
		pki = newTestPKI(t)
	}
	var o *wireOrigin
	if e.tunnel {
		o = newWireOrigin80(t)
	} else {
		o = newWireOrigin(t, pki, "127.0.0.1")
	}
	p := startMITM(t, pki, func(c *config.Config) {
		if e.tunnel {
			c.TLS.Mode = "tunnel"
		}
		if mutate != nil {
			mutate(c)
		}
	})
	return p, o
}

// send writes a raw request and reads its answer, within a bound.
func send(t *testing.T, c net.Conn, br *bufio.Reader, request string) (*http.Response, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	return roundTripRaw(t, c, br, request)
}
