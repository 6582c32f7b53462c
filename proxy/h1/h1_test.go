package h1

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// seen is what a server's handler saw of a request: enough to tell two
// readings of the same bytes apart.
type seen struct {
	method, target, proto, host string
	header                      http.Header
	contentLength               int64
	transferEncoding            []string
	close                       bool
	body                        string
	bodyErr                     bool
	trailer                     http.Header
}

func (s *seen) String() string {
	return fmt.Sprintf("%s %q %s host %q cl %d te %q close %v header %v body %q (err %v) trailer %v",
		s.method, s.target, s.proto, s.host, s.contentLength, s.transferEncoding, s.close, s.header, s.body, s.bodyErr, s.trailer)
}

// record reads a request as a handler sees it, body and trailer included,
// and closes the body, as a proxy's Transport does.
func record(r *http.Request) *seen {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	r.Body.Close()
	h := r.Header.Clone()
	return &seen{
		method: r.Method, target: r.RequestURI, proto: r.Proto, host: r.Host, header: h,
		contentLength: r.ContentLength, transferEncoding: slices.Clone(r.TransferEncoding), close: r.Close,
		body: string(b), bodyErr: err != nil, trailer: r.Trailer.Clone(),
	}
}

// memConn is a connection that reads in and takes whatever is written.
type memConn struct {
	in     *bytes.Reader
	out    bytes.Buffer
	mu     sync.Mutex
	closed chan struct{}
	once   sync.Once
}

func newMemConn(in []byte) *memConn {
	return &memConn{in: bytes.NewReader(in), closed: make(chan struct{})}
}

func (c *memConn) Read(p []byte) (int, error) { return c.in.Read(p) }
func (c *memConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}
func (c *memConn) Close() error                     { c.once.Do(func() { close(c.closed) }); return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// limits are the test's: net/http's server gets the same.
var limits = Limits{ReadHeaderTimeout: time.Second, MaxHeaderBytes: 4 << 10, IdleTimeout: time.Second, TunnelIdleTimeout: time.Second}

// serveH1 serves in on Serve and returns what the handler saw of the
// first request, if it saw one.
func serveH1(in []byte) *seen {
	var first *seen
	c := newMemConn(in)
	Serve(c, Options{Scheme: "http", Authority: "tunnel.example"}, limits, func(r *http.Request) *http.Response {
		if first == nil {
			first = record(r)
		}
		return &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}, Body: http.NoBody}
	})
	return first
}

// oneConn is a listener of one connection.
type oneConn struct {
	c    net.Conn
	used bool
	done chan struct{}
}

func (l *oneConn) Accept() (net.Conn, error) {
	if !l.used {
		l.used = true
		return l.c, nil
	}
	<-l.done
	return nil, errors.New("closed")
}
func (l *oneConn) Close() error   { return nil }
func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }

// serveNetHTTP serves in on net/http's server and returns what its
// handler saw of the first request, if it saw one.
func serveNetHTTP(in []byte) *seen {
	var first *seen
	var mu sync.Mutex
	c := newMemConn(in)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s := record(r)
			mu.Lock()
			if first == nil {
				first = s
			}
			mu.Unlock()
		}),
		ReadHeaderTimeout: limits.ReadHeaderTimeout,
		MaxHeaderBytes:    limits.MaxHeaderBytes,
		ErrorLog:          nil,
	}
	srv.SetKeepAlivesEnabled(true)
	l := &oneConn{c: c, done: c.closed}
	srv.Serve(l)
	mu.Lock()
	defer mu.Unlock()
	return first
}

// knownDifference reports whether net/http's reading of a request is one
// Serve refuses on purpose: an HTTP/2 preface (net/http hands "PRI *
// HTTP/2.0" to a handler, for h2c), and an upgrade request with a body
// (its body would be read upstream while a relay reads the connection).
func knownDifference(std *seen) bool {
	if std.proto == "HTTP/2.0" {
		return true
	}
	upgrade := false
	for _, v := range std.header.Values("Upgrade") {
		upgrade = upgrade || strings.Contains(strings.ToLower(v), "websocket")
	}
	return upgrade && (std.contentLength != 0 || len(std.transferEncoding) > 0)
}

// compare fails t when Serve and net/http's server read in differently:
// one refuses what the other serves, or both serve it and see another
// method, target, host, headers, framing or body.
func compare(t *testing.T, in []byte) {
	t.Helper()
	got, std := serveH1(in), serveNetHTTP(in)
	switch {
	case got == nil && std == nil:
	case std != nil && knownDifference(std):
	case got == nil || std == nil:
		t.Fatalf("%q:\nServe:    %v\nnet/http: %v", in, got, std)
	default:
		if got.method != std.method || got.target != std.target || got.proto != std.proto || got.host != std.host ||
			got.contentLength != std.contentLength || !slices.Equal(got.transferEncoding, std.transferEncoding) ||
			got.close != std.close || got.body != std.body || got.bodyErr != std.bodyErr ||
			!maps.EqualFunc(got.header, std.header, slices.Equal) || !maps.EqualFunc(got.trailer, std.trailer, slices.Equal) {
			t.Fatalf("%q:\nServe:    %v\nnet/http: %v", in, got, std)
		}
	}
}

// readingSeeds are requests that exercise the readings of a head and its
// framing where servers have differed.
var readingSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET http://a/x HTTP/1.1\r\n\r\n", // absolute-form, no Host: net/http refuses
	"GET http://a/x HTTP/1.1\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.0\r\n\r\n",
	"GET / HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
	"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
	"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, x\r\nContent-Length: 2\r\n\r\nhi",
	"GET / HTTP/1.1\r\nHost: a\r\nExpect: something\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
	"CONNECT a:443 HTTP/1.1\r\n\r\n",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX\x7f: 1\r\n\r\n",
	"GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\nHost: a\n\n",
	"get / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-Long: "+strings.Repeat("x", 100)+"\r\n", 80) + "\r\n", // past the header bound
}

// TestServeReadsAsNetHTTP: Serve reads each seed as net/http's server
// reads it.
func TestServeReadsAsNetHTTP(t *testing.T) {
	t.Parallel()
	for _, s := range readingSeeds {
		compare(t, []byte(s))
	}
}

// FuzzServe: on any bytes, what Serve refuses net/http's server refuses
// and what both accept they read alike (method, target, headers, framing
// and body), but for knownDifference's deliberate refusals.
func FuzzServe(f *testing.F) {
	for _, s := range readingSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 16<<10 {
			return
		}
		compare(t, in)
	})
}
