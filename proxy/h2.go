package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/wire"
)

// h2MaxConcurrentStreams bounds the streams a client may have open at once
// on one MITM connection (net/http's default, 250, is a browser's need
// and more): past it a stream is refused, and net/http's rapid-reset
// defence ends a connection that keeps more than four times as many
// handlers queued.
const h2MaxConcurrentStreams = 100

// serveH2 serves the HTTP/2 streams of a decrypted MITM connection whose
// client chose h2 by ALPN, until it ends: each stream is a request handed
// to serveInner, the one hook h1's loop calls, so that it is decided,
// paced, signed, audited and answered as an HTTP/1.1 request is. ctx
// carries the tunnel's connectInfo (its :authority is held to the CONNECT
// host by the decision, 421 otherwise, as a Host header is); remoteAddr
// is every request's RemoteAddr. The server is net/http's own, an
// http.Server for this one connection (served from a listener that hands
// it out once), and its protections are net/http's, to [limits]: the
// header list size (max_header_bytes, also the HPACK table bound), the
// stream count, idle_timeout for a request body's progress,
// tunnel_idle_timeout between requests, read_header_timeout for the
// connection preface; rapid resets and CONTINUATION floods end the
// connection with GOAWAY.
func (s *Server) serveH2(ctx context.Context, conn *tls.Conn, remoteAddr string, lim config.LimitsConfig) {
	ln := newOneConnListener(conn)
	if lim.ReadHeaderTimeout > 0 {
		// The preface is the connection's first header: net/http's own
		// bound on it is a fixed 10 s. ln.state lifts this once it is read.
		conn.SetReadDeadline(time.Now().Add(lim.ReadHeaderTimeout))
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.serveStream(w, r, remoteAddr, lim.IdleTimeout)
		}),
		Protocols: h2Only(), // a connection that did not choose h2 by ALPN never reaches it
		// OPTIONS * is the origin's to answer, decided as over HTTP/1.1,
		// not net/http's.
		DisableGeneralOptionsHandler: true,
		// SETTINGS_MAX_HEADER_LIST_SIZE, sent and enforced (a
		// CONTINUATION flood is cut at it).
		MaxHeaderBytes: lim.MaxHeaderBytes,
		IdleTimeout:    lim.TunnelIdleTimeout,
		// A client's protocol errors: debug.
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext: func(net.Listener) context.Context { return ctx },
		ConnState:   ln.state,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: h2MaxConcurrentStreams,
			// The HPACK table a client may make the proxy keep: no more
			// than the header bytes it may send.
			MaxDecoderHeaderTableSize: min(lim.MaxHeaderBytes, 1<<16),
			// A connection the client does not drain: closed once nothing
			// of what is ready for it could be written for idle_timeout.
			WriteByteTimeout: lim.IdleTimeout,
			CountError: func(errType string) {
				s.log.Debug("tunnel: h2 connection error", "type", errType, "client", remoteAddr)
			},
		},
	}
	srv.Serve(ln) // returns once the connection is closed
}

// h2Only is the protocols of HTTP/2 over TLS alone.
func h2Only() *http.Protocols {
	var p http.Protocols
	p.SetHTTP2(true)
	return &p
}

// oneConnListener hands out one connection, already handshaken, then
// blocks until that connection has been closed (http.Server's ConnState
// says so), so that Serve returns only then.
type oneConnListener struct {
	conn    *tls.Conn
	next    chan *tls.Conn // holds conn until it is accepted
	closed  chan struct{}  // closed with the connection, or the listener
	once    sync.Once
	preface atomic.Bool // the preface was read: its deadline is lifted
}

func newOneConnListener(conn *tls.Conn) *oneConnListener {
	l := &oneConnListener{conn: conn, next: make(chan *tls.Conn, 1), closed: make(chan struct{})}
	l.next <- conn
	return l
}

// Accept returns the connection the first time, then net.ErrClosed once
// it has been closed.
func (l *oneConnListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.next:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close ends Accept's wait; it leaves the connection to its server.
func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr is the connection's local address.
func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

// state is the server's ConnState hook: the first Active follows the
// preface (its read deadline is lifted: from then on the server keeps
// time), Closed ends the listener.
func (l *oneConnListener) state(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateActive:
		if l.preface.CompareAndSwap(false, true) {
			l.conn.SetReadDeadline(time.Time{})
		}
	case http.StateClosed:
		l.Close()
	}
}

