//go:build unix

package filestore

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// TestStoreRefusesWhatItDidNotWrite: a FIFO (which would block an
// open until a writer came), a link to /dev/zero (which would be read for
// ever) and a directory in place of an origin's file are neither waited on
// nor followed: Load returns at once with nothing, logs it and removes the
// entry itself (the link, not /dev/zero); a store opened on such a
// directory skips them unopened.
func TestStoreRefusesWhatItDidNotWrite(t *testing.T) {
	t.Parallel()
	o := fetch.Origin{Scheme: "https", Host: "example.com", Port: 443}
	for _, tt := range []struct {
		name string
		make func(path string) error
	}{
		{"fifo", func(path string) error { return syscall.Mkfifo(path, 0o600) }},
		{"link to /dev/zero", func(path string) error { return os.Symlink("/dev/zero", path) }},
		{"link to a good file", func(path string) error {
			good := filepath.Join(filepath.Dir(path), "elsewhere")
			content := `{"v":1,"origin":"https://example.com:443","good":{"outcome":"unavailable","status":404,"url":"u","fetched_at":"2026-01-01T00:00:00Z","expires":"2026-01-02T00:00:00Z"}}`
			if err := os.WriteFile(good, []byte(content), 0o600); err != nil {
				return err
			}
			return os.Symlink(good, path)
		}},
		{"directory", func(path string) error { return os.Mkdir(path, 0o700) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, fileName(o))
			if err := tt.make(path); err != nil {
				t.Fatal(err)
			}
			type result struct {
				s   *Store
				rec fetch.Record
				err error
			}
			var log testkit.Buffer
			done := make(chan result, 1)
			go func() {
				s, err := Open(dir, 1<<20, slog.New(slog.NewTextHandler(&log, nil)))
				if err != nil {
					done <- result{err: err}
					return
				}
				rec, err := s.Load(context.Background(), o)
				done <- result{s, rec, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second): // a hang guard: at once, or never
				t.Fatal("Open and Load still blocked after 30 s")
			}
			if r.err != nil || r.rec.Good != nil || r.rec.Failure != nil {
				t.Fatalf("Load = %+v, %v; want nothing", r.rec, r.err)
			}
			if r.s.Bytes() != 0 {
				t.Errorf("the store counts %d bytes; want the entry skipped at open", r.s.Bytes())
			}
			if !strings.Contains(log.String(), "not a file it wrote") {
				t.Errorf("not logged: %q", log.String())
			}
			if _, err := os.Lstat(path); err == nil {
				t.Errorf("the entry is still there")
			}
			if info, err := os.Stat("/dev/zero"); err != nil || info.Mode()&os.ModeCharDevice == 0 {
				t.Errorf("/dev/zero: %v, %v", info, err)
			}
		})
	}
}

// TestStoreDirectoryNotALink: the store's own directory, when a
// symbolic link stands in its place, is not followed: no files are
// written through it (to wherever it points).
func TestStoreDirectoryNotALink(t *testing.T) {
	t.Parallel()
	elsewhere, root := t.TempDir(), t.TempDir()
	dir := filepath.Join(root, "robots")
	if err := os.Symlink(elsewhere, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, 1<<20, nil); err == nil || !strings.Contains(err.Error(), "not followed") {
		t.Errorf("Open on a link = %v; want it refused", err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("%d files written through the link", len(entries))
	}
}
