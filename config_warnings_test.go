package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/robotsgate/robotsgate/internal/testkit"
)

// TestValidateWarnings runs the binary's validate as a user would: a
// config with a [[sites]] rule an earlier rule leaves no request to, or a
// signature_agent with no path, is valid (exit 0) and warned of, naming
// the lines; a [[sites]] signature_agent_form without [identity] is an
// error naming the rule's line.
func TestValidateWarnings(t *testing.T) {
	t.Parallel()
	bin := builtBinary(t)
	const warnings = "proxy/policy/testdata/warnings/"
	for _, tt := range []struct {
		file     string
		code     int
		wantErr  string // stderr, exactly
		wantNone bool   // no stdout
	}{
		{file: warnings + "same-host.toml", wantErr: "robotsgate validate: warning: " + warnings + `same-host.toml:11: sites[1]: has no effect: sites[0] (line 6, host = "localhost") comes first and matches every request this rule matches (the first rule that matches wins), so its signature_agent_form = "string" is never used` + "\n"},
		{file: warnings + "identity-no-path.toml", wantErr: "robotsgate validate: warning: " + warnings + `identity-no-path.toml:2: identity.signature_agent: "https://bot.example.com" has no path: sites fetch the key directory at exactly this URL and follow no redirect; unless https://bot.example.com/ itself answers the directory (check: curl -sS --max-redirs 0 https://bot.example.com), write "https://bot.example.com/.well-known/http-message-signatures-directory"` + "\n"},
		{file: warnings + "exact-then-wildcard.toml"},
		{file: "testdata/validate/site-form-without-identity.toml", code: 2, wantNone: true,
			wantErr: "robotsgate: testdata/validate/site-form-without-identity.toml:5: sites[0].signature_agent_form: set without identity.signature_agent: nothing is signed\n"},
	} {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			cmd := exec.Command(bin, "validate", "-config", tt.file)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			cmd.Run()
			// A key not made yet is said too, on a line of its own.
			errOut := regexp.MustCompile(`(?m)^robotsgate validate: no identity key in .*\n`).ReplaceAllString(stderr.String(), "")
			wantOut := tt.file + ": ok\n"
			if tt.wantNone {
				wantOut = ""
			}
			if code := cmd.ProcessState.ExitCode(); code != tt.code || errOut != tt.wantErr || stdout.String() != wantOut {
				t.Errorf("validate %s: exit %d, stdout %q, stderr:\n%s\nwant exit %d, %q and\n%s", tt.file, code, stdout.String(), stderr.String(), tt.code, wantOut, tt.wantErr)
			}
		})
	}
}

// TestServeWarningsAndRestartNeeded runs the binary as an operator
// would: the start log warns of what validate warns of, and a SIGHUP that
// changes a key only a restart applies (tls.http2) lists it apart from
// the keys the reload applied, at that reload and at the next, until the
// file is set back.
func TestServeWarningsAndRestartNeeded(t *testing.T) {
	t.Parallel()
	bin := builtBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.toml")
	write := func(extra string) {
		t.Helper()
		err := os.WriteFile(cfg, []byte("[tls]\nstate_dir = "+strconv.Quote(filepath.Join(dir, "state"))+"\n"+extra+
			"[identity]\nsignature_agent = \"https://bot.example.com\"\n"+
			"[[sites]]\nhost = \"*.example.com\"\n[[sites]]\nhost = \"www.example.com\"\nsignature_agent_form = \"string\"\n"), 0o644)
		if err != nil {
			t.Fatal(err)
		}
	}
	write("")
	g := startGate(t, bin, cfg, dir)
	for _, want := range []string{
		`level=WARN msg="config: ` + cfg + `:4: identity.signature_agent: \"https://bot.example.com\" has no path: sites fetch the key directory at exactly this URL and follow no redirect; unless https://bot.example.com/ itself answers the directory (check: curl -sS --max-redirs 0 https://bot.example.com), write \"https://bot.example.com/.well-known/http-message-signatures-directory\""`,
		`level=WARN msg="config: ` + cfg + `:7: sites[1]: has no effect: sites[0] (line 5, host = \"*.example.com\") comes first and matches every request this rule matches (the first rule that matches wins), so its signature_agent_form = \"string\" is never used"`,
	} {
		if !strings.Contains(g.stderr(), want) {
			t.Errorf("the start log:\n%s\nlacks %s", g.stderr(), want)
		}
	}
	reload := func(n int) string {
		t.Helper()
		g.cmd.Process.Signal(syscall.SIGHUP)
		var line string
		if !testkit.Poll(testkit.EventuallyLimit, func() bool {
			if lines := regexp.MustCompile(`.*msg="config reloaded".*`).FindAllString(g.stderr(), -1); len(lines) >= n {
				line = lines[n-1]
			}
			return line != ""
		}) {
			t.Fatalf("no reload %d:\n%s", n, g.stderr())
		}
		return line
	}
	write("http2 = false\n[politeness]\nmin_interval = \"1s\"\n")
	if line := reload(1); !strings.HasSuffix(line, `changed=politeness.min_interval restart_needed=tls.http2`) {
		t.Errorf("a reload changing tls.http2 and politeness.min_interval: %s", line)
	}
	if !strings.Contains(g.stderr(), `level=WARN msg="[tls] changed: restart to apply"`) {
		t.Errorf("the reload did not say [tls] waits for a restart:\n%s", g.stderr())
	}
	if line := reload(2); !strings.HasSuffix(line, `changed=nothing restart_needed=tls.http2`) {
		t.Errorf("the next reload, the file as it was: %s", line)
	}
	write("")
	if line := reload(3); !strings.HasSuffix(line, `changed="tls.http2 politeness.min_interval"`) {
		t.Errorf("a reload setting tls.http2 back: %s", line)
	}
	if n := strings.Count(g.stderr(), "sites[1]: has no effect"); n != 4 {
		t.Errorf("the warning was logged %d times; want at the start and at each of the 3 reloads:\n%s", n, g.stderr())
	}
	g.stop(t, syscall.SIGTERM)
}
