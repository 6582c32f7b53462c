package main

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// errAuditFailed is an audit subcommand's finding: the log did not check
// out (verify) or a record did not reproduce (replay). What was found is
// already printed; it maps to exit 1 without a further message.
var errAuditFailed = errors.New("audit: not intact")

// auditUsage is the audit command's usage.
const auditUsage = `usage:
  robotsgate audit verify [-key FILE]... [-config FILE] [-from HASH] FILE...
  robotsgate audit key [-config FILE]
  robotsgate audit replay [-config FILE] [-store DIR] FILE...
`

// runAudit runs an audit subcommand: verify (the chain and the signed
// checkpoints of audit logs), key (the public key checkpoints are signed
// with). Each subcommand is a function of its own, below or in a file of
// its own.
func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, auditUsage)
		return fmt.Errorf("%w: audit: name a subcommand", errUsageShown)
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "verify":
		return runAuditVerify(args, stdout, stderr)
	case "key":
		return runAuditKey(args, stdout, stderr)
	case "replay":
		return runAuditReplay(ctx, args, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, auditUsage)
		return nil
	}
	fmt.Fprint(stderr, auditUsage)
	return fmt.Errorf("%w: audit: unknown subcommand %q", errUsageShown, sub)
}

// runAuditVerify checks audit logs' chain and checkpoints.
func runAuditVerify(args []string, stdout, stderr io.Writer) error {
	return errors.New("audit verify: not yet built")
}

// runAuditKey prints the public key checkpoints are signed with.
func runAuditKey(args []string, stdout, stderr io.Writer) error {
	return errors.New("audit key: not yet built")
}
