//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAuditFilesFIFO: a FIFO given to verify or replay is refused at
// once, naming it, not waited on for a writer that never comes.
func TestAuditFilesFIFO(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "audit.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	for _, args := range [][]string{
		{"audit", "verify", "-key", "proxy/audit/testdata/chain/key.pem", fifo},
		{"audit", "replay", "-store", t.TempDir(), fifo},
	} {
		type result struct {
			errOut string
			code   int
		}
		done := make(chan result, 1)
		go func() {
			_, errOut, code := runCmd(t, "", args...)
			done <- result{errOut, code}
		}()
		select {
		case r := <-done:
			if r.code != 2 || !strings.Contains(r.errOut, "not a regular file") || !strings.Contains(r.errOut, fifo) {
				t.Errorf("%v: exit %d, stderr %q; want 2, %s not a regular file", args, r.code, r.errOut, fifo)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: still waiting on the FIFO after 10s", args)
		}
	}
}
