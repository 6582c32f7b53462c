package audit

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/robotsgate/robotsgate/proxy/identity"
)

// baseLog writes a log of one run: a start checkpoint (line 1), 12
// records with an interval checkpoint after every 4 (lines 6, 11, 16) and
// the shutdown checkpoint (line 17).
func baseLog(t *testing.T, dir string) (string, *identity.Key) {
	t.Helper()
	c, key := newClock(), testKey(1)
	path := filepath.Join(dir, "base.log")
	l := openTest(t, path, key, c)
	writeRun(l, c, 0, 12, 4)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path, key
}

// writeLines writes ls to a file named name in dir.
func writeLines(t *testing.T, dir, name string, ls [][]byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, bytes.Join(ls, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVerifyTampered: each way a log can be tampered with is found, named
// at its file and line, and the log is not intact.
func TestVerifyTampered(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base, key := baseLog(t, dir)
	ls := lines(t, base)
	if len(ls) != 17 {
		t.Fatalf("base log of %d lines; want 17", len(ls))
	}
	edit := func(i int, f func([]byte) []byte) [][]byte {
		out := make([][]byte, len(ls))
		copy(out, ls)
		out[i-1] = f(bytes.Clone(ls[i-1]))
		return out
	}
	insert := func(i int, line []byte) [][]byte {
		return append(append(append([][]byte{}, ls[:i-1]...), line), ls[i-1:]...)
	}
	forged := bytes.Replace(ls[8-1], []byte("articles/5"), []byte("articles/666"), -1)
	forged = append(bytes.TrimSuffix(forged[:bytes.LastIndex(forged, []byte(`"prev":"`))], nil), []byte(`"prev":"`+LineHash(ls[7-1]).String()+`"}`+"\n")...)
	chained := append(bytes.Clone(forged)[:bytes.LastIndex(forged, []byte(`"prev":"`))], []byte(`"prev":"`+LineHash(ls[8-1]).String()+`"}`+"\n")...)
	appended := append(bytes.Clone(forged)[:bytes.LastIndex(forged, []byte(`"prev":"`))], []byte(`"prev":"`+LineHash(ls[17-1]).String()+`"}`+"\n")...)
	tests := []struct {
		name  string
		ls    [][]byte
		keys  []*identity.Key
		line  int
		want  string
		write func(path string, b []byte) error
	}{
		{"a line edited", edit(8, func(b []byte) []byte { return bytes.Replace(b, []byte("articles/5"), []byte("articles/9"), -1) }), nil, 8, "an altered line", nil},
		{"a line removed", append(append([][]byte{}, ls[:7]...), ls[8:]...), nil, 8, "1 line removed between", nil},
		{"a line inserted", insert(9, forged), nil, 9, "an inserted line", nil},
		{"a line inserted, chained", insert(9, chained), nil, 9, "an inserted line", nil},
		{"a line appended after the shutdown", append(append([][]byte{}, ls...), appended), nil, 18, "a line robotsgate did not write, inserted after the run's shutdown", nil},
		{"a pair swapped", append(append(append([][]byte{}, ls[:7]...), ls[8], ls[7]), ls[9:]...), nil, 8, "lines in the wrong order", nil},
		{"a foreign line", insert(8, []byte(`{"time":"2026-03-02T09:00:00Z","level":"INFO","msg":"hello"}`+"\n")), nil, 8, "no prev: not a robotsgate audit line", nil},
		{"not JSON", insert(8, []byte("GET /x HTTP/1.1 200\n")), nil, 8, "not a JSON object", nil},
		{"truncated mid-line", append(append([][]byte{}, ls[:16]...), ls[16][:40]), nil, 17, "an incomplete record", nil},
		{"truncated at a line", ls[:14], nil, 12, "an unsigned tail: ", nil},
		{"a checkpoint's signature", edit(6, func(b []byte) []byte { return bytes.Replace(b, []byte(`"sig":"`), []byte(`"sig":"AA`), 1) }), nil, 6, "signature is not key", nil},
		{"a checkpoint's count up", edit(11, func(b []byte) []byte { return bytes.Replace(b, []byte(`"lines":4`), []byte(`"lines":5`), 1) }), nil, 11, "a checkpoint whose count was altered: it counts 5 lines since line 6, and the chain there is unbroken with 4", nil},
		{"a checkpoint's count down", edit(11, func(b []byte) []byte { return bytes.Replace(b, []byte(`"lines":4`), []byte(`"lines":3`), 1) }), nil, 11, "a checkpoint whose count was altered: it counts 3 lines", nil},
		{"a checkpoint's head", edit(11, func(b []byte) []byte {
			h := LineHash(ls[0]).String()
			return append(b[:bytes.Index(b, []byte(`"head":"`))+8], append([]byte(h), b[bytes.Index(b, []byte(`"head":"`))+8+64:]...)...)
		}), nil, 11, "whose head", nil},
		{"the first lines removed", ls[4:], nil, 1, "the first line does not start a chain", nil},
		{"a wrong key", ls, []*identity.Key{testKey(2)}, 1, "which is not among the keys given", nil},
		{"an over-long line", insert(8, append(bytes.Repeat([]byte("x"), MaxLine+10), '\n')), nil, 8, "a line longer than", nil},
		{"a gzip file cut short", ls, nil, 0, "cannot be read on: the gzip stream ends early: the file was cut short", func(path string, b []byte) error {
			var z bytes.Buffer
			w := gzip.NewWriter(&z)
			w.Write(b)
			w.Close()
			return os.WriteFile(path, z.Bytes()[:z.Len()-20], 0o600)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "audit.log")
			write := tt.write
			if write == nil {
				write = func(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }
			}
			if err := write(path, bytes.Join(tt.ls, nil)); err != nil {
				t.Fatal(err)
			}
			keys := tt.keys
			if keys == nil {
				keys = []*identity.Key{key}
			}
			rep, err := Verify([]string{path}, VerifyOptions{Keys: keys})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Intact() {
				t.Fatalf("Verify: intact; want %q at line %d", tt.want, tt.line)
			}
			found := false
			for _, f := range rep.Findings {
				if f.File == path && (tt.line == 0 || f.Line == tt.line) && strings.Contains(f.Msg, tt.want) {
					found = true
				}
			}
			if !found {
				t.Errorf("findings:\n%swant %q at %s:%d", findings(rep), tt.want, path, tt.line)
			}
		})
	}
}

// TestTestdataLog: testdata/chain/audit.log is a log as baseLog writes
// it (a real chained, signed log: the command's tests and the fuzz
// targets read it), key.pem its key's public half, other.pem another
// key's; it verifies with key.pem; -update writes them again.
func TestTestdataLog(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "chain")
	if *update {
		base, key := baseLog(t, t.TempDir())
		b, err := os.ReadFile(base)
		if err != nil {
			t.Fatal(err)
		}
		files := map[string][]byte{"audit.log": b, "key.pem": identity.MarshalPublicPEM(key), "other.pem": identity.MarshalPublicPEM(testKey(2))}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ParsePublicKeys("key.pem", b)
	if err != nil {
		t.Fatal(err)
	}
	verifyOK(t, keys, filepath.Join(dir, "audit.log"))
}

// TestVerifyCheckpointEdits: a checkpoint whose count alone was edited is
// named once, as a count altered (not lines inserted or removed, nor
// another altered line after it); a checkpoint whose signature fails is
// not counted as signed.
func TestVerifyCheckpointEdits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base, key := baseLog(t, dir)
	ls := lines(t, base)
	keys := []*identity.Key{key}
	edit := func(i int, old, new string) string {
		out := slices.Clone(ls)
		out[i-1] = bytes.Replace(ls[i-1], []byte(old), []byte(new), 1)
		return writeLines(t, t.TempDir(), "audit.log", out)
	}
	path := edit(11, `"lines":4`, `"lines":5`)
	rep, err := Verify([]string{path}, VerifyOptions{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		path + ":11: a checkpoint whose count was altered: it counts 5 lines since line 6, and the chain there is unbroken with 4, up to a head its signature verifies (the edit changed this line's hash too: the chain breaks at the line after it)",
	}
	if got := strings.Split(strings.TrimSpace(findings(rep)), "\n"); !slices.Equal(got, want) {
		t.Errorf("findings:\n%swant\n%s", findings(rep), strings.Join(want, "\n"))
	}
	if rep.Checkpoints != 5 || rep.Signed != 5 {
		t.Errorf("%d checkpoints, %d signed; want 5, 5", rep.Checkpoints, rep.Signed)
	}
	path = edit(6, `"sig":"`, `"sig":"AA`)
	if rep, err = Verify([]string{path}, VerifyOptions{Keys: keys}); err != nil {
		t.Fatal(err)
	}
	if rep.Checkpoints != 5 || rep.Signed != 4 {
		t.Errorf("a signature edited: %d checkpoints, %d signed; want 5, 4", rep.Checkpoints, rep.Signed)
	}
}

// TestVerifyNoCheckpointYet: a live file just rotated, whose lines no
// checkpoint signs yet, says they are not signed yet.
func TestVerifyNoCheckpointYet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base, key := baseLog(t, dir)
	ls := lines(t, base)
	path := writeLines(t, dir, "audit.log", ls[1:5]) // records 2-5, after the start checkpoint
	rep, err := Verify([]string{path}, VerifyOptions{Keys: []*identity.Key{key}, From: LineHash(ls[0]).String()})
	if err != nil {
		t.Fatal(err)
	}
	if f := findings(rep); !strings.Contains(f, path+":1: an unsigned tail: line 1 to line 4 (4 lines), with no checkpoint before them in the files given, are not signed yet") {
		t.Errorf("findings:\n%swant an unsigned tail not signed yet", f)
	}
}

