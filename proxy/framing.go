package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/robotsgate/robotsgate/proxy/header"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/proxy/wire"
)

// What goes upstream is one request, framed as decided (docs/decision.md step 0):
// content only where its method gives it meaning (see frame), a
// connection that carried content never reused (see forward), trailers
// under the rules of headers, and a body that stalls ended.

// hasContent reports whether a request carries content: a Content-Length
// over 0, or any Transfer-Encoding (a chunked body may be empty, and is
// still content framed as such).
func hasContent(r *http.Request) bool {
	return r.ContentLength > 0 || len(r.TransferEncoding) > 0
}

// errBodyStalled is what a request body's read returns when the client
// sent nothing of it for limits.idle_timeout: the request ends.
var errBodyStalled = errors.New("request body stalled")

// reasonBodyStalled is the reason of the answer to a request whose body
// stalled.
const reasonBodyStalled = "the request body made no progress for limits.idle_timeout"

// errBodyCut is what a request body's read returns when the client ended
// it before its end (fewer bytes than its Content-Length, a chunked body
// without its last chunk, the stream or connection ended): the request
// ends, and it is the client's failure, not the origin's.
var errBodyCut = errors.New("request body cut short by the client")

// reasonBodyCut is the reason of the answer to a request whose body the
// client cut short.
const reasonBodyCut = "the client ended the request body before its end (its declared length, or its last chunk)"

// connKey marks a plain request's context with its client connection,
// whose read deadline bounds each read of its body.
type connKey struct{}

// guardBody wraps the body of in, a request with content, for the trip
// upstream as out: each read of it must make progress within
// idle_timeout, or the request ends with errBodyStalled (the Transport
// then drops the upstream connection: it is freed, not held); and once it
// is read to its end, the trailers that came with it (which the server
// reads into in.Trailer) go on in out's own trailer, filtered as headers
// are (see header.FilterTrailer), before the Transport sends them.
// connNamed are the fields the request's Connection header named.
func (s *Server) guardBody(p *policy.Policy, in, out *http.Request, connNamed []string) io.ReadCloser {
	g := &guardedBody{rc: in.Body, idle: p.Config().Limits.IdleTimeout, in: in, out: out, connNamed: connNamed}
	// A request inside a tunnel is read by h1's loop, whose body keeps its
	// own deadline (and reports it as a timeout); one on the listener is
	// read from its connection, whose deadline is set here.
	if c, ok := in.Context().Value(connKey{}).(net.Conn); ok {
		g.conn = c
	}
	if in.Trailer != nil {
		// The names announced before the body: out's trailer, which the
		// Transport announces, carries those allowed, and their values
		// once the body's end brings them.
		out.Trailer = in.Trailer.Clone()
		header.FilterTrailer(out.Trailer, connNamed)
	}
	return g
}

// guardedBody is a request body on its way upstream; see guardBody.
type guardedBody struct {
	rc        io.ReadCloser
	conn      net.Conn // the client's connection, whose read deadline bounds a read; nil: rc keeps its own
	idle      time.Duration
	in, out   *http.Request // the client's request, whose trailer the server fills, and the one sent
	connNamed []string
	stalled   atomic.Bool // a read returned errBodyStalled
	cut       atomic.Bool // a read returned errBodyCut
}

// bodyFailed says whether a forwarded request that failed with err ended
// because the client failed to send its body, and the answer's status
// and reason then: 408 when it stalled, 400 when it was cut short; 0
// otherwise. The Transport may report that as the body's error, or, on
// the listener, as the request's context ended (net/http's server ends
// it when a read of the connection fails).
func bodyFailed(body io.Reader, err error) (int, string) {
	g, _ := body.(*guardedBody)
	switch {
	case errors.Is(err, errBodyStalled) || g != nil && g.stalled.Load():
		return http.StatusRequestTimeout, reasonBodyStalled
	case errors.Is(err, errBodyCut) || g != nil && g.cut.Load():
		return http.StatusBadRequest, reasonBodyCut
	}
	return 0, ""
}

func (g *guardedBody) Read(p []byte) (int, error) {
	if g.conn != nil && g.idle > 0 {
		g.conn.SetReadDeadline(time.Now().Add(g.idle))
	}
	n, err := g.rc.Read(p)
	switch {
	case err == io.EOF:
		if g.conn != nil {
			// The server's own read of the connection, which begins now,
			// must not inherit this deadline: a long answer may follow.
			g.conn.SetReadDeadline(time.Time{})
		}
		// Read with the last chunk: only those announced go on (the
		// Transport would send any it found), under the header rules.
		for k := range g.out.Trailer {
			g.out.Trailer[k] = g.in.Trailer[k]
		}
		header.FilterTrailer(g.out.Trailer, g.connNamed)
	case errors.Is(err, errBodyStalled):
		g.stalled.Store(true) // a tunnel's body said so
	case err != nil && wire.IsTimeout(err):
		g.stalled.Store(true)
		err = fmt.Errorf("%w: %v", errBodyStalled, err)
	case err != nil:
		// The body is the client's: any other failure to read it is
		// the client's (h1: an unexpected EOF; h2: a stream ended or
		// reset before its content-length).
		g.cut.Store(true)
		err = fmt.Errorf("%w: %v", errBodyCut, err)
	}
	return n, err
}

func (g *guardedBody) Close() error { return g.rc.Close() }

// trailerGuard removes X-Robots-Gate* fields from a response's trailer
// once the body's end has brought it.
type trailerGuard struct {
	io.ReadCloser
	resp *http.Response
}

func (g *trailerGuard) Read(p []byte) (int, error) {
	n, err := g.ReadCloser.Read(p)
	if err == io.EOF {
		header.RemoveGateFields(g.resp.Trailer)
	}
	return n, err
}
