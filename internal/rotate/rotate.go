// Package rotate keeps a net/http Transport from growing with the number
// of hosts it has ever connected to.
//
// An http.Transport remembers, per host, the requests that waited for an
// idle connection to it, and forgets them only when a connection to that
// host goes idle (Go issue 50798). A host whose connections never go idle
// (it answers "Connection: close", or fails) leaves its entry behind: about
// a kilobyte, with the request it holds, for every such host ever asked.
// A proxy or crawler that reaches hundreds of thousands of hosts keeps
// that much forever. A Transport here sends through a clone of the
// http.Transport it was given and replaces it with a fresh clone after a
// number of new connections, dropping the old one's bookkeeping once its
// requests in flight end.
package rotate

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// DefaultEvery is how many new connections a Transport makes on one clone
// before it takes a fresh one: the entries left behind stay within a few
// megabytes, and a busy proxy that reuses its connections rarely rotates
// (each rotation costs the idle connections, which are closed).
const DefaultEvery = 4096

// Transport is an http.RoundTripper that sends through a clone of an
// http.Transport, replaced by a fresh clone after every Every new
// connections. It is safe for concurrent use.
type Transport struct {
	every int64
	dials atomic.Int64
	next  atomic.Int64 // the dial count at which the next RoundTrip rotates
	cur   atomic.Pointer[http.Transport]
	mu    sync.Mutex // held to rotate

	rotations atomic.Int64
}

// New returns a Transport sending through a clone of t (t itself is left
// as it is), which it replaces after every new connections (0:
// DefaultEvery). t must dial with DialContext or its default, not Dial.
func New(t *http.Transport, every int) *Transport {
	if every <= 0 {
		every = DefaultEvery
	}
	r := &Transport{every: int64(every)}
	base := t.Clone()
	dial := base.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		r.dials.Add(1)
		return dial(ctx, network, addr)
	}
	r.next.Store(r.every)
	r.cur.Store(base)
	return r
}

// RoundTrip sends req through the current clone, first replacing it if it
// has made its share of connections.
func (r *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t := r.cur.Load()
	if r.dials.Load() >= r.next.Load() {
		t = r.rotate(t)
	}
	return t.RoundTrip(req)
}

// rotate replaces old, if it is still the current clone, with a fresh
// clone, and closes old's idle connections (and those that go idle
// later: its requests in flight end on it).
func (r *Transport) rotate(old *http.Transport) *http.Transport {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.cur.Load(); cur != old {
		return cur
	}
	fresh := old.Clone()
	r.cur.Store(fresh)
	r.next.Store(r.dials.Load() + r.every)
	r.rotations.Add(1)
	old.CloseIdleConnections()
	return fresh
}

// CloseIdleConnections closes the current clone's idle connections.
func (r *Transport) CloseIdleConnections() { r.cur.Load().CloseIdleConnections() }

// Rotations returns how many times the clone has been replaced.
func (r *Transport) Rotations() int64 { return r.rotations.Load() }
