package pay

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
)

// TestSettle: each way a site's 402 ends, and what is spent of the budget
// after it.
func TestSettle(t *testing.T) {
	t.Parallel()
	answer := func(status int, fields ...string) *http.Response {
		h := http.Header{}
		for i := 0; i+1 < len(fields); i += 2 {
			h.Set(fields[i], fields[i+1])
		}
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(""))}
	}
	lost := errors.New("connection reset")
	for _, tt := range []struct {
		name      string
		price     string
		content   bool
		again     *http.Response
		connected bool
		err       error
		result    string
		refused   bool
		charged   string // "" for nothing
		spent     int64  // of the budget after, in billionths
	}{
		{"no price: the site's own answer", "", false, nil, false, nil, "", false, "", 0},
		{"paid as asked", "USD 0.01", false, answer(200, FieldCharged, "USD 0.01"), true, nil, Paid, false, "USD 0.01", 10_000_000},
		{"paid, nothing charged", "USD 0.01", false, answer(200), true, nil, "", false, "", 0},
		{"charged less", "USD 0.01", false, answer(200, FieldCharged, "USD 0.004"), true, nil, Paid, false, "USD 0.004", 4_000_000},
		{"charged more: counted whole", "USD 0.01", false, answer(200, FieldCharged, "USD 0.02"), true, nil, Paid, false, "USD 0.02", 20_000_000},
		{"over max_price", "USD 0.50", false, nil, false, nil, OverPrice, true, "", 0},
		{"another currency", "EUR 0.01", false, nil, false, nil, OverPrice, true, "", 0},
		{"over the budget", "USD 0.10", false, nil, false, nil, OverBudget, true, "", 0},
		{"content is not sent twice", "USD 0.01", true, nil, false, nil, Failed, true, "", 0},
		{"a price that does not read", "dollars", false, nil, false, nil, Failed, true, "", 0},
		{"a second 402", "USD 0.01", false, answer(402, FieldPrice, "USD 0.01"), true, nil, Failed, true, "", 0},
		{"never left", "USD 0.01", false, nil, false, lost, Failed, false, "", 0},
		{"answer lost: counted as spent", "USD 0.01", false, nil, true, lost, Failed, false, "USD 0.01", 10_000_000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, _ := NewLocal("")
			usd := func(s string) Amount { a, _ := ParseAmount(s); return a }
			if _, _, err := b.Reserve(t.Context(), "2026-11-28", usd("USD 0.95"), usd("USD 1")); err != nil {
				t.Fatal(err) // what was spent before: USD 0.05 left
			}
			n := Negotiator{Budget: b}
			o := Offer{Resp: answer(402, FieldPrice, tt.price), Client: context.Background(), Day: "2026-11-28", URL: "http://example.com/", Content: tt.content}
			sent := ""
			st := n.Settle(&o, Terms{MaxPrice: usd("USD 0.20"), Budget: usd("USD 1")}, func(price string) (*http.Response, bool, error) {
				sent = price
				return tt.again, tt.connected, tt.err
			})
			if st.Result != tt.result || st.Refused != tt.refused || (st.Charged.Currency != "") != (tt.charged != "") || tt.charged != "" && st.Charged.String() != usd(tt.charged).String() {
				t.Errorf("Settle = result %q, refused %v, charged %v (%s); want %q, %v, %q", st.Result, st.Refused, st.Charged, st.Why, tt.result, tt.refused, tt.charged)
			}
			if !tt.refused && tt.err == nil && st.Resp == nil {
				t.Error("Settle passed no answer on")
			}
			if (sent != "") != (tt.again != nil || tt.err != nil) {
				t.Errorf("sent again with price %q; want a send: %v", sent, tt.again != nil || tt.err != nil)
			}
			if spent, _ := b.Spent(t.Context(), "2026-11-28", "USD"); spent.Nanos-950_000_000 != tt.spent {
				t.Errorf("spent after: %d billionths more; want %d", spent.Nanos-950_000_000, tt.spent)
			}
		})
	}
}

