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
	dir := t.TempDir()
	clock := newFakeClock()

	// Started without the site's CA: tls-verify, remembered here.
	untrusted := x509.NewCertPool()
	first := newTestCache(t, clock, CacheOptions{Fetcher: fetcher(clock, untrusted), Store: openTestStore(t, dir, 1<<20, nil)})
	a := mustGet(t, first, o)
	if !a.Unreachable || a.LastKind != "tls-verify" {
		t.Fatalf("without the site's CA: %+v; want unreachable, tls-verify", a)
	}
	if a = mustGet(t, first, o); !a.Unreachable || a.LastKind != "tls-verify" {
		t.Errorf("again, within retry_after: %+v; want the failure remembered", a)
	}
	first.Close() // waits for any write to the store
	if rec, err := openTestStore(t, dir, 1<<20, nil).Load(t.Context(), o); err != nil || rec.Failure != nil {
		t.Errorf("stored after a tls-verify failure: %+v, %v; want no failure marks", rec.Failure, err)
	}

	// Restarted with it, within retry_after: fetched at once.
	second := newTestCache(t, clock, CacheOptions{Fetcher: fetcher(clock, pool), Store: openTestStore(t, dir, 1<<20, nil)})
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
