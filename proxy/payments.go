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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/robotsgate/robotsgate/proxy/answer"
	"github.com/robotsgate/robotsgate/proxy/header"
	"github.com/robotsgate/robotsgate/proxy/pay"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// removePriceOffers deletes a client's price offers from h
// (crawler-exact-price, crawler-max-price), in every spelling a site may
// read as them (Crawler_Max_Price too): an offer signed with robotsgate's
// identity is the operator's, and every payment goes through the budget.
func removePriceOffers(h http.Header) {
	header.RemoveSpellings(h, "crawler-exact-price", "crawler-max-price")
}

// reasonFree is the audit's reason for a 402 to a path never paid for.
const reasonFree = "a path never paid for (robots.txt, sitemap.xml, security.txt, crawlers.json): the site's 402 passed on, nothing paid"

// pay settles a site's 402 to the request when pay-per-crawl is on
// ([payments]), as pay.Negotiator.Settle does: a price within max_price,
// while the day's budget has room for it, is accepted once, the request
// sent again naming it, signed as every request is (payAgain); the site's
// answer then goes to the client, and what it charged is spent, audited
// and counted. A path never paid for (pay.Free) is not: its 402 is passed
// on and audited. A refused price is answered by robotsgate: 402
// price-refused, nothing paid. A 402 that names no price, or any other
// answer, is the site's own, passed on.
func (f *forwarding) pay(resp *http.Response) *http.Response {
	maxPrice, budget, on := f.sn.pol.Payments()
	if f.offer.amount.Currency != "" && f.settleOffer(resp) || resp.StatusCode != http.StatusPaymentRequired || !on {
		// The site's answer is the client's: a code it names is
		// audited. (A 402 about to be paid is not: its code,
		// MissingCrawlerPrice, is the protocol's first step.)
		f.noteCrawlerError(resp)
		return resp
	}
	if pay.Free(f.req.Target) {
		// Never paid for, whoever asks: the site's 402 is passed on, as
		// one that names no price is, and audited.
		f.up.audited = true
		f.d.Reason = "pay-per-crawl: " + reasonFree
		return resp
	}
	s, d := f.s, f.d
	n := f.negotiator()
	o := pay.Offer{Resp: resp, Client: f.client, Day: pay.Day(s.opts.Now()), URL: answer.DisplayURL(f.out), Content: f.req.Content}
	stated := resp.Header.Get(pay.FieldPrice)
	st := n.Settle(&o, f.terms(maxPrice, budget), f.payAgain)
	if st.Result != "" {
		s.metrics.payments.WithLabelValues(st.Result).Inc()
	}
	f.spend(o.Day, st.Charged)
	switch {
	case st.Left: // nobody to answer, and no refusal of the price
		f.own = true
		d.Action, d.Reason = policy.ActionClientLeft, "pay-per-crawl: "+st.Why
		return s.respond(f.out, d)
	case st.Refused:
		f.own = true
		d.Action, d.Reason = policy.ActionPriceRefused, "price refused: "+st.Why
		body := fmt.Sprintf("robotsgate: %s asks for a payment robotsgate does not make\n\nprice:       %s\nmax_price:   %s\nbudget left: %s\nreason:      %s\n",
			o.URL, stated, maxPrice, n.Left(o.Day, budget), st.Why)
		status := http.StatusPaymentRequired
		if st.Status != 0 {
			status = st.Status
		}
		if st.Code != "" {
			body += fmt.Sprintf("crawler-error: %s (%s)\n", st.Code, pay.Describe(st.Code))
		}
		out := answer.Text(f.out, status, policy.ActionPriceRefused, s.opts.Now(), body)
		out.Header.Set(pay.FieldPrice, stated) // the site's own offer, for the client to see
		if st.Code != "" {
			out.Header.Set(pay.FieldError, st.Code) // read by ParseError: letters and digits only
		}
		return out
	case st.Err != nil:
		f.own = true
		out := s.upstreamFailure(f.sn.pol, f.out, f.client, d.Origin.HostPort(), st.Err, d)
		f.notePayment(st.Note())
		return out
	}
	f.noteCrawlerError(st.Resp) // the paid request's answer, or the 402 that named no price
	f.notePayment(st.Note())
	f.up.answered = st.Resp.StatusCode
	return st.Resp
}

// notePayment adds note, what pay-per-crawl has to say of the request
// (pay.Settlement.Note), to its audit record's reason, and has it audited
// whatever log_allowed says; nothing for "".
func (f *forwarding) notePayment(note string) {
	if note == "" {
		return
	}
	f.up.audited = true
	f.d.Reason += "; pay-per-crawl: " + note
}