// TestVerifyTimes: a line whose time is not a time is not shown as the
// log's first or last time.
func TestVerifyTimes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		time string
		ok   bool
	}{
		{"2026-03-02T09:14:07.412Z", true},
		{"2026-03-02T09:14:07Z", true},
		{"2026-03-02T09:14:07.4+01:00", true},
		{"not a time", false},
		{"2026-13-02T09:14:07Z", false},
		{"2026-03-02T09:14:07.Z", false},
		{"2026-03-02 09:14:07Z", false},
		{"2026-03-02T09:14:07", false},
	} {
		if got := isTime([]byte(tt.time)); got != tt.ok {
			t.Errorf("isTime(%q) = %v; want %v", tt.time, got, tt.ok)
		}
	}
	dir := t.TempDir()
	base, key := baseLog(t, dir)
	ls := lines(t, base)
	first, last := string(ls[0][9:33]), string(ls[16][9:33])
	ls[0] = bytes.Replace(ls[0], []byte(first), []byte("not a time, not a time  "), 1)
	ls[16] = bytes.Replace(ls[16], []byte(last), []byte("2026-99-99T99:99:99.999Z"), 1)
	rep, err := Verify([]string{writeLines(t, dir, "audit.log", ls)}, VerifyOptions{Keys: []*identity.Key{key}})
	if err != nil {
		t.Fatal(err)
	}
	if want0, want1 := string(ls[1][9:33]), string(ls[15][9:33]); rep.First != want0 || rep.Last != want1 {
		t.Errorf("first line %q, last line %q; want %q, %q (the times of lines 2 and 16)", rep.First, rep.Last, want0, want1)
	}
}

// TestFindingsInLineOrder: findings come out in the order of the lines
// they name, files in chain order, whatever order they were found in (an
// unclean stop is found only at the next run's start, after the lines
// that follow it).
func TestFindingsInLineOrder(t *testing.T) {
	t.Parallel()
	r := &Report{Files: []string{"audit.log.1", "audit.log"}, Findings: []Finding{
		{File: "audit.log", Line: 261, Msg: "incomplete"},
		{File: "audit.log.1", Line: 9, Msg: "altered"},
		{File: "audit.log", Line: 4, Msg: "unclean stop"},
		{File: "audit.log.1.gz", Line: 0, Msg: "given twice"},
		{File: "audit.log", Line: 4, Msg: "second at 4"},
	}}
	r.sortFindings()
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.Msg)
	}
	want := []string{"given twice", "altered", "unclean stop", "second at 4", "incomplete"}
	if !slices.Equal(got, want) {
		t.Errorf("findings in order %q; want %q", got, want)
	}
}
