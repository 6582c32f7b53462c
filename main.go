// Command robotsgate is a forward HTTP/HTTPS proxy that enforces robots.txt
// for outbound bots. See README.md.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/term"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/memlimit"
	"github.com/robotsgate/robotsgate/proxy"
	"github.com/robotsgate/robotsgate/proxy/mitm"
	"github.com/robotsgate/robotsgate/report"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		// The first signal starts a graceful stop; a second one exits at
		// once. (Restoring the default disposition is not enough: a process
		// started in the background inherits SIGINT ignored.)
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		stop()
		<-again
		fmt.Fprintln(os.Stderr, "robotsgate: second signal: exiting now")
		os.Exit(130)
	}()
	code := runMain(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// runMain runs a command line, reports its error on stderr as the command
// line shows it, and returns the exit status.
func runMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdin, stdout, stderr)
	if err != nil && !errors.Is(err, proxy.ErrNotAllowed) && !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errUsageShown) {
		fmt.Fprintln(stderr, "robotsgate:", err)
	}
	return exitCode(err)
}

// errUnhealthy is healthcheck's failure: exit 1, as Docker's HEALTHCHECK
// expects (2 is reserved there).
var errUnhealthy = errors.New("unhealthy")

// errUsage is a usage error; errUsageShown one whose message the flag
// package has already printed.
var errUsage = errors.New("usage")

// errUsageShown marks a usage error the flag package has printed.
var errUsageShown = errors.New("usage")

// exitCode maps run's error to the exit status: 0, 1 for URLs that check
// found not allowed, 2 for everything else.
func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, proxy.ErrNotAllowed), errors.Is(err, errUnhealthy):
		return 1
	case errors.Is(err, flag.ErrHelp):
		return 0
	}
	return 2
}

const usage = `usage:
  robotsgate [serve] [-config FILE] [-listen ADDR] [-mode enforce|report]
  robotsgate check [-config FILE] [-robots FILE|-] [-agent TOKEN | -user-agent UA] [-purpose P] [-exact] [-json] URL...
  robotsgate report [-json] [-html FILE] [-since T] AUDIT_FILE...   (- for stdin; plain or gzip)
  robotsgate validate [-config FILE]
  robotsgate ca [-config FILE]
  robotsgate hash-password            (reads one password line on stdin)
  robotsgate healthcheck [-url URL] [-config FILE]
  robotsgate version
`

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	} else if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		cmd = "help"
	} else if len(args) > 0 && (args[0] == "-version" || args[0] == "--version") {
		cmd, args = "version", args[1:]
	}
	switch cmd {
	case "check":
		return runCheck(ctx, args, stdin, stdout, stderr)
	case "version":
		if len(args) > 0 {
			fmt.Fprint(stderr, usage)
			return fmt.Errorf("%w: version takes no arguments", errUsage)
		}
		_, err := fmt.Fprintf(stdout, "robotsgate %s %s\n", version, runtime.Version())
		return err
	case "serve":
		return runServe(ctx, args, stdout, stderr)
	case "report":
		return runReport(args, stdin, stdout, stderr)
	case "validate":
		return runValidate(args, stdout, stderr)
	case "ca":
		return runCA(args, stdout, stderr)
	case "hash-password":
		return runHashPassword(args, stdin, stdout, stderr)
	case "healthcheck":
		return runHealthcheck(ctx, args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("robotsgate "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args, marking a usage error as already shown.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsageShown, err)
	}
	return nil
}

// loadConfig reads the config file, or returns the built-in defaults.
func loadConfig(path string) (*proxy.Config, error) {
	if path == "" {
		return proxy.Default(), nil
	}
	return proxy.LoadConfig(path)
}

func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("validate", stderr)
	path := fs.String("config", "", "config `FILE` to check; none: the built-in defaults")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: validate: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if _, err := loadConfig(*path); err != nil {
		return err
	}
	name := *path
	if name == "" {
		name = "built-in defaults"
	}
	_, err := fmt.Fprintf(stdout, "%s: ok\n", name)
	return err
}

// runCA creates the MITM CA if it is missing and prints its certificate's
// path alone on stdout (so that curl --cacert "$(robotsgate ca)" works),
// and how to trust it on stderr.
func runCA(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ca", stderr)
	path := fs.String("config", "", "config `FILE` ([tls] ca_cert, ca_key, state_dir); none: the built-in defaults")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: ca: unexpected argument %q", errUsage, fs.Arg(0))
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	files, err := cfg.CAFiles()
	if err != nil {
		return err
	}
	ca, err := mitm.LoadOrCreate(files, time.Now())
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(stdout, ca.CertPath); err != nil {
		return err
	}
	_, err = fmt.Fprint(stderr, mitm.TrustHelp(ca.CertPath, ca.KeyPath, cfg.Listen))
	return err
}

