package main

import (
	"fmt"
	"io"

	"github.com/robotsgate/robotsgate/proxy/identity"
)

// runKeys manages the Web Bot Auth key ring ([identity]): it makes the
// signing key if there is none, rotates it (-rotate: the old key stays in
// the directory) or removes a retired key (-remove ID), then prints the
// key directory on stdout, to publish at signature_agent, and the keys on
// stderr. A running proxy signs with a rotated key from its next reload
// (SIGHUP).
func runKeys(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keys", stderr)
	path := fs.String("config", "", "config `FILE` ([identity], [tls] state_dir); none: the built-in defaults")
	rotate := fs.Bool("rotate", false, "make a new signing key; the current one stays in the directory, retired")
	remove := fs.String("remove", "", "take the retired key `ID` out of the directory (once its signatures have expired)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: keys: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *rotate && *remove != "" {
		return fmt.Errorf("%w: keys: -rotate and -remove are separate steps", errUsage)
	}
	cfg, err := loadConfig(*path, nil)
	if err != nil {
		return err
	}
	dir, err := cfg.StateDir()
	if err != nil {
		return err
	}
	ring, made, err := identity.LoadKeyRing(cfg.Identity.KeyPath(dir), true)
	if err != nil {
		return err
	}
	switch {
	case made:
		fmt.Fprintf(stderr, "robotsgate keys: made a signing key in %s\n", ring.Path)
	case *rotate:
		old := ring.Current.ID
		if err := ring.Rotate(); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "robotsgate keys: rotated: %s signs now; %s is retired, still listed (reload the proxy: kill -HUP)\n", ring.Current.ID, old)
	case *remove != "":
		if err := ring.Remove(*remove); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "robotsgate keys: removed %s from the directory\n", *remove)
	}
	for _, k := range ring.Keys() {
		state := "retired"
		if k == ring.Current {
			state = "signing"
		}
		fmt.Fprintf(stderr, "  %s  %s\n", k.ID, state)
	}
	agent := cfg.Identity.SignatureAgent
	if agent == "" {
		fmt.Fprintln(stderr, "robotsgate keys: [identity] signature_agent is not set: nothing is signed until it is")
		agent = "the URL you set as [identity] signature_agent"
	}
	fmt.Fprintf(stderr, "publish the directory below at %s (Content-Type: %s)\n", agent, identity.DirectoryType)
	_, err = fmt.Fprintf(stdout, "%s\n", identity.Directory(ring.Keys()))
	return err
}
