package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/check"
	"github.com/robotsgate/robotsgate/proxy/policy"
	use "github.com/robotsgate/robotsgate/usage" // package main has a const usage
)

// runCheck decides URLs as the proxy would and prints one line for each:
// text, or JSON Lines with -json.
func runCheck(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("check", stderr)
	path := fs.String("config", "", "config `FILE` ([[agents]], [[sites]], [robots]); none: the built-in defaults")
	robotsFile := fs.String("robots", "", "robots.txt `FILE` to use for every URL's origin (- for stdin); without it each origin's is fetched")
	c := &check.Checker{}
	fs.Func("agent", "product `TOKEN` to decide for, taken verbatim", func(s string) error {
		c.Token, c.TokenSet = s, true
		return nil
	})
	fs.StringVar(&c.UserAgent, "user-agent", "", "full User-Agent header (`UA`) to take the token from, as the proxy does")
	fs.BoolVar(&c.Exact, "exact", false, "decide exactly as Google's reference matcher: no normalisation, exemption or size cap")
	asJSON := fs.Bool("json", false, "print JSON Lines")
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
	cfg, err := loadConfig(*path, nil)
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
		cache, files, err := check.Cache(cfg, version, c.Exact)
		if err != nil {
			return err
		}
		defer cache.Close()
		c.Cache, c.Files = cache, files
	}
	filesRead := c.Files != nil
	print := func(u string, d *policy.Decision) error { return printText(stdout, u, d, filesRead) }
	if *asJSON {
		enc := json.NewEncoder(stdout)
		print = func(u string, d *policy.Decision) error {
			return enc.Encode(audit.ResultOf(u, d, filesRead))
		}
	}
	return c.Run(ctx, urls, print, stderr)
}

// unseenText says in words what can still refuse u's purposes.
func unseenText(u *audit.Unseen, filesRead bool) string {
	them := "it"
	if len(u.Purposes) > 1 {
		them = "them"
	}
	purposes := strings.Join(u.Purposes, ", ")
	if filesRead {
		return fmt.Sprintf("%s not refused by what check reads (robots.txt, the RSL licences it names, tdmrep.json), "+
			"but the page's own response headers or HTML meta, which check does not fetch, can still refuse %s", purposes, them)
	}
	return fmt.Sprintf("%s not refused by the robots.txt given, but check read none of the site's usage files (-robots: "+
		"RSL licences, tdmrep.json), and the page's own response headers or HTML meta can still refuse %s", purposes, them)
}

// printText prints one line of check's text output: the status, the URL
// and why, tab-separated. filesRead: the site's usage files were read
// (not with -robots).
func printText(w io.Writer, u string, d *policy.Decision, filesRead bool) error {
	status := "allowed"
	switch {
	case d.Action == policy.ActionUnreachable, d.Action == policy.ActionUpstream:
		status = "unreachable"
	case d.Action == policy.ActionUsageRefused, d.Action == policy.ActionBadRequest:
		status = d.Action.String()
	case !d.Allowed():
		status = "disallowed"
	}
	why := []string{d.Reason}
	if rule, line := audit.RuleOf(d); line > 0 {
		why = append(why, fmt.Sprintf("rule %q line %d", rule, line))
	}
	if f := &d.Fetch; !f.IsZero() {
		s := fmt.Sprintf("%s %s", d.RobotsURL(), f.Outcome)
		if f.Status != 0 {
			s += " " + strconv.Itoa(f.Status)
		}
		if !f.FetchedAt.IsZero() {
			s += " age " + f.Age.Round(time.Second).String()
		}
		if f.Stale {
			s += " (stale)"
		}
		if f.Error != "" && !strings.Contains(d.Reason, f.Error) {
			s += " (" + f.Error + ")"
		}
		why = append(why, s)
	}
	if d.HasDelay {
		why = append(why, "crawl-delay "+strconv.FormatFloat(d.CrawlDelay, 'f', -1, 64))
	}
	var stated []string
	for p, v := range d.Usage {
		if v.State != use.Unstated {
			stated = append(stated, fmt.Sprintf("%s %s by %q line %d", use.Purpose(p), v.State, v.Statement, v.Line))
		}
	}
	if len(stated) > 0 {
		why = append(why, "usage: "+strings.Join(stated, ", "))
	}
	if un := audit.UnseenOf(d, filesRead); un != nil {
		why = append(why, unseenText(un, filesRead))
	}
	_, err := fmt.Fprintf(w, "%s\t%s\t%s\n", status, u, strings.Join(why, "; "))
	return err
}
