package policy

import (
	"fmt"
	"strings"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// warnShadowed warns of each [[sites]] rule an earlier rule leaves no
// request to. The first rule that matches a request is its rule
// (Policy.site), so a rule every request of which an earlier rule also
// matches never applies: what it sets has no effect. That may be meant (a
// rule kept for later), so it is a warning, not an error; it names both
// rules' lines and what the later one sets.
func warnShadowed(c *config.Config, sites []Site, pb *config.Problems) {
	for j := range sites {
		for i := range j {
			if !covers(&sites[i], &sites[j]) {
				continue
			}
			first := fmt.Sprintf("sites[%d]", i)
			where := fmt.Sprintf("%s (%shost = %q", first, lineOf(c, first), sites[i].Host)
			if len(sites[i].Agents) > 0 {
				where += fmt.Sprintf(", agents = %q", sites[i].Agents)
			}
			key := fmt.Sprintf("sites[%d]", j)
			pb.Warnf(key, "has no effect: %s) comes first and matches every request this rule matches (the first rule that matches wins), so %s",
				where, neverUsed(c, key, &c.Sites[j]))
			break
		}
	}
}

// covers reports whether rule a matches every request rule b matches
// (Site.matches): every host b matches, a matches, and when a is for some
// tokens only, b is for some of those only.
func covers(a, b *Site) bool {
	if a.match == "" || b.match == "" { // a host that is not one: refused anyway
		return false
	}
	// An exact host is one host, a.matches it as it matches any; a
	// suffix (".example.com") is every host ending in it, each of which
	// ends in a's suffix exactly when the suffix itself does.
	if a.match != b.match && !(strings.HasPrefix(a.match, ".") && strings.HasSuffix(b.match, a.match)) {
		return false
	}
	if len(a.Agents) == 0 {
		return true
	}
	if len(b.Agents) == 0 { // b is for every token; a for some
		return false
	}
	for _, t := range b.Agents {
		if !anyFold(a.Agents, Agents{one: t}) {
			return false
		}
	}
	return true
}

// neverUsed says what rule s (key is its path) sets beyond what it
// matches on: each key written, or not at its default, as it is written.
func neverUsed(c *config.Config, key string, s *config.SiteRule) string {
	var set []string
	add := func(k string, isDefault bool, v string) {
		if c.Written(key+"."+k) || !isDefault {
			set = append(set, fmt.Sprintf("%s = %q", k, v))
		}
	}
	add("policy", s.Policy == "robots", s.Policy)
	add("reason", s.Reason == "", s.Reason)
	add("min_interval", s.MinInterval == 0, s.MinInterval.String())
	add("signature_agent_form", s.SignatureAgentForm == "", s.SignatureAgentForm)
	switch len(set) {
	case 0:
		return "this rule is never used"
	case 1:
		return "its " + set[0] + " is never used"
	}
	return "its " + strings.Join(set[:len(set)-1], ", ") + " and " + set[len(set)-1] + " are never used"
}

// lineOf is "line N, " for key, when the file gives its line.
func lineOf(c *config.Config, key string) string {
	if n := c.Line(key); n > 0 {
		return fmt.Sprintf("line %d, ", n)
	}
	return ""
}
