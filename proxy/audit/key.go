package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/robotsgate/robotsgate/internal/statefile"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
)

// KeyFileName is the audit key's file in the state directory: the key
// checkpoints are signed with when [identity] is off.
const KeyFileName = "audit-key.pem"

// HeadFileName is the file in the state directory that remembers the
// chain's head (at every checkpoint, reopen and close), so that a new or
// empty audit file continues the chain.
const HeadFileName = "audit-head"

// Signing is where the key checkpoints are signed with lives: the
// [identity] key ring's, or the audit key in the state directory.
type Signing struct {
	Path     string // the private key's file
	Identity bool   // the [identity] key ring's current key; false: audit-key.pem
}

// SigningOf returns where cfg's checkpoint key lives: the [identity] key
// (cfg.Identity.KeyPath) when signature_agent is set, else
// <state_dir>/audit-key.pem.
func SigningOf(cfg *config.Config) (Signing, error) {
	dir, err := cfg.StateDir()
	if err != nil {
		return Signing{}, err
	}
	if cfg.Identity.SignatureAgent != "" {
		return Signing{Path: cfg.Identity.KeyPath(dir), Identity: true}, nil
	}
	return Signing{Path: filepath.Join(dir, KeyFileName)}, nil
}

// LoadAuditKey reads the audit key at path (PEM "PRIVATE KEY", PKCS #8
// Ed25519, as identity keys are written). It is in the state directory:
// a symbolic link is not followed, and a file open to others or
// writable by its group is refused. With create, a missing key is made
// (mode 0600, its directory 0700) and made says so. Every error names
// the file.
func LoadAuditKey(path string, create bool) (k *identity.Key, made bool, err error) {
	info, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && create:
		if k, err = identity.NewKey(); err != nil {
			return nil, false, err
		}
		b, err := k.MarshalPEM()
		if err != nil {
			return nil, false, err
		}
		if err := replaceFile(path, b, 0o600); err != nil {
			return nil, false, fmt.Errorf("make the audit key: %w", err)
		}
		return k, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("read the audit key: %w", err)
	case info.Mode().IsRegular() && info.Mode().Perm()&0o077 != 0:
		return nil, false, fmt.Errorf("audit key %s is open to others or its group (mode %#o): run chmod 600 %s", path, info.Mode().Perm(), path)
	}
	b, err := statefile.ReadFile(path, 64<<10) // refuses a link, a FIFO, a device
	if err != nil {
		return nil, false, fmt.Errorf("read the audit key: %w", err)
	}
	if k, err = identity.ParsePrivateKey(b); err != nil {
		return nil, false, fmt.Errorf("audit key %s: %w", path, err)
	}
	return k, false, nil
}

// LoadSigningKey returns the key cfg's checkpoints are signed with, and
// where it lives: the [identity] key ring's current key, or the audit key
// (made when missing only with create).
func LoadSigningKey(cfg *config.Config, create bool) (*identity.Key, Signing, bool, error) {
	s, err := SigningOf(cfg)
	if err != nil {
		return nil, s, false, err
	}
	if s.Identity {
		ring, made, err := identity.LoadKeyRing(s.Path, create && cfg.Identity.KeyFile == "")
		if err != nil {
			return nil, s, false, err
		}
		return ring.Current, s, made, nil
	}
	k, made, err := LoadAuditKey(s.Path, create)
	return k, s, made, err
}

// VerifyKeys returns the public keys cfg's checkpoints verify with: the
// [identity] key ring's current and retired keys, or the audit key's
// public half. Nothing is made.
func VerifyKeys(cfg *config.Config) ([]*identity.Key, Signing, error) {
	s, err := SigningOf(cfg)
	if err != nil {
		return nil, s, err
	}
	if s.Identity {
		ring, _, err := identity.LoadKeyRing(s.Path, false)
		if err != nil {
			return nil, s, err
		}
		return ring.Keys(), s, nil
	}
	k, _, err := LoadAuditKey(s.Path, false)
	if err != nil {
		return nil, s, err
	}
	return []*identity.Key{k}, s, nil
}

// ParsePublicKeys reads the Ed25519 public keys of a PEM file given to
// verify (identity.ParsePublicKeys); a file with none is an error. name is
// the file's name, for errors.
func ParsePublicKeys(name string, b []byte) ([]*identity.Key, error) {
	keys, err := identity.ParsePublicKeys(name, b)
	if err == nil && len(keys) == 0 {
		err = fmt.Errorf("%s: no PEM PUBLIC KEY or PRIVATE KEY block", name)
	}
	return keys, err
}
