package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// benchCache is a Cache whose fetcher reaches one local origin under any
// host name, with store (nil: none).
func benchCache(b *testing.B, store fetch.Store) *fetch.Cache {
	b.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "User-agent: *\nDisallow: /private\nCrawl-delay: 1\n")
	}))
	b.Cleanup(srv.Close)
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
	}
	c, err := fetch.NewCache(fetch.CacheOptions{
		Fetcher: fetch.NewFetcher(fetch.FetcherOptions{Transport: fetch.NewTransport(fetch.TransportOptions{DialContext: dial})}),
		Store:   store,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

// BenchmarkClusterCache compares, in one run, a cache alone with one
// whose store is the fleet's Redis: a hit (which must cost nothing more:
// no Redis call) and a cold origin (one store read, the lock, the fetch,
// and the write after it).
func BenchmarkClusterCache(b *testing.B) {
	r := redistest.Start(b)
	client, err := New(Options{URL: r.URL(), Prefix: "rgbench:", Secret: testSecret})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	for _, tc := range []struct {
		name  string
		store fetch.Store
	}{{"alone", nil}, {"cluster", client}} {
		b.Run("hit/"+tc.name, func(b *testing.B) {
			c := benchCache(b, tc.store)
			o := fetch.Origin{Scheme: "http", Host: "warm.example", Port: 80}
			if _, err := c.Get(b.Context(), o); err != nil {
				b.Fatal(err)
			}
			c.Wait()
			b.ReportAllocs()
			for b.Loop() {
				if a, err := c.Get(b.Context(), o); err != nil || a.Entry == nil {
					b.Fatal(a, err)
				}
			}
		})
		b.Run("cold/"+tc.name, func(b *testing.B) {
			c := benchCache(b, tc.store)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				o := fetch.Origin{Scheme: "http", Host: fmt.Sprintf("%s-%d.example", tc.name, i), Port: 80}
				if a, err := c.Get(b.Context(), o); err != nil || a.Entry == nil {
					b.Fatal(a, err)
				}
			}
		})
	}
}
