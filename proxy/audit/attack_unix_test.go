//go:build unix

package audit

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestVerifyFIFO: a FIFO given as a log is refused at once, not waited on.
func TestVerifyFIFO(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Verify([]string{path}, VerifyOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("Verify(FIFO) = %v; want not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Verify(FIFO) still waiting after 10s")
	}
}
