package report

import (
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/robotsgate/robotsgate/proxy/pay"
)

// MaxCurrencies is the most currencies a report sums charges in; a charge
// in another currency is counted as not summed.
const MaxCurrencies = 32

// spend is what sites charged (the audit records' charged), by currency:
// exact sums of billionths (pay.Amount's unit), never floats, in
// big.Int so that no log, however long or hostile, overflows them.
type spend struct {
	sums     []big.Int // by currency index (Summary.currencies)
	requests []int64   // the records charged, by currency index
}

// grow makes room for n currencies.
func (sp *spend) grow(n int) {
	for len(sp.sums) < n {
		sp.sums = append(sp.sums, big.Int{})
		sp.requests = append(sp.requests, 0)
	}
}

// add adds nanos in currency index i.
func (sp *spend) add(i int, nanos int64, scratch *big.Int) {
	sp.grow(i + 1)
	sp.sums[i].Add(&sp.sums[i], scratch.SetInt64(nanos))
	sp.requests[i]++
}

// merge adds o's sums to sp's (o may be nil).
func (sp *spend) merge(o *spend) {
	if o == nil {
		return
	}
	sp.grow(len(o.sums))
	for i := range o.sums {
		sp.sums[i].Add(&sp.sums[i], &o.sums[i])
		sp.requests[i] += o.requests[i]
	}
}

// cmp compares sp's sums with o's, currency by currency in the order
// they were first seen.
func (sp *spend) cmp(o *spend) int {
	for i := range max(len(sp.sums), len(o.sums)) {
		var a, b big.Int
		if i < len(sp.sums) {
			a.Set(&sp.sums[i])
		}
		if i < len(o.sums) {
			b.Set(&o.sums[i])
		}
		if c := a.Cmp(&b); c != 0 {
			return c
		}
	}
	return 0
}

// empty reports whether sp holds no charge.
func (sp *spend) empty() bool { return sp == nil || len(sp.sums) == 0 }

// charge counts a record's charged: summed into the totals and the
// origin's (oc, nil for a record with no origin) when it is an amount
// (pay.ParseAmount) in one of the first MaxCurrencies currencies seen,
// counted as not summed otherwise.
func (s *Summary) charge(p *parsed, oc *originCounts) {
	if p.chargedBad {
		s.notSummed++
		return
	}
	a, err := pay.ParseAmount(string(p.charged))
	if err != nil {
		s.notSummed++
		return
	}
	i := slices.Index(s.currencies, a.Currency)
	if i < 0 {
		if len(s.currencies) >= MaxCurrencies {
			s.notSummed++
			return
		}
		s.currencies = append(s.currencies, a.Currency)
		i = len(s.currencies) - 1
	}
	s.spent.add(i, a.Nanos, &s.scratch)
	if oc != nil {
		if oc.spent == nil {
			oc.spent = new(spend)
		}
		oc.spent.add(i, a.Nanos, &s.scratch)
	}
}

// money is a sum in one currency, as the reports print it.
type money struct {
	Currency string
	Amount   string // decimal, as pay.Amount writes it: "0.01", "12.50"
	Requests int64
}

// moneyOf returns sp's sums in currency order (by code).
func (s *Summary) moneyOf(sp *spend) []money {
	if sp.empty() {
		return nil
	}
	var out []money
	for i := range sp.sums {
		if sp.requests[i] > 0 {
			out = append(out, money{s.currencies[i], decimal(&sp.sums[i]), sp.requests[i]})
		}
	}
	slices.SortFunc(out, func(a, b money) int { return strings.Compare(a.Currency, b.Currency) })
	return out
}

// billion is pay.Scale as a big.Int.
var billion = big.NewInt(pay.Scale)

// decimal writes nanos billionths as pay.Amount.String writes its number:
// at least two fractional digits, no trailing zeros past them.
func decimal(nanos *big.Int) string {
	var q, r big.Int
	q.QuoRem(nanos, billion, &r)
	frac := r.String()
	frac = strings.Repeat("0", 9-len(frac)) + frac
	frac = strings.TrimRight(frac, "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return q.String() + "." + frac
}

// moneyText is sums as one line: "USD 0.03 (3 requests), EUR 1.50 (1
// request)"; "none" when there are none.
func moneyText(ms []money) string {
	if len(ms) == 0 {
		return "none"
	}
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.Currency + " " + m.Amount + " (" + counted(m.Requests, "request", "requests") + ")"
	}
	return strings.Join(parts, ", ")
}

// originSpend is one origin's sums, for the tables.
type originSpend struct {
	Origin string
	Money  []money
	spend  *spend
}

// spendByOrigin returns the origins that were charged, and those counted
// under Other as one row named Other, by what they were charged (the
// currencies in the order first seen), most first, then by name.
func (s *Summary) spendByOrigin() []originSpend {
	var out []originSpend
	for name, r := range s.origins.counts {
		if name != Other && !r.origin.spent.empty() {
			out = append(out, originSpend{name, s.moneyOf(r.origin.spent), r.origin.spent})
		}
	}
	other := new(spend)
	if r := s.origins.counts[Other]; r != nil { // an origin named "(other)", merged as table.all does
		other.merge(r.origin.spent)
	}
	other.merge(s.otherOrigins.spent)
	if !other.empty() {
		out = append(out, originSpend{Other, s.moneyOf(other), other})
	}
	slices.SortFunc(out, func(a, b originSpend) int {
		if c := b.spend.cmp(a.spend); c != 0 {
			return c
		}
		return strings.Compare(a.Origin, b.Origin)
	})
	return out
}

// counted is "1 one" or "n many".
func counted(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.FormatInt(n, 10) + " " + many
}
