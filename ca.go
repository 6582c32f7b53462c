package main

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
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
	if err := caSource(stderr, cfg, files, ca.Created); err != nil {
		return err
	}
	_, err = fmt.Fprint(stderr, mitm.TrustHelp(ca.CertPath, ca.KeyPath, cfg.Listen))
	return err
}

// caSource tells on stderr where the CA came from: the config's files, or
// the state directory, and which config (the built-in defaults when none
// was given); and warns when the CA was made just now, which a running
// proxy with another state_dir does not sign with.
func caSource(stderr io.Writer, cfg *config.Config, files mitm.Files, created bool) error {
	source := cfg.Source
	if source == "" {
		source = "no -config: the built-in defaults"
	}
	where := "[tls] ca_cert and ca_key of " + source
	if !files.Given {
		where = "state directory " + filepath.Dir(files.Cert) + " (" + source + ")"
	}
	if _, err := fmt.Fprintf(stderr, "robotsgate ca: the CA of %s\n", where); err != nil {
		return err
	}
	if !created {
		return nil
	}
	_, err := fmt.Fprintf(stderr, `robotsgate ca: WARNING: there was no CA there, so a new one was made just now.
  A proxy already running with another config or state_dir signs with its own CA:
  pass the same -config as the proxy, or fetch the running proxy's from
  http://%s/ca.pem

`, mitm.ClientAddr(cfg.Listen))
	return err
}
