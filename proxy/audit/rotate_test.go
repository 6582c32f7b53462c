package audit

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/identity"
)

// TestReopenRotated: a file renamed away mid-run (logrotate's create),
// then Reopen: the old file ends with a rotate checkpoint, the chain goes
// on into the new one, and verify passes the two given in either order,
// the old one gzipped too.
func TestReopenRotated(t *testing.T) {
	t.Parallel()
	dir, c, key := t.TempDir(), newClock(), testKey(1)
	path := filepath.Join(dir, "audit.log")
	l := openTest(t, path, key, c)
	writeRun(l, c, 0, 5, 0)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	l.Write(testRecord(c, 5)) // still into the renamed file, as a real rotation races
	if err := l.Reopen(path); err != nil {
		t.Fatal(err)
	}
	writeRun(l, c, 6, 3, 0)
	l.Close()
	old := lines(t, path+".1")
	if !bytes.Contains(old[len(old)-1], []byte(`"event":"rotate","lines":6`)) {
		t.Errorf("the old file ends %s; want a rotate checkpoint of 6 lines", old[len(old)-1])
	}
	gzipFile(t, path+".1", path+".1.gz")
	keys := []*identity.Key{key}
	for _, files := range [][]string{{path + ".1", path}, {path, path + ".1"}, {path, path + ".1.gz"}} {
		rep := verifyOK(t, keys, files...)
		if want := []string{files[1], files[0]}; files[0] == path && !slices.Equal(rep.Files, want) {
			t.Errorf("Verify(%v) ordered %v; want %v", files, rep.Files, want)
		}
	}
	// The old file alone is intact, and its end is said to go on in the
	// file reopened then.
	rep := verifyOK(t, keys, path+".1")
	if !strings.Contains(findings(rep), "it goes on in the file robotsgate reopened then") {
		t.Errorf("Verify(the old file alone): notes\n%s\nwant one saying the chain goes on in the reopened file", findings(rep))
	}
	// One file alone: the new one does not start a chain.
	rep, err := Verify([]string{path}, VerifyOptions{Keys: keys})
	if err != nil || rep.Intact() || !strings.Contains(findings(rep), "does not start a chain") {
		t.Errorf("Verify(the new file alone) = %v, %v:\n%s; want the first line not starting a chain", rep.Intact(), err, findings(rep))
	}
	// ... unless -from names the old file's end.
	from := LineHash(old[len(old)-1]).String()
	if rep, err = Verify([]string{path}, VerifyOptions{Keys: keys, From: from}); err != nil || !rep.Intact() {
		t.Errorf("Verify(-from %s) not intact (%v):\n%s", from, err, findings(rep))
	}
	// A log wiped and started again (a new chain, from 64 zeros) does not
	// continue the head kept.
	wiped := filepath.Join(t.TempDir(), "wiped.log") // no audit-head beside it
	w := openTest(t, wiped, key, c)
	writeRun(w, c, 0, 2, 0)
	w.Close()
	rep, err = Verify([]string{wiped}, VerifyOptions{Keys: keys, From: from})
	if err != nil || rep.Intact() || !strings.Contains(findings(rep), wiped+":1: the first line starts a new chain") {
		t.Errorf("Verify(a new chain, -from %s) = %v, %v:\n%swant the first line starting a new chain", from, rep.Intact(), err, findings(rep))
	}
}

// TestCopytruncate: logrotate's copytruncate copies the file and empties
// it in place; the Log, appending, goes on at the start of the emptied
// file with the chain in memory, with or without a Reopen.
func TestCopytruncate(t *testing.T) {
	t.Parallel()
	for _, reopen := range []bool{false, true} {
		dir, c, key := t.TempDir(), newClock(), testKey(1)
		path := filepath.Join(dir, "audit.log")
		l := openTest(t, path, key, c)
		writeRun(l, c, 0, 4, 0)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+".1", b, 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		writeRun(l, c, 4, 2, 0)
		if reopen {
			if err := l.Reopen(path); err != nil {
				t.Fatal(err)
			}
		}
		writeRun(l, c, 6, 2, 0)
		l.Close()
		verifyOK(t, []*identity.Key{key}, path, path+".1")
	}
}

