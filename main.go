// Command robotsgate is a forward HTTP/HTTPS proxy that enforces robots.txt
// for outbound bots. See README.md. This file wires the command line: each
// command is in a file of its own (serve.go, check.go, report.go, ...).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/proxy/admin"
	"github.com/robotsgate/robotsgate/proxy/check"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

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
	if err != nil && !errors.Is(err, check.ErrNotAllowed) && !errors.Is(err, flag.ErrHelp) && !errors.Is(err, errUsageShown) && !errors.Is(err, errAuditFailed) {
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
// found not allowed and for audit logs that are not intact, 2 for
// everything else.
func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, check.ErrNotAllowed), errors.Is(err, errUnhealthy), errors.Is(err, errAuditFailed), errors.Is(err, errNoCopy):
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
  robotsgate keys [-config FILE] [-rotate | -remove ID] [-card]
  robotsgate audit verify [-key FILE]... [-config FILE] [-from HASH] [-head HASH] FILE...   (plain or gzip, any order)
  robotsgate audit key [-config FILE]
  robotsgate audit replay [-config FILE] [-store DIR] FILE...   (re-decide every record from the copy it names)
  robotsgate evidence [-config FILE] [-store DIR] [-agent TOKEN | -user-agent UA] [-at TIME] [-audit FILE]... URL
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
		return runVersion(args, stdout, stderr)
	case "serve":
		return runServe(ctx, args, stdout, stderr)
	case "report":
		return runReport(args, stdin, stdout, stderr)
	case "validate":
		return runValidate(args, stdout, stderr)
	case "ca":
		return runCA(args, stdout, stderr)
	case "keys":
		return runKeys(args, stdout, stderr)
	case "evidence":
		return runEvidence(ctx, args, stdout, stderr)
	case "audit":
		return runAudit(ctx, args, stdout, stderr)
	case "hash-password":
		return runHashPassword(args, stdin, stdout, stderr)
	case "healthcheck":
		return runHealthcheck(ctx, args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	if near := config.Suggest(cmd, commands()...); near != "" {
		return fmt.Errorf("unknown command %q; did you mean %s? (robotsgate help lists the commands)", cmd, near)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

// commands are the names run dispatches, for suggesting one to a command
// line that misspells it.
func commands() []string {
	return []string{"check", "version", "serve", "report", "validate", "ca", "keys", "evidence", "audit", "hash-password", "healthcheck", "help"}
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

// loadConfig reads the config file (or takes the built-in defaults),
// applies override, if any, and checks the result as the proxy would
// (policy.Compile, [cluster] by cluster.CheckConfig, the card's path by
// admin.CheckConfig): every problem is
// reported at once, in the order of
// their lines.
func loadConfig(path string, override func(*config.Config)) (*config.Config, error) {
	cfg := config.Default()
	var err error
	if path != "" {
		if cfg, err = config.Load(path); cfg == nil {
			return nil, err
		}
	}
	if override != nil {
		override(cfg)
	}
	_, cerr := policy.Compile(cfg, cluster.CheckConfig, admin.CheckConfig)
	if err := config.Join(err, cerr); err != nil {
		return nil, err
	}
	return cfg, nil
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
