// Command robotsgate is a forward HTTP/HTTPS proxy that enforces robots.txt
// for outbound bots. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/robotsgate/robotsgate/proxy"
	"github.com/robotsgate/robotsgate/robots"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
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
	case errors.Is(err, proxy.ErrNotAllowed):
		return 1
	case errors.Is(err, flag.ErrHelp):
		return 0
	}
	return 2
}

const usage = `usage:
  robotsgate [serve] [-config FILE] [-listen ADDR] [-mode enforce|report]
  robotsgate check [-robots FILE|-] [-agent TOKEN | -user-agent UA] [-exact] [-json] URL...
  robotsgate version
`

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "check":
		return runCheck(ctx, args, stdin, stdout, stderr)
	case "version":
		_, err := fmt.Fprintf(stdout, "robotsgate %s %s\n", version, runtime.Version())
		return err
	case "serve":
		return errors.New("serve: the proxy is not built yet; use robotsgate check")
	case "help", "-h", "-help", "--help":
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

func runCheck(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", stderr)
	robotsFile := fs.String("robots", "", "robots.txt `FILE` to use for every URL's origin (- for stdin); without it each origin's is fetched")
	c := &proxy.Checker{DefaultAgent: "*", MaxBytes: 512000}
	fs.Func("agent", "product `TOKEN` to decide for, taken verbatim", func(s string) error {
		c.Token, c.TokenSet = s, true
		return nil
	})
	fs.StringVar(&c.UserAgent, "user-agent", "", "full User-Agent `header` to take the token from, as the proxy does")
	fs.BoolVar(&c.Exact, "exact", false, "decide exactly as Google's reference matcher: no normalisation, exemption or size cap")
	fs.BoolVar(&c.JSON, "json", false, "print JSON Lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if c.TokenSet && c.UserAgent != "" {
		return fmt.Errorf("%w: check: -agent and -user-agent are exclusive", errUsage)
	}
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
		cache, err := checkCache(c.Exact)
		if err != nil {
			return err
		}
		defer cache.Close()
		c.Cache = cache
	}
	return c.Run(ctx, fs.Args(), stdout, stderr)
}

// exactMaxBytes bounds a live fetch for check -exact, which has no size cap
// of its own: enough for any real robots.txt, not enough to hurt.
const exactMaxBytes = 32 << 20

// checkCache returns the fetcher and cache check uses without -robots: the
// proxy's, with the built-in defaults.
func checkCache(exact bool) (*robots.Cache, error) {
	fopts := robots.FetchOptions{UserAgent: fetchUserAgent()}
	var parse []robots.Option
	if exact {
		fopts.MaxBytes = exactMaxBytes
	} else {
		parse = append(parse, robots.WithNormalization())
	}
	return robots.NewCache(robots.CacheOptions{Fetcher: robots.NewFetcher(fopts), Parse: parse})
}

// fetchUserAgent is the User-Agent of robots.txt fetches.
func fetchUserAgent() string {
	return "robotsgate/" + version + " (+https://github.com/robotsgate/robotsgate)"
}
