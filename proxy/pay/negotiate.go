package pay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// The pay-per-crawl fields (docs/identity.md, "Pay-per-crawl (HTTP 402)"): a site's 402
// names its price; the request sent again names the price accepted; the
// site's answer names what it charged.
const (
	FieldPrice      = "Crawler-Price"
	FieldExactPrice = "Crawler-Exact-Price"
	FieldCharged    = "Crawler-Charged"
)

// Results of a site's 402 with a price: robotsgate_payments_total's
// labels.
const (
	Paid       = "paid"
	OverPrice  = "over-price"
	OverBudget = "over-budget"
	Failed     = "failed"
	// Rewound: the day's spending went backwards or vanished (a fleet's
	// counter reset in Redis): nothing more is paid that day.
	Rewound = "counter-rewound"
)

// Results are every result, in the order the metric lists them.
func Results() []string { return []string{Paid, OverPrice, OverBudget, Failed, Rewound} }

// BudgetTimeout bounds a call to a Budget (the fleet's, in Redis).
const BudgetTimeout = 2 * time.Second

// Terms are what pay-per-crawl accepts ([payments]): a price at most
// MaxPrice, while the day's spending stays within Budget. Wait is the
// longest a price that does not fit only because of what this process's
// crawler-max-price offers in flight hold waits for them to settle (the
// proxy's upstream.timeout, which bounds how long an offer's request
// waits for its answer); 0 does not wait.
type Terms struct {
	MaxPrice, Budget Amount
	Wait             time.Duration
}

// A Negotiator settles sites' 402s (docs/identity.md, "Pay-per-crawl
// (HTTP 402)") against its Budget, keeping what its requests in flight
// hold in Holds (nil: nothing told apart from spending, nor waited for).
// The zero Logger discards.
type Negotiator struct {
	Budget Budget
	Holds  *Holds
	Logger *slog.Logger
}

// Send sends the request once more, naming price in FieldExactPrice, and
// returns the site's answer, or an error and whether a connection to the
// site was had (a request that never left cannot have been charged).
type Send func(price string) (resp *http.Response, connected bool, err error)

// Offer is a site's 402 to one request.
type Offer struct {
	Resp    *http.Response  // the 402: its body is closed unread unless it is passed on
	Client  context.Context // the client's: whether anyone is still there to receive what is paid for
	Day     string          // the UTC day it is spent on (Day)
	URL     string          // the request's, for the log
	Content bool            // the request carries content, which is never sent twice
}

// Settlement is how an Offer ended. Result is the metric's label ("" when
// nothing is counted: no price, or a price paid and nothing charged).
// Refused: robotsgate answers 402 price-refused, saying Why; otherwise Err
// is the paid request's failure, or Resp is the answer for the client.
// Charged is what is counted as spent. Code is the site's crawler-error
// code, if it named one (ParseError); Status, when not 0, is the status
// a refusal is answered with (the site's 403), else 402. Retried, when
// not 0, is the status of the site's first answer to the paid request,
// crawler-error InternalError: the request was sent twice, and what is
// settled is the second answer. Left: the client went away before the
// price was paid; nothing was paid or counted (Result ""), and the
// request is its client-left, not a refusal of the price.
type Settlement struct {
	Result  string
	Refused bool
	Left    bool
	Why     string
	Resp    *http.Response
	Err     error
	Charged Amount
	Code    string
	Status  int
	Retried int
}

// Note is what the audit record's reason adds of a Settlement that is
// not a refusal (whose Why says it all): the retry after InternalError,
// and a price counted as spent though the answer was lost; "" for none.
func (s *Settlement) Note() string {
	var notes []string
	if s.Retried != 0 {
		notes = append(notes, retried(s.Retried))
	}
	if s.Err != nil && s.Charged.Currency != "" {
		notes = append(notes, "the paid request's answer was lost after its connection to the site was made: its price "+s.Charged.String()+" is counted as spent, as the site may have charged it")
	}
	return strings.Join(notes, "; ")
}

