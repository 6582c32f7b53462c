package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/replay"
)

// runAuditReplay re-decides every record of audit logs from the stored
// copy it names, with the config's agent rules, and reports each record
// that does not reproduce: exit 1 if any does not, or a copy it needs is
// missing, or a line is not a record.
func runAuditReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit replay", stderr)
	path := fs.String("config", "", "config `FILE` ([[agents]], [[sites]], [robots], [evidence]); none: the built-in defaults")
	store := fs.String("store", "", "the evidence store's `DIR`; default the config's [evidence] dir")
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%w: audit replay: name the audit FILEs", errUsage)
	}
	d, dir, err := openDecider(*path, *store)
	if err != nil {
		return err
	}
	p := &replay.Replayer{D: d, Report: func(f replay.Finding) { fmt.Fprintln(stdout, f) }}
	var s replay.Summary
	for _, name := range files {
		if err := replayFile(ctx, p, name, &s); err != nil {
			return fmt.Errorf("audit replay: %w", err)
		}
	}
	printSummary(stdout, &s, dir)
	if s.Failed() {
		return errAuditFailed
	}
	return nil
}

// replayFile replays one audit file, plain or gzip.
func replayFile(ctx context.Context, p *replay.Replayer, name string, s *replay.Summary) error {
	f, err := audit.OpenFile(name) // a FIFO or a device is refused, not waited on
	if err != nil {
		return err
	}
	defer f.Close()
	r, shown, err := replay.Plain(f, name)
	if err != nil {
		return err
	}
	return p.Replay(ctx, r, shown, s)
}

// printSummary prints replay's counts.
func printSummary(w io.Writer, s *replay.Summary, dir string) {
	fmt.Fprintf(w, "%s: %d reproduced, %d differ, %d not replayed for a missing copy (store %s), %s",
		plural(s.Records, "record", "records"), s.Reproduced, s.Differ, s.Missing, dir, plural(s.BadLines, "line not a record", "lines not records"))
	var skipped []string
	for _, why := range slices.Sorted(maps.Keys(s.Skipped)) {
		skipped = append(skipped, fmt.Sprintf("%d %s", s.Skipped[why], why))
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "; skipped, not decided from a copy: %s", strings.Join(skipped, ", "))
	}
	if s.Agents > 0 {
		fmt.Fprintf(w, "; %d with other tokens under this config's [[agents]]", s.Agents)
	}
	fmt.Fprintln(w)
}

// openDecider loads the config and returns a replay.Decider on the
// evidence store: dir if given, else the config's.
func openDecider(path, dir string) (*replay.Decider, string, error) {
	cfg, err := loadConfig(path, nil)
	if err != nil {
		return nil, "", err
	}
	if dir == "" {
		state, err := cfg.StateDir()
		if err != nil {
			return nil, "", err
		}
		dir = cfg.Evidence.DirPath(state)
	}
	d, err := replay.New(cfg, dir)
	return d, dir, err
}
