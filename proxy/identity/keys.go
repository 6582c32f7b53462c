// Package identity is robotsgate's verified bot identity (Web Bot Auth,
// draft-ietf-webbotauth-httpsig-protocol): the Ed25519 keys it signs with,
// kept in the state directory; the HTTP Message Signatures (RFC 9421) it
// puts on every request it sends; and the key directory an operator
// publishes at the signature agent's URL.
package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/robotsgate/robotsgate/internal/statefile"
	"github.com/robotsgate/robotsgate/proxy/config"
)

// A Key is an Ed25519 key pair, named by its JWK thumbprint.
type Key struct {
	Private ed25519.PrivateKey // nil for a retired key, which only the directory lists
	Public  ed25519.PublicKey
	ID      string // the JWK SHA-256 thumbprint (RFC 7638), base64url: the signatures' keyid
}

// NewKey makes a key from the system's randomness.
func NewKey() (*Key, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make an Ed25519 key: %w", err)
	}
	return keyOf(priv, pub), nil
}

func keyOf(priv ed25519.PrivateKey, pub ed25519.PublicKey) *Key {
	return &Key{Private: priv, Public: pub, ID: Thumbprint(pub)}
}

// Thumbprint returns the JWK SHA-256 thumbprint of an Ed25519 public key
// (RFC 7638 section 3, with RFC 8037's members for an OKP key), base64url
// without padding: the hash of {"crv":"Ed25519","kty":"OKP","x":"…"}, its
// members in that order, without white space.
func Thumbprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + base64.RawURLEncoding.EncodeToString(pub) + `"}`))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// JWK is a public key as a JSON Web Key (RFC 8037): what the key
// directory lists.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
}

// JWK returns k's public key as a JWK.
func (k *Key) JWK() JWK {
	return JWK{Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(k.Public)}
}

// maxKeyFile bounds what is read of a key file.
const maxKeyFile = 64 << 10

// ParsePrivateKey reads a PEM "PRIVATE KEY" (PKCS #8) Ed25519 key.
func ParsePrivateKey(b []byte) (*Key, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM \"PRIVATE KEY\" block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse the key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T key: want Ed25519", k)
	}
	return keyOf(priv, priv.Public().(ed25519.PublicKey)), nil
}

// MarshalPEM returns k's private key as a PEM "PRIVATE KEY" (PKCS #8).
func (k *Key) MarshalPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.Private)
	if err != nil {
		return nil, fmt.Errorf("encode the key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// A KeyRing is the signing key and the retired keys the directory still
// lists (so that signatures made before a rotation verify until they
// expire), as kept on disk: the signing key at Path (PEM, mode 0600), the
// retired ones' public keys at Path + ".retired" (PEM "PUBLIC KEY"
// blocks).
type KeyRing struct {
	Path    string
	Current *Key
	Retired []*Key
}

// LoadKeyRing reads the key ring at path. With create, a missing key is
// made (mode 0600, its directory 0700) and made reports so. A key file
// that grants anything to others, or write to its group, is refused
// (read by its group is allowed: a Kubernetes Secret mounted for a pod
// with an fsGroup is 0440).
func LoadKeyRing(path string, create bool) (ring *KeyRing, made bool, err error) {
	ring = &KeyRing{Path: path}
	b, mode, err := statefile.ReadFollowing(path, maxKeyFile)
	switch {
	case errors.Is(err, fs.ErrNotExist) && create:
		if ring.Current, err = NewKey(); err != nil {
			return nil, false, err
		}
		if err := ring.writeCurrent(); err != nil {
			return nil, false, err
		}
		made = true
	case err != nil:
		return nil, false, fmt.Errorf("read the identity key: %w", err)
	case mode.Perm()&0o027 != 0:
		// Group-readable is allowed: a Kubernetes Secret mounted for a
		// pod with an fsGroup is 0440.
		return nil, false, fmt.Errorf("identity key %s is open to others or writable by its group (mode %#o): run chmod 600 %s", path, mode.Perm(), path)
	default:
		if ring.Current, err = ParsePrivateKey(b); err != nil {
			return nil, false, fmt.Errorf("identity key %s: %w", path, err)
		}
	}
	if ring.Retired, err = readRetired(path + ".retired"); err != nil {
		return nil, false, err
	}
	return ring, made, nil
}

// OpenRing reads the key ring cfg's [identity] names (LoadKeyRing, its
// mode rule included): key_file, or identity-key.pem in the state
// directory. With firstStart and no key_file, a missing key is made (made
// reports so); a key_file is never made in its place, nor a key gone at a
// reload: either would be a new identity nobody published. The proxy
// opens its ring with it at start and at each reload, and validate
// checks the same file with it.
func OpenRing(cfg *config.Config, firstStart bool) (ring *KeyRing, made bool, err error) {
	dir, err := cfg.StateDir()
	if err != nil {
		return nil, false, err
	}
	ic := &cfg.Identity
	return LoadKeyRing(ic.KeyPath(dir), firstStart && ic.KeyFile == "")
}

// readRetired reads the retired keys at path; none when it does not exist.
func readRetired(path string) ([]*Key, error) {
	b, _, err := statefile.ReadFollowing(path, maxKeyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the retired identity keys: %w", err)
	}
	keys, err := ParsePublicKeys(path, b)
	if err != nil {
		return nil, fmt.Errorf("retired identity keys %w", err)
	}
	return keys, nil
}

// ParsePublicKeys reads the Ed25519 public keys of a PEM file: each
// "PUBLIC KEY" block, and the public half of each "PRIVATE KEY" block (so
// a key file, or a list of retired keys, can be given as it is); none
// for a file with no block. name is the file's name, for errors.
func ParsePublicKeys(name string, b []byte) ([]*Key, error) {
	var keys []*Key
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return keys, nil
		}
		switch block.Type {
		case "PUBLIC KEY":
			pub, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			p, ok := pub.(ed25519.PublicKey)
			if !ok {
				return nil, fmt.Errorf("%s: a %T key: want Ed25519", name, pub)
			}
			keys = append(keys, keyOf(nil, p))
		case "PRIVATE KEY":
			k, err := ParsePrivateKey(pem.EncodeToMemory(block))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			keys = append(keys, keyOf(nil, k.Public))
		default:
			return nil, fmt.Errorf("%s: a PEM %q block: want PUBLIC KEY or PRIVATE KEY", name, block.Type)
		}
	}
}

