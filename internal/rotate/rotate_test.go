package rotate

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
)

// origin is a real server on loopback; every host name is dialled to it,
// so that each name is a host of its own to the transport.
func origin(t *testing.T, h http.HandlerFunc) (*httptest.Server, *http.Transport) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		MaxIdleConnsPerHost: 4,
	}
	return srv, tr
}

func get(t *testing.T, rt http.RoundTripper, host string) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+host+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("GET %s: %v", host, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", host, resp.StatusCode)
	}
}

func TestRotatesAfterEveryDials(t *testing.T) {
	_, tr := origin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
	})
	rt := New(tr, 10)
	for i := range 35 {
		get(t, rt, fmt.Sprintf("h%d.test", i))
	}
	if got := rt.Rotations(); got != 3 {
		t.Errorf("%d rotations after 35 new connections, every 10; want 3", got)
	}
	if tr.DialContext == nil || rt.cur.Load() == tr {
		t.Error("the transport given was changed or used: want a clone")
	}
}

// A connection kept alive is reused across requests, and counts once; a
// rotation closes the old clone's idle connections, and a request in
// flight across it completes, its connection closed after it.
func TestRotationKeepsRequestsAndClosesIdle(t *testing.T) {
	closed := make(chan struct{}, 16)
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") != "" {
			<-release
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	rt := New(&http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}, 2)
	for range 5 {
		get(t, rt, "kept.test") // one connection, reused
	}
	if d := rt.dials.Load(); d != 1 {
		t.Fatalf("%d dials for five requests to one kept-alive host; want 1", d)
	}
	slow := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://slow.test/?slow=1", nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		slow <- err
	}()
	testkit.Eventually(t, "the slow request's connection", func() bool { return rt.dials.Load() >= 2 })
	get(t, rt, "third.test") // rotates first: 2 dials, every 2
	if rt.Rotations() != 1 {
		t.Fatalf("%d rotations; want 1", rt.Rotations())
	}
	close(release)
	if err := <-slow; err != nil {
		t.Errorf("the request in flight across the rotation: %v", err)
	}
	// kept.test's idle connection at the rotation, and slow.test's once
	// its request ended; third.test's, on the fresh clone, stays open.
	timeout := time.After(5 * time.Second)
	for range 2 {
		select {
		case <-closed:
		case <-timeout:
			t.Fatal("the old clone's connections were not closed")
		}
	}
	select {
	case <-closed:
		t.Error("a third connection closed: the fresh clone's idle one should stay")
	case <-time.After(50 * time.Millisecond): // a close that does not come cannot be waited for: a real socket's, not in a bubble
	}
}

// The point of rotating: hosts whose connections never go idle leave
// nothing behind past a rotation.
func TestRotationBoundsPerHostMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("thousands of connections: not with -short")
	}
	const hosts = 3000
	grow := func(rt http.RoundTripper) int64 {
		_, tr := origin(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
		})
		if rt == nil {
			rt = tr
		} else {
			rt = New(tr, 200)
		}
		live := func() int64 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return int64(ms.HeapAlloc)
		}
		before := live()
		for i := range hosts {
			get(t, rt, fmt.Sprintf("h%d.test", i))
		}
		after := live()
		runtime.KeepAlive(rt)
		return after - before
	}
	plain := grow(nil)
	rotated := grow(&Transport{})
	t.Logf("%d hosts that close their connections: heap +%d B plain, +%d B rotated every 200", hosts, plain, rotated)
	if rotated*4 > plain {
		t.Errorf("rotated transport keeps %d B for %d hosts, plain %d B: want under a quarter", rotated, hosts, plain)
	}
}
