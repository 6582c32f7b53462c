package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/memlimit"
	"github.com/robotsgate/robotsgate/proxy"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/mitm"
	"github.com/robotsgate/robotsgate/proxy/pay"
)

// runServe runs the proxy until a signal stops it; SIGHUP reloads its
// config.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	path := fs.String("config", "", "config `FILE`; none: the built-in defaults")
	listen := fs.String("listen", "", "listen on `ADDR` (host:port), overriding the config")
	mode := fs.String("mode", "", "enforce or report, overriding the config")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: serve: unexpected argument %q", errUsage, fs.Arg(0))
	}
	load := func() (*config.Config, error) {
		return loadConfig(*path, func(cfg *config.Config) {
			if *listen != "" {
				cfg.Listen = *listen
			}
			if *mode != "" {
				cfg.Mode = *mode
			}
		})
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	cluster.RouteLibraryLogs(logger)
	s, err := proxy.NewServer(cfg, proxy.Options{Logger: logger, AuditOut: stdout, Version: version})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// SIGHUP reloads from the moment the start says where it listens: one
	// sent then, by an operator or a test that waits for that line, must
	// not end the process (SIGHUP's default).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	source := logStart(logger, s, cfg, ln.Addr().String())

	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	for {
		select {
		case err := <-done:
			return err
		case <-hup:
			cfg = reload(logger, s, load, cfg, source)
		case <-ctx.Done():
			return shutdown(logger, s, done)
		}
	}
}

// logStart says at startup where the proxy listens and what it does
// (config, audit log, memory limit, how clients reach it, the CA,
// pacing, identity, payments, the fleet), warning of what looks unmeant;
// it returns the config's source as the reload log names it.
func logStart(logger *slog.Logger, s *proxy.Server, cfg *config.Config, addr string) (source string) {
	source, audit := cfg.Source, cfg.Audit.File
	if source == "" {
		source = "built-in defaults"
	}
	if audit == "" {
		audit = "stdout"
	}
	if ap, err := netip.ParseAddrPort(addr); err == nil && !ap.Addr().IsLoopback() && len(cfg.Auth.Users) == 0 {
		logger.Warn("listening beyond loopback with no [auth] users: anyone who can reach this address can use the proxy", "addr", addr)
	}
	logWarnings(logger, cfg)
	logger.Info("robotsgate listening", "version", version, "addr", addr, "mode", cfg.Mode, "config", source, "audit", audit)
	applyMemoryLimit(logger, cfg)
	proxyURL := "http://" + addr
	if len(cfg.Auth.Users) > 0 {
		proxyURL = "http://USER:PASSWORD@" + addr // [auth]: every request needs a user's credentials
	}
	logger.Info("point clients at it (curl reads only the lower-case http_proxy)", "http_proxy", proxyURL, "https_proxy", proxyURL,
		"HTTP_PROXY", proxyURL, "HTTPS_PROXY", proxyURL, "example", "curl -x "+proxyURL+" http://example.com/")
	if ca := s.CA(); ca != nil {
		logger.Info("HTTPS is decrypted: clients must trust the CA (robotsgate ca -config FILE says how)", "ca", ca.CertPath, "ca_url", "http://"+mitm.ClientAddr(addr)+"/ca.pem")
	}
	logPacing(logger, cfg)
	if keyID := s.SigningKey(); keyID != "" {
		logger.Info("identity: every request sent is signed (Web Bot Auth); publish the key directory at signature_agent (robotsgate keys prints it)",
			"signature_agent", cfg.Identity.SignatureAgent, "keyid", keyID)
	}
	logPayments(logger, cfg)
	logFleet(logger, cfg)
	return source
}

// applyMemoryLimit applies the container's memory limit as the soft limit
// of the heap (docs/performance.md, "Memory": without it the collector
// lets the heap grow to twice the live data) and says what it is, warning
// when robots.cache_max_bytes is above it.
func applyMemoryLimit(logger *slog.Logger, cfg *config.Config) {
	ml, err := memlimit.Apply(os.DirFS("/"), os.Getenv, cfg.Robots.CacheMaxBytes, "robots.cache_max_bytes")
	if err != nil {
		logger.Warn("no soft memory limit: the container's could not be read; set GOMEMLIMIT", "err", err)
		return
	}
	logger.Info("soft memory limit", "limit", ml.String())
	if ml.Limit < cfg.Robots.CacheMaxBytes {
		logger.Warn("robots.cache_max_bytes is more than the soft memory limit: the collector will run hard long before the cache is full; lower it",
			"cache_max_bytes", cfg.Robots.CacheMaxBytes, "limit", ml.Limit)
	}
}

// logFleet says at startup, with [cluster], what the fleet shares and
// through which Redis.
func logFleet(logger *slog.Logger, cfg *config.Config) {
	cc := &cfg.Cluster
	if !cc.Enabled() {
		return
	}
	const fleet = "fleet: robots.txt copies, pacing and back-off are shared through Redis while it answers (a lost Redis is logged, and this instance goes on alone)"
	switch {
	case len(cc.Sentinels) > 0:
		logger.Info(fleet, "sentinels", strings.Join(cc.Sentinels, ","), "master", cc.Master, "key_prefix", cc.KeyPrefix)
	case len(cc.Nodes) > 0:
		logger.Info(fleet, "cluster_nodes", strings.Join(cc.Nodes, ","), "key_prefix", cc.KeyPrefix)
	default:
		logger.Info(fleet, "redis", redisAddr(cc.Redis), "key_prefix", cc.KeyPrefix)
	}
}

