package audit

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/robotsgate/robotsgate/proxy/identity"
)

// TestVerifyAttacks: what an attacker without the key might try on a
// signed log; none of it verifies as intact.
func TestVerifyAttacks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base, key := baseLog(t, dir)
	ls := lines(t, base)
	// rechain recomputes every prev (and a checkpoint's head) from line
	// i on, as someone without the key can.
	rechain := func(in [][]byte, i int) [][]byte {
		out := make([][]byte, len(in))
		for j := range in {
			out[j] = bytes.Clone(in[j])
		}
		for j := i; j < len(out); j++ {
			h := LineHash(out[j-1]).String()
			b := out[j]
			k := bytes.LastIndex(b, []byte(`"prev":"`)) + 8
			b = append(b[:k:k], append([]byte(h), b[k+64:]...)...)
			if k := bytes.Index(b, []byte(`"head":"`)); k >= 0 {
				k += 8
				b = append(b[:k:k], append([]byte(h), b[k+64:]...)...)
			}
			out[j] = b
		}
		return out
	}
	edited := make([][]byte, len(ls))
	copy(edited, ls)
	edited[7] = bytes.Replace(ls[7], []byte("articles/5"), []byte("articles/9"), -1)
	crlf := make([][]byte, len(ls))
	for i, l := range ls {
		crlf[i] = append(bytes.TrimSuffix(bytes.Clone(l), []byte("\n")), '\r', '\n')
	}
	dupKey := make([][]byte, len(ls))
	copy(dupKey, ls)
	dupKey[7] = bytes.Replace(ls[7], []byte(`"decision":`), []byte(`"decision":"allowed","decision":`), 1)
	tests := []struct {
		name string
		ls   [][]byte
		want string
	}{
		{"edited, every later prev recomputed", rechain(edited, 8), "signature is not key"},
		{"a checkpoint duplicated", append(append(append([][]byte{}, ls[:11]...), ls[10]), ls[11:]...), "an inserted line"},
		{"CRLF line ends", crlf, "not a whole JSON object"},
		{"a member duplicated", dupKey, "an altered line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeLines(t, t.TempDir(), "audit.log", tt.ls)
			rep, err := Verify([]string{path}, VerifyOptions{Keys: []*identity.Key{key}})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, f := range rep.Findings {
				found = found || strings.Contains(f.Msg, tt.want)
			}
			if !found {
				t.Errorf("findings (intact %v):\n%swant %q", rep.Intact(), findings(rep), tt.want)
			}
		})
	}
}