// negotiator returns the pay.Negotiator of the request's payments: the
// server's budget and what its requests in flight hold of it.
func (f *forwarding) negotiator() pay.Negotiator {
	return pay.Negotiator{Budget: f.s.budget, Holds: f.s.holds, Logger: f.s.log}
}

// terms are the payments' terms: [payments]' amounts, and a price waits
// at most upstream.timeout for offers in flight to settle, the longest an
// offer's request waits for its answer's header.
func (f *forwarding) terms(maxPrice, budget pay.Amount) pay.Terms {
	return pay.Terms{MaxPrice: maxPrice, Budget: budget, Wait: f.sn.pol.Config().Upstream.Timeout}
}

// noteCrawlerError audits a site's error answer that names a
// crawler-error code (pay.ParseError), whether or not pay-per-crawl is
// on: the record's reason names the code, whatever log_allowed says.
func (f *forwarding) noteCrawlerError(resp *http.Response) {
	if resp.StatusCode < 400 {
		return
	}
	if code := pay.ParseError(resp.Header.Get(pay.FieldError)); code != "" {
		f.up.audited = true
		f.d.Reason = fmt.Sprintf("the site answered %d, %s", resp.StatusCode, pay.Explain(code))
	}
}

// payAgain sends the request once more, naming price, on a connection of
// its own (see paidTransport). Whether a connection was had tells a
// request that may have reached the site from one that never left.
func (f *forwarding) payAgain(price string) (*http.Response, bool, error) {
	var connected atomic.Bool
	sendCtx := httptrace.WithClientTrace(context.WithValue(f.out.Context(), sendOnceKey{}, new(atomic.Bool)),
		&httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }})
	again := f.out.Clone(sendCtx)
	again.Header.Del(pay.FieldMaxPrice) // one price field per request (ConflictingPriceHeaders)
	again.Header.Set(pay.FieldExactPrice, price)
	if signer := f.signer(); signer != nil {
		// A fresh signature that covers the price accepted too: it cannot
		// be replayed with another.
		signer.SignWith(again.Header, again.Host, pay.FieldExactPrice)
		f.s.metrics.signed.Inc()
	}
	paid, err := f.sn.out.paid.RoundTrip(again)
	return paid, connected.Load(), err
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
func newPaymentMetrics(reg *prometheus.Registry) (payments *prometheus.CounterVec, spent *spentMetric) {
	payments = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "robotsgate_payments_total",
		Help: "Sites' 402s with a price, by result: paid, over-price, over-budget, failed (a second 402, a request with content, a budget that cannot be checked, an answer lost), counter-rewound (the day's spending went backwards or vanished: nothing more paid that day).",
	}, []string{"result"})
	spent = &spentMetric{desc: prometheus.NewDesc("robotsgate_spent_total",
		"What sites charged for requests (pay-per-crawl), by currency: the currency of [payments] max_price only. Summed in billionths, exactly, as the budget is.",
		[]string{"currency"}, nil)}
	reg.MustRegister(payments, spent)
	for _, r := range pay.Results() {
		payments.WithLabelValues(r)
	}
	return payments, spent
}

// spentMetric is robotsgate_spent_total: a counter by currency, read
// from what pay.Tally sums in billionths when /metrics is scraped, so
// that it is exact (a prometheus.Counter adds floats: 0.005 four times
// and 0.065 is 0.08499999999999999).
type spentMetric struct {
	desc  *prometheus.Desc
	tally pay.Tally
}

// Add counts a, spent.
func (m *spentMetric) Add(a pay.Amount) { m.tally.Add(a) }

// Describe implements prometheus.Collector.
func (m *spentMetric) Describe(ch chan<- *prometheus.Desc) { ch <- m.desc }

// Collect implements prometheus.Collector.
func (m *spentMetric) Collect(ch chan<- prometheus.Metric) {
	for _, a := range m.tally.Totals() {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, a.Float(), a.Currency)
	}
}

// priceOffer is a crawler-max-price a request carries: reserved from
// day's budget before it is sent (offerPrice).
type priceOffer struct {
	amount    pay.Amount   // zero when none is offered
	day       string       // the UTC day it is reserved on
	connected *atomic.Bool // whether the request had a connection to the site
}