// retried says that the paid request was sent twice, the site's first
// answer (status) naming InternalError.
func retried(status int) string {
	return fmt.Sprintf("the paid request was retried once, the site's first answer to it being %d, %s", status, Explain(InternalError))
}

// Settle answers o under t: a price within MaxPrice, while the day's
// budget has room for it, is accepted once and the request sent again
// with send; the site's answer then goes to the client, and what it
// charged is spent. A price in another currency or above MaxPrice, a
// spent budget, a request with content (which is not sent twice), a
// budget that cannot be checked, a client gone, a second 402, or a
// crawler-error that is the site's refusal (any code but
// MissingCrawlerPrice and InvalidCrawlerMaxPrice on the 402; a 402 or 403
// with any code to the paid request) is refused: nothing paid, never
// retried. A paid request answered crawler-error InternalError (any
// status) is sent once more, and the second answer settled as the first
// would have been (Retried says so), InternalError again included: a 402
// or 403 refused, any other passed on. A price that does not fit the
// budget only because of what this process's offers in flight hold waits
// for them (Terms.Wait). A 402 that names no price is the site's own
// answer, passed on (Resp).
func (n *Negotiator) Settle(o *Offer, t Terms, send Send) Settlement {
	stated := o.Resp.Header.Get(FieldPrice)
	code := ParseError(o.Resp.Header.Get(FieldError))
	if stated == "" {
		return Settlement{Resp: o.Resp, Code: code}
	}
	if !payable(code) {
		o.Resp.Body.Close()
		s := refused(Failed, "the site's 402 says "+Explain(code)+": not paid, not retried")
		s.Code = code
		return s
	}
	// Closed unread: the connection is not reused, and a site that
	// trickles its 402 holds nothing; nothing of it is needed (nor kept
	// while the price waits for room).
	o.Resp.Body.Close()
	price, s, ok := n.reserve(o, t, stated)
	if !ok {
		return s
	}
	n.Holds.add(o.Day, price, false)
	defer n.Holds.add(o.Day, Amount{Currency: price.Currency, Nanos: -price.Nanos}, false)
	paid, connected, err := send(stated)
	first := 0
	if err == nil && ParseError(paid.Header.Get(FieldError)) == InternalError {
		// The site's own failure, the one code worth a retry: once.
		first = paid.StatusCode
		paid.Body.Close()
		paid, connected, err = send(stated)
	}
	s = n.settlePaid(o, price, paid, connected, err, first)
	s.Retried = first
	return s
}

// settlePaid settles the reservation of price by the paid request's
// answer (or its failure, and whether it had a connection); first is the
// status of the site's first answer when it was retried, else 0.
func (n *Negotiator) settlePaid(o *Offer, price Amount, paid *http.Response, connected bool, err error, first int) Settlement {
	switch {
	case err != nil && !connected:
		// It never left (no connection: refused, a private address, a
		// TLS or next-hop failure): nothing can have been charged.
		n.refund(o.Day, price)
		return Settlement{Result: Failed, Err: err}
	case err != nil:
		// The site may have charged for a request whose answer was lost:
		// the price is counted as spent (the budget keeps the
		// reservation; the audit and the metric say so too), so that
		// nothing ever counts less than may have been spent, and the
		// request is not sent again.
		n.logger().Warn("pay-per-crawl: the paid request's answer was lost; its price is counted as spent", "url", o.URL, "price", price.String(), "err", err)
		return Settlement{Result: Failed, Err: err, Charged: price}
	}
	code := ParseError(paid.Header.Get(FieldError))
	retry, stop := "", ": not retried"
	if first != 0 {
		retry, stop = fmt.Sprintf(", after one retry (its first answer: %d, crawler-error %s)", first, InternalError), ": not retried again"
	}
	switch {
	case paid.StatusCode == http.StatusPaymentRequired && code == "":
		n.refund(o.Day, price)
		paid.Body.Close()
		return refused(Failed, "the site asked again (a second 402)"+retry)
	case (paid.StatusCode == http.StatusPaymentRequired || paid.StatusCode == http.StatusForbidden) && code != "":
		n.refund(o.Day, price)
		paid.Body.Close()
		s := refused(Failed, fmt.Sprintf("the site answered the paid request %d, %s%s%s", paid.StatusCode, Explain(code), retry, stop))
		s.Code, s.Status = code, paid.StatusCode
		return s
	}
	s := Settlement{Resp: paid, Code: code, Charged: n.charged(o, price, paid.Header.Get(FieldCharged))}
	if s.Charged.Currency != "" {
		s.Result = Paid
	}
	return s
}