// MarshalPublicPEM returns k's public key as a PEM "PUBLIC KEY" block.
func MarshalPublicPEM(k *Key) []byte {
	der, _ := x509.MarshalPKIXPublicKey(k.Public) // an Ed25519 key: cannot fail
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// Rotate makes a new signing key; the current one is retired, listed in
// the directory until Remove takes it out. Both files are replaced whole
// (written beside, then renamed).
func (r *KeyRing) Rotate() error {
	next, err := NewKey()
	if err != nil {
		return err
	}
	retired := append([]*Key{{Public: r.Current.Public, ID: r.Current.ID}}, r.Retired...)
	if err := writeRetired(r.Path+".retired", retired); err != nil {
		return err
	}
	r.Current, r.Retired = next, retired
	return r.writeCurrent()
}

// Remove takes the retired key id out of the directory. It fails for the
// current key and for an id not listed.
func (r *KeyRing) Remove(id string) error {
	if id == r.Current.ID {
		return fmt.Errorf("%s is the signing key: rotate first", id)
	}
	for i, k := range r.Retired {
		if k.ID == id {
			left := append(r.Retired[:i:i], r.Retired[i+1:]...)
			if err := writeRetired(r.Path+".retired", left); err != nil {
				return err
			}
			r.Retired = left
			return nil
		}
	}
	return fmt.Errorf("no retired key %s", id)
}

// Keys returns the keys the directory lists: the current one first.
func (r *KeyRing) Keys() []*Key { return append([]*Key{r.Current}, r.Retired...) }

func (r *KeyRing) writeCurrent() error {
	b, err := r.Current.MarshalPEM()
	if err != nil {
		return err
	}
	return replaceFile(r.Path, b, 0o600)
}

func writeRetired(path string, keys []*Key) error {
	var b []byte
	for _, k := range keys {
		b = append(b, MarshalPublicPEM(k)...)
	}
	return replaceFile(path, b, 0o644)
}

// replaceFile writes data to path whole (statefile.WriteFile), making its
// directory (0700) first.
func replaceFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create the identity key directory: %w", err)
	}
	return statefile.WriteFile(path, data, mode)
}

// Directory returns the key directory listing keys
// (application/http-message-signatures-directory+json): {"keys": [JWK…]}.
func Directory(keys []*Key) []byte {
	d := struct {
		Keys []JWK `json:"keys"`
	}{Keys: make([]JWK, len(keys))}
	for i, k := range keys {
		d.Keys[i] = k.JWK()
	}
	b, _ := json.Marshal(d) // strings only: cannot fail
	return b
}

// DirectoryType is the key directory's media type.
const DirectoryType = "application/http-message-signatures-directory+json"
