package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// runValidate checks a config file as the proxy would, and says so: its
// values, and the files the proxy would refuse to start on that
// validate can read without side effects (the [identity] key).
func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("validate", stderr)
	path := fs.String("config", "", "config `FILE` to check; none: the built-in defaults")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: validate: unexpected argument %q", errUsage, fs.Arg(0))
	}
	cfg, err := loadConfig(*path, nil)
	if err != nil {
		return err
	}
	if err := checkIdentityKey(cfg, stderr); err != nil {
		return err
	}
	for _, w := range configWarnings(cfg) {
		fmt.Fprintf(stderr, "robotsgate validate: warning: %v\n", w)
	}
	name := *path
	if name == "" {
		name = "built-in defaults"
	}
	_, err = fmt.Fprintf(stdout, "%s: ok\n", name)
	return err
}

// configWarnings returns what cfg, a checked config (loadConfig), holds
// that is valid but likely not meant (policy.Policy.Warnings): validate
// prints them, serve logs them at start and at each reload.
func configWarnings(cfg *config.Config) []*config.Error {
	pol, err := policy.Compile(cfg) // the other checks do not warn
	if err != nil {
		return nil // loadConfig has said why
	}
	return pol.Warnings()
}

// checkIdentityKey reads the [identity] key ring as the proxy does at
// start (identity.OpenRing: the file present, an Ed25519 key, a mode that
// grants nothing to others nor write to its group, the retired keys
// beside it), making nothing. A key missing from the state directory,
// with no key_file, is not an error: the proxy makes it on first start,
// and validate says so.
func checkIdentityKey(cfg *config.Config, stderr io.Writer) error {
	if cfg.Identity.SignatureAgent == "" {
		return nil
	}
	_, _, err := identity.OpenRing(cfg, false)
	if errors.Is(err, fs.ErrNotExist) && cfg.Identity.KeyFile == "" {
		dir, _ := cfg.StateDir() // OpenRing found it
		fmt.Fprintf(stderr, "robotsgate validate: no identity key in %s yet: the proxy makes it on first start (robotsgate keys makes it now)\n", cfg.Identity.KeyPath(dir))
		return nil
	}
	if err != nil {
		pb := cfg.Problems()
		key, msg := keyProblem(cfg, err)
		pb.Addf(key, "%s", msg)
		return pb.Err()
	}
	return nil
}

// keyProblem names the config key an [identity] key that does not read
// (err) is a problem of, and says so: identity.key_file when it is set;
// else the key is the state directory's default, which the message names
// with its path, against tls.state_dir when the file sets it (the
// [identity] table when not): not a key_file nobody wrote.
func keyProblem(cfg *config.Config, err error) (key, msg string) {
	if cfg.Identity.KeyFile != "" {
		return "identity.key_file", err.Error()
	}
	key = "identity"
	if cfg.Written("tls.state_dir") {
		key = "tls.state_dir"
	}
	dir, derr := cfg.StateDir()
	if derr != nil { // err is derr: no state directory to name
		return "tls.state_dir", err.Error()
	}
	return key, fmt.Sprintf("the identity key is the state directory's, %s (the default: identity.key_file is not set): %v", cfg.Identity.KeyPath(dir), err)
}
