package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"

	"github.com/robotsgate/robotsgate/proxy/wire"
)

// respWriter keeps net/http from adding Date or Content-Type to a
// forwarded response that had none: allowed traffic passes unchanged.
type respWriter struct {
	http.ResponseWriter
	wrote    bool
	hijacked net.Conn // the connection taken over, closed when the request is done
}

func (w *respWriter) WriteHeader(code int) {
	if !w.wrote {
		h := w.Header()
		if _, ok := h["Date"]; !ok {
			h["Date"] = nil
		}
		if _, ok := h["Content-Type"]; !ok {
			h["Content-Type"] = nil
		}
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *respWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// ReadFrom copies a forwarded body as it arrives: each piece read from the
// origin is written and flushed at once, so that a slow or stalling
// origin's bytes (and the headers before them) are not held back in
// net/http's buffer; a complete body is sent when the handler ends, in one
// write with its headers (wire.CopyFlushing, as h1 writes inside tunnels).
func (w *respWriter) ReadFrom(r io.Reader) (int64, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return wire.CopyFlushing(w.ResponseWriter, w.flush, r, declaredLength(w.Header()))
}

// declaredLength is the body length h's Content-Length declares, or -1
// (unknown: the body is copied to its end) when it has none or one that
// does not parse, which must not cut the body to nothing.
func declaredLength(h http.Header) int64 {
	cl := h.Get("Content-Length")
	if cl == "" {
		return -1
	}
	n, err := strconv.ParseInt(cl, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// flush is Flush for wire.CopyFlushing.
func (w *respWriter) flush() error {
	w.Flush()
	return nil
}

func (w *respWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack takes the client's connection over, as net/http's does, but
// hands out each byte the server has already read exactly once. Those
// bytes (what a client sent with its request: the first bytes of a
// CONNECT tunnel or of a WebSocket, or the byte net/http's background read
// took) are in the server's reader. The connection returned reads them
// first, then the socket (goproxy's CONNECT handling drops the reader);
// the reader returned holds none of them and reads that same connection.
// A caller may read either; one that relays what the reader holds and then
// the connection, as goproxy's WebSocket relay does, relays each byte
// once. (When both held the bytes, that relay sent them twice: issue 34.)
func (w *respWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("hijack not supported")
	}
	c, rw, err := h.Hijack()
	if err != nil {
		return c, rw, err
	}
	w.hijacked = c
	if rw == nil || rw.Reader.Buffered() == 0 {
		return c, rw, nil
	}
	hc := &wire.BufferedConn{Conn: c, R: rw.Reader}
	// The smallest reader bufio makes: a caller that reads it reads the
	// connection through it, and nothing is buffered in it yet.
	return hc, bufio.NewReadWriter(bufio.NewReaderSize(hc, 16), rw.Writer), nil
}

// trackedOf returns the listener's tracked connection under c, or nil.
func trackedOf(c net.Conn) *trackedConn {
	switch c := c.(type) {
	case *trackedConn:
		return c
	case *wire.BufferedConn: // a hijacked connection, read through the server's reader
		return trackedOf(c.Conn)
	}
	return nil
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// closeHijacked closes a connection taken over during a request (a
// WebSocket, a tunnel) once its handler has returned: goproxy's WebSocket
// relay returns when one side ends and leaves the client's side open.
func (w *respWriter) closeHijacked() {
	if w.hijacked != nil {
		w.hijacked.Close()
	}
}
