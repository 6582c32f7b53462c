package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/robotsgate/robotsgate/proxy/answer"
	"github.com/robotsgate/robotsgate/proxy/header"
	"github.com/robotsgate/robotsgate/proxy/pay"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// The pay-per-crawl fields (docs/identity.md, "Pay-per-crawl (HTTP 402)"): a site's 402
// names its price; the request sent again names the price accepted; the
// site's answer names what it charged.
const (
	fieldPrice      = "Crawler-Price"
	fieldExactPrice = "Crawler-Exact-Price"
	fieldCharged    = "Crawler-Charged"
)

// removePriceOffers deletes a client's price offers from h
// (crawler-exact-price, crawler-max-price), in every spelling a site may
// read as them (Crawler_Max_Price too): an offer signed with robotsgate's
// identity is the operator's, and every payment goes through the budget.
func removePriceOffers(h http.Header) {
	header.RemoveSpellings(h, "crawler-exact-price", "crawler-max-price")
}

// Payment results, robotsgate_payments_total's labels.
const (
	payPaid       = "paid"
	payOverPrice  = "over-price"
	payOverBudget = "over-budget"
	payFailed     = "failed"
	// payRewound: the day's spending went backwards or vanished (a fleet's
	// counter reset in Redis): nothing more is paid that day.
	payRewound = "counter-rewound"
)

// budgetTimeout bounds a call to the budget (the fleet's, in Redis).
const budgetTimeout = 2 * time.Second

// pay answers resp, a site's 402 to the request, when pay-per-crawl is
// on ([payments]): a price within max_price, while the day's budget has
// room for it, is accepted once, the request sent again naming it, signed
// as every request is; the site's answer then goes to the client, and
// what it charged is spent, audited and counted. A price in another
// currency or above max_price, a spent budget, a request with content
// (which is not sent twice), a budget that cannot be checked, or a second
// 402 is answered by robotsgate: 402 price-refused, nothing paid (f.own).
// A 402 that names no price is the site's own answer, passed on, as is
// any other answer.
func (f *forwarding) pay(resp *http.Response) *http.Response {
	if resp.StatusCode != http.StatusPaymentRequired {
		return resp
	}
	resp, f.own = f.payFor(resp)
	if !f.own {
		f.d.Answered = resp.StatusCode
	}
	return resp
}

