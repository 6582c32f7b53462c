// Package h1 serves the HTTP/1.x requests inside a tunnel, one after
// another on the connection, each to a Handler whose response it writes:
// robotsgate's MITM tunnels (decrypted) and plain HTTP inside a CONNECT.
// It is hardened as net/http's server is, to the same limits (see Serve),
// with less machinery per request; FuzzServe compares its reading of
// every input with net/http's server.
package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
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

	"golang.org/x/net/http/httpguts"

	"github.com/robotsgate/robotsgate/proxy/header"
	"github.com/robotsgate/robotsgate/proxy/wire"
)

// Why not an http.Server per tunnel: that server's per-request machinery (a
// cancellable context, a background read of the connection, deadlines set
// six times, a header map copied into its own) cost about a tenth of a
// kept-alive MITM request. What it gave is kept, to the same limits as the
// proxy's own listener: the header timeout and size limit (408 is not
// sent: the connection is closed, as net/http does), the idle timeout
// between requests, the validation of request heads (400), Expect:
// 100-continue, keep-alive and Connection: close, HTTP/1.0 clients,
// streamed bodies sent as they arrive, trailers, WebSocket upgrades, and
// a 500 rather than a panic. A client that leaves while its request waits
// (for pacing, a back-off or a robots.txt fetch) is noticed, as net/http
// notices it: see watchCtx.

// Handler answers one request; Serve writes the response it returns and
// closes its body. The request's context ends when the client leaves
// while something waits on it (see Serve). The request's body may be read
// after Handler returns, while the response is written (a proxy's
// upload streaming while its answer does), until it is closed: a
// RoundTripper always closes it, and a Handler that passes it to none
// must close it itself before it returns. Serve waits for a body that is
// neither closed nor read to its end, at most ReadHeaderTimeout after
// the response, before it reads the next request.
type Handler func(r *http.Request) *http.Response

// Limits bound a connection's requests, as [limits] bounds the listener's.
type Limits struct {
	ReadHeaderTimeout time.Duration // to read a request head
	MaxHeaderBytes    int           // a request head's size (and net/http's 4 KiB of slack)
	// A request body that makes no progress this long ends the request;
	// a write to the client that makes none ends the connection.
	IdleTimeout       time.Duration
	TunnelIdleTimeout time.Duration // between requests, and a WebSocket with no traffic either way
}

// Options say what Serve gives each request, and how it ends the
// connection.
type Options struct {
	Scheme     string          // the scheme of every request's URL ("https" decrypted, "http")
	Authority  string          // the URL's host when a request names none
	RemoteAddr string          // every request's RemoteAddr
	Context    context.Context // the requests' contexts derive from it (for its values); nil: Background
	Logger     *slog.Logger    // a handler's panic is logged here; nil: discarded
	// OnUpgrade, if set, is called as a WebSocket begins to be relayed
	// (to idle-time the client's connection as a tunnel's).
	OnUpgrade func()
	// CloseWrite, if set, ends the sending side of the client's
	// connection when conn is not a *tls.Conn (see closeLingering).
	CloseWrite func() error
	// Active, if set, counts the requests being served, from when a head
	// is read to when its response is written: what a shutdown waits for
	// (http.Server.Shutdown does not see hijacked connections).
	Active *atomic.Int64
}

// innerConn is one connection, with what serving its requests needs.
type innerConn struct {
	conn    net.Conn // decrypted (MITM) or as it is (plain HTTP in a tunnel)
	in      *innerReader
	br      *bufio.Reader // over in
	bw      *bufio.Writer // over out
	out     stallWriter   // conn, each write held to IdleTimeout
	opts    Options
	handler Handler
	lim     Limits
	ctx     context.Context // the requests' contexts derive from it

	wmu         sync.Mutex // serialises a 100 Continue with the response head
	headWritten bool       // the current request's final response head is written (under wmu)
	failed      bool       // a request's handling panicked: the connection ends after its 500
	lastMethod  string     // the method of the request before this one
	head        []byte     // the head being read, as read (see readRequest)
	body        *innerBody // the current request's body; nil if it has none
	linger      bool       // the client may still be sending: close as net/http does (see closeLingering)
}

