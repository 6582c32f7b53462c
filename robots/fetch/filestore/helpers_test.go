package filestore

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// fakeClock is a clock tests move by hand.
type fakeClock = testkit.Clock

func newFakeClock() *fakeClock {
	return testkit.NewClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
}

// origin serves robots.txt with handler and counts its requests.
type origin struct {
	*httptest.Server
	hits atomic.Int64
}

func newOrigin(t *testing.T, handler http.HandlerFunc) *origin {
	t.Helper()
	o := &origin{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.hits.Add(1)
		handler(w, r)
	}))
	t.Cleanup(o.Close)
	return o
}

// count returns how many times robots.txt was asked for.
func (o *origin) count() int64 { return o.hits.Load() }

func (o *origin) origin(t *testing.T) fetch.Origin {
	t.Helper()
	or, err := fetch.ParseOrigin(o.URL)
	if err != nil {
		t.Fatal(err)
	}
	return or
}

func newTestCache(t *testing.T, clock *fakeClock, opts fetch.CacheOptions) *fetch.Cache {
	t.Helper()
	opts.Now = clock.Now
	opts.Fetcher = fetch.NewFetcher(fetch.FetcherOptions{Now: clock.Now, Timeout: 2 * time.Second})
	c, err := fetch.NewCache(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func mustGet(t *testing.T, c *fetch.Cache, o fetch.Origin) fetch.Answer {
	t.Helper()
	a, err := c.Get(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// oneBody is a transport that answers every robots.txt with its bytes,
// from memory, without a socket.
type oneBody []byte

func (b oneBody) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain"}},
		Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b)), Request: req,
	}, nil
}

// siteOrigin is the origin siteN.test.
func siteOrigin(i int) fetch.Origin {
	return fetch.Origin{Scheme: "http", Host: fmt.Sprintf("site%d.test", i), Port: 80}
}
