package main

import (
	"fmt"
	"io"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// runKeys manages the Web Bot Auth key ring ([identity]): it makes the
// signing key if there is none, rotates it (-rotate: the old key stays in
// the directory) or removes a retired key (-remove ID), then prints the
// key directory on stdout, to publish at signature_agent (with -card, the
// Signature Agent Card instead, to publish at its client_id), and the
// keys on stderr. A running proxy signs with a rotated key from its next
// reload (SIGHUP).
func runKeys(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keys", stderr)
	path := fs.String("config", "", "config `FILE` ([identity], [tls] state_dir); none: the built-in defaults")
	rotate := fs.Bool("rotate", false, "make a new signing key; the current one stays in the directory, retired")
	remove := fs.String("remove", "", "take the retired key `ID` out of the directory (once its signatures have expired)")
	card := fs.Bool("card", false, "print the Signature Agent Card ([identity.card]) instead of the key directory")
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
	var sac *identity.Card
	if *card {
		pol, err := policy.Compile(cfg) // loadConfig has checked it
		if err != nil {
			return err
		}
		if sac = pol.Card(); sac == nil {
			return fmt.Errorf("keys -card: no Signature Agent Card: set [identity.card] client_id (docs/identity.md)")
		}
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
	return printPublished(stdout, stderr, cfg, ring, sac)
}

// printPublished prints what the operator publishes: the Signature Agent
// Card sac, if not nil, else the key directory, each listing ring's keys.
func printPublished(stdout, stderr io.Writer, cfg *config.Config, ring *identity.KeyRing, sac *identity.Card) error {
	if sac != nil {
		signed := "with its keys by jwks_uri"
		if sac.Signed() {
			signed = "signed over its Content-Digest (a static copy is not: see docs/identity.md)"
		}
		fmt.Fprintf(stderr, "publish the card below at %s (Content-Type: %s); the proxy's listener serves it at %s, %s\n",
			sac.ClientID(), identity.CardType, sac.Path(), signed)
		_, err := stdout.Write(sac.JSON(ring.Keys()))
		return err
	}
	agent := cfg.Identity.SignatureAgent
	if agent == "" {
		fmt.Fprintln(stderr, "robotsgate keys: [identity] signature_agent is not set: nothing is signed until it is")
		agent = "the URL you set as [identity] signature_agent"
	}
	fmt.Fprintf(stderr, "publish the directory below at %s (Content-Type: %s)\n", agent, identity.DirectoryType)
	_, err := fmt.Fprintf(stdout, "%s\n", identity.Directory(ring.Keys()))
	return err
}
