package robots

import "github.com/robotsgate/robotsgate/usage"

// A Budget bounds the work of deciding: a robots.txt file is hostile input
// (up to a fetcher's size cap of rules, any wildcards) and so is a path, and
// without a bound one decision could cost seconds of CPU. Work is counted in
// units of about one byte compared: a wildcard pattern tried against a path
// costs the length of the path plus the pattern's, each rule or statement
// visited costs ruleCost. Once a Budget is spent, matching under it stops at
// once and [Budget.Exhausted] reports true: the answers given under it are
// then not to be trusted, and a caller that enforces must refuse (fail
// closed). A nil *Budget is unbounded, which is what [Group.Test] and
// [Group.Usage] use: the reference's answer, whatever it costs.
type Budget struct {
	left int64
}

// ruleCost is what visiting one rule, block or statement costs, in units
// of a byte compared: a compare and a few loads.
const ruleCost = 8

// NewBudget returns a Budget of units.
func NewBudget(units int64) *Budget { return &Budget{left: units} }

// MakeBudget returns a Budget of units, as a value (to keep in a struct).
func MakeBudget(units int64) Budget { return Budget{left: units} }

// Exhausted reports whether the budget ran out: some work was not done,
// and the answers given under it are unreliable.
func (b *Budget) Exhausted() bool { return b != nil && b.left < 0 }

// Left returns the units left; negative once exhausted.
func (b *Budget) Left() int64 { return b.left }

// Spend takes n units for work done outside this package (making the
// lenient readings of a path, for one), and reports whether the work may
// go on: false once the budget is exhausted, this call included.
func (b *Budget) Spend(n int) bool { return b.spend(n) }

// SpendPattern takes what visiting one rule or statement of pattern costs,
// as Spend does: for matchers of other files' patterns (usage/source).
func (b *Budget) SpendPattern(pattern string) bool { return b.spend(ruleCost + len(pattern)) }

// spend takes n units and reports whether the work may go on: false once
// the budget is exhausted (this call included). A nil Budget always may.
func (b *Budget) spend(n int) bool {
	if b == nil {
		return true
	}
	if b.left < 0 {
		return false
	}
	b.left -= int64(n)
	return b.left >= 0
}

// TestWithin is [Group.Test] under budget b: it reports false, with an
// unreliable verdict, when b runs out before the path is decided.
func (g Group) TestWithin(path string, b *Budget) (Verdict, bool) {
	v := g.test(path, g.r.scanLimit(), b)
	return v, !b.Exhausted()
}

// UsageWithin is [Group.Usage] under budget b: it reports false, with an
// unreliable answer, when b runs out.
func (g Group) UsageWithin(path string, b *Budget) (usage.Usage, bool) {
	u := g.usage(path, b)
	return u, !b.Exhausted()
}
