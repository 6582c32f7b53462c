package mitm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func caConfig(dir string) Files { return StateFiles(dir) }

func TestCACreateAndReload(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	now := time.Now()
	ca, err := LoadOrCreate(caConfig(dir), now)
	if err != nil {
		t.Fatal(err)
	}
	if ca.CertPath != filepath.Join(dir, "ca.pem") || ca.KeyPath != filepath.Join(dir, "ca-key.pem") {
		t.Errorf("paths %s, %s", ca.CertPath, ca.KeyPath)
	}
	for path, want := range map[string]os.FileMode{ca.KeyPath: 0o600, ca.CertPath: 0o644, dir: 0o700} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s mode %#o; want %#o", path, got, want)
		}
	}
	if _, ok := ca.Key.(*ecdsa.PrivateKey); !ok || !ca.Cert.IsCA || !strings.Contains(ca.Cert.Subject.CommonName, "robotsgate") {
		t.Errorf("CA: key %T, IsCA %v, name %q", ca.Key, ca.Cert.IsCA, ca.Cert.Subject.CommonName)
	}
	again, err := LoadOrCreate(caConfig(dir), now)
	if err != nil {
		t.Fatal(err)
	}
	if again.Cert.SerialNumber.Cmp(ca.Cert.SerialNumber) != 0 {
		t.Error("second start made a new CA; want the same one loaded")
	}
}

func TestCARefusals(t *testing.T) {
	t.Parallel()
	now := time.Now()
	newCA := func(t *testing.T) (string, *CA) {
		dir := t.TempDir()
		ca, err := LoadOrCreate(caConfig(dir), now)
		if err != nil {
			t.Fatal(err)
		}
		return dir, ca
	}
	t.Run("key readable by others", func(t *testing.T) {
		t.Parallel()
		dir, ca := newCA(t)
		os.Chmod(ca.KeyPath, 0o644)
		if _, err := LoadOrCreate(caConfig(dir), now); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("err = %v; want a refusal naming chmod 600", err)
		}
	})
	t.Run("mismatched pair", func(t *testing.T) {
		t.Parallel()
		dir, ca := newCA(t)
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, _ := x509.MarshalPKCS8PrivateKey(key)
		os.WriteFile(ca.KeyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
		if _, err := LoadOrCreate(caConfig(dir), now); err == nil || !strings.Contains(err.Error(), "private key does not match public key") {
			t.Errorf("err = %v; want a mismatch", err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		t.Parallel()
		dir, _ := newCA(t)
		if _, err := LoadOrCreate(caConfig(dir), now.Add(11*365*24*time.Hour)); err == nil || !strings.Contains(err.Error(), "not valid now") {
			t.Errorf("err = %v; want expired", err)
		}
	})
	t.Run("only one file", func(t *testing.T) {
		t.Parallel()
		dir, ca := newCA(t)
		os.Remove(ca.KeyPath)
		if _, err := LoadOrCreate(caConfig(dir), now); err == nil {
			t.Error("a certificate without its key was accepted (or replaced)")
		}
	})
	// What someone else put in state_dir is never waited on or read
	// without bound: a FIFO, a link to /dev/zero, a link at all.
	for _, tt := range []struct {
		name  string
		plant func(path string) error
	}{
		{"key is a FIFO", func(path string) error { return syscall.Mkfifo(path, 0o600) }},
		{"key links to /dev/zero", func(path string) error { return os.Symlink("/dev/zero", path) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir, ca := newCA(t)
			os.Remove(ca.KeyPath)
			if err := tt.plant(ca.KeyPath); err != nil {
				t.Skip(err)
			}
			done := make(chan error, 1)
			go func() { _, err := LoadOrCreate(caConfig(dir), now); done <- err }()
			select {
			case err := <-done:
				if err == nil {
					t.Error("a CA key that is not a regular file was accepted")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("loading the CA hangs on a key that is not a regular file")
			}
		})
	}
	t.Run("given paths are never created", func(t *testing.T) {
		t.Parallel()
		given := Files{Cert: filepath.Join(t.TempDir(), "mine.pem"), Key: filepath.Join(t.TempDir(), "mine-key.pem"), Given: true}
		if _, err := LoadOrCreate(given, now); err == nil {
			t.Error("missing ca_cert/ca_key were created; want an error")
		}
	})
}

func TestLeafCacheRenews(t *testing.T) {
	t.Parallel()
	now := time.Now()
	clock := func() time.Time { return now }
	ca, err := LoadOrCreate(caConfig(t.TempDir()), now)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := newLeafCache(ca, clock)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := lc.get("a.example")
	if same, _ := lc.get("a.example"); same != first {
		t.Error("cached leaf not reused")
	}
	now = now.Add(leafValidity - leafRenew + time.Minute) // less than a day left
	renewed, _ := lc.get("a.example")
	if renewed == first || !renewed.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Error("leaf near its end was not reissued")
	}
	if err := renewed.Leaf.CheckSignatureFrom(ca.Cert); err != nil {
		t.Errorf("leaf not signed by the CA: %v", err)
	}
	for i := range leafMax + 10 {
		lc.get("h" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + ".example")
	}
	if n := lc.lru.Len(); n > leafMax {
		t.Errorf("leaf cache holds %d; bound is %d", n, leafMax)
	}
}

func TestClientAddr(t *testing.T) {
	t.Parallel()
	for listen, want := range map[string]string{
		"127.0.0.1:8080": "127.0.0.1:8080",
		":8080":          "127.0.0.1:8080",
		"0.0.0.0:8080":   "127.0.0.1:8080",
		"[::]:8080":      "127.0.0.1:8080",
		"10.1.2.3:3128":  "10.1.2.3:3128",
		"[::1]:8080":     "[::1]:8080",
		"proxy.lan:8080": "proxy.lan:8080",
		"nonsense":       "nonsense",
	} {
		if got := ClientAddr(listen); got != want {
			t.Errorf("ClientAddr(%q) = %q; want %q", listen, got, want)
		}
	}
}
