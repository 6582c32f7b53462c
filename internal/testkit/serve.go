package testkit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"
)

// Binary is robotsgate built once, for every test of a test binary that
// asks for it (Path); TestMain removes it (Remove).
type Binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Path is robotsgate built from the module whose root is root (a path
// from the test's package directory, "../.."), the first call building it.
func (b *Binary) Path(t testing.TB, root string) string {
	t.Helper()
	b.once.Do(func() {
		root, b.err = filepath.Abs(root)
		if b.err != nil {
			return
		}
		if b.dir, b.err = os.MkdirTemp("", "robotsgate-test-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "robotsgate")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		build := exec.CommandContext(ctx, "go", "build", "-o", b.path, ".")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Remove removes what Path built.
func (b *Binary) Remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// listening is the log line robotsgate writes once its proxy listens.
var listening = regexp.MustCompile(`msg="robotsgate listening" .*addr=(127\.0\.0\.1:\d+)`)

// Serve runs bin serve -config cfg on a loopback port of its choosing,
// with only PATH and HOME (home) in its environment, and returns the
// address it listens on. It is interrupted when the test ends, its log
// shown if it failed or the test did.
func Serve(t testing.TB, bin, cfg, home string) string {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "serve", "-config", cfg, "-listen", "127.0.0.1:0")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		stop()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		stop()
		t.Fatal(err)
	}
	var logs Buffer
	addrc := make(chan string, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 16<<20) // a long log line must not stop the reading, and robotsgate with it
		for sc.Scan() {
			logs.Write([]byte(sc.Text() + "\n"))
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr) // past a line too long even so: keep it from blocking
	}()
	t.Cleanup(func() {
		stop()
		// The log read to its end before Wait closes the pipe (os/exec),
		// unless robotsgate outlives its interrupt: Wait then kills it.
		select {
		case <-readDone:
		case <-time.After(cmd.WaitDelay):
		}
		cmd.Wait() // the context's error: it was stopped
		<-readDone
		if code := cmd.ProcessState.ExitCode(); code != 0 || t.Failed() {
			t.Logf("robotsgate (exit %d):\n%s", code, logs.String())
		}
	})
	select {
	case addr := <-addrc:
		return addr
	case <-readDone:
		t.Fatal("robotsgate exited before listening")
	case <-time.After(30 * time.Second):
		t.Fatal("robotsgate did not listen within 30s")
	}
	return ""
}

// JSONLines decodes the file at path, one JSON object of type T per line
// (an audit log), in the order written.
func JSONLines[T any](t testing.TB, path string) []T {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	for line := range bytes.Lines(data) {
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatalf("%s: line %q: %v", path, line, err)
		}
		out = append(out, v)
	}
	return out
}