// serveStream answers one h2 stream through serveInner, as h1's loop
// answers a request: the URL made absolute (scheme https, the
// :authority as its host), a body's progress held to idle, a panic a 500.
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, remoteAddr string, idle time.Duration) {
	s.tunnelRequests.Add(1)
	defer s.tunnelRequests.Add(-1)
	r.URL.Scheme = "https"
	if r.URL.Host = r.Host; r.URL.Host == "" {
		ci, _ := r.Context().Value(connectKey{}).(*connectInfo)
		r.URL.Host = ci.tunnel.Authority
	}
	r.RemoteAddr = remoteAddr
	if r.Body != http.NoBody {
		if r.ContentLength < 0 {
			// Content without a length: in HTTP/1.1 it would be chunked,
			// and is decided as such (a GET with content is refused).
			r.TransferEncoding = []string{"chunked"}
		}
		body := &h2Body{rc: r.Body, ctl: http.NewResponseController(w), idle: idle}
		defer body.end()
		r.Body = body
	}
	resp := s.answerStream(r)
	writeStream(w, r, resp, idle)
}

// answerStream is serveInner's answer to r, with a 500 in place of a
// panic (as h1's loop answers one).
func (s *Server) answerStream(r *http.Request) (resp *http.Response) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("panic serving request", "panic", fmt.Sprint(v), "method", r.Method, "url", r.URL.Redacted())
			resp = plainResponse(http.StatusInternalServerError, "robotsgate: internal error\n")
		}
	}()
	return s.serveInner(r)
}

// plainResponse is a text/plain answer of status with body.
func plainResponse(status int, body string) *http.Response {
	return &http.Response{
		StatusCode: status, ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
	}
}

// writeStream sends resp on an h2 stream and closes its body: the header
// without HTTP/1.1's connection-specific fields (which h2 forbids) and
// with nothing net/http would add (a sniffed Content-Type, a Date), the
// length when known, the body flushed as it arrives and at its end, then
// the trailer. Each write must make progress within idle, or the stream
// is reset (see stallGuard); a header alone, which flow control does not
// hold, goes as the handler returns. A 101 (a WebSocket, which an h2 request
// cannot ask for) is answered 502.
func writeStream(w http.ResponseWriter, r *http.Request, resp *http.Response, idle time.Duration) {
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.StatusCode < 200 {
		http.Error(w, "robotsgate: no protocol switch over HTTP/2", http.StatusBadGateway)
		return
	}
	h := w.Header()
	for k, vv := range resp.Header {
		switch http.CanonicalHeaderKey(k) {
		case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Content-Length", "Trailer":
			continue
		}
		h[k] = vv
	}
	// The origin's fields and no others, as over HTTP/1.1: net/http adds
	// a Content-Type it sniffs (charset=utf-8, which changes how a
	// browser decodes a Latin-1 page) and a Date unless the key is there;
	// there with no value, it adds neither and sends nothing.
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil
	}
	if _, ok := h["Date"]; !ok {
		h["Date"] = nil
	}
	code := resp.StatusCode
	bodyAllowed := r.Method != http.MethodHead && code != http.StatusNoContent && code != http.StatusNotModified
	if resp.ContentLength >= 0 && (bodyAllowed || r.Method == http.MethodHead) {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	} else if code == http.StatusNotModified {
		if cl := resp.Header.Get("Content-Length"); cl != "" {
			h.Set("Content-Length", cl)
		}
	}
	w.WriteHeader(code)
	if !bodyAllowed {
		return
	}
	var dst io.Writer = w
	var flush func() error
	if g := newStallGuard(w, idle); g != nil {
		defer g.end()
		dst, flush = g, g.flush
	} else {
		flush = http.NewResponseController(w).Flush
	}
	n, err := wire.CopyFlushing(dst, flush, resp.Body, resp.ContentLength)
	if err != nil || n > 0 && flush() != nil {
		panic(http.ErrAbortHandler) // a body cut short: the stream is reset, not ended as if whole
	}
	for k, vv := range resp.Trailer { // as h1's loop writes it: forward has filtered it
		h[http.TrailerPrefix+k] = vv
	}
}