// TestUncleanStop: a run that ends without Close (kill -9) leaves lines
// no checkpoint of its run signs; verify names them and the next run's
// start.
func TestUncleanStop(t *testing.T) {
	t.Parallel()
	dir, c, key := t.TempDir(), newClock(), testKey(1)
	path := filepath.Join(dir, "audit.log")
	l := openTest(t, path, key, c)
	writeRun(l, c, 0, 5, 3) // start, 3, interval, 2 unsigned: lines 6 and 7
	l.f.Close()             // killed: no shutdown checkpoint
	l = openTest(t, path, key, c)
	writeRun(l, c, 5, 2, 0)
	l.Close()
	rep, err := Verify([]string{path}, VerifyOptions{Keys: []*identity.Key{key}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Intact() || len(rep.Findings) != 1 || rep.Findings[0].Line != 6 ||
		!strings.Contains(rep.Findings[0].Msg, "an unclean stop: line 6 to line 7 (2 lines), after the checkpoint at line 5") ||
		!strings.Contains(rep.Findings[0].Msg, "start at line 8") {
		t.Errorf("findings:\n%swant one: an unclean stop of lines 6 to 7 before the start at line 8", findings(rep))
	}
}

// TestRecoverTornLine: a last line cut short (a write killed midway) is
// ended with "\n" when the log is opened again, and the chain goes on
// from it: verify names it, and only it, as an incomplete record.
func TestRecoverTornLine(t *testing.T) {
	t.Parallel()
	dir, c, key := t.TempDir(), newClock(), testKey(1)
	path := filepath.Join(dir, "audit.log")
	l := openTest(t, path, key, c)
	writeRun(l, c, 0, 2, 0)
	l.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"time":"2026-03-02T09:00:09.000Z","level":"WARN","msg":"bloc`)
	f.Close()
	l = openTest(t, path, key, c)
	writeRun(l, c, 2, 1, 0)
	l.Close()
	rep, err := Verify([]string{path}, VerifyOptions{Keys: []*identity.Key{key}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Line != 5 || !strings.Contains(rep.Findings[0].Msg, "an incomplete or unreadable record") {
		t.Errorf("findings:\n%swant one: an incomplete record at line 5", findings(rep))
	}
}

// TestKeyErrors: a signing key that cannot be used is a start-up error
// naming its file.
func TestKeyErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k, made, err := LoadAuditKey(filepath.Join(dir, "audit-key.pem"), true)
	if err != nil || !made {
		t.Fatalf("LoadAuditKey(create) = %v, %v", made, err)
	}
	if info, err := os.Stat(filepath.Join(dir, "audit-key.pem")); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("audit key mode %v (%v); want 0600", info.Mode(), err)
	}
	again, made, err := LoadAuditKey(filepath.Join(dir, "audit-key.pem"), true)
	if err != nil || made || again.ID != k.ID {
		t.Fatalf("LoadAuditKey again = %v, %v; want the same key", made, err)
	}
	pemKey, _ := k.MarshalPEM()
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	tests := []struct {
		name, path, want string
	}{
		{"open to others", write("open.pem", pemKey, 0o644), "chmod 600"},
		{"not PEM", write("junk.pem", []byte("junk"), 0o600), "not a PEM"},
		{"not Ed25519", write("rsa.pem", rsaPEM(t), 0o600), "want Ed25519"},
		{"a link", func() string {
			p := filepath.Join(dir, "link.pem")
			os.Symlink(filepath.Join(dir, "audit-key.pem"), p)
			return p
		}(), "symbolic link"},
		{"missing", filepath.Join(dir, "none.pem"), "no such file"},
	}
	for _, tt := range tests {
		_, _, err := LoadAuditKey(tt.path, false)
		if err == nil || !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: LoadAuditKey(%s) = %v; want an error naming the file and %q", tt.name, tt.path, err, tt.want)
		}
	}
}

// gzipFile writes src gzipped to dst.
func gzipFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	w := gzip.NewWriter(out)
	if _, err := io.Copy(w, in); err != nil {
		t.Fatal(err)
	}
	w.Close()
	out.Close()
}

