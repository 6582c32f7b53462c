package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/replay"
)

// errNoCopy is the evidence command's finding that no copy was in force,
// or the one in force is not in the store: exit 1, with its message.
var errNoCopy = errors.New("evidence")

// evidenceQuery is what the evidence command is asked.
type evidenceQuery struct {
	*replay.Query
	at     time.Time
	audits []string
}

// runEvidence prints the copy of a URL's origin's robots.txt that was in
// force at a time, the verdict it gives the URL for a token, and the
// audit records of that URL.
func runEvidence(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("evidence", stderr)
	path := fs.String("config", "", "config `FILE` ([[agents]], [[sites]], [robots], [evidence]); none: the built-in defaults")
	store := fs.String("store", "", "the evidence store's `DIR`; default the config's [evidence] dir")
	token := fs.String("agent", "", "product `TOKEN` to decide for, taken verbatim; default the config's default_agent")
	ua := fs.String("user-agent", "", "full User-Agent header (`UA`) to take the token from, as the proxy does ([[agents]] included)")
	atFlag := fs.String("at", "", "the `TIME` (RFC 3339, or a date: the end of that day, UTC); default now")
	q := &evidenceQuery{}
	fs.Func("audit", "audit `FILE` (plain or gzip; repeatable) to print the URL's records from", func(s string) error {
		q.audits = append(q.audits, s)
		return nil
	})
	urls, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *token != "" && *ua != "" {
		return fmt.Errorf("%w: evidence: -agent and -user-agent are exclusive", errUsage)
	}
	if len(urls) != 1 {
		return fmt.Errorf("%w: evidence: give one URL", errUsage)
	}
	if q.at, err = parseAt(*atFlag, time.Now()); err != nil {
		return fmt.Errorf("%w: evidence: -at: %v", errUsage, err)
	}
	d, dir, err := openDecider(*path, *store)
	if err != nil {
		return err
	}
	if q.Query, err = d.NewQuery(urls[0], *token, *ua); err != nil {
		return fmt.Errorf("%w: evidence: %v", errUsage, err)
	}
	sum, err := printCopy(ctx, stdout, stderr, d, dir, q)
	if len(q.audits) > 0 {
		fmt.Fprintf(stdout, "audit records of %s, at any time", q.URL)
		if sum != "" {
			fmt.Fprint(stdout, " (* : decided with the copy above)")
		}
		fmt.Fprintln(stdout, ":")
	}
	for _, name := range q.audits {
		if aerr := printRecords(stdout, name, q, sum); aerr != nil && (err == nil || errors.Is(err, errNoCopy)) {
			err = aerr
		}
	}
	return err
}

// parseAt reads -at: RFC 3339, or a date (the end of that day, UTC); now
// when empty.
func parseAt(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither RFC 3339 nor a date (2006-01-02)", s)
	}
	return t.Add(24*time.Hour - time.Millisecond), nil
}

// printCopy prints the copy in force and its verdict, and returns its
// sha256 ("" when it has no body, or none was in force). Its error wraps
// errNoCopy when none was in force, or the one that was is not in the
// store or cannot be read from it.
func printCopy(ctx context.Context, stdout, stderr io.Writer, d *replay.Decider, dir string, q *evidenceQuery) (string, error) {
	robotsURL := q.RobotsURL
	e, ok, err := evidence.InForce(dir, robotsURL, q.at, func(_ int, err error) {
		fmt.Fprintf(stderr, "robotsgate: evidence: skipped: %v\n", err)
	})
	if err != nil {
		return "", err
	}
	at := q.at.UTC().Format(audit.TimeFormat)
	if !ok {
		return "", fmt.Errorf("%w: no copy of %s was fetched before %s (the index of the store %s)", errNoCopy, robotsURL, at, dir)
	}
	c := e.Copy()
	fmt.Fprintf(stdout, "copy in force at %s:\n  url      %s\n  fetched  %s (its first fetch: refetches that found it unchanged are not indexed)\n  status   %d\n  sha256   %s\n",
		at, e.URL, e.Fetched.UTC().Format(audit.TimeFormat), e.Status, orNoBody(e.SHA256))
	if c.HasBody() {
		if _, err := os.Lstat(evidence.ObjectPath(dir, c.Sum)); err != nil {
			fmt.Fprintln(stdout, "  stored   no")
			return "", fmt.Errorf("%w: the copy with sha256 %s is not in the store %s (removed by retention or its size bound, or never kept)", errNoCopy, e.SHA256, dir)
		}
		fmt.Fprintf(stdout, "  stored   %s\n", evidence.ObjectPath(dir, c.Sum))
	}
	dec, err := d.Decide(ctx, q.Request, []evidence.Copy{c}, q.at)
	switch {
	case errors.Is(err, replay.ErrMissing):
		fmt.Fprintln(stdout, "  stored   no")
		return "", fmt.Errorf("%w: %w", errNoCopy, err)
	case errors.Is(err, evidence.ErrCorrupt), errors.Is(err, evidence.ErrTooLarge):
		return "", fmt.Errorf("%w: %w", errNoCopy, err)
	case err != nil:
		return "", err
	}
	rule, line := audit.RuleOf(dec)
	fmt.Fprintf(stdout, "verdict for %s, token %q: %s (%s)", q.URL, dec.Agents.Slice(), dec.Action, dec.Reason)
	if line > 0 || rule != "" {
		fmt.Fprintf(stdout, "; rule %q line %d", rule, line)
	}
	fmt.Fprintln(stdout)
	return e.SHA256, nil
}

func orNoBody(s string) string {
	if s == "" {
		return "none (no body)"
	}
	return s
}

// printRecords prints the records of an audit file that name q's URL (by
// their url, or their origin and path), each with its file and line, and
// marked "*" when it names the copy whose sha256 is sum.
func printRecords(stdout io.Writer, name string, q *evidenceQuery, sum string) error {
	f, err := audit.OpenFile(name) // a FIFO or a device is refused, not waited on
	if err != nil {
		return fmt.Errorf("evidence: %w", err)
	}
	defer f.Close()
	r, shown, err := replay.Plain(f, name)
	if err != nil {
		return fmt.Errorf("evidence: %w", err)
	}
	named := []byte(`"sha256":"` + sum + `"`)
	return q.Records(r, shown, func(n int, rec []byte) {
		mark := " "
		if sum != "" && bytes.Contains(rec, named) {
			mark = "*"
		}
		fmt.Fprintf(stdout, "%s %s:%d: %s\n", mark, shown, n, rec)
	})
}
