package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// connTracker tracks the proxy's client connections: their number is
// bounded, and Shutdown closes those left, hijacked ones included.
type connTracker struct {
	max     int
	mu      sync.Mutex
	conns   map[*trackedConn]struct{}
	count   atomic.Int64 // open client connections
	tunnels atomic.Int64 // of which hijacked: tunnels, WebSockets
	// overloaded is called for each connection turned away.
	overloaded func(remote net.Addr)
	// epoch is the base of trackedConn.last: a monotonic clock in one
	// integer.
	epoch time.Time
	// stall bounds a write to a connection the server still serves:
	// one that makes no progress for it fails (see trackedConn.Write); 0: none.
	stall time.Duration
}

// newConnTracker tracks up to max connections, each write to one the
// server still serves held to stall ([limits] idle_timeout).
func newConnTracker(max int, stall time.Duration) *connTracker {
	return &connTracker{max: max, conns: map[*trackedConn]struct{}{}, epoch: time.Now(), stall: stall}
}

func (t *connTracker) wrap(l net.Listener) net.Listener { return &trackingListener{Listener: l, t: t} }

// closeAll closes every client connection. The set is copied first:
// each Close removes itself from it.
func (t *connTracker) closeAll() {
	t.mu.Lock()
	conns := make([]*trackedConn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

type trackingListener struct {
	net.Listener
	t *connTracker
}

// overloadedResponse answers a connection past max_connections.
const overloadedResponse = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"X-Robots-Gate: overloaded\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 39\r\n\r\n" +
	"robotsgate: too many connections, retry"

func (l *trackingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if int(l.t.count.Load()) >= l.t.max {
			go func() {
				c.SetWriteDeadline(time.Now().Add(time.Second))
				io.WriteString(c, overloadedResponse)
				c.Close()
			}()
			if l.t.overloaded != nil {
				l.t.overloaded(c.RemoteAddr())
			}
			continue
		}
		tc := &trackedConn{Conn: c, t: l.t}
		l.t.count.Add(1)
		l.t.mu.Lock()
		l.t.conns[tc] = struct{}{}
		l.t.mu.Unlock()
		return tc, nil
	}
}

type trackedConn struct {
	net.Conn
	t        *connTracker
	once     sync.Once
	hijacked atomic.Bool // a tunnel or WebSocket: counted in open_tunnels

	// Once hijacked, nothing reads the connection on a schedule, so a
	// deadline alone would close nothing: a watchdog timer closes it when
	// idle has passed with no read or write either way.
	idle     atomic.Int64 // the idle timeout; 0: none (the connection's server keeps time)
	last     atomic.Int64 // when it was last read or written, as time.Since(t.epoch)
	timerMu  sync.Mutex
	watchdog *time.Timer
}

// setIdle makes the connection close itself after d with no traffic
// either way; 0 hands timekeeping back to whoever serves it.
func (c *trackedConn) setIdle(d time.Duration) {
	c.last.Store(int64(time.Since(c.t.epoch)))
	c.idle.Store(int64(d))
	if d <= 0 {
		return
	}
	c.timerMu.Lock()
	if c.watchdog == nil {
		c.watchdog = time.AfterFunc(d, c.checkIdle)
	} else {
		c.watchdog.Reset(d)
	}
	c.timerMu.Unlock()
}

// checkIdle closes the connection if it has been idle long enough, or
// looks again when it would be.
func (c *trackedConn) checkIdle() {
	idle := time.Duration(c.idle.Load())
	if idle <= 0 {
		return
	}
	quiet := time.Since(c.t.epoch) - time.Duration(c.last.Load())
	if quiet >= idle {
		c.Close()
		return
	}
	c.timerMu.Lock()
	c.watchdog.Reset(idle - quiet)
	c.timerMu.Unlock()
}

func (c *trackedConn) touch() {
	if c.idle.Load() > 0 {
		c.last.Store(int64(time.Since(c.t.epoch)))
	}
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.touch()
	}
	return n, err
}

// Write writes b to the client. Until the connection is hijacked (a
// tunnel or WebSocket, which keeps its own time), a write that makes no
// progress for the tracker's stall fails with a timeout, and net/http's
// server ends the connection: a client that stops reading an answer would
// otherwise hold the request's handler, its buffers and the origin's
// request for as long as it liked, since net/http bounds nothing while a
// handler writes (its WriteTimeout, unset, would cut slow downloads whole).
// A slow client that reads is never cut: the deadline is set again before
// each write, and after each piece a timed-out write did get through.
// Reads, the keep-alive wait between requests included, are untouched.
func (c *trackedConn) Write(b []byte) (int, error) {
	stall := c.t.stall
	if stall <= 0 || c.hijacked.Load() {
		n, err := c.Conn.Write(b)
		if n > 0 {
			c.touch()
		}
		return n, err
	}
	written := 0
	for {
		c.Conn.SetWriteDeadline(time.Now().Add(stall))
		n, err := c.Conn.Write(b[written:])
		written += n
		if err == nil || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return written, err
		}
	}
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.idle.Store(0)
		c.timerMu.Lock()
		if c.watchdog != nil {
			c.watchdog.Stop()
		}
		c.timerMu.Unlock()
		c.t.count.Add(-1)
		if c.hijacked.Load() {
			c.t.tunnels.Add(-1)
		}
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return err
}