// TestSettleOverPriceReason: a price refused against max_price names
// max_price, so that the audit line and report say what it was compared
// with, not only the 402 body.
func TestSettleOverPriceReason(t *testing.T) {
	t.Parallel()
	usd := func(s string) Amount { a, _ := ParseAmount(s); return a }
	for _, tt := range []struct{ price, max, want string }{
		{"USD 0.50", "USD 0.20", "USD 0.50 is more than max_price (USD 0.20)"},
		{"USD 5", "USD 0.01", "USD 5.00 is more than max_price (USD 0.01)"},
		{"EUR 0.01", "USD 0.20", "EUR is not max_price's currency (max_price USD 0.20)"},
	} {
		t.Run(tt.price, func(t *testing.T) {
			t.Parallel()
			b, _ := NewLocal("")
			n := Negotiator{Budget: b}
			h := http.Header{}
			h.Set(FieldPrice, tt.price)
			o := Offer{Resp: &http.Response{StatusCode: 402, Header: h, Body: io.NopCloser(strings.NewReader(""))},
				Client: context.Background(), Day: "2026-11-28", URL: "http://example.com/"}
			st := n.Settle(&o, Terms{MaxPrice: usd(tt.max), Budget: usd("USD 1")}, func(string) (*http.Response, bool, error) {
				t.Error("sent again")
				return nil, false, errors.New("not sent")
			})
			if st.Result != OverPrice || st.Why != tt.want {
				t.Errorf("Settle = %q %q; want %q %q", st.Result, st.Why, OverPrice, tt.want)
			}
		})
	}
}

// TestSettleInternalError: a paid request answered crawler-error
// InternalError is sent once more, and the second answer settled as any:
// the refusal, the answer passed on and the note all say that it was
// retried; never "not retried" alone.
func TestSettleInternalError(t *testing.T) {
	t.Parallel()
	answer := func(status int, code string) *http.Response {
		h := http.Header{}
		if code != "" {
			h.Set(FieldError, code)
		}
		if status == 200 {
			h.Set(FieldCharged, "USD 0.01")
		}
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(""))}
	}
	for _, tt := range []struct {
		name          string
		first, second *http.Response
		refused       bool
		status        int    // of the answer passed on, or of robotsgate's refusal
		why           string // in the refusal's Why, or the Note
	}{
		{"402 twice", answer(402, InternalError), answer(402, InternalError), true, 402,
			"the site answered the paid request 402, crawler-error InternalError (the site failed on its side), after one retry (its first answer: 402, crawler-error InternalError): not retried again"},
		{"500, then 403 PaymentFailed", answer(500, InternalError), answer(403, "PaymentFailed"), true, 403,
			"403, crawler-error PaymentFailed (the payment did not go through on the site's side (the operator's pay-per-crawl account)), after one retry (its first answer: 500, crawler-error InternalError): not retried again"},
		{"500 twice: passed on", answer(500, InternalError), answer(500, InternalError), false, 500,
			"the paid request was retried once, the site's first answer to it being 500, crawler-error InternalError"},
		{"500, then paid", answer(500, InternalError), answer(200, ""), false, 200,
			"the paid request was retried once, the site's first answer to it being 500"},
		{"402 PaymentFailed: not retried", answer(402, "PaymentFailed"), nil, true, 402,
			"crawler-error PaymentFailed (the payment did not go through on the site's side (the operator's pay-per-crawl account)): not retried"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, _ := NewLocal("")
			usd := func(s string) Amount { a, _ := ParseAmount(s); return a }
			n := Negotiator{Budget: b, Holds: NewHolds()}
			o := Offer{Resp: &http.Response{StatusCode: 402, Header: http.Header{"Crawler-Price": {"USD 0.01"}}, Body: io.NopCloser(strings.NewReader(""))},
				Client: context.Background(), Day: "2026-11-28", URL: "http://example.com/"}
			answers := []*http.Response{tt.first, tt.second}
			sends := 0
			st := n.Settle(&o, Terms{MaxPrice: usd("USD 0.01"), Budget: usd("USD 1")}, func(string) (*http.Response, bool, error) {
				sends++
				return answers[sends-1], true, nil
			})
			want := 2
			if tt.second == nil {
				want = 1
			}
			if sends != want {
				t.Errorf("sent %d times; want %d", sends, want)
			}
			got, status := st.Note(), 0
			if st.Refused {
				got, status = st.Why, cmp.Or(st.Status, 402)
			} else if st.Resp != nil {
				status = st.Resp.StatusCode
			}
			if st.Refused != tt.refused || status != tt.status || !strings.Contains(got, tt.why) {
				t.Errorf("refused %v, status %d, %q; want %v, %d, %q in it", st.Refused, status, got, tt.refused, tt.status, tt.why)
			}
			if tt.second != nil && st.Retried != tt.first.StatusCode || tt.second == nil && st.Retried != 0 {
				t.Errorf("Retried = %d", st.Retried)
			}
			if strings.Contains(got, "worth one retry") || strings.Contains(got, "): not retried\n") {
				t.Errorf("%q contradicts the retry", got)
			}
		})
	}
}