// payFor is pay's work; it returns the response for the client and
// whether it is robotsgate's own (refused).
func (f *forwarding) payFor(resp *http.Response) (*http.Response, bool) {
	s, sn, r, req, d, client := f.s, f.sn, f.out, f.req, f.d, f.client
	p := sn.pol
	maxPrice, budget, on := p.Payments()
	stated := resp.Header.Get(fieldPrice)
	if !on || stated == "" {
		return resp, false
	}
	day := pay.Day(s.opts.Now())
	bctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), budgetTimeout)
	}
	refuse := func(result, why string) (*http.Response, bool) {
		// Closed unread: the connection is not reused, and a site that
		// trickles its 402 holds nothing.
		resp.Body.Close()
		s.metrics.payments.WithLabelValues(result).Inc()
		d.Action, d.Reason = policy.ActionPriceRefused, "price refused: "+why
		left := "unknown (the budget cannot be read now)"
		ctx, cancel := bctx()
		if spent, err := s.budget.Spent(ctx, day, budget.Currency); err == nil {
			left = pay.Amount{Currency: budget.Currency, Nanos: max(budget.Nanos-spent.Nanos, 0)}.String()
		}
		cancel()
		body := fmt.Sprintf("robotsgate: %s asks for a payment robotsgate does not make\n\nprice:       %s\nmax_price:   %s\nbudget left: %s of %s today (UTC)\nreason:      %s\n",
			answer.DisplayURL(r), stated, maxPrice, left, budget, why)
		out := answer.Text(r, http.StatusPaymentRequired, policy.ActionPriceRefused, s.opts.Now(), body)
		out.Header.Set(fieldPrice, stated) // the site's own offer, for the client to see
		return out, true
	}
	price, err := pay.ParseAmount(stated)
	switch {
	case err != nil:
		return refuse(payFailed, fmt.Sprintf("the site's price %q does not read as one", stated))
	case req.Content:
		return refuse(payFailed, "a request with content is not sent twice")
	case price.Currency != maxPrice.Currency:
		return refuse(payOverPrice, fmt.Sprintf("%s is not max_price's currency", price.Currency))
	case price.Nanos > maxPrice.Nanos:
		return refuse(payOverPrice, fmt.Sprintf("%s is more than max_price", price))
	}
	if client.Err() != nil {
		// Nobody would receive what was paid for.
		return refuse(payFailed, "the client left before the price was paid")
	}
	ctx, cancel := bctx()
	spent, ok, err := s.budget.Reserve(ctx, day, price, budget)
	cancel()
	switch {
	case errors.Is(err, pay.ErrCounterRewound):
		// Logged once, when it was found (cluster.Client.Counter); each
		// refusal is counted and says why.
		return refuse(payRewound, "the day's spending counter went backwards or vanished, so what was paid today cannot be known: nothing more is paid today ("+err.Error()+")")
	case err != nil:
		s.log.Warn("pay-per-crawl: the budget cannot be checked: paying nothing", "err", err)
		return refuse(payFailed, "the budget cannot be checked now: "+err.Error())
	case !ok:
		return refuse(payOverBudget, fmt.Sprintf("%s would take today's spending past the budget (%s spent)", price, spent))
	}
	refund := func(a pay.Amount) {
		ctx, cancel := bctx()
		defer cancel()
		if err := s.budget.Refund(ctx, day, a); err != nil {
			s.log.Warn("pay-per-crawl: a reservation could not be given back", "amount", a.String(), "err", err)
		}
	}
	resp.Body.Close() // unread: nothing of it is needed, and a trickle holds nothing

	// Sent once: on a connection of its own (see paidTransport). Whether
	// a connection was had tells a request that may have reached the site
	// from one that never left.
	var connected atomic.Bool
	sendCtx := httptrace.WithClientTrace(context.WithValue(r.Context(), sendOnceKey{}, new(atomic.Bool)),
		&httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }})
	again := r.Clone(sendCtx)
	again.Header.Set(fieldExactPrice, stated)
	if signer := sn.signer; signer != nil {
		// A fresh signature that covers the price accepted too: it cannot
		// be replayed with another.
		signer.SignWith(again.Header, again.Host, fieldExactPrice)
		s.metrics.signed.Inc()
	}
	paid, err := sn.out.paid.RoundTrip(again)
	if err != nil && !connected.Load() {
		// It never left (no connection: refused, a private address, a
		// TLS or next-hop failure): nothing can have been charged.
		refund(price)
		s.metrics.payments.WithLabelValues(payFailed).Inc()
		return s.upstreamFailure(p, r, d.Origin.HostPort(), err, d), true
	}
	if err != nil {
		// The site may have charged for a request whose answer was lost:
		// the price is counted as spent (the budget keeps the
		// reservation; the audit and the metric say so too), so that
		// nothing ever counts less than may have been spent, and the
		// request is not sent again.
		s.log.Warn("pay-per-crawl: the paid request's answer was lost; its price is counted as spent", "url", answer.DisplayURL(r), "price", price.String(), "err", err)
		s.metrics.payments.WithLabelValues(payFailed).Inc()
		d.Charged = price
		s.metrics.spent.WithLabelValues(price.Currency).Add(price.Float())
		return s.upstreamFailure(p, r, d.Origin.HostPort(), err, d), true
	}
	if paid.StatusCode == http.StatusPaymentRequired {
		refund(price)
		resp = paid
		return refuse(payFailed, "the site asked again (a second 402)")
	}
	charged, err := pay.ParseAmount(paid.Header.Get(fieldCharged))
	switch {
	case paid.Header.Get(fieldCharged) == "":
		refund(price) // nothing charged: the reservation is given back
	case err != nil || charged.Currency != price.Currency:
		// A charge that does not read is taken at the price accepted:
		// the budget never counts less than may have been spent.
		s.log.Warn("pay-per-crawl: a charge that does not read as one: counted at the price accepted", "url", answer.DisplayURL(r), "crawler-charged", paid.Header.Get(fieldCharged), "price", price.String())
		d.Charged = price
	default:
		switch extra := (pay.Amount{Currency: price.Currency, Nanos: charged.Nanos - price.Nanos}); {
		case extra.Nanos < 0:
			refund(pay.Amount{Currency: price.Currency, Nanos: -extra.Nanos})
		case extra.Nanos > 0:
			// Counted whole, past the budget if it must be: the budget,
			// the audit and the metric agree on what was charged, and
			// the day's payments stop sooner.
			s.log.Warn("pay-per-crawl: the site charged more than the price accepted", "url", answer.DisplayURL(r), "charged", charged.String(), "price", price.String())
			ctx, cancel := bctx()
			if _, _, err := s.budget.Reserve(ctx, day, extra, pay.Unbounded(extra.Currency)); err != nil {
				s.log.Warn("pay-per-crawl: an overcharge could not be counted in the budget", "amount", extra.String(), "err", err)
			}
			cancel()
		}
		d.Charged = charged
	}
	if d.Charged.Currency != "" {
		s.metrics.payments.WithLabelValues(payPaid).Inc()
		s.metrics.spent.WithLabelValues(d.Charged.Currency).Add(d.Charged.Float())
	}
	return paid, false
}

