package fetch

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestCacheOwnFailuresNotKept: a fetch that failed on a certificate the
// fetcher's roots do not verify (tls-verify: robotsgate's configuration,
// not the origin) is not written to the Store, nor adopted from it when
// something else wrote it there: a restart with the site's CA added
// fetches at once, instead of answering the failure persisted for
// retry_after. Within one process it is remembered as any failure.
func TestCacheOwnFailuresNotKept(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "User-agent: *\nDisallow: /private\n")
	}))
	t.Cleanup(srv.Close)
	o, err := ParseOrigin(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	fetcher := func(clock *fakeClock, roots *x509.CertPool) *Fetcher {
		return NewFetcher(FetcherOptions{Transport: NewTransport(TransportOptions{RootCAs: roots}), Now: clock.Now})
	}
	store := newMapStore() // the state directory, across restarts
	clock := newFakeClock()

	// Started without the site's CA: tls-verify, remembered here.
	untrusted := x509.NewCertPool()
	first := newTestCache(t, clock, CacheOptions{Fetcher: fetcher(clock, untrusted), Store: store})
	a := mustGet(t, first, o)
	if !a.Unreachable || a.LastKind != "tls-verify" {
		t.Fatalf("without the site's CA: %+v; want unreachable, tls-verify", a)
	}
	if a = mustGet(t, first, o); !a.Unreachable || a.LastKind != "tls-verify" {
		t.Errorf("again, within retry_after: %+v; want the failure remembered", a)
	}
	first.Close() // waits for any write to the store
	if rec, err := store.Load(t.Context(), o); err != nil || rec.Failure != nil {
		t.Errorf("stored after a tls-verify failure: %+v, %v; want no failure marks", rec.Failure, err)
	}

	// Restarted with it, within retry_after: fetched at once.
	second := newTestCache(t, clock, CacheOptions{Fetcher: fetcher(clock, pool), Store: store})
	if a := mustGet(t, second, o); a.Entry == nil || a.Stale || a.Entry.Rules.Allowed("Bot", "http://h/private") {
		t.Errorf("restarted with the site's CA: %+v; want the rules, fetched", a)
	}
	if n := second.Stats().Fetches; n != 1 {
		t.Errorf("the restarted cache made %d fetches; want 1", n)
	}

	// A tls-verify failure another writer stored (an instance still
	// without the CA; an older version) is not adopted; one of the
	// origin's own is.
	for _, tt := range []struct {
		kind  string
		fetch bool
	}{{"tls-verify", true}, {"private-address", true}, {"timeout", false}} {
		now := clock.Now()
		store := &recordStore{rec: Record{Failure: &Failure{UnreachableSince: now.Add(-time.Minute), RetryAt: now.Add(time.Minute), LastError: tt.kind + ": x", LastKind: tt.kind}}}
		c := newTestCache(t, clock, CacheOptions{Fetcher: fetcher(clock, pool), Store: store})
		a := mustGet(t, c, o)
		if fetched := c.Stats().Fetches == 1; fetched != tt.fetch || fetched && a.Entry == nil {
			t.Errorf("a stored %s failure retrying in a minute: %+v, fetched = %v; want fetched = %v", tt.kind, a, fetched, tt.fetch)
		}
	}
}

// swappableTransport sends through the transport stored last, as the
// proxy's does after a reload; before each request it calls enter, if
// set.
type swappableTransport struct {
	rt    atomic.Pointer[http.Transport]
	enter func()
}

func (s *swappableTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if s.enter != nil {
		s.enter()
	}
	return s.rt.Load().RoundTrip(r)
}

