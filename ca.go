package main

import (
	"fmt"
	"io"
	"time"

	"github.com/robotsgate/robotsgate/proxy/mitm"
)

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
	cfg, err := loadConfig(*path, nil)
	if err != nil {
		return err
	}
	files, err := mitm.FilesOf(cfg)
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
