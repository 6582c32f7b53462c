package proxy

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/replay"
)

// TestFleetEvidence: in a fleet of two on a real Redis, the instance that
// takes robots.txt from Redis instead of fetching it keeps the copy in
// its own store too, so that each instance's audit log replays from its
// own store alone.
func TestFleetEvidence(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	o := newTestOrigin(t, testRobots, nil)
	dirs := []string{t.TempDir(), t.TempDir()}
	n := 0
	fleet := startFleet(t, r, 2, func(cfg *config.Config) { // each with an audit file: evidence is on
		cfg.TLS.StateDir = dirs[n]
		cfg.Audit.File = filepath.Join(dirs[n], "audit.log")
		n++
	})
	for _, p := range fleet {
		if resp, _ := get(t, p.client(), o.URL+"/private/x"); resp.StatusCode != 403 {
			t.Fatalf("/private/x: %d; want 403", resp.StatusCode)
		}
	}
	if n := o.count("/robots.txt"); n != 1 {
		t.Fatalf("robots.txt fetched %d times; want once, the second instance taking it from Redis", n)
	}
	sum := evidence.SumOf([]byte(testRobots))
	for i, p := range fleet {
		if err := p.srv.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
		store := config.Default().Evidence.DirPath(dirs[i])
		if _, err := evidence.GetObject(store, sum, 0); err != nil {
			t.Errorf("instance %d's store: %v", i, err)
		}
		d, err := replay.New(loopbackConfig(), store)
		if err != nil {
			t.Fatal(err)
		}
		log, err := os.ReadFile(filepath.Join(dirs[i], "audit.log"))
		if err != nil {
			t.Fatal(err)
		}
		var s replay.Summary
		if err := (&replay.Replayer{D: d, Report: func(f replay.Finding) { t.Errorf("instance %d: %v", i, f) }}).Replay(t.Context(), bytes.NewReader(log), "audit.log", &s); err != nil {
			t.Fatal(err)
		}
		if s.Records != 1 || s.Reproduced != 1 {
			t.Errorf("instance %d: replay %+v; want its one record reproduced", i, s)
		}
	}
}