// TestVerifyBomb: a gzip file of millions of empty lines (a few KiB that
// decompress to 16 MiB) is not intact, and its findings are bounded.
func TestVerifyBomb(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log.1.gz")
	var z bytes.Buffer
	w, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	nl := bytes.Repeat([]byte("\n"), 1<<20)
	for range 16 {
		w.Write(nl)
	}
	w.Close()
	if err := os.WriteFile(path, z.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify([]string{path}, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Intact() {
		t.Fatal("a file of empty lines is intact")
	}
	if n := len(rep.Findings); n > MaxFindings+1 {
		t.Errorf("%d findings kept for a %d-byte file; want at most %d", n, z.Len(), MaxFindings+1)
	}
	if last := rep.Findings[len(rep.Findings)-1]; !strings.Contains(last.Msg, "verify stops here") {
		t.Errorf("last finding %s; want verify to say it stops", last)
	}
}

// halfWriter writes half of what it is given, then fails: a disk that
// fills in the middle of a line.
type halfWriter struct{ w io.Writer }

func (h halfWriter) Write(b []byte) (int, error) {
	n, _ := h.w.Write(b[:len(b)/2])
	return n, errors.New("no space left on device")
}

// TestTornWrite: a write that fails midway leaves part of a line; the
// next write ends it first, and the chain goes on from it as it does
// after a crash: verify names that line, and only it, as incomplete,
// rather than the next record glued to it and a break after.
func TestTornWrite(t *testing.T) {
	t.Parallel()
	dir, c, key := t.TempDir(), newClock(), testKey(1)
	path := filepath.Join(dir, "audit.log")
	var failed int
	l, err := OpenWith(path, Options{Now: c.now, OnError: func(error, Record) { failed++ },
		Checkpoints: Checkpoints{Key: key, HeadPath: filepath.Join(dir, HeadFileName)}})
	if err != nil {
		t.Fatal(err)
	}
	writeRun(l, c, 0, 2, 0)
	l.mu.Lock()
	l.w = halfWriter{l.f}
	l.mu.Unlock()
	l.Write(testRecord(c, 2)) // line 4, cut short
	l.mu.Lock()
	l.w = l.f
	l.mu.Unlock()
	writeRun(l, c, 3, 2, 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if failed != 1 {
		t.Errorf("%d failed writes reported; want 1", failed)
	}
	rep, err := Verify([]string{path}, VerifyOptions{Keys: []*identity.Key{key}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lines != 7 || len(rep.Findings) != 1 || rep.Findings[0].Line != 4 || !strings.Contains(rep.Findings[0].Msg, "an incomplete or unreadable record") {
		t.Errorf("%d lines, findings:\n%swant 7 lines, one finding: an incomplete record at line 4", rep.Lines, findings(rep))
	}
}

// TestVerifyTailCut: lines cut from the end right after a checkpoint
// leave a chain that is whole, and verify cannot tell them from a log
// still being written, except against a head kept from an earlier verify
// (-head): the chain must reach it. Without one, verify notes that the
// chain ends at a checkpoint other than a shutdown.
func TestVerifyTailCut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base, key := baseLog(t, dir)
	ls := lines(t, base)
	kept := LineHash(ls[14]).String() // a head an auditor kept: line 15
	relabeled := append(append([][]byte{}, ls[:10]...), bytes.Replace(ls[10], []byte(`"event":"interval"`), []byte(`"event":"shutdown"`), 1))
	tests := []struct {
		name   string
		ls     [][]byte
		head   string
		intact bool
		want   string
	}{
		{"whole, reaching the head kept", ls, kept, true, ""},
		{"cut after a checkpoint, no head kept", ls[:11], "", true, "ends at the interval checkpoint at line 11, not a shutdown"},
		{"cut after a checkpoint", ls[:11], kept, false, "no line given has hash " + kept},
		{"cut, its last checkpoint made a shutdown", relabeled, kept, false, "no line given has hash " + kept},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeLines(t, t.TempDir(), "audit.log", tt.ls)
			rep, err := Verify([]string{path}, VerifyOptions{Keys: []*identity.Key{key}, Head: tt.head})
			if err != nil {
				t.Fatal(err)
			}
			found := tt.want == ""
			for _, f := range rep.Findings {
				found = found || strings.Contains(f.Msg, tt.want)
			}
			if rep.Intact() != tt.intact || !found {
				t.Errorf("intact %v, findings:\n%swant intact %v and %q", rep.Intact(), findings(rep), tt.intact, tt.want)
			}
		})
	}
	if _, err := Verify([]string{base}, VerifyOptions{Head: "xyz"}); err == nil || !strings.Contains(err.Error(), "-head") {
		t.Errorf("Verify with a bad -head = %v; want an error naming -head", err)
	}
}

// TestHugeRecord: a record whose line would pass MaxLine (a client's URL
// and User-Agent of megabytes, which limits.max_header_bytes allows up
// to 16 MiB) is written with its strings and lists cut, marked, so that
// verify reads the log on past it and a restart can read its last line.
func TestHugeRecord(t *testing.T) {
	t.Parallel()
	dir, c, key := t.TempDir(), newClock(), testKey(1)
	path := filepath.Join(dir, "audit.log")
	l := openTest(t, path, key, c)
	r := testRecord(c, 0)
	r.URL = "https://news.example/" + strings.Repeat("a", 2<<20)
	r.Path = r.URL[len("https://news.example"):]
	r.UserAgent = strings.Repeat("\x01", 600<<10) // six bytes each, escaped
	for i := range 1000 {
		r.Purpose = append(r.Purpose, fmt.Sprintf("purpose-%d-%s", i, strings.Repeat("é", 100)))
	}
	l.Write(r)
	l.Write(testRecord(c, 1))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ls := lines(t, path)
	for i, line := range ls {
		if len(line) > MaxLine {
			t.Errorf("line %d: %d bytes; want at most MaxLine, %d", i+1, len(line), MaxLine)
		}
	}
	if len(ls) != 4 || !bytes.Contains(ls[1], []byte(`bytes cut]","path":"/aaa`)) {
		t.Errorf("%d lines; want 4, the record's url cut and marked", len(ls))
	}
	verifyOK(t, []*identity.Key{key}, path)
}
