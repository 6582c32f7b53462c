package pay

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
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