// runHealthcheck exits 0 if URL (by default the configured listener's
// /healthz) answers 200 within 2 seconds: the Docker HEALTHCHECK, which
// needs no shell or curl in the image.
func runHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("healthcheck", stderr)
	target := fs.String("url", "", "`URL` to check; default http://<listen>/healthz of the config")
	path := fs.String("config", "", "config `FILE` whose listen address to check")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *target == "" {
		cfg, err := loadConfig(*path)
		if err != nil {
			return err
		}
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen %q: %w", cfg.Listen, err)
		}
		if a, err := netip.ParseAddr(host); host == "" || err == nil && a.IsUnspecified() {
			host = "127.0.0.1" // listening everywhere: ask on loopback
			if err == nil && a.Is6() && !a.Is4In6() {
				host = "::1"
			}
		}
		*target = "http://" + net.JoinHostPort(host, port) + "/healthz"
	}
	if u, err := url.Parse(*target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: healthcheck: -url %q is not an http:// or https:// URL", errUsage, *target)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *target, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil}} // never the environment's proxy
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", errUnhealthy, *target, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: %s answered %s", errUnhealthy, *target, resp.Status)
	}
	_, err = fmt.Fprintf(stdout, "ok: %s\n", *target)
	return err
}

// bcryptCost is the cost of hashes made by hash-password.
const bcryptCost = 12

