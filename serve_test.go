package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy"
	"github.com/robotsgate/robotsgate/proxy/config"
)

// TestLogPacing checks that the startup line says what pacing is in force.
func TestLogPacing(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  func(*config.Config)
		want []string
	}{
		{"defaults", func(*config.Config) {}, []string{
			"level=INFO", "pacing on", `crawl_delay="honoured, at most 30s"`, "held_at_most=2m0s",
			`origin_backoff="429 and 503 with Retry-After hold the origin, at most 10m0s"`}},
		{"off", func(c *config.Config) { c.Politeness.CrawlDelay = false }, []string{
			"level=WARN", "pacing off", "politeness.crawl_delay = false"}},
		{"interval only", func(c *config.Config) {
			c.Politeness.CrawlDelay, c.Politeness.MinInterval = false, 2*time.Second
		}, []string{"pacing on", `crawl_delay="ignored (politeness.crawl_delay = false)"`, "min_interval=2s"}},
		{"a site's interval", func(c *config.Config) {
			c.Politeness.CrawlDelay, c.Politeness.HonourRetryAfter = false, false
			c.Sites = []config.SiteRule{{Host: "a.example", MinInterval: time.Second}}
		}, []string{"pacing on", "sites_with_own_interval=1", `origin_backoff="off (politeness.honour_retry_after = false)"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			tt.set(cfg)
			var buf bytes.Buffer
			logPacing(slog.New(slog.NewTextHandler(&buf, nil)), cfg)
			for _, w := range tt.want {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("%q lacks %q", buf.String(), w)
				}
			}
		})
	}
}

// TestLogPayments: the start-up log says what pay-per-crawl pays, and
// warns when the budget is below max_price (valid: it caps each price).
func TestLogPayments(t *testing.T) {
	for _, tt := range []struct {
		name             string
		maxPrice, budget string
		want, wantAbsent string
	}{
		{"off", "", "", "", "pay-per-crawl"},
		{"budget above", "USD 0.01", "USD 25", "level=INFO msg=\"pay-per-crawl: sites'", "level=WARN"},
		{"budget below", "USD 0.05", "USD 0.03", "level=WARN msg=\"pay-per-crawl: the budget is less than max_price: no price above the budget is paid\" max_price=\"USD 0.05\" budget=\"USD 0.03\"", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Payments.MaxPrice, cfg.Payments.Budget = tt.maxPrice, tt.budget
			var buf bytes.Buffer
			logPayments(slog.New(slog.NewTextHandler(&buf, nil)), cfg)
			if !strings.Contains(buf.String(), tt.want) {
				t.Errorf("%q lacks %q", buf.String(), tt.want)
			}
			if tt.wantAbsent != "" && strings.Contains(buf.String(), tt.wantAbsent) {
				t.Errorf("%q has %q", buf.String(), tt.wantAbsent)
			}
		})
	}
}

// TestLogReloaded: the reload line lists the keys a reload applied under
// changed, and apart, as restart_needed, those that wait for a restart
// (under changed too when the reload applied part of them).
func TestLogReloaded(t *testing.T) {
	limits := proxy.Pending{Key: "limits.idle_timeout", Now: "tunnels opened from now on"}
	for _, tt := range []struct {
		name    string
		changed []string
		keys    bool
		pending []proxy.Pending
		want    string
	}{
		{"nothing", nil, false, nil, "changed=nothing\n"},
		{"applied", []string{"mode", "sites"}, false, nil, `changed="mode sites"` + "\n"},
		{"key files", []string{"identity.validity"}, true, nil, `changed="identity.validity identity.keys"` + "\n"},
		{"restart only", []string{"tls.http2"}, false, []proxy.Pending{{Key: "tls.http2"}}, "changed=nothing restart_needed=tls.http2\n"},
		{"both", []string{"politeness.min_interval", "tls.http2"}, false, []proxy.Pending{{Key: "tls.http2"}},
			"changed=politeness.min_interval restart_needed=tls.http2\n"},
		{"still waiting", nil, false, []proxy.Pending{{Key: "listen"}, {Key: "tls.http2"}}, `changed=nothing restart_needed="listen tls.http2"` + "\n"},
		{"in part", []string{"limits.idle_timeout"}, false, []proxy.Pending{limits}, "changed=limits.idle_timeout restart_needed=limits.idle_timeout\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			logReloaded(slog.New(slog.NewTextHandler(&buf, nil)), "c.toml", tt.changed, tt.keys, tt.pending)
			if want := `level=INFO msg="config reloaded" config=c.toml ` + tt.want; !strings.HasSuffix(buf.String(), want) {
				t.Errorf("%q; want %q", buf.String(), want)
			}
		})
	}
}

func TestRedisAddr(t *testing.T) {
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379/0":             "redis://127.0.0.1:6379/0",
		"rediss://:s3cret@redis.internal:6380": "rediss://:xxxxx@redis.internal:6380",
		"redis://user:pw@h:1":                  "redis://user:xxxxx@h:1",
	} {
		if got := redisAddr(in); got != want || strings.Contains(got, "s3cret") {
			t.Errorf("redisAddr(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestReload: SIGHUP's step, without a signal: a config that cannot be
// read, or that the proxy refuses, leaves the running one in force and is
// logged as a failed reload; one applied is returned and logged with what
// changed.
func TestReload(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.TLS.StateDir = t.TempDir()
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	s, err := proxy.NewServer(cfg, proxy.Options{Logger: slog.New(slog.DiscardHandler), AuditOut: io.Discard, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	with := func(mode string) *config.Config {
		c := config.Default()
		c.TLS.StateDir, c.Mode = cfg.TLS.StateDir, mode
		return c
	}
	for _, tt := range []struct {
		name string
		load func() (*config.Config, error)
		kept bool   // the running config stays in force
		log  string // the line logged
	}{
		{"unreadable", func() (*config.Config, error) { return nil, errors.New("c.toml:3: mode: bad") }, true,
			`level=ERROR msg="reload failed: keeping the running config" err="c.toml:3: mode: bad"`},
		{"refused", func() (*config.Config, error) { return with("sometimes"), nil }, true,
			`level=ERROR msg="reload failed: keeping the running config" err=`},
		{"applied", func() (*config.Config, error) { return with("report"), nil }, false,
			`level=INFO msg="config reloaded" config=c.toml changed=mode`},
	} {
		buf.Reset()
		next := reload(logger, s, tt.load, cfg, "c.toml")
		if kept := next == cfg; kept != tt.kept {
			t.Errorf("%s: running config kept %v; want %v", tt.name, kept, tt.kept)
		}
		if !strings.Contains(buf.String(), tt.log) {
			t.Errorf("%s: logged %q; want %q", tt.name, buf.String(), tt.log)
		}
	}
}
