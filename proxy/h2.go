package proxy

//lint:file-ignore SA1019 x/net's http2.Server is deprecated for net/http's own, which serves only from its listener; ServeConn is how one TLS connection a tunnel already terminated is served (x/net keeps it working). Moving to http.Server.Serve over a one-connection listener is the next step.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/wire"
)

// h2MaxConcurrentStreams bounds the streams a client may have open at once
// on one MITM connection (net/http's default, 250, is a browser's need
// and more): past it a stream is refused, and x/net's rapid-reset defence
// ends a connection that keeps more than four times as many handlers
// queued.
const h2MaxConcurrentStreams = 100

// serveH2 serves the HTTP/2 streams of a decrypted MITM connection whose
// client chose h2 by ALPN, until it ends: each stream is a request handed
// to serveInner, the one hook h1's loop calls, so that it is decided,
// paced, signed, audited and answered as an HTTP/1.1 request is. ctx
// carries the tunnel's connectInfo (its :authority is held to the CONNECT
// host by the decision, 421 otherwise, as a Host header is); remoteAddr
// is every request's RemoteAddr. The protections are x/net's server's,
// to [limits]: the header list size (max_header_bytes, also the HPACK
// table bound), the stream count, idle_timeout for a request body's
// progress, tunnel_idle_timeout between requests, read_header_timeout for
// the connection preface; rapid resets and CONTINUATION floods end the
// connection with GOAWAY.
func (s *Server) serveH2(ctx context.Context, conn *tls.Conn, remoteAddr string, lim config.LimitsConfig) {
	defer conn.Close()
	conn.SetReadDeadline(time.Time{})
	srv := &http2.Server{
		MaxConcurrentStreams: h2MaxConcurrentStreams,
		// The HPACK table a client may make the proxy keep: no more than
		// the header bytes it may send.
		MaxDecoderHeaderTableSize: uint32(min(lim.MaxHeaderBytes, 1<<16)),
		IdleTimeout:               lim.TunnelIdleTimeout,
		CountError: func(errType string) {
			s.log.Debug("tunnel: h2 connection error", "type", errType, "client", remoteAddr)
		},
	}
	srv.ServeConn(conn, &http2.ServeConnOpts{
		Context: ctx,
		// MaxHeaderBytes is the SETTINGS_MAX_HEADER_LIST_SIZE sent and
		// enforced (a CONTINUATION flood is cut at it).
		// Its ErrorLog has a client's protocol errors: debug.
		BaseConfig: &http.Server{MaxHeaderBytes: lim.MaxHeaderBytes, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.serveStream(w, r, remoteAddr, lim.IdleTimeout)
		}),
	})
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
	writeStream(w, r, resp)
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
// without HTTP/1.1's connection-specific fields (which h2 forbids), the
// length when known, the body flushed as it arrives, then the trailer. A
// 101 (a WebSocket, which an h2 request cannot ask for) is answered 502.
func writeStream(w http.ResponseWriter, r *http.Request, resp *http.Response) {
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
	ctl := http.NewResponseController(w)
	if _, err := wire.CopyFlushing(w, ctl.Flush, resp.Body, resp.ContentLength); err != nil {
		panic(http.ErrAbortHandler) // a body cut short: the stream is reset, not ended as if whole
	}
	for k, vv := range resp.Trailer { // as h1's loop writes it: forward has filtered it
		h[http.TrailerPrefix+k] = vv
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
