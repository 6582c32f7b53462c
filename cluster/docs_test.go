package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage"
	"github.com/robotsgate/robotsgate/usage/source"
)

// TestDocStore: a usage file one instance fetched is shared through Redis:
// another instance's cache answers from it without fetching, until it
// expires; a stored value for another URL, or one not sealed with the
// fleet's secret, is ignored and counted.
func TestDocStore(t *testing.T) {
	r := redistest.Start(t)
	var fetches atomic.Int64
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fetches.Add(1)
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write([]byte(`[{"location": "/news/*", "tdm-reservation": 1}]`))
	}))
	defer o.Close()
	url := o.URL + "/.well-known/tdmrep.json"
	files := func(c *Client) *fetch.DocCache[*source.TDMRep] {
		return fetch.NewDocCache(fetch.DocCacheOptions[*source.TDMRep]{
			Fetcher: fetch.NewFetcher(fetch.FetcherOptions{Timeout: 2 * time.Second}),
			Parse:   func(_ string, b []byte) (*source.TDMRep, error) { return source.ParseTDMRep(b) },
			Store:   c,
		})
	}
	a, b := newClient(t, r, nil, time.Second), newClient(t, r, nil, time.Second)
	ctx := t.Context()
	for i, c := range []*Client{a, b} {
		d, err := files(c).Get(ctx, url)
		if err != nil || !d.Good() || d.Value.Usage("/news/x")[usage.AITrain].State != usage.Refused {
			t.Fatalf("instance %d: %+v, %v; want the file", i, d, err)
		}
		// The answer is stored once its waiters have it.
		if i == 0 {
			testkit.Eventually(t, "the fetched file to be stored", func() bool { d, _ := a.LoadDoc(ctx, url); return d != nil })
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("%d fetches by two instances; want 1 (the second read it from Redis)", n)
	}

	// Foreign values: another URL's, and one sealed with another secret.
	other := newClientWith(t, r, nil, Options{Secret: []byte("another secret, as long as a fleet's")})
	good, err := a.LoadDoc(ctx, url)
	if err != nil || good == nil {
		t.Fatalf("LoadDoc: %v, %v", good, err)
	}
	if err := a.SaveDoc(ctx, o.URL+"/license.xml", good); err != nil { // this URL's answer under another's key
		t.Fatal(err)
	}
	if err := other.SaveDoc(ctx, o.URL+"/other.json", good); err != nil {
		t.Fatal(err)
	}
	before := a.Status().Errors
	for _, u := range []string{o.URL + "/license.xml", o.URL + "/other.json"} {
		if d, err := a.LoadDoc(ctx, u); d != nil || err != nil {
			t.Errorf("LoadDoc(%s) of a foreign value = %+v, %v; want nothing", u, d, err)
		}
	}
	if got := a.Status().Errors - before; got != 2 {
		t.Errorf("%d errors counted for 2 foreign values; want 2", got)
	}
	// A stored answer expires with the file.
	expired := *good
	expired.Expires = time.Now().Add(-time.Second)
	if err := a.SaveDoc(context.Background(), o.URL+"/gone.json", &expired); err != nil {
		t.Fatal(err)
	}
	if d, _ := a.LoadDoc(ctx, o.URL+"/gone.json"); d != nil {
		t.Errorf("an expired answer was stored: %+v", d)
	}
}

// TestDocStorePurge: a purge of a usage file in one instance deletes the
// fleet's copy: another instance, whose own copy is forgotten as a purge
// message makes it, fetches the file again rather than read the old one.
func TestDocStorePurge(t *testing.T) {
	r := redistest.Start(t)
	var fetches atomic.Int64
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		fetches.Add(1)
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write([]byte(`[]`))
	}))
	defer o.Close()
	url := o.URL + "/.well-known/tdmrep.json"
	cache := func(c *Client) *fetch.DocCache[*source.TDMRep] {
		return fetch.NewDocCache(fetch.DocCacheOptions[*source.TDMRep]{
			Fetcher: fetch.NewFetcher(fetch.FetcherOptions{Timeout: 2 * time.Second}),
			Parse:   func(_ string, b []byte) (*source.TDMRep, error) { return source.ParseTDMRep(b) },
			Store:   c,
		})
	}
	a, b := newClient(t, r, nil, time.Second), newClient(t, r, nil, time.Second)
	ca, cb := cache(a), cache(b)
	ctx := t.Context()
	if _, err := ca.Get(ctx, url); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the fetched file to be stored", func() bool { d, _ := a.LoadDoc(ctx, url); return d != nil })
	ca.Purge(url)
	if d, err := b.LoadDoc(ctx, url); d != nil || err != nil {
		t.Fatalf("after a purge, the fleet's copy: %+v, %v; want none", d, err)
	}
	cb.Forget(url) // as the purge message has it
	if _, err := cb.Get(ctx, url); err != nil {
		t.Fatal(err)
	}
	if n := fetches.Load(); n != 2 {
		t.Errorf("%d fetches; want 2 (the second instance fetched the purged file again)", n)
	}
}
