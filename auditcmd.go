package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/identity"
)

// errAuditFailed is an audit subcommand's finding: the log did not check
// out (verify) or a record did not reproduce (replay). What was found is
// already printed; it maps to exit 1 without a further message.
var errAuditFailed = errors.New("audit: not intact")

// auditUsage is the audit command's usage.
const auditUsage = `usage:
  robotsgate audit verify [-key FILE]... [-config FILE] [-from HASH] [-head HASH] FILE...
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
	return fmt.Errorf("%w: audit: unknown subcommand %q", errUsage, sub)
}

// runAuditVerify checks audit logs' chain and signed checkpoints
// (audit.Verify): each finding on stdout as FILE:LINE: what, then a
// summary; exit 0 only when every file was read whole and is intact, 1
// (errAuditFailed) when something is not, 2 for a usage or I/O error.
func runAuditVerify(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit verify", stderr)
	var keyFiles stringList
	fs.Var(&keyFiles, "key", "a PEM `FILE` of the public key(s) checkpoints verify with (or a private key, whose public half is used); repeatable; none: the config's")
	path := fs.String("config", "", "config `FILE` whose keys checkpoints verify with ([identity], or audit-key.pem in state_dir); none: the built-in defaults")
	from := fs.String("from", "", "the `HASH` the first line must continue from exactly: the final head an earlier verify printed (without it, the first line must start a chain: prev 64 zeros)")
	head := fs.String("head", "", "a `HASH` the chain must reach: the final head an earlier verify of these files printed (lines cut from the end since are found)")
	names, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fmt.Errorf("%w: audit verify: name the audit files", errUsage)
	}
	keys, source, err := verifyKeys(keyFiles, *path)
	if err != nil {
		return err
	}
	rep, err := audit.Verify(names, audit.VerifyOptions{Keys: keys, From: *from, Head: *head})
	if err != nil {
		return fmt.Errorf("audit verify: %w", err)
	}
	for _, f := range rep.Findings {
		fmt.Fprintln(stdout, f)
	}
	verdict := "intact"
	if !rep.Intact() {
		verdict = "NOT INTACT"
	}
	signed := plural(rep.Signed, "checkpoint", "checkpoints") + " signed by " + orNone(rep.Keys)
	switch {
	case rep.Signed == 0 && rep.Checkpoints > 0:
		signed = fmt.Sprintf("%s, none signed by the keys given", plural(rep.Checkpoints, "checkpoint", "checkpoints"))
	case rep.Signed != rep.Checkpoints:
		signed = fmt.Sprintf("%d of %d checkpoints signed by %s", rep.Signed, rep.Checkpoints, orNone(rep.Keys))
	}
	fmt.Fprintf(stdout, "%s: %s, %s, %s (keys from %s)\n", verdict, plural(len(rep.Files), "file", "files"), plural(rep.Lines, "line", "lines"), signed, source)
	fmt.Fprintf(stdout, "files in chain order: %s\n", strings.Join(rep.Files, " "))
	fmt.Fprintf(stdout, "first line %s, last line %s\n", orDash(rep.First), orDash(rep.Last))
	if !rep.Intact() {
		// Not a head to keep: what it would prove continued is not intact.
		fmt.Fprintf(stdout, "head of the lines read: %s (not intact: not a head to keep)\n", rep.Head)
		return errAuditFailed
	}
	_, err = fmt.Fprintf(stdout, "final head: %s (keep it: verify the files that follow with -from it)\n", rep.Head)
	return err
}

// verifyKeys returns the keys checkpoints verify with, and where they
// come from: the -key files, or the config's key ring or audit key.
func verifyKeys(files []string, config string) ([]*identity.Key, string, error) {
	if len(files) > 0 {
		var keys []*identity.Key
		for _, name := range files {
			b, err := readKeyFile(name)
			if err != nil {
				return nil, "", fmt.Errorf("audit verify: -key: %w", err)
			}
			k, err := audit.ParsePublicKeys(name, b)
			if err != nil {
				return nil, "", fmt.Errorf("audit verify: -key: %w", err)
			}
			keys = append(keys, k...)
		}
		return keys, "-key " + strings.Join(files, ", "), nil
	}
	cfg, err := loadConfig(config, nil)
	if err != nil {
		return nil, "", err
	}
	keys, sg, err := audit.VerifyKeys(cfg)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("audit verify: no key to verify with at %s: pass the public key with -key FILE (robotsgate audit key prints it where robotsgate runs)", sg.Path)
	}
	if err != nil {
		return nil, "", fmt.Errorf("audit verify: %w", err)
	}
	return keys, sg.Path, nil
}

// readKeyFile reads a -key file, at most 1 MiB of it (a key file is a
// few hundred bytes; a device or a FIFO given by mistake is not read for
// ever).
func readKeyFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err == nil && len(b) > 1<<20 {
		err = fmt.Errorf("%s: more than 1 MiB: not a key file", name)
	}
	return b, err
}

// runAuditKey prints the public key checkpoints are signed with (PEM) on
// stdout, and its key id and file on stderr. It makes nothing: with no
// key yet, it says so and fails (exit 1).
func runAuditKey(args []string, stdout, stderr io.Writer) error {
	flags := newFlagSet("audit key", stderr)
	path := flags.String("config", "", "config `FILE` ([identity], [tls] state_dir); none: the built-in defaults")
	if err := parseFlags(flags, args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("%w: audit key: unexpected argument %q", errUsage, flags.Arg(0))
	}
	cfg, err := loadConfig(*path, nil)
	if err != nil {
		return err
	}
	k, sg, _, err := audit.LoadSigningKey(cfg, false)
	if errors.Is(err, fs.ErrNotExist) {
		if sg.Identity {
			fmt.Fprintf(stderr, "robotsgate audit key: no [identity] key yet at %s: checkpoints are signed with it; it is made on the first start with [identity] set, or by robotsgate keys\n", sg.Path)
		} else {
			fmt.Fprintf(stderr, "robotsgate audit key: no audit key yet at %s: it is made on the first start with [evidence] on\n", sg.Path)
		}
		return errAuditFailed
	}
	if err != nil {
		return err
	}
	what := "the audit key"
	if sg.Identity {
		what = "the [identity] signing key"
	}
	fmt.Fprintf(stderr, "robotsgate audit key: %s %s, key id %s\n", what, sg.Path, k.ID)
	_, err = stdout.Write(identity.MarshalPublicPEM(k))
	return err
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

func orNone(ids []string) string {
	if len(ids) == 0 {
		return "no key"
	}
	return "key " + strings.Join(ids, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// plural is "1 one" or "N many".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
