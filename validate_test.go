package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
)

// TestValidateIdentityKey: validate reads the [identity] key as the proxy
// does at start (identity.OpenRing): present, an Ed25519 key, a mode that
// grants nothing to others nor write to its group, the retired keys
// beside it readable; each problem names identity.key_file and its line,
// or, without key_file, the state directory's key, its path and
// tls.state_dir's line.
func TestValidateIdentityKey(t *testing.T) {
	t.Parallel()
	good, err := os.ReadFile("proxy/identity/testdata/test-key-ed25519.pem")
	if err != nil {
		t.Fatal(err)
	}
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(ecKey)
	ecPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	for _, tt := range []struct {
		name    string
		keyFile bool   // key_file set in the config (else the state directory's)
		key     []byte // nil: no key file
		mode    os.FileMode
		retired string // the .retired file beside it, if any
		code    int
		want    string // in stderr
	}{
		{name: "good key_file", keyFile: true, key: good, mode: 0o600},
		{name: "read by its group (a Secret with fsGroup)", keyFile: true, key: good, mode: 0o440},
		{name: "owner read only", keyFile: true, key: good, mode: 0o400},
		{name: "in the state directory", key: good, mode: 0o600},
		{name: "not made yet in the state directory", want: "the proxy makes it on first start"},
		{name: "key_file missing", keyFile: true, code: 2, want: "c.toml:6: identity.key_file: read the identity key: open "},
		{name: "readable by others", keyFile: true, key: good, mode: 0o644, code: 2, want: "c.toml:6: identity.key_file: identity key "},
		{name: "writable by its group", keyFile: true, key: good, mode: 0o620, code: 2, want: "(mode 0620): run chmod 600"},
		{name: "others' access in the state directory", key: good, mode: 0o604, code: 2,
			want: "c.toml:2: tls.state_dir: the identity key is the state directory's, STATE/identity-key.pem (the default: identity.key_file is not set): identity key STATE/identity-key.pem is open to others"},
		{name: "not PEM in the state directory", key: []byte("not a key\n"), mode: 0o600, code: 2,
			want: "c.toml:2: tls.state_dir: the identity key is the state directory's, STATE/identity-key.pem (the default: identity.key_file is not set): identity key STATE/identity-key.pem: not a PEM"},
		{name: "not PEM", keyFile: true, key: []byte("not a key\n"), mode: 0o600, code: 2, want: `not a PEM "PRIVATE KEY" block`},
		{name: "not Ed25519", keyFile: true, key: ecPEM, mode: 0o600, code: 2, want: "a *ecdsa.PrivateKey key: want Ed25519"},
		{name: "retired keys unreadable", keyFile: true, key: good, mode: 0o600, retired: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
			code: 2, want: `want PUBLIC KEY or PRIVATE KEY`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			state := filepath.Join(dir, "state")
			keyPath := filepath.Join(state, "identity-key.pem")
			cfg := "[tls]\nstate_dir = \"" + state + "\"\n[identity]\nsignature_agent = \"https://bot.example/.well-known/http-message-signatures-directory\"\n"
			if tt.keyFile {
				keyPath = filepath.Join(dir, "secret", "bot-key.pem")
				cfg += "\nkey_file = \"" + keyPath + "\"\n"
			}
			if tt.key != nil {
				if err := os.MkdirAll(filepath.Dir(keyPath), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(keyPath, tt.key, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(keyPath, tt.mode); err != nil {
					t.Fatal(err)
				}
			}
			if tt.retired != "" {
				if err := os.WriteFile(keyPath+".retired", []byte(tt.retired), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, "c.toml"), []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := runCmd(t, "", "validate", "-config", filepath.Join(dir, "c.toml"))
			if want := strings.ReplaceAll(tt.want, "STATE", state); code != tt.code || !strings.Contains(errOut, want) {
				t.Errorf("validate: exit %d, stdout %q, stderr:\n%s\nwant exit %d and %q", code, out, errOut, tt.code, want)
			}
			if tt.code == 0 && !strings.HasSuffix(out, "c.toml: ok\n") {
				t.Errorf("validate: stdout %q; want ok", out)
			}
			// What validate accepts, the proxy starts on; what it refuses,
			// the proxy refuses: the same function reads it.
			_, _, err := identity.OpenRing(mustLoad(t, filepath.Join(dir, "c.toml")), tt.key == nil && !tt.keyFile)
			if (err == nil) != (tt.code == 0) {
				t.Errorf("OpenRing at start: %v; validate exit %d", err, code)
			}
		})
	}
}

// TestKeyProblem: a key that does not read is named as the problem of
// identity.key_file only when the file sets it; else it is the state
// directory's default, named with its path, at tls.state_dir's line when
// the file sets it, at [identity]'s when not.
func TestKeyProblem(t *testing.T) {
	t.Parallel()
	const agent = "[identity]\nsignature_agent = \"https://bot.example/k\"\n"
	for _, tt := range []struct {
		name, config string
		want         string // the problem, DIR the state directory
	}{
		{"key_file", "[tls]\nstate_dir = \"/s\"\n" + agent + "key_file = \"/k.pem\"\n",
			"c.toml:5: identity.key_file: bad key"},
		{"state_dir", "[tls]\nstate_dir = \"/s\"\n" + agent,
			"c.toml:2: tls.state_dir: the identity key is the state directory's, /s/identity-key.pem (the default: identity.key_file is not set): bad key"},
		{"the default state directory", agent,
			"c.toml:1: identity: the identity key is the state directory's, DIR/identity-key.pem (the default: identity.key_file is not set): bad key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "c.toml")
			if err := os.WriteFile(path, []byte(tt.config), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := mustLoad(t, path)
			dir, err := cfg.StateDir()
			if err != nil {
				t.Skipf("no default state directory here: %v", err)
			}
			pb := cfg.Problems()
			key, msg := keyProblem(cfg, errors.New("bad key"))
			pb.Addf(key, "%s", msg)
			want := strings.ReplaceAll(tt.want, "DIR", dir)
			if got := strings.TrimPrefix(pb.Err().Error(), filepath.Dir(path)+string(filepath.Separator)); got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

// TestValidateMakesNoKey: validate only reads; the key is made by the
// first start or by robotsgate keys.
func TestValidateMakesNoKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.toml")
	os.WriteFile(cfg, []byte("[tls]\nstate_dir = \""+dir+"/state\"\n[identity]\nsignature_agent = \"https://bot.example/k\"\n"), 0o644)
	if _, errOut, code := runCmd(t, "", "validate", "-config", cfg); code != 0 {
		t.Fatalf("validate: exit %d\n%s", code, errOut)
	}
	if _, err := os.Stat(dir + "/state/identity-key.pem"); err == nil {
		t.Error("validate made the identity key")
	}
}

// mustLoad reads the config at path, which must be valid.
func mustLoad(t *testing.T, path string) *config.Config {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