// offerPrice offers crawler-max-price when the origin charged today for
// a request in the same place (pay.Place: the same section of its paths,
// "/news/..." or its root, and the same kind of request, a page or a
// ".css", a sub-resource or not), so that the site can charge at once,
// saving the 402 and the retry (Server.charging): the lower of
// max_price and the budget left, reserved first, as a price accepted is
// (pay.Negotiator.ReserveOffer). A path never paid for, a budget with
// nothing left, a price waiting for offers to settle, and an origin that
// lost an answer to an offer today offer nothing. An offered request
// goes as a paid one does (roundTrip); any other stays on the pooled
// transport.
func (f *forwarding) offerPrice() {
	maxPrice, budget, on := f.sn.pol.Payments()
	if !on || f.sn.signer == nil {
		return
	}
	// Most origins never charge: that is asked first, the request's
	// place (its header read) and the path's normalisation (pay.Free)
	// only for one that did.
	day, origin := pay.Day(f.s.opts.Now()), f.d.Origin.String()
	if !f.s.charging.Charging(day, origin) || !f.s.charging.Charged(day, origin, f.place()) || pay.Free(f.req.Target) {
		return
	}
	n := f.negotiator()
	offer, ok := n.ReserveOffer(day, f.terms(maxPrice, budget))
	if !ok {
		return
	}
	f.offer = priceOffer{amount: offer, day: day, connected: new(atomic.Bool)}
	f.out.Header.Set(pay.FieldMaxPrice, offer.String())
}

// roundTrip sends the request upstream: one that offers a price as a
// paid request is sent, once, on a connection of its own (paidTransport),
// since the site may charge for it at once.
func (f *forwarding) roundTrip() (*http.Response, error) {
	if f.offer.amount.Currency == "" {
		return f.sn.out.send.RoundTrip(f.out)
	}
	connected := f.offer.connected
	ctx := httptrace.WithClientTrace(context.WithValue(f.out.Context(), sendOnceKey{}, new(atomic.Bool)),
		&httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }})
	return f.sn.out.paid.RoundTrip(f.out.WithContext(ctx))
}

// settleOffer settles a crawler-max-price offer by the site's answer, and
// reports whether that is the client's (not a 402, which is then settled
// as any other: the exact-price retry).
func (f *forwarding) settleOffer(resp *http.Response) bool {
	n := f.negotiator()
	o := pay.Offer{Resp: resp, Client: f.client, Day: f.offer.day, URL: answer.DisplayURL(f.out)}
	st := n.SettleOffer(&o, f.offer.amount)
	if st.Resp == nil {
		return false
	}
	if st.Result != "" {
		f.s.metrics.payments.WithLabelValues(st.Result).Inc()
	}
	f.spend(o.Day, st.Charged)
	return true
}

// lostOffer settles a crawler-max-price offer whose request got no
// answer, once its failure is answered (its reason set): counted as
// spent if it may have reached the site, as a lost paid answer is, the
// audit's reason saying so; the origin is then offered nothing more that
// day (pay.Recent.Stop), so that a site that loses answers, by accident
// or design, cannot have a free page after another counted at max_price.
func (f *forwarding) lostOffer() {
	if f.offer.amount.Currency == "" {
		return
	}
	n := f.negotiator()
	if charged := n.LostOffer(f.offer.day, f.offer.amount, f.offer.connected.Load()); charged.Currency != "" {
		f.s.metrics.payments.WithLabelValues(pay.Failed).Inc()
		f.up.charged = charged
		f.s.metrics.spent.Add(charged)
		f.s.charging.Stop(f.offer.day, f.d.Origin.String())
		f.notePayment("the answer to a crawler-max-price offer was lost after its connection to the site was made, so the site may have charged it: the offer " + charged.String() + " is counted as spent, and this origin is offered nothing more today")
	}
}

// spend accounts for what a site charged on day (nothing when zero): the
// audit's charged, robotsgate_spent_total, and the request's place of
// the origin remembered as one that charges (offerPrice).
func (f *forwarding) spend(day string, charged pay.Amount) {
	if charged.Currency == "" {
		return
	}
	f.up.charged = charged
	f.s.metrics.spent.Add(charged)
	f.s.charging.Mark(day, f.d.Origin.String(), f.place())
}

// place is where the request falls among its origin's paths, as charges
// are remembered (pay.PlaceOf): its target as decided, and the client's
// Sec-Fetch-Dest and Accept.
func (f *forwarding) place() pay.Place {
	return pay.PlaceOf(f.req.Target, f.in.Header)
}
