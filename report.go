package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/robotsgate/robotsgate/report"
)

// runReport summarises audit files: counts by decision, origin, token and
// rule, the time range, the refusals by whether they reached the site, the
// URLs refused and what sites charged, as text or JSON on stdout, and as an
// HTML page with -html. A file that cannot be read is named on stderr and makes the
// exit status 2; the others are still reported.
func runReport(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of text")
	htmlFile := fs.String("html", "", "also write a self-contained HTML page with a chart to `FILE`")
	since := fs.String("since", "", "skip records before `T`: an RFC 3339 time, or a duration before now (24h)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: robotsgate report [-json] [-html FILE] [-since T] AUDIT_FILE...

Summarises audit logs (JSON lines, plain or gzip; - reads stdin): records by
decision, origin, token and rule, their time range, the URLs refused (-json:
every one while there are at most 10,000; past that the 10,000 most refused,
by Space-Saving: every URL refused more often than the smallest count listed
is among them, each count with its error bound; text and -html: the most
refused of each origin) and what sites charged (pay-per-crawl, summed exactly per currency and origin). Blocked
records are those whose client got robotsgate's answer, not the site's: the
decisions
  %s
(not would-block, paced, upstream-error, client-left or the other refusals).
They were never sent, except usage refusals made on the site's own answer (its
headers, its HTML meta, a tdmrep.json reservation it did not lift): those
reached the site, and only the answer's body was withheld. price-refused requests reached
the site too (it answered 402; nothing was paid). Malformed lines are counted
and skipped. A file that cannot be read is named on stderr and makes the exit
status 2; the other files are still reported, and when none was read, no report
is printed.

`, report.BlockedNames())
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
	if failed == len(files) && s.Total() == 0 {
		// An empty report would read as an empty log.
		return fmt.Errorf("report: no audit file read: nothing to report")
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
