package proxy

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// TestReloadRestartNeeded: through a real reload, each key whose change
// waits for a restart is named by RestartNeeded (with what of it the
// reload applied, if anything) and logged as such, and a key a reload
// applies is not. Every case is one reload from the config the server
// started with, so that each names only its own keys.
func TestReloadRestartNeeded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := loopbackConfig()
	start.TLS.StateDir = filepath.Join(dir, "state")
	p, _ := startWithLookup(t, start, loopbackLookup)
	for _, tt := range []struct {
		name   string
		change func(*config.Config)
		want   []Pending
		warn   string // in the log of the reload
	}{
		{"nothing", func(*config.Config) {}, nil, ""},
		{"applied keys", func(c *config.Config) {
			c.Mode, c.Politeness.MinInterval, c.Upstream.Timeout = "report", time.Second, time.Minute
			c.Sites = []config.SiteRule{{Host: "a.example", Policy: "deny"}}
			c.Payments.KeyPrefix = "other:" // names nothing without [cluster]
		}, nil, ""},
		{"listen", func(c *config.Config) { c.Listen = "127.0.0.1:1" }, []Pending{{Key: "listen"}}, "listen changed: restart to apply"},
		{"tls.http2", func(c *config.Config) { c.TLS.HTTP2 = false }, []Pending{{Key: "tls.http2"}}, "[tls] changed: restart to apply"},
		{"every [tls] key", func(c *config.Config) {
			c.TLS.Mode, c.TLS.CACert, c.TLS.CAKey = "tunnel", filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
		}, []Pending{{Key: "tls.mode"}, {Key: "tls.ca_cert"}, {Key: "tls.ca_key"}}, "[tls] changed: restart to apply"},
		{"tls.state_dir", func(c *config.Config) { c.TLS.StateDir = filepath.Join(dir, "other") }, []Pending{{Key: "tls.state_dir"}},
			"tls.state_dir changed: restart to apply (the CA, the robots.txt copies, the budget and the evidence store stay in the old directory"},
		{"[robots]", func(c *config.Config) {
			c.Robots.CacheTTL, c.Robots.FetchUserAgent, c.Robots.CacheMaxBytes, c.Robots.MaxFetches = time.Hour, "Other/1.0", 1<<21, 8
		}, []Pending{{Key: "robots.cache_ttl"}, {Key: "robots.fetch_user_agent"}, {Key: "robots.cache_max_bytes"}, {Key: "robots.max_fetches"}},
			"[robots] changed: restart to apply"},
		{"[evidence]", func(c *config.Config) { c.Evidence.CheckpointInterval = time.Hour }, []Pending{{Key: "evidence.checkpoint_interval"}},
			"[evidence] changed: restart to apply"},
		{"audit.file turns evidence on", func(c *config.Config) { c.Audit.File = filepath.Join(dir, "audit.log") },
			[]Pending{{Key: "audit.file", Now: "the audit log moved to it"}}, "[evidence] changed: restart to apply"},
		{"audit.file with evidence off", func(c *config.Config) { c.Audit.File, c.Evidence.Enabled = filepath.Join(dir, "audit.log"), false },
			[]Pending{{Key: "evidence.enabled"}}, "[evidence] changed: restart to apply"},
		{"limits.max_connections", func(c *config.Config) { c.Limits.MaxConnections = 10 },
			[]Pending{{Key: "limits.max_connections", Now: "connections kept to origins"}}, "limits.max_connections changed: connections kept to origins are bounded by it now; the limit on client connections needs a restart"},
		{"the listener's [limits]", func(c *config.Config) {
			c.Limits.ReadHeaderTimeout, c.Limits.MaxHeaderBytes, c.Limits.IdleTimeout, c.Limits.TunnelIdleTimeout = time.Second, 4096, time.Second, time.Second
		}, []Pending{
			{Key: "limits.read_header_timeout", Now: "tunnels opened from now on, and connections to origins"},
			{Key: "limits.max_header_bytes", Now: "tunnels opened from now on, and connections to origins"},
			{Key: "limits.idle_timeout", Now: "tunnels opened from now on, and connections to origins"},
			{Key: "limits.tunnel_idle_timeout", Now: "tunnels opened from now on, and connections to origins"},
		}, "[limits] changed: tunnels opened from now on, and connections to origins, use it; the listener's own connections keep the old value until a restart"},
	} {
		next := *start
		tt.change(&next)
		before := len(p.log.String())
		if err := p.srv.Reload(&next); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := p.srv.RestartNeeded(&next); !slices.Equal(got, tt.want) {
			t.Errorf("%s: RestartNeeded = %+v; want %+v", tt.name, got, tt.want)
		}
		log := p.log.String()[before:]
		if tt.warn == "" && strings.Contains(log, "restart") || tt.warn != "" && !strings.Contains(log, "level=WARN msg=\""+tt.warn) {
			t.Errorf("%s: the reload logged:\n%s\nwant %q", tt.name, log, tt.warn)
		}
	}
}

// TestRestartNeededFleet: with [cluster], the fleet's budget counter is
// opened at start: payments.key_prefix waits for a restart, as [cluster]
// does; without, it names nothing.
func TestRestartNeededFleet(t *testing.T) {
	t.Parallel()
	alone, fleet := config.Default(), config.Default()
	fleet.Cluster.Redis, fleet.Cluster.Secret = "redis://127.0.0.1:6379/0", strings.Repeat("s", 32)
	for _, tt := range []struct {
		name    string
		started *config.Config
		change  func(*config.Config)
		want    []Pending
	}{
		{"alone", alone, func(c *config.Config) { c.Payments.KeyPrefix = "other:" }, nil},
		{"fleet", fleet, func(c *config.Config) { c.Payments.KeyPrefix = "other:" }, []Pending{{Key: "payments.key_prefix"}}},
		{"cluster", fleet, func(c *config.Config) { c.Cluster.KeyPrefix, c.Cluster.OpTimeout = "other:", time.Second },
			[]Pending{{Key: "cluster.op_timeout"}, {Key: "cluster.key_prefix"}}},
	} {
		next := *tt.started
		tt.change(&next)
		if got, _ := restartNeeded(tt.started, &next); !slices.Equal(got, tt.want) {
			t.Errorf("%s: restartNeeded = %+v; want %+v", tt.name, got, tt.want)
		}
	}
}