// refused is the Settlement of a refusal.
func refused(result, why string) Settlement {
	return Settlement{Result: result, Refused: true, Why: why}
}

// left is the Settlement of an offer whose client went away: not paid,
// not counted.
func left(why string) Settlement {
	return Settlement{Refused: true, Left: true, Why: why}
}

// reserve checks stated against t and the budget, and reserves it; it
// returns the price, or the refusal and false.
func (n *Negotiator) reserve(o *Offer, t Terms, stated string) (Amount, Settlement, bool) {
	price, err := ParseAmount(stated)
	switch {
	case err != nil:
		return price, refused(Failed, fmt.Sprintf("the site's price %q does not read as one", stated)), false
	case o.Content:
		return price, refused(Failed, "a request with content is not sent twice"), false
	case price.Currency != t.MaxPrice.Currency:
		return price, refused(OverPrice, fmt.Sprintf("%s is not max_price's currency (max_price %s)", price.Currency, t.MaxPrice)), false
	case price.Nanos > t.MaxPrice.Nanos:
		return price, refused(OverPrice, fmt.Sprintf("%s is more than max_price (%s)", price, t.MaxPrice)), false
	case o.Client.Err() != nil:
		// Nobody would receive what was paid for.
		return price, left("the client left before the price was paid"), false
	}
	spent, ok, waited, err := n.reserveWaiting(o, price, t)
	switch {
	case errors.Is(err, ErrCounterRewound):
		// Logged once, when it was found (cluster.Client.Counter); each
		// refusal is counted and says why.
		return price, refused(Rewound, "the day's spending counter went backwards or vanished, so what was paid today cannot be known: nothing more is paid today ("+err.Error()+")"), false
	case err != nil:
		n.logger().Warn("pay-per-crawl: the budget cannot be checked: paying nothing", "err", err)
		return price, refused(Failed, "the budget cannot be checked now: "+err.Error()), false
	case !ok && waited > 0 && o.Client.Err() != nil:
		return price, left("the client left while the price waited for crawler-max-price offers in flight to settle"), false
	case !ok:
		offers, prices := n.Holds.Held(o.Day, price.Currency)
		why := fmt.Sprintf("%s would take today's spending past the budget (%s)", price, breakdown(spent, offers, prices))
		if waited > 0 {
			why += fmt.Sprintf(", after waiting %v for offers in flight to settle", waited.Round(time.Millisecond))
		}
		return price, refused(OverBudget, why), false
	}
	return price, Settlement{}, true
}