// innerBufs pools the buffered readers and writers of tunnels' connections,
// 4 KiB each as net/http's, so that a tunnel per request does not allocate
// them each time.
var (
	innerReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	innerWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
)

// Serve serves the HTTP/1.x requests on conn, one after another, each to
// h, until the client leaves, a request or response ends the connection,
// or a limit is reached; then it closes conn. What it keeps of net/http's
// server, to the same limits: the header timeout and size limit (a head
// past the size is answered 431; a slow one gets no answer, the
// connection is closed), the idle timeout between requests, net/http's
// checks of a request head (400; HTTP/2's preface in the clear, h2c, is
// logged and the connection closed), Expect: 100-continue, keep-alive and
// Connection: close, HTTP/1.0 clients, request bodies that stall for
// IdleTimeout ended, streamed response bodies sent as they arrive,
// trailers, WebSocket upgrades (relayed, then the connection ends), and a
// 500 rather than a panic. A client that leaves while its request waits
// is noticed, as net/http notices it: see watchCtx.
func Serve(conn net.Conn, opts Options, lim Limits, h Handler) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	ic := &innerConn{
		conn: conn, in: &innerReader{conn: conn, limit: -1},
		opts: opts, handler: h, lim: lim, ctx: opts.Context,
	}
	ic.br = innerReaders.Get().(*bufio.Reader)
	ic.br.Reset(ic.in)
	ic.out = stallWriter{conn: conn, idle: lim.IdleTimeout}
	ic.bw = innerWriters.Get().(*bufio.Writer)
	ic.bw.Reset(&ic.out)
	defer func() {
		if ic.linger {
			ic.closeLingering()
		}
		conn.Close() // a TLS connection ends with its close_notify: a body sent until the end is then known to be whole
		if ic.body != nil {
			ic.body.finish() // waits out a read of the Transport's, which the close has ended, before the reader is reused
		}
		ic.br.Reset(nil)
		innerReaders.Put(ic.br)
		ic.bw.Reset(nil)
		innerWriters.Put(ic.bw)
	}()
	for first := true; ; first = false {
		if !ic.serveOne(first) {
			return
		}
	}
}

// serveOne reads one request and answers it; it reports whether the
// connection can carry another.
func (ic *innerConn) serveOne(first bool) bool {
	r, status, why := ic.readRequest(first)
	if r == nil {
		if status != 0 {
			ic.writeError(status, why)
		}
		return false
	}
	if a := ic.opts.Active; a != nil {
		a.Add(1)
		defer a.Add(-1)
	}
	clientClose := r.Close // the client's own word on this connection (what goes upstream is a clone whose Close forward sets)
	watch := newWatchCtx(ic, r.Body == http.NoBody && ic.br.Buffered() == 0)
	ic.body = nil
	if r.Body != http.NoBody {
		ic.body = newInnerBody(ic, r)
		r.Body = ic.body
	}
	// In place: the body of http.ReadRequest merges a trailer it did not
	// announce into its own request, this one.
	*r = *r.WithContext(watch)
	r.URL.Scheme = ic.opts.Scheme
	if r.URL.Host == "" {
		r.URL.Host = r.Host
	}
	if r.URL.Host == "" {
		r.URL.Host = ic.opts.Authority
	}
	r.RemoteAddr = ic.opts.RemoteAddr
	ic.wmu.Lock()
	ic.headWritten = false
	ic.wmu.Unlock()

	resp := ic.handle(r)
	watch.stop() // before anything else reads the connection (a WebSocket relay, the next request)
	keep := ic.writeResponse(r, resp, clientClose)
	if keep && ic.body != nil && !ic.settleBody() {
		ic.linger = true
		return false
	}
	return keep
}

