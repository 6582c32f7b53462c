package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/audit"
)

// auditBinary is robotsgate built from this module, once, for the tests
// that stop it as an operator or a crash would (SIGHUP, kill -9).
var auditBinary struct {
	once sync.Once
	path string
	err  error
}

func builtBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary: not with -short")
	}
	auditBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "robotsgate-audit-test-")
		if err != nil {
			auditBinary.err = err
			return
		}
		auditBinary.path = filepath.Join(dir, "robotsgate")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", auditBinary.path, ".").CombinedOutput(); err != nil {
			auditBinary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if auditBinary.err != nil {
		t.Fatal(auditBinary.err)
	}
	return auditBinary.path
}

// gateProcess is a robotsgate process serving on loopback.
type gateProcess struct {
	cmd    *exec.Cmd
	client *http.Client
	done   chan struct{}
	mu     sync.Mutex
	logs   strings.Builder
}

func (g *gateProcess) stderr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.logs.String()
}

// startGate starts the binary on cfg and waits until it listens.
func startGate(t *testing.T, bin, cfg, home string) *gateProcess {
	t.Helper()
	g := &gateProcess{cmd: exec.Command(bin, "serve", "-config", cfg, "-listen", "127.0.0.1:0"), done: make(chan struct{})}
	g.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
	pipe, err := g.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.cmd.Process.Kill(); <-g.done })
	addrc := make(chan string, 1)
	go func() {
		defer close(g.done)
		listen := regexp.MustCompile(`msg="robotsgate listening" .*addr=(127\.0\.0\.1:\d+)`)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			g.mu.Lock()
			g.logs.WriteString(sc.Text() + "\n")
			g.mu.Unlock()
			if m := listen.FindStringSubmatch(sc.Text()); m != nil {
				addrc <- m[1]
			}
		}
		g.cmd.Wait()
	}()
	select {
	case addr := <-addrc:
		u, _ := url.Parse("http://" + addr)
		g.client = &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 10 * time.Second}
	case <-g.done:
		t.Fatalf("robotsgate exited:\n%s", g.stderr())
	case <-time.After(30 * time.Second):
		t.Fatalf("robotsgate did not listen:\n%s", g.stderr())
	}
	return g
}

// block gets a disallowed URL through g: one audit record.
func (g *gateProcess) block(t *testing.T, origin string) {
	t.Helper()
	resp, err := g.client.Get(origin + "/private")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("/private: %d; want 403", resp.StatusCode)
	}
}

// stop sends sig and waits for the process to end.
func (g *gateProcess) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	g.cmd.Process.Signal(sig)
	select {
	case <-g.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("robotsgate did not stop on %v:\n%s", sig, g.stderr())
	}
}

// countLines counts path's lines.
func countLines(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}

