// Package pay is pay-per-crawl (docs/identity.md, "Pay-per-crawl (HTTP 402)"): prices as
// sites state them in HTTP 402 answers, and the daily budget they are paid
// from, in this process or, for a fleet, in Redis. Amounts are decimal,
// held as integers of a billionth of the currency unit: never floats.
package pay

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Scale is how many of an Amount's units make one of its currency.
const Scale = 1_000_000_000

// maxAmount bounds what an Amount holds: a million of a currency, so that
// sums stay exact where they are compared as doubles (Redis's Lua, below
// 2^53 billionths).
const maxAmount = 1_000_000 * Scale

// An Amount is a sum of money: a currency code and a decimal number of
// it, in billionths.
type Amount struct {
	Currency string // ISO 4217-shaped: three upper-case letters
	Nanos    int64  // billionths of the currency: 0.01 is 10,000,000
}

// ParseAmount reads "<currency> <decimal>" ("USD 0.01"), as the
// crawler-price family of fields and the [payments] keys write it: three
// ASCII letters (read upper-cased), one or more spaces, and a decimal
// with at most nine fractional digits, no sign, no exponent, at most a
// million.
func ParseAmount(s string) (Amount, error) {
	cur, num, ok := strings.Cut(strings.TrimSpace(s), " ")
	num = strings.TrimLeft(num, " ")
	if !ok || len(cur) != 3 || num == "" {
		return Amount{}, fmt.Errorf("%q: want \"<currency> <amount>\", as \"USD 0.01\"", s)
	}
	for i := range 3 {
		if c := cur[i] | 0x20; c < 'a' || c > 'z' {
			return Amount{}, fmt.Errorf("%q: the currency is three letters", s)
		}
	}
	whole, frac, point := strings.Cut(num, ".")
	if whole == "" || point && frac == "" || len(frac) > 9 || !digits(whole) || !digits(frac) || len(whole) > 7 {
		return Amount{}, fmt.Errorf("%q: the amount is a decimal number with at most 9 digits after the point", s)
	}
	w, _ := strconv.ParseInt(whole, 10, 64)
	f, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	n := w*Scale + f
	if n > maxAmount {
		return Amount{}, fmt.Errorf("%q: more than a million", s)
	}
	return Amount{Currency: strings.ToUpper(cur), Nanos: n}, nil
}

// digits reports whether s is ASCII digits only (true for "").
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String writes a as ParseAmount reads it, with no trailing zeros past
// the two first fractional digits: "USD 0.01", "EUR 1.50", "USD 0.000125".
func (a Amount) String() string {
	frac := fmt.Sprintf("%09d", a.Nanos%Scale)
	frac = strings.TrimRight(frac, "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return fmt.Sprintf("%s %d.%s", a.Currency, a.Nanos/Scale, frac)
}

// Decimal writes a's number alone ("0.01"), as a metric's value is
// described.
func (a Amount) Decimal() string {
	s := a.String()
	return s[strings.IndexByte(s, ' ')+1:]
}

// Float is a as a float64, for a Prometheus metric only: never for a
// decision, never summed (Tally sums). It is the double nearest a's
// decimal, which a metric then writes as that decimal ("0.085").
func (a Amount) Float() float64 { return float64(a.Nanos) / Scale }

// ErrCurrency is wrapped by a comparison of amounts in two currencies.
var ErrCurrency = errors.New("another currency")