// rsaPEM is an RSA private key, PKCS #8 PEM: not a key checkpoints sign with.
func rsaPEM(t *testing.T) []byte {
	k, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// TestVerifyFilesNotLinking: of three rotated files, the middle one
// missing: the last does not continue any file given; the same file
// given twice claims one place twice.
func TestVerifyFilesNotLinking(t *testing.T) {
	t.Parallel()
	dir, c, key := t.TempDir(), newClock(), testKey(1)
	path := filepath.Join(dir, "audit.log")
	l := openTest(t, path, key, c)
	for i := range 2 {
		writeRun(l, c, i*3, 3, 0)
		os.Rename(path, path+"."+string(rune('2'-i)))
		if err := l.Reopen(path); err != nil {
			t.Fatal(err)
		}
	}
	writeRun(l, c, 6, 3, 0)
	l.Close()
	keys := []*identity.Key{key}
	whole := verifyOK(t, keys, path, path+".1", path+".2")
	gzipFile(t, path+".1", path+".1.gz")
	one := lines(t, path+".1")
	short := writeLines(t, dir, "short.1", one[:len(one)-1])
	tests := []struct {
		files  []string
		bad    string
		line   int
		want   string
		intact bool
	}{
		{[]string{path, path + ".2"}, path, 1, "does not continue any file given", false},
		{[]string{path + ".2", path + ".1", path, short}, short, 1, "two files claim one place in the chain", false},
		{[]string{path + ".2", path + ".1", path, path + ".1"}, path + ".1", 0, "the same lines as " + path + ".1: given twice", true},
		{[]string{path + ".2", path + ".1", path, path + ".1.gz"}, path + ".1.gz", 0, "the same lines as " + path + ".1: given twice", true},
	}
	for _, tt := range tests {
		rep, err := Verify(tt.files, VerifyOptions{Keys: keys})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range rep.Findings {
			found = found || f.File == tt.bad && f.Line == tt.line && strings.Contains(f.Msg, tt.want)
		}
		if rep.Intact() != tt.intact || !found {
			t.Errorf("Verify(%v): intact %v\n%swant %q at %s:%d", tt.files, rep.Intact(), findings(rep), tt.want, tt.bad, tt.line)
		}
		if tt.intact && (rep.Last != whole.Last || rep.Head != whole.Head || rep.Lines != whole.Lines || len(rep.Files) != 3) {
			t.Errorf("Verify(%v): last line %s, head %s, %d lines, files %v; want %s, %s, %d, the three files", tt.files, rep.Last, rep.Head, rep.Lines, rep.Files, whole.Last, whole.Head, whole.Lines)
		}
	}
	// An empty file (the live one just rotated) ends where -from began.
	empty := writeLines(t, dir, "empty.log", nil)
	rep, err := Verify([]string{empty}, VerifyOptions{Keys: keys, From: whole.Head})
	if err != nil || rep.Head != whole.Head {
		t.Errorf("Verify(an empty file, -from %s): head %s, %v; want -from's", whole.Head, rep.Head, err)
	}
}

// TestIntervalCheckpoints: with an interval, the Log signs what was
// written since its last checkpoint, and nothing when nothing was.
func TestIntervalCheckpoints(t *testing.T) {
	t.Parallel()
	dir, c, key := t.TempDir(), newClock(), testKey(1)
	path := filepath.Join(dir, "audit.log")
	l, err := OpenWith(path, Options{Now: c.now, Checkpoints: Checkpoints{Key: key, Interval: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	l.Write(testRecord(c, 0))
	testkit.Eventually(t, "an interval checkpoint", func() bool {
		b, _ := os.ReadFile(path)
		return bytes.Contains(b, []byte(`"event":"interval","lines":1,`))
	})
	l.Close()
	ls := lines(t, path)
	if n := len(ls); n != 4 {
		t.Errorf("%d lines; want 4 (start, the record, one interval checkpoint, shutdown)", n)
	}
	verifyOK(t, []*identity.Key{key}, path)
}

// TestWarnUncleanStop: a start into a file whose last run stopped without
// its shutdown checkpoint warns, naming the file and the first line no
// checkpoint of that run signs; a clean stop, a file without checkpoints
// and a log without a key do not.
func TestWarnUncleanStop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  bool
		run  func(l *Log, c *fakeClock)
		want string // "": no warning
	}{
		{"killed after unsigned lines", true, func(l *Log, c *fakeClock) { writeRun(l, c, 0, 5, 3); l.f.Close() },
			"[file PATH line 6 unsigned_lines 2]"},
		{"killed right after a checkpoint", true, func(l *Log, c *fakeClock) { writeRun(l, c, 0, 3, 3); l.f.Close() },
			"[file PATH line 5]"},
		{"a clean stop", true, func(l *Log, c *fakeClock) { writeRun(l, c, 0, 5, 3); l.Close() }, ""},
		{"no key", false, func(l *Log, c *fakeClock) { writeRun(l, c, 0, 5, 3); l.f.Close() }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir, c := t.TempDir(), newClock()
			path := filepath.Join(dir, "audit.log")
			var key *identity.Key
			if tt.key {
				key = testKey(1)
			}
			tt.run(openTest(t, path, key, c), c)
			var got []string
			o := Options{Now: c.now, Warn: func(msg string, args ...any) { got = append(got, msg+" "+fmt.Sprint(args)) }}
			if key != nil {
				o.Checkpoints = Checkpoints{Key: key}
			}
			l, err := OpenWith(path, o)
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
			want := strings.ReplaceAll(tt.want, "PATH", path)
			if tt.want == "" && len(got) > 0 || tt.want != "" && (len(got) != 1 || !strings.HasSuffix(got[0], want) || !strings.Contains(got[0], "audit verify will")) {
				t.Errorf("warnings %q; want one ending %q", got, want)
			}
		})
	}
	// A file with records and no checkpoint (evidence just turned on):
	// no warning.
	dir, c := t.TempDir(), newClock()
	path := filepath.Join(dir, "audit.log")
	l := openTest(t, path, nil, c)
	writeRun(l, c, 0, 3, 0)
	l.Close()
	var got []string
	l, err := OpenWith(path, Options{Now: c.now, Checkpoints: Checkpoints{Key: testKey(1)}, Warn: func(msg string, args ...any) { got = append(got, msg) }})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if len(got) > 0 {
		t.Errorf("warnings %q for a file without checkpoints; want none", got)
	}
}

// TestStartMessages: a start says on the operational log what it found:
// a last line cut short (warned: verify will report it), a new file that
// continues the chain from audit-head, a new chain with neither.
func TestStartMessages(t *testing.T) {
	t.Parallel()
	key := testKey(1)
	open := func(t *testing.T, path, head string, c *fakeClock) (warns, infos []string) {
		t.Helper()
		o := Options{Now: c.now, Checkpoints: Checkpoints{Key: key, HeadPath: head},
			Warn: func(msg string, _ ...any) { warns = append(warns, msg) },
			Info: func(msg string, _ ...any) { infos = append(infos, msg) }}
		l, err := OpenWith(path, o)
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		return warns, infos
	}
	dir, c := t.TempDir(), newClock()
	path, head := filepath.Join(dir, "audit.log"), filepath.Join(dir, HeadFileName)
	if warns, infos := open(t, path, head, c); len(warns) != 0 || len(infos) != 1 || !strings.Contains(infos[0], "a new chain starts") {
		t.Errorf("first start: warnings %q, infos %q; want one info: a new chain", warns, infos)
	}
	// The file rotated away while stopped: the new one goes on from audit-head.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if warns, infos := open(t, path, head, c); len(warns) != 0 || len(infos) != 1 || !strings.Contains(infos[0], "continues from the head remembered in audit-head") {
		t.Errorf("start into a new file: warnings %q, infos %q; want one info: from audit-head", warns, infos)
	}
	// Its last line cut short by a crash: a warning.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)-20], 0o640); err != nil {
		t.Fatal(err)
	}
	warns, infos := open(t, path, head, c)
	if len(warns) == 0 || !strings.Contains(warns[0], "last line was cut short") || len(infos) != 0 {
		t.Errorf("start after a line cut short: warnings %q, infos %q; want the cut line warned of", warns, infos)
	}
}