// TestRetryOwnFailures: after the roots change (a reload with
// upstream.ca), RetryOwnFailures makes an origin that failed tls-verify
// due at once, robots.txt and usage files alike, within retry_after; a
// failure of the origin's own (a 503) still waits for retry_after; and a
// fetch already in flight when it is called, which may have gone the old
// way, does not keep its tls-verify failure for retry_after either.
func TestRetryOwnFailures(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/robots.txt":
			fmt.Fprint(w, "User-agent: *\nDisallow: /private\n")
		case "/.well-known/tdmrep.json":
			fmt.Fprint(w, "[]")
		}
	}))
	t.Cleanup(srv.Close)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	o, _ := ParseOrigin(srv.URL)
	od, _ := ParseOrigin(down.URL)
	trusted := x509.NewCertPool()
	trusted.AddCert(srv.Certificate())
	tr := &swappableTransport{}
	tr.rt.Store(NewTransport(TransportOptions{RootCAs: x509.NewCertPool()}))
	clock := newFakeClock()
	fetcher := NewFetcher(FetcherOptions{Transport: tr, Now: clock.Now})
	c := newTestCache(t, clock, CacheOptions{Fetcher: fetcher})
	tdm := FileKind{Name: "tdmrep.json", Parse: func(_ string, body []byte) (any, error) { return body, nil }}
	files := NewFiles(FilesOptions{Fetcher: fetcher, Now: clock.Now, Kinds: []FileKind{tdm}})

	if a := mustGet(t, c, o); a.LastKind != "tls-verify" {
		t.Fatalf("robots.txt without the site's CA: %+v; want tls-verify", a)
	}
	if d, err := files.Get(t.Context(), tdm.Name, o.URL("/.well-known/tdmrep.json")); err != nil || d.Outcome != Unreachable {
		t.Fatalf("tdmrep.json without the site's CA: %+v, %v; want unreachable", d, err)
	}
	if a := mustGet(t, c, od); a.LastStatus != http.StatusServiceUnavailable {
		t.Fatalf("an origin answering 503: %+v", a)
	}
	tr.rt.Store(NewTransport(TransportOptions{RootCAs: trusted}))
	if n := c.RetryOwnFailures(); n != 1 {
		t.Errorf("Cache.RetryOwnFailures() = %d; want 1 (the tls-verify origin, not the 503)", n)
	}
	if n := files.RetryOwnFailures(); n != 1 {
		t.Errorf("Files.RetryOwnFailures() = %d; want 1", n)
	}
	if a := mustGet(t, c, o); a.Entry == nil || a.Entry.Rules.Allowed("Bot", "http://h/private") {
		t.Errorf("robots.txt after RetryOwnFailures: %+v; want the rules, fetched at once", a)
	}
	if d, err := files.Get(t.Context(), tdm.Name, o.URL("/.well-known/tdmrep.json")); err != nil || d.Outcome != Fetched {
		t.Errorf("tdmrep.json after RetryOwnFailures: %+v, %v; want fetched at once", d, err)
	}
	fetches := c.Stats().Fetches
	if a := mustGet(t, c, od); a.LastStatus != http.StatusServiceUnavailable || c.Stats().Fetches != fetches {
		t.Errorf("the 503 origin after RetryOwnFailures: %+v, %d fetches more; want its failure kept for retry_after", a, c.Stats().Fetches-fetches)
	}

	// A fetch in flight across the call: it went the old way (no CA).
	srv2 := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "User-agent: *\nAllow: /\n")
	}))
	t.Cleanup(srv2.Close)
	o2, _ := ParseOrigin(srv2.URL)
	entered, release := make(chan struct{}), make(chan struct{})
	old := &swappableTransport{enter: func() { close(entered); <-release }}
	old.rt.Store(NewTransport(TransportOptions{RootCAs: x509.NewCertPool()}))
	c2 := newTestCache(t, clock, CacheOptions{Fetcher: NewFetcher(FetcherOptions{Transport: old, Now: clock.Now})})
	got := make(chan Answer, 1)
	go func() { a, _ := c2.Get(t.Context(), o2); got <- a }()
	<-entered
	c2.RetryOwnFailures()
	old.enter = nil // read by the next fetch only, after this one ends
	close(release)
	if a := <-got; a.LastKind != "tls-verify" {
		t.Fatalf("the fetch in flight: %+v; want tls-verify", a)
	}
	pool2 := x509.NewCertPool()
	pool2.AddCert(srv2.Certificate())
	old.rt.Store(NewTransport(TransportOptions{RootCAs: pool2}))
	if a := mustGet(t, c2, o2); a.Entry == nil {
		t.Errorf("after a fetch in flight across RetryOwnFailures failed tls-verify: %+v; want fetched again at once", a)
	}
}
