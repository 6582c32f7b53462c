// Package wire holds what both of robotsgate's HTTP stacks move bytes
// with: net/http's server behind goproxy on the listener, and h1's loop
// inside tunnels. Each piece is written once, so that the two stacks
// cannot drift apart on how a connection already read from is read
// again, how a streamed body is passed on, how a relay ends, or what a
// deadline's error looks like.
package wire

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
)

// BufferedConn is a connection read through a bufio.Reader that may hold
// bytes already taken from it (a peek at a tunnel's first bytes, or what
// net/http's server had read before a hijack). It must be R's only reader
// from then on: each byte is handed out once.
type BufferedConn struct {
	net.Conn
	R *bufio.Reader // reads Conn
}

// Read reads what R holds first, then the connection.
func (c *BufferedConn) Read(b []byte) (int, error) { return c.R.Read(b) }

// CopyFlushing copies src to dst, at most length bytes when length ≥ 0,
// and calls flush after each piece while more is to come: a streamed or
// slow body reaches the client as the origin sends it, and a whole one
// goes in one write with its head. A src longer than length is cut at
// length, with an error: the client can tell only by the connection's
// end. The copy buffer is pooled, not allocated per body.
func CopyFlushing(dst io.Writer, flush func() error, src io.Reader, length int64) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var n int64
	for {
		p := buf
		if length >= 0 && int64(len(p)) > length-n {
			p = p[:length-n+1] // one byte over: a body longer than said is cut, not passed on
		}
		nr, rerr := src.Read(p)
		if length >= 0 && n+int64(nr) > length {
			nr = int(length - n)
			rerr = errLonger
		}
		if nr > 0 {
			nw, werr := dst.Write(p[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			if length < 0 || n < length {
				if err := flush(); err != nil {
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

// errLonger ends the copy of a body longer than its Content-Length.
var errLonger = errors.New("body longer than its Content-Length")

// copyBufs are CopyFlushing's buffers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Relay copies between a and b until either side ends or fails, then
// closes both, so that neither is left open by the other's end, and
// returns once both copies have.
func Relay(a, b io.ReadWriteCloser) {
	done := make(chan struct{}, 2)
	copyTo := func(dst io.Writer, src io.Reader) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go copyTo(a, b)
	go copyTo(b, a)
	<-done
	a.Close()
	b.Close()
	<-done
}

// IsTimeout reports whether err is a deadline's.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ClientAddr is the IP address of r's client, the connection's peer
// (unmapped from IPv4-in-IPv6); the zero Addr when RemoteAddr does not
// read as one.
func ClientAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