// reserveWaiting reserves price on o's day within t.Budget, as
// Budget.Reserve does. A price that does not fit only because of what
// this process's crawler-max-price offers in flight hold (Holds) waits
// for them to settle, each settled offer trying again, at most t.Wait;
// while it waits no new offer is made (ReserveOffer), so that offers
// cannot starve it. It stops waiting when the client leaves, and when
// what offers still hold could no longer make room. It returns what was
// spent (before, when it did not fit) and how long it waited.
func (n *Negotiator) reserveWaiting(o *Offer, price Amount, t Terms) (spent Amount, ok bool, waited time.Duration, err error) {
	var settled <-chan struct{}
	var deadline <-chan time.Time
	var start time.Time
	for {
		ctx, cancel := context.WithTimeout(context.Background(), BudgetTimeout)
		spent, ok, err = n.Budget.Reserve(ctx, o.Day, price, t.Budget)
		cancel()
		if err != nil || ok || n.Holds == nil || t.Wait <= 0 {
			break
		}
		if offers, _ := n.Holds.Held(o.Day, price.Currency); offers.Nanos < spent.Nanos+price.Nanos-t.Budget.Nanos {
			break // the offers settled with nothing given back could not make room
		}
		if settled == nil {
			// Watched from now, and tried again before waiting: an offer
			// settled in between is not missed. (Only a price that does
			// not fit watches: a settled offer no one watches costs
			// nothing.)
			settled = n.Holds.changes()
			start = time.Now()
			timer := time.NewTimer(t.Wait)
			defer timer.Stop()
			deadline = timer.C
			n.Holds.wait(1)
			defer n.Holds.wait(-1)
			continue
		}
		if !awaitSettled(settled, deadline, o.Client.Done()) {
			break
		}
		settled = n.Holds.changes()
	}
	if deadline != nil {
		waited = time.Since(start)
	}
	return spent, ok, waited, err
}

// awaitSettled reports whether settled was closed before deadline, or
// before the client left.
func awaitSettled(settled <-chan struct{}, deadline <-chan time.Time, left <-chan struct{}) bool {
	select {
	case <-settled:
		return true
	case <-deadline:
	case <-left:
	}
	return false
}

// breakdown says what spent, as a Budget counts it, is made of: what is
// spent, and what offers and paid requests in flight hold of it.
func breakdown(spent, offers, prices Amount) string {
	done := Amount{Currency: spent.Currency, Nanos: max(spent.Nanos-offers.Nanos-prices.Nanos, 0)}
	s := done.String() + " spent"
	if offers.Nanos > 0 {
		s += ", " + offers.String() + " held by crawler-max-price offers in flight"
	}
	if prices.Nanos > 0 {
		s += ", " + prices.String() + " held by paid requests in flight"
	}
	return s
}

// charged settles the reservation of price against what the site says it
// charged (FieldCharged, "" for nothing) and returns what is spent.
func (n *Negotiator) charged(o *Offer, price Amount, field string) Amount {
	charged, err := ParseAmount(field)
	switch {
	case field == "":
		n.refund(o.Day, price) // nothing charged: the reservation is given back
		return Amount{}
	case err != nil || charged.Currency != price.Currency:
		// A charge that does not read is taken at the price accepted:
		// the budget never counts less than may have been spent.
		n.logger().Warn("pay-per-crawl: a charge that does not read as one: counted at the price accepted", "url", o.URL, "crawler-charged", field, "price", price.String())
		return price
	}
	switch extra := (Amount{Currency: price.Currency, Nanos: charged.Nanos - price.Nanos}); {
	case extra.Nanos < 0:
		n.refund(o.Day, Amount{Currency: price.Currency, Nanos: -extra.Nanos})
	case extra.Nanos > 0:
		// Counted whole, past the budget if it must be: the budget, the
		// audit and the metric agree on what was charged, and the day's
		// payments stop sooner.
		n.logger().Warn("pay-per-crawl: the site charged more than the price accepted", "url", o.URL, "charged", charged.String(), "price", price.String())
		ctx, cancel := context.WithTimeout(context.Background(), BudgetTimeout)
		if _, _, err := n.Budget.Reserve(ctx, o.Day, extra, Unbounded(extra.Currency)); err != nil {
			n.logger().Warn("pay-per-crawl: an overcharge could not be counted in the budget", "amount", extra.String(), "err", err)
		}
		cancel()
	}
	return charged
}

// refund gives back a reservation, or the part of it not charged.
func (n *Negotiator) refund(day string, a Amount) {
	ctx, cancel := context.WithTimeout(context.Background(), BudgetTimeout)
	defer cancel()
	if err := n.Budget.Refund(ctx, day, a); err != nil {
		n.logger().Warn("pay-per-crawl: a reservation could not be given back", "amount", a.String(), "err", err)
	}
}

