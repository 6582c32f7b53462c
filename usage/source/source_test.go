package source

import (
	"testing"

	"github.com/robotsgate/robotsgate/usage"
)

// TestListInfos: every source of List declares an ID, a name and a rule
// prefix no other has (robots.txt's alone empty), and a rule of each is
// read back as its (usage.RuleSource), as the report reads them.
func TestListInfos(t *testing.T) {
	t.Parallel()
	infos := Infos(List())
	ids, names, prefixes := map[usage.SourceID]bool{}, map[string]bool{}, map[string]bool{}
	for _, i := range infos {
		if ids[i.ID] || names[i.Name] || prefixes[i.Prefix] || i.Name == "" {
			t.Errorf("source %+v: ID, name or prefix not its own", i)
		}
		ids[i.ID], names[i.Name], prefixes[i.Prefix] = true, true, true
		if got, _ := usage.RuleSource(i.Prefix+"x", infos); got != i {
			t.Errorf("RuleSource(%q) = %+v; want %+v", i.Prefix+"x", got, i)
		}
	}
	if len(infos) != int(usage.NumSources) || !prefixes[""] {
		t.Errorf("List's infos = %+v; want the %d sources usage names, robots.txt's with no prefix", infos, usage.NumSources)
	}
}