// stallGuard is an h2 stream's response writer that resets the stream
// when a write or flush makes no progress for idle ([limits]
// idle_timeout): a client that stops reading, by a zero flow-control
// window or by not draining the connection, would hold the handler, the
// response's buffers and the upstream connection for as long as it liked.
// Only the time spent writing counts, never the time waiting for the
// origin. The body's last bytes are flushed through it too, before the
// handler returns: net/http would write them after, unguarded. Guards
// and their timers are pooled: one that may still fire is not reused.
type stallGuard struct {
	w     h2Writer
	idle  time.Duration
	timer *time.Timer // armed during a write; nil: no bound
	fired bool        // a Stop came too late: the timer may yet run

	mu    sync.Mutex
	ended bool // the handler is returning: the ResponseWriter is not to be used
}

// h2Writer is what net/http's h2 ResponseWriter is, asked directly (a
// ResponseController would be allocated per stream).
type h2Writer interface {
	http.ResponseWriter
	FlushError() error
	SetWriteDeadline(time.Time) error
}

var stallGuards sync.Pool

// newStallGuard guards w, or returns nil if w is not net/http's h2
// ResponseWriter or idle is 0: nothing is bounded.
func newStallGuard(w http.ResponseWriter, idle time.Duration) *stallGuard {
	hw, ok := w.(h2Writer)
	if !ok || idle <= 0 {
		return nil
	}
	g, _ := stallGuards.Get().(*stallGuard)
	if g == nil {
		g = &stallGuard{}
		g.timer = time.AfterFunc(time.Hour, g.stalled)
		g.timer.Stop()
	}
	g.mu.Lock()
	g.w, g.idle, g.ended = hw, idle, false
	g.mu.Unlock()
	return g
}

// stalled resets the stream: a write deadline already past.
func (g *stallGuard) stalled() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.ended {
		g.w.SetWriteDeadline(time.Unix(1, 0))
	}
}

// arm starts the timer for one write.
func (g *stallGuard) arm() { g.timer.Reset(g.idle) }

// disarm stops the timer, noting whether it had fired.
func (g *stallGuard) disarm() {
	if !g.timer.Stop() {
		g.fired = true
	}
}

// Write writes p to the stream, the timer armed while it does.
func (g *stallGuard) Write(p []byte) (int, error) {
	g.arm()
	defer g.disarm()
	return g.w.Write(p)
}

// flush flushes the stream, the timer armed while it does.
func (g *stallGuard) flush() error {
	g.arm()
	defer g.disarm()
	return g.w.FlushError()
}

// end says the handler is returning; g is not to be used after.
func (g *stallGuard) end() {
	g.mu.Lock()
	g.ended, g.w = true, nil
	g.mu.Unlock()
	if !g.fired {
		stallGuards.Put(g)
	}
}

// h2Body is an h2 request's body: each read must make progress within
// idle ([limits] idle_timeout), as h1's loop holds a body to it, or it
// ends with a timeout, which forward answers as a stalled body. The
// deadline is set through the stream's ResponseWriter, which x/net
// forgets once the handler returns, while the upstream transport may
// still be reading the body (a request sent while its answer was given):
// after end, a read sets no deadline.
type h2Body struct {
	rc   io.ReadCloser
	ctl  *http.ResponseController
	idle time.Duration

	mu    sync.Mutex
	ended bool // the stream's handler has returned (end)
}

func (b *h2Body) Read(p []byte) (int, error) {
	if b.idle > 0 {
		b.mu.Lock()
		if !b.ended {
			b.ctl.SetReadDeadline(time.Now().Add(b.idle))
		}
		b.mu.Unlock()
	}
	return b.rc.Read(p)
}

// end says the stream's handler is returning: the ResponseWriter is not
// to be used again.
func (b *h2Body) end() {
	b.mu.Lock()
	b.ended = true
	b.mu.Unlock()
}

func (b *h2Body) Close() error { return b.rc.Close() }