// Left says what is left of budget on day, for a refusal's answer:
// "USD 0.02 of USD 0.03 today (UTC)", then, when requests in flight hold
// some of it, what is spent and what they hold; the budget may not be
// readable just then.
func (n *Negotiator) Left(day string, budget Amount) string {
	ctx, cancel := context.WithTimeout(context.Background(), BudgetTimeout)
	defer cancel()
	spent, err := n.Budget.Spent(ctx, day, budget.Currency)
	if err != nil {
		return "unknown (the budget cannot be read now)"
	}
	s := Amount{Currency: budget.Currency, Nanos: max(budget.Nanos-spent.Nanos, 0)}.String() + " of " + budget.String() + " today (UTC)"
	if offers, prices := n.Holds.Held(day, budget.Currency); offers.Nanos > 0 || prices.Nanos > 0 {
		s += "; " + breakdown(spent, offers, prices)
	}
	return s
}

func (n *Negotiator) logger() *slog.Logger {
	if n.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return n.Logger
}

// FieldMaxPrice offers a price before any 402 (docs/identity.md,
// "crawler-max-price"): the most the request may be charged, at once.
const FieldMaxPrice = "Crawler-Max-Price"

// ReserveOffer reserves a crawler-max-price offer on day: the lower of
// t.MaxPrice and what is left of t.Budget, as a price accepted is reserved
// before it is sent, and held (Holds) until SettleOffer or LostOffer. It
// returns false, nothing reserved, when nothing is left, the budget
// cannot be read, or a site's price waits for offers to settle
// (Holds.Waiting): the request then goes unpriced, and a 402 is settled
// as always.
func (n *Negotiator) ReserveOffer(day string, t Terms) (Amount, bool) {
	if n.Holds.Waiting() > 0 {
		return Amount{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), BudgetTimeout)
	defer cancel()
	offer := t.MaxPrice
	spent, ok, err := n.Budget.Reserve(ctx, day, offer, t.Budget)
	if err != nil {
		return Amount{}, false
	}
	if !ok {
		offer.Nanos = min(offer.Nanos, t.Budget.Nanos-spent.Nanos)
		if offer.Nanos <= 0 {
			return Amount{}, false
		}
		if _, ok, err = n.Budget.Reserve(ctx, day, offer, t.Budget); err != nil || !ok {
			return Amount{}, false
		}
	}
	n.Holds.add(day, offer, true)
	return offer, true
}

// SettleOffer settles the reservation of offered, a crawler-max-price
// offer on o's day, by the site's answer to it: a 402 gives it back (the
// 402 is then settled as any other, with Settle); any other answer is
// the client's, and what it charged (FieldCharged) is spent, as a price
// accepted is (Settle).
func (n *Negotiator) SettleOffer(o *Offer, offered Amount) Settlement {
	defer n.Holds.add(o.Day, Amount{Currency: offered.Currency, Nanos: -offered.Nanos}, true)
	if o.Resp.StatusCode == http.StatusPaymentRequired {
		n.refund(o.Day, offered)
		return Settlement{}
	}
	s := Settlement{Resp: o.Resp, Code: ParseError(o.Resp.Header.Get(FieldError)), Charged: n.charged(o, offered, o.Resp.Header.Get(FieldCharged))}
	if s.Charged.Currency != "" {
		s.Result = Paid
	}
	return s
}

// LostOffer settles the reservation of offered when the request that
// carried it got no answer: given back when it never left (no
// connection), else counted as spent, as a lost paid answer is (the site
// may have charged it; the caller offers that origin nothing more that
// day, Recent.Stop).
func (n *Negotiator) LostOffer(day string, offered Amount, connected bool) Amount {
	defer n.Holds.add(day, Amount{Currency: offered.Currency, Nanos: -offered.Nanos}, true)
	if !connected {
		n.refund(day, offered)
		return Amount{}
	}
	return offered
}