// handle answers one request, with a 500 in place of a panic.
func (ic *innerConn) handle(r *http.Request) (resp *http.Response) {
	defer func() {
		if v := recover(); v != nil {
			ic.opts.Logger.Error("panic serving request", "panic", fmt.Sprint(v), "method", r.Method, "url", r.URL.Redacted())
			const body = "robotsgate: internal error\n"
			resp = &http.Response{
				StatusCode: http.StatusInternalServerError, ProtoMajor: 1, ProtoMinor: 1,
				Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
				Body:          io.NopCloser(strings.NewReader(body)),
				ContentLength: int64(len(body)),
			}
			ic.failed = true
		}
	}()
	if resp = ic.handler(r); resp == nil {
		panic("h1: the handler returned no response")
	}
	return resp
}

// readRequest reads the next request head, within the idle timeout for
// its first byte (but the first request's, which the tunnel's header
// timeout already covers) and the header timeout for the rest. It returns
// nil and the status to answer with (0: close without one) when there is
// no request to serve.
func (ic *innerConn) readRequest(first bool) (*http.Request, int, string) {
	if !first {
		if ic.br.Buffered() == 0 {
			ic.conn.SetReadDeadline(time.Now().Add(ic.lim.TunnelIdleTimeout))
			if _, err := ic.br.Peek(1); err != nil {
				return nil, 0, ""
			}
		}
	}
	ic.conn.SetReadDeadline(time.Now().Add(ic.lim.ReadHeaderTimeout))
	if ic.lastMethod == http.MethodPost {
		// RFC 9112 section 2.2's tolerance, as net/http's: a client that
		// sent a CRLF after a POST's body.
		peek, _ := ic.br.Peek(4)
		ic.br.Discard(leadingCRorLF(peek))
	}
	// The head is kept as read (what is buffered, then what is read):
	// http.ReadRequest drops the Host header, which net/http's server
	// checks (see badHead).
	buffered, _ := ic.br.Peek(ic.br.Buffered())
	ic.head = append(ic.head[:0], buffered...)
	ic.in.tee = &ic.head
	ic.in.limit = int64(ic.lim.MaxHeaderBytes) + 4096 // net/http's slack for its buffer
	r, err := http.ReadRequest(ic.br)
	hitLimit := ic.in.limit == 0
	ic.in.limit, ic.in.tee = -1, nil
	if err != nil {
		switch {
		case hitLimit:
			return nil, http.StatusRequestHeaderFieldsTooLarge, ""
		case connGone(err):
			return nil, 0, "" // gone, or too slow: nothing to answer
		}
		return nil, http.StatusBadRequest, "malformed request"
	}
	if r.Method == "PRI" && r.RequestURI == "*" && r.Proto == "HTTP/2.0" {
		// HTTP/2's connection preface in the clear (h2c with prior
		// knowledge), which net/http's server would hand to a handler:
		// not HTTP/1.x, and no HTTP/2 is served here (a tunnel's h2 is
		// chosen by ALPN). Closed and logged, as a tunnel that speaks
		// neither TLS nor HTTP/1.x is: a 505 would be read by no h2c client.
		ic.opts.Logger.Warn("tunnel: HTTP/2 without TLS (h2c prior knowledge) is not served: closed",
			"authority", ic.opts.Authority, "client", ic.opts.RemoteAddr)
		return nil, 0, ""
	}
	if status, why := badHead(r, hostValues(ic.head)); status != 0 {
		return nil, status, why
	}
	ic.lastMethod = r.Method
	if r.Body != http.NoBody {
		ic.conn.SetReadDeadline(time.Time{}) // a body takes as long as it takes, as on the listener
	}
	// A request without a body keeps the head's deadline: nothing reads
	// the connection until the next head, which sets its own, but a
	// watch, which clears it first (one system call fewer per request).
	return r, 0, ""
}

// connGone reports whether a failed read of a request head means the
// client has gone or was too slow, rather than that it sent a bad one. A
// bad request-target is a *url.Error, which is a net.Error too: only a
// timeout or a failure of the connection itself counts.
func connGone(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.As(err, &ne) && ne.Timeout() || errors.As(err, &oe)
}