// errSentOnce is what a paid request's second connection attempt fails
// with: a paid request is sent once.
var errSentOnce = errors.New("a paid request is sent once: not again on another connection")

// sendOnceKey is the context key of a paid request's one connection: an
// *atomic.Bool, set by its first dial.
type sendOnceKey struct{}

// paidTransport returns the transport a paid request is sent with, so
// that it reaches the site once (docs/identity.md, "Pay-per-crawl (HTTP
// 402)"): tr's settings, but HTTP/1.1 on a connection of its own, closed
// after the answer, and at most one connection per request. net/http's
// Transport resends a request itself only on a connection it reused
// (persistConn.shouldRetryRequest in net/http/transport.go: a GET, HEAD,
// OPTIONS or TRACE, or one with an Idempotency-Key, whose kept-alive
// connection closed before the answer; and, before it reaches the
// origin, one a reused connection did not take), and its HTTP/2 client
// resends a request up to six times after a refused stream or a GOAWAY,
// which a site can send after reading it. A connection that is never
// reused, never HTTP/2, is never resent on; a request whose context holds
// a sendOnceKey is refused a second dial (errSentOnce) whatever the
// Transport's version would try.
func paidTransport(tr *http.Transport) *http.Transport {
	t := tr.Clone()
	t.DisableKeepAlives = true // never reused: never resent (and never pooled)
	t.ForceAttemptHTTP2 = false
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	if t.TLSClientConfig != nil {
		t.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if once, _ := ctx.Value(sendOnceKey{}).(*atomic.Bool); once != nil && once.Swap(true) {
			return nil, errSentOnce
		}
		return dial(ctx, network, addr)
	}
	return t
}

// newPaymentMetrics registers pay-per-crawl's counters on reg.
func newPaymentMetrics(reg *prometheus.Registry) (payments, spent *prometheus.CounterVec) {
	payments = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "robotsgate_payments_total",
		Help: "Sites' 402s with a price, by result: paid, over-price, over-budget, failed (a second 402, a request with content, a budget that cannot be checked, an answer lost), counter-rewound (the day's spending went backwards or vanished: nothing more paid that day).",
	}, []string{"result"})
	spent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "robotsgate_spent_total",
		Help: "What sites charged for requests (pay-per-crawl), by currency: the currency of [payments] max_price only.",
	}, []string{"currency"})
	reg.MustRegister(payments, spent)
	for _, r := range []string{payPaid, payOverPrice, payOverBudget, payFailed, payRewound} {
		payments.WithLabelValues(r)
	}
	return payments, spent
}