// TestSettleWaitsForOffers: a price that does not fit only because of
// what offers in flight hold waits for them, no new offer being made
// meanwhile, and is paid once one is given back; one that would not fit
// even then is refused at once, its reason naming what is spent and what
// is held apart; one still not fitting when the wait is up, or whose
// client leaves, is refused too.
func TestSettleWaitsForOffers(t *testing.T) {
	t.Parallel()
	usd := func(s string) Amount { a, _ := ParseAmount("USD " + s); return a }
	const day = "2026-11-28"
	free := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}
	for _, tt := range []struct {
		name    string
		budget  string
		spent   string // spent before the offers
		price   string
		settle  bool // an offer settles (nothing charged) once the price waits
		leave   bool // the client leaves once the price waits
		wait    time.Duration
		result  string
		waited  bool // the test sees it wait (not asked of a short wait)
		why     string
		spentAt string // after
	}{
		{"an offer given back makes room", "0.03", "0.005", "0.01", true, false, time.Minute, "", true, "", "0.02"},
		{"offers could not make room", "0.03", "0.015", "0.02", false, false, time.Minute, OverBudget, false,
			"USD 0.02 would take today's spending past the budget (USD 0.015 spent, USD 0.015 held by crawler-max-price offers in flight)", "0.03"},
		{"the wait is up", "0.03", "0.005", "0.01", false, false, 50 * time.Millisecond, OverBudget, false,
			"(USD 0.005 spent, USD 0.025 held by crawler-max-price offers in flight), after waiting", "0.03"},
		{"the client leaves", "0.03", "0.005", "0.01", false, true, time.Minute, "", true,
			"the client left while the price waited", "0.03"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, _ := NewLocal("")
			b.Reserve(t.Context(), day, usd(tt.spent), usd(tt.budget))
			n := Negotiator{Budget: b, Holds: NewHolds()}
			terms := Terms{MaxPrice: usd("0.02"), Budget: usd(tt.budget), Wait: tt.wait}
			var offers []Amount
			for {
				a, ok := n.ReserveOffer(day, terms)
				if !ok {
					break
				}
				offers = append(offers, a)
			}
			ctx, leave := context.WithCancel(t.Context())
			defer leave()
			done := make(chan Settlement, 1)
			go func() {
				o := Offer{Resp: &http.Response{StatusCode: 402, Header: http.Header{"Crawler-Price": {"USD " + tt.price}}, Body: io.NopCloser(strings.NewReader(""))},
					Client: ctx, Day: day, URL: "http://example.com/"}
				done <- n.Settle(&o, terms, func(string) (*http.Response, bool, error) {
					return &http.Response{StatusCode: 200, Header: http.Header{FieldCharged: {"USD " + tt.price}}, Body: io.NopCloser(strings.NewReader(""))}, true, nil
				})
			}()
			if tt.waited {
				testkit.Eventually(t, "the price to wait", func() bool { return n.Holds.Waiting() == 1 })
				if a, ok := n.ReserveOffer(day, Terms{MaxPrice: usd("0.02"), Budget: usd("1")}); ok {
					t.Errorf("an offer of %v made while a price waits", a)
				}
			}
			if tt.settle {
				n.SettleOffer(&Offer{Resp: free, Day: day}, offers[0])
			}
			if tt.leave {
				leave()
			}
			var st Settlement
			select {
			case st = <-done:
			case <-time.After(20 * time.Second): // a bound on a hang, not a measure
				t.Fatal("Settle still waiting after 20 s")
			}
			if st.Result != tt.result && !(tt.result == "" && st.Result == Paid) || !strings.Contains(st.Why, tt.why) {
				t.Errorf("Settle = %q, %q; want %q, %q in it", st.Result, st.Why, tt.result, tt.why)
			}
			if tt.leave && (!st.Left || st.Result != "") {
				t.Errorf("Settle = %+v; want Left, nothing counted", st)
			}
			if tt.result == "" && !tt.leave && (st.Resp == nil || st.Result != Paid) {
				t.Errorf("Settle = %+v; want it paid", st)
			}
			if spent, _ := b.Spent(t.Context(), day, "USD"); spent.String() != usd(tt.spentAt).String() {
				t.Errorf("spent after = %v; want USD %s", spent, tt.spentAt)
			}
			if n.Holds.Waiting() != 0 {
				t.Error("still counted as waiting")
			}
		})
	}
}
