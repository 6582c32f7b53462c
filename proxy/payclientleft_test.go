package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/robotsgate/robotsgate/internal/testkit"
)

// TestPayClientLeftWhilePriced: a client that goes away while
// pay-per-crawl weighs the site's price (here: the price waits for a
// crawler-max-price offer in flight to settle) is client-left, nothing
// paid, not price-refused counted failed.
func TestPayClientLeftWhilePriced(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var held atomic.Int64
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/robots.txt":
			io.WriteString(w, "User-agent: *\nAllow: /\n")
		case r.URL.Path == "/hold": // an offer in flight, its price held
			held.Add(1)
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.Header().Set("Crawler-Charged", "USD 0.01")
		case r.Header.Get("Crawler-Exact-Price") == "USD 0.01":
			w.Header().Set("Crawler-Charged", "USD 0.01")
		default:
			w.Header().Set("Crawler-Price", "USD 0.01")
			w.WriteHeader(http.StatusPaymentRequired)
		}
	}))
	t.Cleanup(o.Close)
	p := payingProxy(t, "USD 0.02", "USD 0.03")
	t.Cleanup(func() { close(release) }) // before the proxy and the origin close
	if resp, body := get(t, p.client(), o.URL+"/a"); resp.StatusCode != 200 {
		t.Fatalf("/a: %d %q; want it paid", resp.StatusCode, body)
	}
	go func() { // the offer of USD 0.02 leaves no room in the budget
		if resp, err := p.client().Get(o.URL + "/hold"); err == nil {
			resp.Body.Close()
		}
	}()
	testkit.Eventually(t, "the offer in flight", func() bool { return held.Load() == 1 })

	c := rawRequest(t, p, &testOrigin{Server: o}, "/b")
	testkit.Eventually(t, "the price waiting", func() bool { return p.srv.holds.Waiting() == 1 })
	c.Close()
	waitForLog(t, p.audit, `"decision":"client-left"`)

	rec := p.lastAudit(t)
	if rec["decision"] != "client-left" || !strings.Contains(rec["reason"].(string), "the client left while the price waited") || rec["url"] != o.URL+"/b" {
		t.Errorf("audit record: %v; want client-left, the client left while the price waited", rec)
	}
	if got := testutil.ToFloat64(p.srv.metrics.payments.WithLabelValues("failed")); got != 0 {
		t.Errorf("robotsgate_payments_total{result=\"failed\"} = %v; want 0", got)
	}
}