// badHead is net/http's server's check of a request head beyond what
// http.ReadRequest checks: the status to refuse it with and why, or 0;
// hosts are the values of the head's Host header fields (which
// http.ReadRequest has refused more than one of). One refusal is
// robotsgate's own: an upgrade request with a body.
func badHead(r *http.Request, hosts []string) (int, string) {
	if r.ProtoMajor != 1 {
		// A request line of another version (HTTP/2's preface is closed
		// before: see readRequest).
		return http.StatusHTTPVersionNotSupported, "unsupported protocol version"
	}
	if r.ProtoAtLeast(1, 1) && len(hosts) == 0 && r.Method != http.MethodConnect {
		return http.StatusBadRequest, "missing required Host header"
	}
	if len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]) {
		return http.StatusBadRequest, "malformed Host header"
	}
	for k, vv := range r.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return http.StatusBadRequest, "invalid header name"
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return http.StatusBadRequest, "invalid header value"
			}
		}
	}
	if r.Body != http.NoBody && header.IsWebSocketUpgrade(r.Header) {
		// Its body would still be read upstream while the relay reads
		// the connection: two readers of one stream.
		return http.StatusBadRequest, "an upgrade request with a body"
	}
	if e := r.Header.Get("Expect"); e != "" && !hasToken(e, "100-continue") {
		return http.StatusExpectationFailed, "unsupported Expect"
	}
	return 0, ""
}

// hostValues returns the values of the Host fields of a request head as
// read (http.ReadRequest has parsed it: every field line is well formed,
// and a line that starts with a space or tab continues the one before,
// joined to it as textproto joins them: "Host: a" and a line " " make
// "a ", which is no valid host).
func hostValues(head []byte) []string {
	var hosts []string
	prevHost := false
	_, rest, _ := bytes.Cut(head, []byte("\n")) // past the request line
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		switch {
		case len(line) == 0:
			return hosts // the end of the head
		case line[0] == ' ' || line[0] == '\t':
			// textproto's join: one space, then the line without its
			// spaces and tabs at either end; the value's leading ones go.
			if prevHost {
				last := &hosts[len(hosts)-1]
				*last = strings.TrimLeft(*last+" "+string(bytes.Trim(line, " \t")), " \t")
			}
		default:
			name, value, _ := bytes.Cut(line, []byte(":"))
			if prevHost = bytes.EqualFold(name, []byte("Host")); prevHost {
				hosts = append(hosts, string(bytes.Trim(value, " \t")))
			}
		}
	}
	return hosts
}

// leadingCRorLF counts the CR and LF bytes that start v.
func leadingCRorLF(v []byte) (n int) {
	for _, b := range v {
		if b != '\r' && b != '\n' {
			break
		}
		n++
	}
	return n
}

// hasToken reports whether token is one of the tokens of v, as net/http's
// server reads Expect: case aside, between spaces, tabs and commas.
func hasToken(v, token string) bool {
	for sp := 0; sp+len(token) <= len(v); sp++ {
		end := sp + len(token)
		if (sp == 0 || isTokenBoundary(v[sp-1])) && (end == len(v) || isTokenBoundary(v[end])) &&
			strings.EqualFold(v[sp:end], token) {
			return true
		}
	}
	return false
}

func isTokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }

// writeError answers a request that could not be read, and the
// connection is closed after it.
func (ic *innerConn) writeError(status int, why string) {
	line := strconv.Itoa(status) + " " + http.StatusText(status)
	body := line
	if why != "" {
		body += ": " + why
	}
	ic.out.idle = time.Second // the connection ends after it: no longer
	fmt.Fprintf(ic.bw, "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", line, len(body), body)
	ic.bw.Flush()
}

// framingHeaders are written by writeResponse from the response's fields,
// never copied from its header.
var framingHeaders = map[string]bool{"Content-Length": true, "Transfer-Encoding": true, "Trailer": true}

