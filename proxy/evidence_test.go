package proxy

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/replay"
)

// TestFleetEvidence: in a fleet of two on a real Redis, the instance that
// takes robots.txt from Redis instead of fetching it keeps the copy in
// its own store too, so that each instance's audit log replays from its
// own store alone; each instance signs its own chain with its own key,
// and each log verifies intact with its instance's key and not with the
// other's.
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
	keys := make([][]*identity.Key, len(fleet))
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
		cfg := loopbackConfig()
		cfg.TLS.StateDir = dirs[i]
		if keys[i], _, err = audit.VerifyKeys(cfg); err != nil || len(keys[i]) != 1 {
			t.Fatalf("instance %d's keys: %v, %v", i, keys[i], err)
		}
	}
	if keys[0][0].ID == keys[1][0].ID {
		t.Errorf("both instances sign with key %s; want a key each", keys[0][0].ID)
	}
	for i := range fleet {
		logs := []string{filepath.Join(dirs[i], "audit.log")}
		rep, err := audit.Verify(logs, audit.VerifyOptions{Keys: keys[i]})
		if err != nil || !rep.Intact() || rep.Lines != 3 { // start, the record, shutdown
			t.Errorf("instance %d: verify = %+v, %v; want intact, 3 lines", i, rep, err)
		}
		other := keys[1-i]
		if rep, err := audit.Verify(logs, audit.VerifyOptions{Keys: other}); err != nil || rep.Intact() {
			t.Errorf("instance %d's log verified with instance %d's key: %+v, %v; want not intact", i, 1-i, rep, err)
		}
	}
}
