package audit

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// seedLines adds each line of testdata/chain/audit.log (a real chained,
// signed log) to f.
func seedLines(f *testing.F) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", "chain", "audit.log"))
	if err != nil {
		f.Fatal(err)
	}
	for line := range bytes.Lines(b) {
		f.Add(bytes.TrimSuffix(line, []byte("\n")))
	}
	return b
}

// FuzzParseLine: the verifier's line parser never panics, and accepts
// only a JSON object whose top-level prev, as encoding/json decodes it,
// is the prev it read.
func FuzzParseLine(f *testing.F) {
	seedLines(f)
	f.Add([]byte(`{"prev":"` + ZeroHead + `"}`))
	f.Add([]byte(`{"a":{"prev":"x"},"prev":"` + ZeroHead + `"}`))
	f.Add([]byte(`{"msg":"checkpoint"}`))
	f.Add([]byte(`{"n":7E403,"prev":"` + ZeroHead + `"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		li, err := parseLine(b)
		if err != nil {
			return
		}
		// UseNumber: a number too large for a float64 (7E403) is still
		// JSON, and a line may carry one.
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if err := d.Decode(&m); err != nil || d.More() {
			t.Fatalf("parseLine(%q) accepted what is not a JSON object: %v", b, err)
		}
		prev, _ := m["prev"].(string)
		if prev != li.prev.String() && !(li.prev == Hash{} && prev == ZeroHead) {
			h, err := ParseHash(prev)
			if err != nil || h != li.prev {
				t.Fatalf("parseLine(%q): prev %s; encoding/json reads %q", b, li.prev, prev)
			}
		}
		if li.ck != nil && m["msg"] != "checkpoint" {
			t.Fatalf("parseLine(%q): a checkpoint whose msg is %v", b, m["msg"])
		}
	})
}

// FuzzVerify: Verify never panics on a file of any bytes, and finds a
// file intact only if every line in it reads.
func FuzzVerify(f *testing.F) {
	b := seedLines(f)
	f.Add(b)
	f.Add(b[:len(b)/2])
	keys, err := ParsePublicKeys("key.pem", must(os.ReadFile(filepath.Join("testdata", "chain", "key.pem"))))
	if err != nil {
		f.Fatal(err)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "audit.log")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := Verify([]string{path}, VerifyOptions{Keys: keys})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Intact() {
			return
		}
		for line := range bytes.Lines(b) {
			if _, err := parseLine(bytes.TrimSuffix(line, []byte("\n"))); err != nil {
				t.Fatalf("intact, with a line that does not read (%v): %q", err, line)
			}
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