// writeResponse sends resp to the client of r and closes its body; it
// reports whether the connection can carry another request. A body of
// known length is sent as such; any other is chunked (to HTTP/1.0
// clients: sent until the connection closes). What the origin sends in
// pieces is passed on piece by piece.
func (ic *innerConn) writeResponse(r *http.Request, resp *http.Response, clientClose bool) bool {
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	defer resp.Body.Close()
	code := resp.StatusCode
	upgrade := code == http.StatusSwitchingProtocols
	bodyAllowed := r.Method != http.MethodHead && code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
	length := resp.ContentLength
	// The origin's Connection: close is about its own connection (forward
	// removed it); one on robotsgate's own answer ends this one.
	keep := !clientClose && !ic.failed && !upgrade && !(len(resp.Header["Connection"]) > 0 && header.Has(resp.Header, "Connection", "close"))
	if !upgrade {
		delete(resp.Header, "Connection") // written below, from keep
	}
	// A body the Transport is still sending upstream (the origin answered
	// before reading all of it) is left to it: the answer streams back
	// meanwhile, and serveOne settles the body after. Any other body not
	// read to its end is finished here, before the head.
	if ic.body != nil && !ic.body.inUse() && !ic.discardBody() {
		keep = false // the rest of the request's body is not read: it would be taken for the next request
		ic.linger = true
	}
	chunked := bodyAllowed && length < 0 && r.ProtoAtLeast(1, 1)
	if bodyAllowed && length < 0 && !chunked {
		keep = false // an HTTP/1.0 client reads to the end of the connection
	}

	ic.wmu.Lock()
	ic.headWritten = true
	ic.wmu.Unlock()
	bw := ic.bw
	writeHead(bw, r, resp, bodyAllowed, chunked, keep)

	if upgrade {
		up, ok := resp.Body.(io.ReadWriteCloser)
		// Relayed only when the client asked for it and has no body being
		// read (badHead refuses those; discardBody has ended any other).
		if bw.Flush() == nil && ok && ic.body == nil && header.IsWebSocketUpgrade(r.Header) && header.IsWebSocketUpgrade(resp.Header) {
			ic.relayUpgrade(up)
		}
		return false
	}
	if !bodyAllowed {
		return bw.Flush() == nil && keep
	}
	return writeBody(bw, resp, chunked) && keep
}

// writeHead writes resp's status line and header section to bw, with the
// framing writeResponse chose: chunked, or resp's length; Connection
// from keep.
func writeHead(bw *bufio.Writer, r *http.Request, resp *http.Response, bodyAllowed, chunked, keep bool) {
	code, length := resp.StatusCode, resp.ContentLength
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(code))
	bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code " + strconv.Itoa(code))
	}
	bw.WriteString("\r\n")
	resp.Header.WriteSubset(bw, framingHeaders)
	switch {
	case chunked:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
		if len(resp.Trailer) > 0 {
			bw.WriteString("Trailer: " + header.TrailerNames(resp.Trailer) + "\r\n")
		}
	case length >= 0 && (bodyAllowed || r.Method == http.MethodHead):
		bw.WriteString("Content-Length: " + strconv.FormatInt(length, 10) + "\r\n")
	case !bodyAllowed && code == http.StatusNotModified:
		if cl := resp.Header.Get("Content-Length"); cl != "" {
			bw.WriteString("Content-Length: " + cl + "\r\n")
		}
	}
	upgrade := code == http.StatusSwitchingProtocols
	if !keep && !upgrade {
		bw.WriteString("Connection: close\r\n")
	} else if keep && !r.ProtoAtLeast(1, 1) {
		bw.WriteString("Connection: keep-alive\r\n")
	}
	bw.WriteString("\r\n")
}

// writeBody writes resp's body to bw, chunked (with its trailer) or as it
// is, flushing as it arrives (wire.CopyFlushing); it reports whether the
// body went whole: one cut short can be told by the client only by the
// connection's end.
func writeBody(bw *bufio.Writer, resp *http.Response, chunked bool) bool {
	length := resp.ContentLength
	var w io.Writer = bw
	var cw io.WriteCloser
	if chunked {
		cw = newChunkedWriter(bw)
		w = cw
	}
	n, err := wire.CopyFlushing(w, bw.Flush, resp.Body, length)
	if err != nil || length >= 0 && n != length {
		bw.Flush()
		return false
	}
	if chunked {
		cw.Close()
		if len(resp.Trailer) > 0 {
			resp.Trailer.Write(bw)
		}
		bw.WriteString("\r\n")
	}
	return bw.Flush() == nil
}