// TestAuditRealProcess runs the binary as an operator would: a rotation
// (rename, then SIGHUP) mid-run, a clean stop, verify passes the two
// files given in any order; then a kill -9 mid-run and a restart, and
// verify names the lines the killed run left unsigned, exactly.
func TestAuditRealProcess(t *testing.T) {
	t.Parallel()
	bin := builtBinary(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "User-agent: *\nDisallow: /private\n")
	}))
	t.Cleanup(origin.Close)
	dir := t.TempDir()
	log := filepath.Join(dir, "audit.log")
	cfg := filepath.Join(dir, "robotsgate.toml")
	os.WriteFile(cfg, fmt.Appendf(nil, "[tls]\nstate_dir = %s\n[upstream]\nblock_private = false\n[audit]\nfile = %s\n[evidence]\ncheckpoint_interval = \"24h\"\n",
		strconv.Quote(filepath.Join(dir, "state")), strconv.Quote(log)), 0o644)

	g := startGate(t, bin, cfg, dir)
	g.block(t, origin.URL)
	g.block(t, origin.URL)
	if err := os.Rename(log, log+".1"); err != nil {
		t.Fatal(err)
	}
	g.cmd.Process.Signal(syscall.SIGHUP)
	testkit.Eventually(t, "the reload", func() bool { return strings.Contains(g.stderr(), "config reloaded") })
	g.block(t, origin.URL)
	g.block(t, origin.URL)
	g.stop(t, syscall.SIGINT)
	if out, errOut, code := runCmd(t, "", "audit", "verify", "-config", cfg, log, log+".1"); code != 0 || !strings.Contains(out, "intact: 2 files, 7 lines, 3 checkpoints") {
		t.Fatalf("verify after a rotation: exit %d; want 0, intact:\n%s%s", code, out, errOut)
	}

	// kill -9 after three records: the fourth to sixth line of audit.log
	// (after the shutdown of the run before, and this run's start).
	g = startGate(t, bin, cfg, dir)
	for range 3 {
		g.block(t, origin.URL)
	}
	testkit.Eventually(t, "three records written", func() bool { return countLines(log) == 7 })
	g.stop(t, syscall.SIGKILL)
	g = startGate(t, bin, cfg, dir)
	// The start says so on the operational log, at the first unsigned line.
	if warn := "level=WARN msg=\"audit: the run before stopped without its shutdown checkpoint"; !strings.Contains(g.stderr(), warn) || !strings.Contains(g.stderr(), "line=5 unsigned_lines=3") {
		t.Errorf("start after kill -9: logs\n%swant %s… line=5 unsigned_lines=3", g.stderr(), warn)
	}
	g.block(t, origin.URL)
	g.stop(t, syscall.SIGTERM)
	out, errOut, code := runCmd(t, "", "audit", "verify", "-config", cfg, log+".1", log)
	want := log + ":5: an unclean stop: line 5 to line 7 (3 lines), after the checkpoint at line 4, were never signed by the run that wrote them"
	if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "the next run's start at line 8 signed them") || !strings.Contains(out, "NOT INTACT") {
		t.Errorf("verify after kill -9: exit %d:\n%s%s\nwant exit 1 and %q", code, out, errOut, want)
	}

	// audit key prints the key the checkpoints verify with.
	keyOut, keyErr, code := runCmd(t, "", "audit", "key", "-config", cfg)
	if code != 0 || !strings.HasPrefix(keyOut, "-----BEGIN PUBLIC KEY-----") || !strings.Contains(keyErr, filepath.Join(dir, "state", "audit-key.pem")) {
		t.Fatalf("audit key: exit %d\n%s%s", code, keyOut, keyErr)
	}
	pub := filepath.Join(dir, "audit.pub")
	os.WriteFile(pub, []byte(keyOut), 0o644)
	if out, _, code := runCmd(t, "", "audit", "verify", "-key", pub, log, log+".1"); code != 1 || !strings.Contains(out, want) {
		t.Errorf("verify -key the printed key: exit %d:\n%s", code, out)
	}
}