// reload is SIGHUP's step: it loads the config again and applies it to
// s, logging its warnings and what changed against cfg, the config in
// force (the identity keys too, when keys -rotate or -remove changed
// them, and the keys only a restart applies apart). It returns the config
// in force after it: the new one, or cfg when the new one cannot be read
// or is refused (s.ReloadFailed, or Reload, counts the failure, and the
// log lists every problem).
func reload(logger *slog.Logger, s *proxy.Server, load func() (*config.Config, error), cfg *config.Config, source string) *config.Config {
	next, err := load()
	if err != nil {
		s.ReloadFailed()
		logger.Error("reload failed: keeping the running config", "err", err)
		return cfg
	}
	keys := s.IdentityKeys()
	if err := s.Reload(next); err != nil {
		logger.Error("reload failed: keeping the running config", "err", err)
		return cfg
	}
	logWarnings(logger, next)
	logReloaded(logger, source, config.Changed(cfg, next), !slices.Equal(keys, s.IdentityKeys()), s.RestartNeeded(next))
	return next
}

// shutdown drains s's requests (10 s at most; a second signal exits at
// once) and waits for Serve to return on done.
func shutdown(logger *slog.Logger, s *proxy.Server, done <-chan error) error {
	logger.Info("shutting down: draining requests (a second signal exits at once)")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := s.Shutdown(sctx)
	cancel()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shut down: %w", err)
	}
	<-done
	logger.Info("shutdown complete", "drained", err == nil)
	return nil
}

// logReloaded says what a reload changed: the keys that differ from the
// config before it (changed), with identity.keys when the key files
// changed (keys -rotate or -remove), the config not; but those a restart
// needs (pending: each differs from the config the proxy started with)
// are listed apart, as restart_needed, and under changed only when the
// reload applied part of them.
func logReloaded(logger *slog.Logger, source string, changed []string, keys bool, pending []proxy.Pending) {
	var applied, restart []string
	for _, k := range changed {
		i := slices.IndexFunc(pending, func(p proxy.Pending) bool { return p.Key == k })
		if i < 0 || pending[i].Now != "" {
			applied = append(applied, k)
		}
	}
	if keys {
		applied = append(applied, "identity.keys")
	}
	if len(applied) == 0 {
		applied = []string{"nothing"}
	}
	args := []any{"config", source, "changed", strings.Join(applied, " ")}
	for _, p := range pending {
		restart = append(restart, p.Key)
	}
	if len(restart) > 0 {
		args = append(args, "restart_needed", strings.Join(restart, " "))
	}
	logger.Info("config reloaded", args...)
}

// logWarnings logs what cfg (checked) holds that is valid but likely not
// meant (policy.Policy.Warnings), at start and at each reload, as validate
// prints it.
func logWarnings(logger *slog.Logger, cfg *config.Config) {
	for _, w := range configWarnings(cfg) {
		logger.Warn("config: " + w.Error())
	}
}

// logPayments says at startup what pay-per-crawl pays ([payments]), and
// warns of a budget below max_price: valid, but then no price above the
// budget is paid.
func logPayments(logger *slog.Logger, cfg *config.Config) {
	pc := cfg.Payments
	if pc.MaxPrice == "" {
		return
	}
	logger.Info("pay-per-crawl: sites' 402 prices are paid within max_price, and the day's budget (UTC)", "max_price", pc.MaxPrice, "budget", pc.Budget)
	maxPrice, err1 := pay.ParseAmount(pc.MaxPrice)
	budget, err2 := pay.ParseAmount(pc.Budget)
	if err1 == nil && err2 == nil && budget.Nanos < maxPrice.Nanos {
		logger.Warn("pay-per-crawl: the budget is less than max_price: no price above the budget is paid", "max_price", maxPrice.String(), "budget", budget.String())
	}
}

// logPacing says at startup what pacing is in force ([politeness]):
// whether Crawl-delay is honoured, any interval of its own, how long a
// request may be held, and the origins' own back-off.
func logPacing(logger *slog.Logger, cfg *config.Config) {
	pc := cfg.Politeness
	sites := 0
	for _, st := range cfg.Sites {
		if st.MinInterval > 0 {
			sites++
		}
	}
	backoff := "off (politeness.honour_retry_after = false)"
	if pc.HonourRetryAfter {
		backoff = "429 and 503 with Retry-After hold the origin, at most " + pc.MaxBackoff.String()
	}
	if !pc.CrawlDelay && pc.MinInterval <= 0 && sites == 0 {
		logger.Warn("pacing off: requests to one site are not spaced (politeness.crawl_delay = false, no min_interval)", "origin_backoff", backoff)
		return
	}
	crawlDelay := "ignored (politeness.crawl_delay = false)"
	if pc.CrawlDelay {
		crawlDelay = "honoured, at most " + pc.MaxDelay.String()
	}
	logger.Info("pacing on: requests to one site start no closer than its Crawl-delay or min_interval", "crawl_delay", crawlDelay, "min_interval", pc.MinInterval.String(),
		"sites_with_own_interval", sites, "held_at_most", pc.MaxWait.String(), "origin_backoff", backoff)
}

// redisAddr is the Redis URL u as a startup line may show it: its
// password, if any, left out.
func redisAddr(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}