// runHashPassword reads one password line on stdin (without echo on a
// terminal) and prints its bcrypt hash, for [[auth.users]] password_hash.
func runHashPassword(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("hash-password", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: hash-password reads the password on stdin, not as an argument", errUsage)
	}
	var pw []byte
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(stderr, "password: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(stderr)
		if err != nil {
			return fmt.Errorf("read password: %w", err)
		}
		pw = b
	} else {
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read password: %w", err)
		}
		pw = []byte(strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r"))
	}
	switch {
	case len(pw) == 0:
		return fmt.Errorf("%w: empty password", errUsage)
	case len(pw) > 72:
		return fmt.Errorf("%w: password longer than 72 bytes (bcrypt reads no further)", errUsage)
	}
	hash, err := bcrypt.GenerateFromPassword(pw, bcryptCost)
	if err != nil {
		return fmt.Errorf("hash password: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "%s\n", hash)
	return err
}

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
	load := func() (*proxy.Config, error) {
		cfg, err := loadConfig(*path)
		if err != nil {
			return nil, err
		}
		if *listen != "" {
			cfg.Listen = *listen
		}
		if *mode != "" {
			cfg.Mode = *mode
		}
		return cfg, cfg.Validate()
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
	source, audit := cfg.Source, cfg.Audit.File
	if source == "" {
		source = "built-in defaults"
	}
	if audit == "" {
		audit = "stdout"
	}
	addr := ln.Addr().String()
	if ap, err := netip.ParseAddrPort(addr); err == nil && !ap.Addr().IsLoopback() && len(cfg.Auth.Users) == 0 {
		logger.Warn("listening beyond loopback with no [auth] users: anyone who can reach this address can use the proxy", "addr", addr)
	}
	logger.Info("robotsgate listening", "version", version, "addr", addr, "mode", cfg.Mode, "config", source, "audit", audit)
	// The container's memory limit bounds the heap (README, "Limits"):
	// without it the collector lets the heap grow to twice the live data.
	if ml, err := memlimit.Apply(os.DirFS("/"), os.Getenv); err != nil {
		logger.Warn("no soft memory limit: the container's could not be read; set GOMEMLIMIT", "err", err)
	} else {
		logger.Info("soft memory limit", "limit", ml.String())
	}
	proxyURL := "http://" + addr
	if len(cfg.Auth.Users) > 0 {
		proxyURL = "http://USER:PASSWORD@" + addr // [auth]: every request needs a user's credentials
	}
	logger.Info("point clients at it (curl reads only the lower-case http_proxy)", "http_proxy", proxyURL, "https_proxy", proxyURL,
		"HTTP_PROXY", proxyURL, "HTTPS_PROXY", proxyURL, "example", "curl -x "+proxyURL+" http://example.com/")
	if ca := s.CA(); ca != nil {
		logger.Info("HTTPS is decrypted: clients must trust the CA (robotsgate ca says how)", "ca", ca.CertPath)
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	for {
		select {
		case err := <-done:
			return err
		case <-hup:
			cfg, err := load()
			if err != nil {
				s.ReloadFailed()
				logger.Error("reload failed: keeping the running config", "err", err)
				continue
			}
			if err := s.Reload(cfg); err != nil {
				logger.Error("reload failed: keeping the running config", "err", err)
				continue
			}
			logger.Info("config reloaded", "config", source)
		case <-ctx.Done():
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
	}
}

// runReport summarises audit files: counts by decision, origin, token and
// rule, and the time range, as text or JSON on stdout, and as an HTML page
// with -html. A file that cannot be read is named on stderr and makes the
// exit status 2; the others are still reported.
func runReport(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of text")
	htmlFile := fs.String("html", "", "also write a self-contained HTML page with a chart to `FILE`")
	since := fs.String("since", "", "skip records before `T`: an RFC 3339 time, or a duration before now (24h)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: robotsgate report [-json] [-html FILE] [-since T] AUDIT_FILE...

Summarises audit logs (JSON lines, plain or gzip; - reads stdin): records by
decision, origin, token and rule, and their time range. Blocked records are
those the proxy answered without sending the request, the decisions
  %s
(not would-block, paced, upstream-error or the other refusals). Malformed
lines are counted and skipped. A file that cannot be read is named on stderr
and makes the exit status 2; the other files are still reported.

`, strings.Join(report.BlockedDecisions, ", "))
		fs.PrintDefaults()
	}
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: report: no audit file given (- for stdin)", errUsage)
	}
	s := &report.Summary{}
	if *since != "" {
		if s.Since, err = report.ParseSince(*since, time.Now()); err != nil {
			return fmt.Errorf("%w: report: -%v", errUsage, err)
		}
	}
	failed := 0
	for _, name := range files {
		if name == "-" {
			err = s.Read("-", stdin)
		} else {
			err = s.ReadFile(name)
		}
		if err != nil {
			fmt.Fprintln(stderr, "robotsgate: report:", err)
			failed++
		}
	}
	if *asJSON {
		err = s.WriteJSON(stdout)
	} else {
		err = s.WriteText(stdout)
		if n, first := s.Malformed(); n > 0 {
			fmt.Fprintf(stderr, "robotsgate: report: malformed lines skipped: %d (first: %s)\n", n, first)
		}
	}
	if err != nil {
		return err
	}
	if *htmlFile != "" {
		if err := writeHTMLReport(s, *htmlFile); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("report: %d of %d audit files not read in full", failed, len(files))
	}
	return nil
}

// writeHTMLReport writes s's HTML page to path.
func writeHTMLReport(s *report.Summary, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	w := bufio.NewWriter(f)
	err = s.WriteHTML(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	return nil
}

func runCheck(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", stderr)
	path := fs.String("config", "", "config `FILE` ([[agents]], [[sites]], [robots]); none: the built-in defaults")
	robotsFile := fs.String("robots", "", "robots.txt `FILE` to use for every URL's origin (- for stdin); without it each origin's is fetched")
	c := &proxy.Checker{}
	fs.Func("agent", "product `TOKEN` to decide for, taken verbatim", func(s string) error {
		c.Token, c.TokenSet = s, true
		return nil
	})
	fs.StringVar(&c.UserAgent, "user-agent", "", "full User-Agent header (`UA`) to take the token from, as the proxy does")
	fs.BoolVar(&c.Exact, "exact", false, "decide exactly as Google's reference matcher: no normalisation, exemption or size cap")
	fs.BoolVar(&c.JSON, "json", false, "print JSON Lines")
	fs.Func("purpose", "declare a purpose `P` (ai-train, ai-input, search; comma-separated or repeated): refused where the site's usage statements refuse it", func(s string) error {
		c.Purposes = append(c.Purposes, s)
		return nil
	})
	urls, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if c.TokenSet && c.UserAgent != "" {
		return fmt.Errorf("%w: check: -agent and -user-agent are exclusive", errUsage)
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	c.Config = cfg
	switch *robotsFile {
	case "":
	case "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("check: read robots.txt from stdin: %w", err)
		}
		c.Robots = b
	default:
		b, err := os.ReadFile(*robotsFile)
		if err != nil {
			return fmt.Errorf("check: read robots.txt: %w", err)
		}
		c.Robots = b
	}
	if c.Robots == nil && *robotsFile != "" {
		c.Robots = []byte{}
	}
	if c.Robots == nil {
		cache, err := proxy.CheckCache(cfg, version, c.Exact)
		if err != nil {
			return err
		}
		defer cache.Close()
		c.Cache = cache
	}
	return c.Run(ctx, urls, stdout, stderr)
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments, which it returns; "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}