// TestAuditCommands: usage errors exit 2, a missing key is said and not
// made, a wrong key is named.
func TestAuditCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.toml")
	os.WriteFile(cfg, fmt.Appendf(nil, "[tls]\nstate_dir = %s\n", strconv.Quote(filepath.Join(dir, "state"))), 0o644)
	oneBad := filepath.Join(dir, "one-bad.log")
	os.WriteFile(oneBad, []byte(`{"time":"2026-03-02T10:00:00Z","msg":"blocked","copies":[{"url":"x","sha256":"zz"}]}`+"\n"), 0o644)
	tests := []struct {
		name    string
		args    []string
		code    int
		wantOut string
		wantErr string
	}{
		{"no subcommand", []string{"audit"}, 2, "", "usage:"},
		{"unknown subcommand", []string{"audit", "bogus"}, 2, "", `unknown subcommand "bogus"`},
		{"verify no file", []string{"audit", "verify", "-config", cfg}, 2, "", "name the audit files"},
		{"verify no key", []string{"audit", "verify", "-config", cfg, "proxy/audit/testdata/chain/audit.log"}, 2, "", "no key to verify with at " + filepath.Join(dir, "state", "audit-key.pem")},
		{"verify a missing file", []string{"audit", "verify", "-key", "proxy/audit/testdata/chain/key.pem", "nonexistent.log"}, 2, "", "nonexistent.log"},
		{"verify a directory", []string{"audit", "verify", "-key", "proxy/audit/testdata/chain/key.pem", dir}, 2, "", dir + ": is a directory"},
		{"replay a directory", []string{"audit", "replay", "-config", cfg, "-store", dir, dir}, 2, "", dir + ": is a directory"},
		{"replay one bad line", []string{"audit", "replay", "-config", cfg, "-store", dir, oneBad}, 1, "1 record: 0 reproduced, 0 differ, 0 not replayed for a missing copy (store " + dir + "), 1 line not a record\n", ""},
		{"verify a bad -from", []string{"audit", "verify", "-key", "proxy/audit/testdata/chain/key.pem", "-from", "xyz", "proxy/audit/testdata/chain/audit.log"}, 2, "", "-from"},
		{"verify", []string{"audit", "verify", "-key", "proxy/audit/testdata/chain/key.pem", "proxy/audit/testdata/chain/audit.log"}, 0, "intact: 1 file, 17 lines, 5 checkpoints", ""},
		{"verify -head reached", []string{"audit", "verify", "-key", "proxy/audit/testdata/chain/key.pem", "-head", chainHead(t, 16), "proxy/audit/testdata/chain/audit.log"}, 0, "intact: 1 file, 17 lines", ""},
		{"verify -head not reached", []string{"audit", "verify", "-key", "proxy/audit/testdata/chain/key.pem", "-head", strings.Repeat("ab", 32), "proxy/audit/testdata/chain/audit.log"}, 1, "the head given with -head", ""},
		{"verify a bad -head", []string{"audit", "verify", "-key", "proxy/audit/testdata/chain/key.pem", "-head", "xyz", "proxy/audit/testdata/chain/audit.log"}, 2, "", "-head"},
		{"verify a wrong key", []string{"audit", "verify", "-key", "proxy/audit/testdata/chain/other.pem", "proxy/audit/testdata/chain/audit.log"}, 1, "which is not among the keys given", ""},
		{"verify a wrong key: the summary", []string{"audit", "verify", "-key", "proxy/audit/testdata/chain/other.pem", "proxy/audit/testdata/chain/audit.log"}, 1, "5 checkpoints, none signed by the keys given (keys from", ""},
		{"verify not intact: no head to keep", []string{"audit", "verify", "-key", "proxy/audit/testdata/chain/other.pem", "proxy/audit/testdata/chain/audit.log"}, 1, "\nhead of the lines read: " + chainHead(t, 17) + " (not intact: not a head to keep)\n", ""},
		{"key: none yet", []string{"audit", "key", "-config", cfg}, 1, "", "no audit key yet at " + filepath.Join(dir, "state", "audit-key.pem") + ": it is made on the first start with [evidence] on"},
	}
	for _, tt := range tests {
		out, errOut, code := runCmd(t, "", tt.args...)
		if code == 1 && strings.Contains(out, "keep it") {
			t.Errorf("%s: %v: not intact, and advises to keep its head:\n%s", tt.name, tt.args, out)
		}
		if code != tt.code || !strings.Contains(out, tt.wantOut) || !strings.Contains(errOut, tt.wantErr) {
			t.Errorf("%s: %v: exit %d\nstdout: %s\nstderr: %s\nwant exit %d, %q, %q", tt.name, tt.args, code, out, errOut, tt.code, tt.wantOut, tt.wantErr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "audit-key.pem")); err == nil {
		t.Error("audit key made a key; want it to make nothing")
	}
}

// TestAuditKeyIdentity: with [identity], checkpoints are signed with the
// identity key ring's key: audit key names it and its file.
func TestAuditKeyIdentity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.toml")
	os.WriteFile(cfg, fmt.Appendf(nil, "[tls]\nstate_dir = %s\n[identity]\nsignature_agent = \"https://bot.example\"\n", strconv.Quote(filepath.Join(dir, "state"))), 0o644)
	if _, errOut, code := runCmd(t, "", "audit", "key", "-config", cfg); code != 1 || !strings.Contains(errOut, "no [identity] key yet") {
		t.Errorf("audit key before a key: exit %d %q; want 1, no [identity] key yet", code, errOut)
	}
	_, keysErr, code := runCmd(t, "", "keys", "-config", cfg)
	m := regexp.MustCompile(`(?m)^  (\S+)  signing$`).FindStringSubmatch(keysErr)
	if code != 0 || m == nil {
		t.Fatalf("keys: exit %d:\n%s", code, keysErr)
	}
	out, errOut, code := runCmd(t, "", "audit", "key", "-config", cfg)
	if code != 0 || !strings.Contains(errOut, "the [identity] signing key") || !strings.Contains(errOut, "key id "+m[1]) || !strings.Contains(out, "BEGIN PUBLIC KEY") {
		t.Errorf("audit key: exit %d\n%s%s\nwant the [identity] key %s", code, out, errOut, m[1])
	}
}

// chainHead is the hash of line n (from 1) of testdata/chain/audit.log.
func chainHead(t *testing.T, n int) string {
	t.Helper()
	b, err := os.ReadFile("proxy/audit/testdata/chain/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	return audit.LineHash(bytes.SplitAfter(b, []byte("\n"))[n-1]).String()
}
