package proxy

import (
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
)

// TestOperatorMetrics: the gauges and counters deploy/prometheus's
// alerts read move with what they stand for: a refused reload sets
// robotsgate_config_last_reload_successful to 0 and the next applied one
// back to 1; an origin's 429 holds its host (robotsgate_backoff_hosts,
// and robotsgate_backoff_longest_seconds counts from it);
// an audit line that cannot be written is counted; max_connections is
// exported as in force.
func TestOperatorMetrics(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, testRobots, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	var cfg *config.Config // as started, reloaded again below
	p := startMITM(t, nil, func(c *config.Config) { c.Limits.MaxConnections, cfg = 77, c }, func(o *Options) { o.AuditOut = fullDisk{} })
	scrape := func() string {
		_, body := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/metrics")
		return body
	}
	has := func(body string, want ...string) bool {
		for _, w := range want {
			if !strings.Contains(body, "\n"+w+"\n") {
				return false
			}
		}
		return true
	}
	if body := scrape(); !has(body, "robotsgate_config_last_reload_successful 1", "robotsgate_max_connections 77", "robotsgate_backoff_hosts 0", "robotsgate_backoff_longest_seconds 0") {
		t.Fatalf("/metrics at start lacks the reload gauge at 1, max_connections 77 or no back-off:\n%s", body)
	}
	if strings.Contains(scrape(), "robotsgate_cluster_up") {
		t.Error("/metrics has robotsgate_cluster_up without [cluster]")
	}

	bad := loopbackConfig()
	bad.Mode = "sometimes"
	if err := p.srv.Reload(bad); err == nil {
		t.Fatal("Reload(mode = sometimes) = nil; want an error")
	}
	if body := scrape(); !has(body, "robotsgate_config_last_reload_successful 0", `robotsgate_config_reloads_total{result="failure"} 1`) {
		t.Errorf("/metrics after a refused reload: want the gauge at 0 and one failure:\n%s", body)
	}
	if err := p.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if body := scrape(); !has(body, "robotsgate_config_last_reload_successful 1") {
		t.Errorf("/metrics after an applied reload: want the gauge at 1 again:\n%s", body)
	}

	resp, _ := get(t, p.client(), o.URL+"/public")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("GET /public: %d; want the origin's 429", resp.StatusCode)
	}
	get(t, p.client(), o.URL+"/private") // blocked: an audit line, which fullDisk refuses
	testkit.Eventually(t, "robotsgate_backoff_hosts 1 and audit write errors counted", func() bool {
		body := scrape()
		return has(body, "robotsgate_backoff_hosts 1") && !has(body, "robotsgate_audit_write_errors_total 0") && strings.Contains(body, "\nrobotsgate_audit_write_errors_total ")
	})
	// The hold, on the wall clock, has lasted from its start to now.
	if l := testkit.Metric(t, p.url.String()+"/metrics", "robotsgate_backoff_longest_seconds"); l <= 0 || l > 120 {
		t.Errorf("robotsgate_backoff_longest_seconds %v; want the hold's age, above 0 and within its Retry-After: 120", l)
	}
}

// fullDisk is an audit output every write to which fails as on a full
// disk.
type fullDisk struct{}

func (fullDisk) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestClusterUpMetric: with [cluster], robotsgate_cluster_up says whether
// the fleet's Redis answers: 0 for one that refuses connections (a port
// nothing listens on), from the watcher's first probe.
func TestClusterUpMetric(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	cfg := loopbackConfig()
	cfg.Cluster.Redis, cfg.Cluster.Secret = "redis://"+addr+"/0", fleetSecret
	p := startProxy(t, cfg)
	testkit.Eventually(t, "robotsgate_cluster_up 0", func() bool {
		_, body := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/metrics")
		return strings.Contains(body, "\nrobotsgate_cluster_up 0\n")
	})
}
