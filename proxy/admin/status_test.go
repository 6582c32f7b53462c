package admin

import (
	"fmt"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// TestStatusBoardBounds: the board keeps at most maxStatusOrigins origins
// (dropping the least recently seen when full) and the last recentRecords
// records.
func TestStatusBoardBounds(t *testing.T) {
	t.Parallel()
	b := NewBoard(time.Now)
	origin := func(i int) fetch.Origin {
		return fetch.Origin{Scheme: "http", Host: fmt.Sprintf("h%d.example", i), Port: 80}
	}
	count := func(o fetch.Origin, a policy.Action) {
		b.Count(&policy.Decision{Origin: o, Action: a}, audit.Answer2xx, a == policy.ActionAllowed)
	}
	for i := range maxStatusOrigins + 50 {
		count(origin(i), policy.ActionAllowed)
		if i == 5000 {
			count(origin(0), policy.ActionDisallowed) // seen again: kept
		}
	}
	count(fetch.Origin{}, policy.ActionBadRequest) // no origin: not tracked
	for i := range recentRecords + 30 {
		b.Remember(&audit.Record{Line: i})
	}
	counts, recent := b.snapshot()
	if len(counts) > maxStatusOrigins || len(counts) < maxStatusOrigins*9/10 {
		t.Fatalf("%d origins kept; want at most %d, the least recently seen tenth dropped when full", len(counts), maxStatusOrigins)
	}
	if counts[0].origin.Host != fmt.Sprintf("h%d.example", maxStatusOrigins+49) {
		t.Errorf("first origin %s; want the most recently seen", counts[0].origin.Host)
	}
	kept := map[string]map[string]int64{}
	for _, oc := range counts {
		kept[oc.origin.Host] = oc.counts
	}
	if c, ok := kept["h0.example"]; !ok || c[policy.ActionDisallowed.String()] != 1 || c[policy.ActionAllowed.String()] != 1 {
		t.Errorf("h0, seen again at 5000, was dropped or lost its counts: %v", c)
	}
	if _, ok := kept["h1.example"]; ok {
		t.Error("h1, the least recently seen, was kept")
	}
	if len(recent) != recentRecords || recent[0].Line != 30 || recent[recentRecords-1].Line != recentRecords+29 {
		t.Errorf("recent: %d records, first %d last %d", len(recent), recent[0].Line, recent[len(recent)-1].Line)
	}
}
