package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// The requests inside a tunnel are served here, one after another on the
// connection, as goproxy's own MITM loop serves them, rather than by an
// http.Server per tunnel: that server's per-request machinery (a
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

// innerConn is one tunnel's client connection, with what serving its
// requests needs.
type innerConn struct {
	s      *Server
	conn   net.Conn // decrypted (MITM) or as it is (plain HTTP in a tunnel)
	in     *innerReader
	br     *bufio.Reader // over in
	bw     *bufio.Writer // over conn
	scheme string
	remote string
	ci     *connectInfo
	tc     *trackedConn // the client's TCP connection; nil in tests that have none
	lim    LimitsConfig
	ctx    context.Context // the tunnel's: inner requests' contexts derive from it

	wmu         sync.Mutex // serialises a 100 Continue with the response head
	headWritten bool       // the current request's final response head is written (under wmu)
	failed      bool       // a request's handling panicked: the connection ends after its 500
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

// serveInner serves the HTTP/1.1 requests inside a tunnel: each goes
// through the proxy's one decision, bound to the CONNECT (ci) and its
// client (remote); a WebSocket inside is idle-timed like a tunnel (on tc,
// the client's connection) and ends the tunnel.
func (s *Server) serveInner(conn net.Conn, scheme, remote string, ci *connectInfo, tc *trackedConn, lim LimitsConfig) {
	ic := &innerConn{
		s: s, conn: conn, in: &innerReader{conn: conn, limit: -1},
		scheme: scheme, remote: remote, ci: ci, tc: tc, lim: lim,
		ctx: context.WithValue(context.Background(), connectKey{}, ci),
	}
	ic.br = innerReaders.Get().(*bufio.Reader)
	ic.br.Reset(ic.in)
	ic.bw = innerWriters.Get().(*bufio.Writer)
	ic.bw.Reset(conn)
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
	clientClose := r.Close // the request's own word, before forward clears it for upstream
	watch := newWatchCtx(ic, r.Body == http.NoBody && ic.br.Buffered() == 0)
	ic.body = nil
	if r.Body != http.NoBody {
		ic.body = newInnerBody(ic, r)
		r.Body = ic.body
	}
	r = r.WithContext(watch)
	r.URL.Scheme = ic.scheme
	if r.URL.Host == "" {
		r.URL.Host = r.Host
	}
	if r.URL.Host == "" {
		r.URL.Host = ic.ci.authority
	}
	r.RemoteAddr = ic.remote
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

// handle decides and answers one request, with a 500 in place of a panic.
func (ic *innerConn) handle(r *http.Request) (resp *http.Response) {
	defer func() {
		if v := recover(); v != nil {
			ic.s.log.Error("panic serving request", "panic", fmt.Sprint(v), "method", r.Method, "url", redactURL(r.RequestURI))
			resp = ic.s.answer(r, http.StatusInternalServerError, "error", "robotsgate: internal error\n")
			ic.failed = true
		}
	}()
	_, resp = ic.s.onRequest(r, nil)
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
	ic.in.limit = int64(ic.lim.MaxHeaderBytes) + 4096 // net/http's slack for its buffer
	r, err := http.ReadRequest(ic.br)
	hitLimit := ic.in.limit == 0
	ic.in.limit = -1
	if err != nil {
		switch {
		case hitLimit:
			return nil, http.StatusRequestHeaderFieldsTooLarge, ""
		case connGone(err):
			return nil, 0, "" // gone, or too slow: nothing to answer
		}
		return nil, http.StatusBadRequest, "malformed request"
	}
	if status, why := badHead(r); status != 0 {
		return nil, status, why
	}
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
// http.ReadRequest checks: the status to refuse it with and why, or 0.
func badHead(r *http.Request) (int, string) {
	if r.ProtoMajor != 1 {
		return http.StatusHTTPVersionNotSupported, "unsupported protocol version"
	}
	// http.ReadRequest has taken the Host header into r.Host (and refused
	// two of them).
	if r.ProtoAtLeast(1, 1) && r.Host == "" {
		return http.StatusBadRequest, "missing required Host header"
	}
	if !httpguts.ValidHostHeader(r.Host) {
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
	if r.Body != http.NoBody && isWebSocketUpgrade(r.Header) {
		// Its body would still be read upstream while the relay reads
		// the connection: two readers of one stream.
		return http.StatusBadRequest, "an upgrade request with a body"
	}
	if e := r.Header["Expect"]; len(e) > 0 && !(len(e) == 1 && strings.EqualFold(e[0], "100-continue")) {
		return http.StatusExpectationFailed, "unsupported Expect"
	}
	return 0, ""
}

// writeError answers a request that could not be read, and the
// connection is closed after it.
func (ic *innerConn) writeError(status int, why string) {
	line := strconv.Itoa(status) + " " + http.StatusText(status)
	body := line
	if why != "" {
		body += ": " + why
	}
	ic.conn.SetWriteDeadline(time.Now().Add(time.Second))
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
	keep := !clientClose && !ic.failed && !upgrade && !(len(resp.Header["Connection"]) > 0 && headerHas(resp.Header, "Connection", "close"))
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
			bw.WriteString("Trailer: " + trailerNames(resp.Trailer) + "\r\n")
		}
	case length >= 0 && (bodyAllowed || r.Method == http.MethodHead):
		bw.WriteString("Content-Length: " + strconv.FormatInt(length, 10) + "\r\n")
	case !bodyAllowed && code == http.StatusNotModified:
		if cl := resp.Header.Get("Content-Length"); cl != "" {
			bw.WriteString("Content-Length: " + cl + "\r\n")
		}
	}
	if !keep && !upgrade {
		bw.WriteString("Connection: close\r\n")
	} else if keep && !r.ProtoAtLeast(1, 1) {
		bw.WriteString("Connection: keep-alive\r\n")
	}
	bw.WriteString("\r\n")

	if upgrade {
		up, ok := resp.Body.(io.ReadWriteCloser)
		// Relayed only when the client asked for it and has no body being
		// read (badHead refuses those; discardBody has ended any other).
		if bw.Flush() == nil && ok && ic.body == nil && isWebSocketUpgrade(r.Header) && isWebSocketUpgrade(resp.Header) {
			ic.relayUpgrade(up)
		}
		return false
	}
	if !bodyAllowed {
		return bw.Flush() == nil && keep
	}
	var w io.Writer = bw
	var cw io.WriteCloser
	if chunked {
		cw = newChunkedWriter(bw)
		w = cw
	}
	n, err := copyFlushing(w, bw, resp.Body, length)
	if err != nil || length >= 0 && n != length {
		bw.Flush()
		return false // the client can tell the body is cut short only by the connection's end
	}
	if chunked {
		cw.Close()
		removeGateFields(resp.Trailer) // those that came with the body's end
		if len(resp.Trailer) > 0 {
			resp.Trailer.Write(bw)
		}
		bw.WriteString("\r\n")
	}
	return bw.Flush() == nil && keep
}

// copyFlushing copies body to w, at most length bytes when length ≥ 0, and
// flushes bw after each piece while more is to come: a streamed or slow
// body reaches the client as the origin sends it, and a whole one goes in
// one write with its head. The copy buffer is pooled.
func copyFlushing(w io.Writer, bw *bufio.Writer, body io.Reader, length int64) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var n int64
	for {
		p := buf
		if length >= 0 && int64(len(p)) > length-n {
			p = p[:length-n+1] // one byte over: a body longer than said is cut, not passed on
		}
		nr, rerr := body.Read(p)
		if length >= 0 && n+int64(nr) > length {
			nr = int(length - n)
			rerr = errors.New("body longer than its Content-Length")
		}
		if nr > 0 {
			nw, werr := w.Write(p[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			if length < 0 || n < length {
				if err := bw.Flush(); err != nil {
					return n, err
				}
			}
		}
		if rerr == io.EOF || length >= 0 && n == length && rerr == nil && nr == 0 {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// relayUpgrade relays a WebSocket between the client and the origin until
// either ends, idle-timed like a tunnel.
func (ic *innerConn) relayUpgrade(up io.ReadWriteCloser) {
	ic.conn.SetReadDeadline(time.Time{})
	if ic.tc != nil {
		ic.tc.setIdle(ic.lim.TunnelIdleTimeout)
	}
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(up, ic.br) // what the client sent after its request first
		done <- struct{}{}
	}()
	go func() {
		io.Copy(ic.conn, up)
		done <- struct{}{}
	}()
	<-done
	up.Close()
	ic.conn.Close()
	<-done
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
// lock, before the connection's reader is used for anything else. Closing
// it does nothing: http.ReadRequest's body would read what is left
// without bound; the loop reads at most maxDiscard of it (discardBody).
type innerBody struct {
	ic     *innerConn
	expect bool // the client waits for 100 Continue before sending it

	mu        sync.Mutex    // held by each read, for as long as it waits on the client
	rc        io.ReadCloser // http.ReadRequest's body
	continued bool          // 100 Continue is sent (or was not needed)
	done      bool          // finished: no more reads

	// Read without the lock, which a read may hold for long.
	handed  atomic.Bool // given to the Transport, which reads it until it closes it
	eof     atomic.Bool
	stalled atomic.Bool // a read waited idle_timeout for the client: nothing more is read

	releaseOnce sync.Once
	released    chan struct{} // closed by Close: the Transport is done with it
}

// newInnerBody wraps a request's body as read by http.ReadRequest.
func newInnerBody(ic *innerConn, r *http.Request) *innerBody {
	return &innerBody{rc: r.Body, ic: ic, released: make(chan struct{}),
		expect: r.ProtoAtLeast(1, 1) && strings.EqualFold(r.Header.Get("Expect"), "100-continue")}
}

// errBodyDone answers the Transport's reads of a body that the loop has
// finished with.
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
		// (DESIGN step 0); the loop's own reads set their deadlines again.
		b.ic.conn.SetReadDeadline(time.Now().Add(idle))
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.eof.Store(true)
	case err != nil && isTimeout(err):
		b.stalled.Store(true)
		err = fmt.Errorf("%w: %v", errBodyStalled, err)
	}
	return n, err
}

// Close is the Transport's word that it is done with the body (every
// RoundTripper closes it, perhaps after RoundTrip has returned).
func (b *innerBody) Close() error {
	b.releaseOnce.Do(func() { close(b.released) })
	return nil
}

// inUse reports whether the Transport may still read the body: it was
// handed over, not yet read to its end, and not yet closed. (The Transport
// sends a head before its body, so the origin can answer before the
// first read of it.)
func (b *innerBody) inUse() bool {
	if b.eof.Load() || !b.handed.Load() {
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
		if ic.tc != nil {
			if cw, ok := ic.tc.Conn.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
		}
	}
	time.Sleep(lingerDelay)
}

// lingerDelay is net/http's rstAvoidanceDelay.
const lingerDelay = 500 * time.Millisecond

// innerReader is the connection as a tunnel's requests are read from it:
// with the header size limit while a head is read, and a byte that a
// watch read ahead handed back first.
type innerReader struct {
	conn    net.Conn
	limit   int64 // bytes the current head may still take; < 0: none
	stash   [1]byte
	stashed bool
}

func (r *innerReader) Read(p []byte) (int, error) {
	if r.stashed && len(p) > 0 {
		r.stashed = false
		p[0] = r.stash[0]
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
	return n, err
}

// watchCtx is an inner request's context. Its Done channel closes when
// the client leaves, which can be known only by reading the connection:
// a read of one byte in the background starts when something first waits
// on Done (a paced request, one held by a back-off, one waiting for a
// robots.txt fetch), as net/http's server reads in the background while a
// handler runs, and stops once the answer is written. The upstream round
// trip does not start one (see settle): a client that leaves then costs
// that one upstream request, as in goproxy's own MITM loop.
type watchCtx struct {
	context.Context // the tunnel's, for its values
	ic              *innerConn
	canWatch        bool // the request has no body and nothing follows it yet

	mu      sync.Mutex
	done    chan struct{} // nil until Done is first called
	err     error
	settled bool          // no watch starts from here on
	watched chan struct{} // closed when the watch's read returns; nil if none started
	stopped bool
}

func newWatchCtx(ic *innerConn, canWatch bool) *watchCtx {
	return &watchCtx{Context: ic.ctx, ic: ic, canWatch: canWatch}
}

// Done starts the watch, the first time, unless the request is settled.
func (c *watchCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.settled {
			return nil // never cancelled: nothing waits on it
		}
		c.done = make(chan struct{})
		if c.canWatch && !c.stopped {
			// The head's deadline may still be set: a wait may be longer.
			// Cleared here, under mu, so that stop's deadline comes after.
			c.ic.conn.SetReadDeadline(time.Time{})
			c.watched = make(chan struct{})
			go c.watch()
		}
	}
	return c.done
}

func (c *watchCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Value answers for the tunnel's context; context.Cause asks for no
// cancelCtx of ours, so it takes Err.
func (c *watchCtx) Value(key any) any { return c.Context.Value(key) }

func (c *watchCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// settle marks the decision as made: from here on Done starts no watch.
func (c *watchCtx) settle() {
	c.mu.Lock()
	c.settled = true
	c.mu.Unlock()
}

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
	if err != nil && !c.stopped && c.err == nil {
		c.err = context.Canceled
		close(c.done)
	}
}

// stop ends a watch, if one started, before the connection is read again.
func (c *watchCtx) stop() {
	c.mu.Lock()
	c.stopped = true
	watched := c.watched
	c.mu.Unlock()
	if watched == nil {
		return
	}
	c.ic.conn.SetReadDeadline(time.Unix(1, 0)) // a time long past: the watch's read returns now
	<-watched
}

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