// relayUpgrade relays a WebSocket between the client and the origin until
// either ends, idle-timed like a tunnel.
func (ic *innerConn) relayUpgrade(up io.ReadWriteCloser) {
	ic.conn.SetReadDeadline(time.Time{})
	ic.conn.SetWriteDeadline(time.Time{}) // the relay's own idle time bounds it
	if ic.opts.OnUpgrade != nil {
		ic.opts.OnUpgrade()
	}
	// What the client sent after its request first (ic.br holds it).
	wire.Relay(&wire.BufferedConn{Conn: ic.conn, R: ic.br}, up)
}

// writeContinue tells a client that waits for it to send its body, unless
// the final answer is already on its way.
func (ic *innerConn) writeContinue() {
	ic.wmu.Lock()
	defer ic.wmu.Unlock()
	if !ic.headWritten {
		ic.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		ic.bw.Flush()
	}
}

// innerBody is a request body read inside a tunnel, by the Transport's
// goroutine when the request is forwarded, which may go on reading it
// after the response has come back. finish ends that, under the body's
// lock, before the connection's reader is used for anything else. Close
// says its reader is done with it (http.ReadRequest's body would read
// what is left without bound; the loop reads at most maxDiscard of it,
// see discardBody).
type innerBody struct {
	ic     *innerConn
	expect bool // the client waits for 100 Continue before sending it

	mu        sync.Mutex    // held by each read, for as long as it waits on the client
	rc        io.ReadCloser // http.ReadRequest's body
	continued bool          // 100 Continue is sent (or was not needed)
	done      bool          // finished: no more reads

	// Read without the lock, which a read may hold for long.
	eof     atomic.Bool
	stalled atomic.Bool // a read waited idle_timeout for the client: nothing more is read

	releaseOnce sync.Once
	released    chan struct{} // closed by Close: the Transport is done with it
}

// newInnerBody wraps a request's body as read by http.ReadRequest.
func newInnerBody(ic *innerConn, r *http.Request) *innerBody {
	return &innerBody{rc: r.Body, ic: ic, released: make(chan struct{}),
		expect: r.ProtoAtLeast(1, 1) && r.ContentLength != 0 && hasToken(r.Header.Get("Expect"), "100-continue")}
}

// errBodyDone answers the reads of a body that the loop has finished
// with.
var errBodyDone = errors.New("request body: the tunnel has moved on")

func (b *innerBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, errBodyDone
	}
	if b.expect && !b.continued {
		b.continued = true
		b.ic.writeContinue()
	}
	if idle := b.ic.lim.IdleTimeout; idle > 0 {
		// A body that makes no progress for idle_timeout ends the request
		// (docs/decision.md step 0); the loop's own reads set their deadlines again.
		b.ic.conn.SetReadDeadline(time.Now().Add(idle))
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.eof.Store(true)
	case err != nil && wire.IsTimeout(err):
		b.stalled.Store(true) // the reader sees the deadline's error, a net.Error with Timeout
	}
	return n, err
}

// Close is the reader's word that it is done with the body: a
// RoundTripper always closes it (perhaps after RoundTrip has returned),
// and a Handler that passes it to none closes it itself.
func (b *innerBody) Close() error {
	b.releaseOnce.Do(func() { close(b.released) })
	return nil
}

// inUse reports whether the body's reader may still read it: it is
// neither read to its end nor closed. (A Transport sends a head before
// its body, so the origin can answer before the first read of it: only
// Close says it is done.)
func (b *innerBody) inUse() bool {
	if b.eof.Load() {
		return false
	}
	select {
	case <-b.released:
		return false
	default:
		return true
	}
}

// settleBody, once the answer is written, waits for the Transport to be
// done with the current request's body, within the header timeout (a read
// of it waiting on the client ends then), and finishes it as discardBody
// does; it reports whether the body was read to its end.
func (ic *innerConn) settleBody() bool {
	b := ic.body
	if b.inUse() {
		ic.conn.SetReadDeadline(time.Now().Add(ic.lim.ReadHeaderTimeout))
		timeout := time.NewTimer(ic.lim.ReadHeaderTimeout + time.Second)
		select {
		case <-b.released:
		case <-timeout.C: // the read's own deadline has passed: it has returned, or will
		}
		timeout.Stop()
	}
	return ic.discardBody()
}

