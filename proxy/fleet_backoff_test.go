package proxy

import (
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
)

// TestFleetBackoffHoldsQueued: a 429 that one instance reads holds the
// requests another instance has already reserved a fleet slot for and
// waits to send: none reaches the site inside its Retry-After.
func TestFleetBackoffHoldsQueued(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	o := newBackoffOrigin(t, "User-agent: *\nCrawl-delay: 1\n", 2*time.Second)
	fleet := startFleet(t, r, 2, func(c *config.Config) {
		c.Politeness.CrawlDelay, c.Politeness.MaxWait, c.Politeness.MaxDelay = true, 20*time.Second, 5*time.Second
	})
	logs := []*startLog{logStarts(fleet[0]), logStarts(fleet[1])}
	for i, p := range fleet { // each has the rules, and a start to 127.0.0.1
		if resp, _ := get(t, p.client(), o.URL+"/warm"); resp.StatusCode != 200 {
			t.Fatalf("/warm through instance %d: %d", i, resp.StatusCode)
		}
	}
	// /busy takes the next fleet slot through instance 0; then /r1, /r2
	// and /r3 reserve the three after it through instance 1, each
	// recorded there before the next is sent.
	type sent struct {
		p    int
		path string
	}
	order := []sent{{0, "/busy"}, {1, "/r1"}, {1, "/r2"}, {1, "/r3"}}
	codes := make(chan int, len(order))
	for _, s := range order {
		n := logs[s.p].count("127.0.0.1")
		go func() { resp, _ := get(t, fleet[s.p].client(), o.URL+s.path); codes <- resp.StatusCode }()
		testkit.Eventually(t, s.path+" given a start", func() bool { return logs[s.p].count("127.0.0.1") > n })
	}
	got := map[int]int{}
	for range order {
		got[<-codes]++
	}
	if got[429] != 1 || got[200] != len(order)-1 {
		t.Errorf("statuses %v; want one 429 (the origin's) and %d 200", got, len(order)-1)
	}
	o.checkHeld(t, "/r1", "/r2", "/r3")
}
