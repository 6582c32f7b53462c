package pay

import (
	"strings"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// CheckConfig checks c's [payments] into pb (policy.Compile calls it) and
// returns its amounts, parsed: max_price and budget in one currency, a
// budget above zero, and [identity] (sites offer a price to signed
// crawlers only). A budget is required: it is what bounds the spending of
// a crawl of many priced pages. Zero amounts when pay-per-crawl is off.
func CheckConfig(c *config.Config, pb *config.Problems) (maxPrice, budget Amount) {
	pc := &c.Payments
	if pc.MaxPrice == "" {
		if pc.Budget != "" {
			pb.Addf("payments.budget", "set without payments.max_price: nothing is paid")
		}
		return
	}
	var err error
	if maxPrice, err = ParseAmount(pc.MaxPrice); err != nil {
		pb.Addf("payments.max_price", "%v", err)
	}
	switch budget, err = ParseAmount(pc.Budget); {
	case pc.Budget == "":
		pb.Addf("payments.budget", "required with max_price: the most spent in a UTC day (\"USD 25\")")
	case err != nil:
		pb.Addf("payments.budget", "%v", err)
	case maxPrice.Currency != "" && budget.Currency != maxPrice.Currency:
		pb.Addf("payments.budget", "%s is not max_price's currency (%s)", budget.Currency, maxPrice.Currency)
	case budget.Nanos == 0:
		pb.Addf("payments.budget", "%s: nothing could be paid (leave max_price empty to pay nothing)", budget)
	}
	// A budget below max_price is valid: it caps each price too (a USD
	// 0.01 price is paid with budget = "USD 0.03", max_price = "USD
	// 0.05"); the start-up log says so.
	if c.Identity.SignatureAgent == "" {
		pb.Addf("payments.max_price", "needs [identity] signature_agent: sites offer prices to signed crawlers only")
	}
	if pc.KeyPrefix == "" || strings.ContainsAny(pc.KeyPrefix, "{}") {
		pb.Addf("payments.key_prefix", "%q: must not be empty, and holds no { or } (a Redis Cluster hash tag is robotsgate's to place)", pc.KeyPrefix)
	}
	return maxPrice, budget
}