// finish ends the body's reading, once any read in progress has returned.
func (b *innerBody) finish() {
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
}

// maxDiscard is how much of a request body the loop reads and drops, when
// the request is answered without it, to keep the connection: net/http's
// server's bound (maxPostHandlerReadBytes).
const maxDiscard = 256 << 10

// discardBody finishes the current request's body before its answer is
// written, as net/http's server does: what is left of it, up to
// maxDiscard and within the header timeout, is read and dropped, so that
// a client that sends its whole body before it reads (most do) gets the
// answer. It reports whether the body was read to its end; if not, the
// connection must close. A client that waits for a 100 Continue it was
// not sent has sent nothing to read.
func (ic *innerConn) discardBody() bool {
	b := ic.body
	if b.eof.Load() { // no read is in progress: nothing to wait for
		b.finish()
		return true
	}
	if b.stalled.Load() { // the client stopped sending it: waiting for more is what idle_timeout ended
		b.finish()
		return false
	}
	// A read of the Transport's may be waiting on the client: the
	// deadline bounds it, and the loop's own reads below.
	ic.conn.SetReadDeadline(time.Now().Add(ic.lim.ReadHeaderTimeout))
	defer ic.conn.SetReadDeadline(time.Time{})
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	if b.eof.Load() {
		return true
	}
	if b.expect && !b.continued {
		return false
	}
	n, err := io.CopyN(io.Discard, b.rc, maxDiscard+1)
	whole := err == io.EOF && n <= maxDiscard
	b.eof.Store(whole)
	return whole
}

// closeLingering ends a connection whose client may still be sending a
// body that was not read, as net/http's server does: the answer is
// flushed, the sending side closed (for TLS, close_notify), and the close
// waits a moment, so that the client reads the answer before the unread
// bytes make the kernel reset the connection.
func (ic *innerConn) closeLingering() {
	ic.bw.Flush()
	switch c := ic.conn.(type) {
	case *tls.Conn:
		c.CloseWrite()
	default:
		if ic.opts.CloseWrite != nil {
			ic.opts.CloseWrite()
		}
	}
	time.Sleep(lingerDelay)
}

// lingerDelay is net/http's rstAvoidanceDelay.
const lingerDelay = 500 * time.Millisecond

// stallWriter is the connection as answers are written to it: a write
// that makes no progress for idle ([limits] idle_timeout) fails with a
// timeout, and the connection ends, as an h2 stream is reset (see
// proxy's stallGuard). A client that stops reading a large answer would
// otherwise hold the request's handler, its buffers and the upstream
// connection for as long as it liked. Only the time spent writing
// counts, never the time waiting for the origin; idle 0: no bound.
type stallWriter struct {
	conn net.Conn
	idle time.Duration
}

// Write writes p to the connection, which must take it within idle.
func (w *stallWriter) Write(p []byte) (int, error) {
	if w.idle > 0 {
		w.conn.SetWriteDeadline(time.Now().Add(w.idle))
	}
	return w.conn.Write(p)
}

// innerReader is the connection as a tunnel's requests are read from it:
// with the header size limit while a head is read, and a byte that a
// watch read ahead handed back first.
type innerReader struct {
	conn    net.Conn
	limit   int64   // bytes the current head may still take; < 0: none
	tee     *[]byte // while a head is read, what is read is appended here too
	stash   [1]byte
	stashed bool
}

func (r *innerReader) Read(p []byte) (int, error) {
	if r.stashed && len(p) > 0 {
		r.stashed = false
		p[0] = r.stash[0]
		if r.tee != nil {
			*r.tee = append(*r.tee, p[0])
		}
		if r.limit > 0 {
			r.limit--
		}
		return 1, nil
	}
	if r.limit >= 0 {
		if r.limit == 0 {
			return 0, io.EOF
		}
		if int64(len(p)) > r.limit {
			p = p[:r.limit]
		}
	}
	n, err := r.conn.Read(p)
	if r.limit >= 0 {
		r.limit -= int64(n)
	}
	if r.tee != nil {
		*r.tee = append(*r.tee, p[:n]...)
	}
	return n, err
}

