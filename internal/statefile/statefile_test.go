//go:build unix

package statefile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("x"), 11), 0o600); err != nil {
		t.Fatal(err)
	}
	exact := filepath.Join(dir, "exact")
	if err := os.WriteFile(exact, bytes.Repeat([]byte("x"), 10), 0o600); err != nil {
		t.Fatal(err)
	}
	linkToRegular := filepath.Join(dir, "link-regular")
	if err := os.Symlink(regular, linkToRegular); err != nil {
		t.Fatal(err)
	}
	linkToZero := filepath.Join(dir, "link-zero")
	if err := os.Symlink("/dev/zero", linkToZero); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		want    string // the content; "" when an error is wanted
		wantErr error
	}{
		{"regular file", regular, "hello", nil},
		{"exactly max", exact, "xxxxxxxxxx", nil},
		{"missing", filepath.Join(dir, "missing"), "", fs.ErrNotExist},
		{"symlink to a regular file", linkToRegular, "", ErrSymlink},
		{"symlink to /dev/zero", linkToZero, "", ErrSymlink},
		{"fifo", fifo, "", ErrNotRegular},
		{"directory", dir, "", ErrNotRegular},
		{"over max", big, "", ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			type result struct {
				b   []byte
				err error
			}
			done := make(chan result, 1)
			go func() {
				b, err := ReadFile(tt.path, 10)
				done <- result{b, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second): // a hang guard: at once, or never
				t.Fatalf("ReadFile(%s) still blocked after 30 s", tt.name)
			}
			switch {
			case tt.wantErr == nil && (r.err != nil || string(r.b) != tt.want):
				t.Errorf("ReadFile(%s) = %q, %v; want %q", tt.name, r.b, r.err, tt.want)
			case tt.wantErr != nil && !errors.Is(r.err, tt.wantErr):
				t.Errorf("ReadFile(%s) = %q, %v; want an error wrapping %v", tt.name, r.b, r.err, tt.wantErr)
			case tt.wantErr != nil && r.b != nil:
				t.Errorf("ReadFile(%s) returned %d bytes with its error", tt.name, len(r.b))
			}
		})
	}
}

// TestReadFollowing: links are followed to a regular file, and the mode
// is the file's; what they end at is checked as ReadFile checks it.
func TestReadFollowing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("hello"), 0o400); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	if b, mode, err := ReadFollowing(link, 10); err != nil || string(b) != "hello" || mode.Perm() != 0o400 {
		t.Errorf("ReadFollowing(link to a 0400 file) = %q, %v, %v; want hello, -r--------", b, mode, err)
	}
	// A missing file is named once: "open P: no such file or directory".
	missing := filepath.Join(dir, "missing")
	if _, _, err := ReadFollowing(missing, 10); !errors.Is(err, fs.ErrNotExist) || strings.Count(err.Error(), missing) != 1 {
		t.Errorf("ReadFollowing(missing) = %v; want ErrNotExist, naming the path once", err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadFollowing(zero, 10); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadFollowing(link to /dev/zero) = %v; want ErrNotRegular", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := ReadFollowing(fifo, 10); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("ReadFollowing(fifo) = %v; want ErrNotRegular", err)
		}
	case <-time.After(30 * time.Second): // a hang guard: at once, or never
		t.Fatal("ReadFollowing(fifo) still blocked after 30 s")
	}
}

// TestWriteFile: the file is replaced whole with its mode, read back as
// written, and a failed write names the path and leaves nothing beside it.
func TestWriteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "audit-head")
	for _, data := range []string{"first\n", "second, longer\n"} {
		if err := WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := ReadFile(path, 1<<10)
		if err != nil || string(b) != data {
			t.Fatalf("ReadFile = %q, %v; want %q", b, err, data)
		}
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v; want 0600", info.Mode().Perm(), err)
	}
	missing := filepath.Join(dir, "none", "key.pem")
	if err := WriteFile(missing, []byte("x"), 0o600); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("WriteFile into a missing directory = %v; want an error naming %s", err, missing)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files in the directory; want only the one written", len(ents))
	}
}