// watchCtx is an inner request's context. It ends when the client leaves,
// which can be known only by reading the connection, or when the tunnel's
// context ends (a shutdown's drain time is up), whichever comes first.
// Both are set up when something first waits on Done (a paced request,
// one held by a back-off, one waiting for a robots.txt fetch): a read of
// one byte in the background, as net/http's server reads in the
// background while a handler runs, stopped once the answer is written,
// and a cancellable context under the tunnel's, whose cause says which
// (context.Canceled: the client left; the tunnel's own cause otherwise).
// A request that never waits costs neither. (A proxy that sends the
// request on detaches its round trip from this context, with
// context.WithoutCancel: a client that leaves then costs that one
// upstream request, as in goproxy's own MITM loop, and the round trip
// starts no watch.)
type watchCtx struct {
	context.Context // the tunnel's, until Done is first called
	ic              *innerConn
	canWatch        bool // the request has no body and nothing follows it yet

	mu      sync.Mutex
	waited  context.Context         // under the tunnel's; nil until Done is first called
	cancel  context.CancelCauseFunc // waited's
	watched chan struct{}           // closed when the watch's read returns; nil if none started
	stopped bool
}

func newWatchCtx(ic *innerConn, canWatch bool) *watchCtx {
	return &watchCtx{Context: ic.ctx, ic: ic, canWatch: canWatch}
}

// current returns the context that answers for c: the tunnel's, or once
// something waited, the one under it.
func (c *watchCtx) current() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waited != nil {
		return c.waited
	}
	return c.Context
}

// Done starts the watch, the first time.
func (c *watchCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waited == nil {
		c.waited, c.cancel = context.WithCancelCause(c.Context)
		if c.canWatch && !c.stopped {
			// The head's deadline may still be set: a wait may be longer.
			// Cleared here, under mu, so that stop's deadline comes after.
			c.ic.conn.SetReadDeadline(time.Time{})
			c.watched = make(chan struct{})
			go c.watch()
		}
	}
	return c.waited.Done()
}

func (c *watchCtx) Err() error { return c.current().Err() }

// Value answers from the current context: context.Cause finds the cause
// of the one under the tunnel's once something waited.
func (c *watchCtx) Value(key any) any { return c.current().Value(key) }

func (c *watchCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// watch reads one byte: an error that is not the stop's deadline means
// the client has gone; a byte (the next request, pipelined) is handed
// back to the reader.
func (c *watchCtx) watch() {
	defer close(c.watched)
	in := c.ic.in
	n, err := c.ic.conn.Read(in.stash[:])
	if n == 1 {
		in.stashed = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil && !c.stopped {
		c.cancel(context.Canceled)
	}
}

// stop ends a watch, if one started, before the connection is read again,
// and lets the tunnel's context forget the one under it.
func (c *watchCtx) stop() {
	c.mu.Lock()
	c.stopped = true
	watched, cancel := c.watched, c.cancel
	c.mu.Unlock()
	if watched != nil {
		c.ic.conn.SetReadDeadline(time.Unix(1, 0)) // a time long past: the watch's read returns now
		<-watched
	}
	if cancel != nil {
		cancel(errAnswered)
	}
}

// errAnswered is the cause of a waited request's context once its answer
// is written: nothing decides on it any more.
var errAnswered = errors.New("h1: request answered")

// chunkedWriter writes HTTP/1.1 chunks; Close writes the last, empty one
// (without the final CRLF, which goes after any trailers).
type chunkedWriter struct{ w *bufio.Writer }

func newChunkedWriter(w *bufio.Writer) *chunkedWriter { return &chunkedWriter{w: w} }

func (c *chunkedWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.w.WriteString(strconv.FormatInt(int64(len(p)), 16))
	c.w.WriteString("\r\n")
	c.w.Write(p)
	if _, err := c.w.WriteString("\r\n"); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *chunkedWriter) Close() error {
	_, err := c.w.WriteString("0\r\n")
	return err
}
