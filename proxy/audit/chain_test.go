package audit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

var update = flag.Bool("update", false, "rewrite testdata/chain's logs")

// testKey is a key made from a fixed seed, so that the logs made with it
// are the same at every run.
func testKey(seed byte) *identity.Key {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	pub := priv.Public().(ed25519.PublicKey)
	return &identity.Key{Private: priv, Public: pub, ID: identity.Thumbprint(pub)}
}

// fakeClock is a clock that moves a second at each reading.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

// testRecord is a realistic record (some 500 bytes), the i-th.
func testRecord(c *fakeClock, i int) *Record {
	return &Record{
		Time: Time(c.now()), Level: "WARN", Msg: MsgBlocked, Client: "10.0.0.7", Method: "GET",
		URL: fmt.Sprintf("https://news.example/articles/%d?ref=feed", i), Path: fmt.Sprintf("/articles/%d?ref=feed", i),
		Origin: "https://news.example", UserAgent: "ExampleBot/2.1 (+https://bot.example/about)",
		Agent: []string{"examplebot"}, Token: "examplebot", Purpose: []string{"search"},
		RobotsURL: "https://news.example/robots.txt", Rule: "disallow: /articles/", Line: 7, Status: 403,
		Decision: policy.ActionDisallowed, Reason: "disallowed by robots.txt",
		Copies: []Copy{{URL: "https://news.example/robots.txt", SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Fetched: Time(c.t), Status: 200}},
	}
}

// openTest opens a Log at path signed with key (none: nil), its head
// remembered in dir.
func openTest(t testing.TB, path string, key *identity.Key, c *fakeClock) *Log {
	t.Helper()
	o := Options{Now: c.now, OnError: func(err error, r Record) { t.Errorf("audit write: %v", err) }}
	if key != nil {
		o.Checkpoints = Checkpoints{Key: key, HeadPath: filepath.Join(filepath.Dir(path), HeadFileName)}
	}
	l, err := OpenWith(path, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// writeRun writes n records, an interval checkpoint after every ckEvery.
func writeRun(l *Log, c *fakeClock, from, n, ckEvery int) {
	for i := from; i < from+n; i++ {
		l.Write(testRecord(c, i))
		if ckEvery > 0 && (i+1-from)%ckEvery == 0 {
			l.mu.Lock()
			l.checkpoint(EventInterval, true)
			l.mu.Unlock()
		}
	}
}

// lines reads a file's lines.
func lines(t testing.TB, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ls := bytes.SplitAfter(b, []byte("\n"))
	if len(ls[len(ls)-1]) == 0 {
		ls = ls[:len(ls)-1]
	}
	return ls
}

// verifyOK verifies files with keys and fails the test on any finding.
func verifyOK(t *testing.T, keys []*identity.Key, files ...string) *Report {
	t.Helper()
	rep, err := Verify(files, VerifyOptions{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Intact() {
		t.Errorf("Verify(%v): not intact:\n%s", files, findings(rep))
	}
	return rep
}

func findings(rep *Report) string {
	var b strings.Builder
	for _, f := range rep.Findings {
		fmt.Fprintln(&b, f)
	}
	return b.String()
}

// TestChain: every line's prev is the hash of the line before, the first
// 64 zeros; checkpoints sign the head, count the run's lines and carry
// only their members.
func TestChain(t *testing.T) {
	t.Parallel()
	dir, c, key := t.TempDir(), newClock(), testKey(1)
	path := filepath.Join(dir, "audit.log")
	l := openTest(t, path, key, c)
	writeRun(l, c, 0, 5, 3)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ls := lines(t, path)
	var events []string
	prev := ZeroHead
	for i, line := range ls {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if m["prev"] != prev {
			t.Errorf("line %d: prev %v; want %s", i+1, m["prev"], prev)
		}
		if m["msg"] == "checkpoint" {
			events = append(events, fmt.Sprintf("%s:%v", m["event"], m["lines"]))
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range m {
					if !yield(k) {
						return
					}
				}
			})
			if !slices.Equal(keys, checkpointFields) || m["head"] != prev || m["key"] != key.ID || !VerifySig(key.Public, prev, m["sig"].(string)) {
				t.Errorf("line %d: checkpoint %s", i+1, line)
			}
		}
		prev = LineHash(line).String()
	}
	if want := []string{"start:0", "interval:3", "shutdown:2"}; !slices.Equal(events, want) {
		t.Errorf("checkpoints %v; want %v", events, want)
	}
	rep := verifyOK(t, []*identity.Key{key}, path)
	if rep.Lines != 8 || rep.Checkpoints != 3 || rep.Head != prev || !slices.Equal(rep.Keys, []string{key.ID}) {
		t.Errorf("report %+v; want 8 lines, 3 checkpoints, head %s", rep, prev)
	}
}

// TestChainRestart: a second run continues the file's chain from its last
// line; a new file continues from the head remembered in audit-head.
func TestChainRestart(t *testing.T) {
	t.Parallel()
	dir, c, key := t.TempDir(), newClock(), testKey(1)
	path := filepath.Join(dir, "audit.log")
	for run := range 2 {
		l := openTest(t, path, key, c)
		writeRun(l, c, run*10, 4, 0)
		l.Close()
	}
	// Rotated while robotsgate was stopped: the new file continues the
	// chain from audit-head.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	l := openTest(t, path, key, c)
	writeRun(l, c, 20, 2, 0)
	l.Close()
	verifyOK(t, []*identity.Key{key}, path, path+".1")
}

// TestChainStdout: on stdout the chain is written, without checkpoints.
func TestChainStdout(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	c := newClock()
	l, err := OpenWith("", Options{Stdout: &out, Now: c.now, Checkpoints: Checkpoints{Key: testKey(1)}})
	if err != nil {
		t.Fatal(err)
	}
	writeRun(l, c, 0, 3, 2)
	l.Close()
	prev := ZeroHead
	for i, line := range bytes.SplitAfter(bytes.TrimSuffix(out.Bytes(), []byte("\n")), []byte("\n")) {
		var r Record
		if err := json.Unmarshal(line, &r); err != nil || r.Prev != prev || r.Msg == MsgCheckpoint {
			t.Errorf("line %d: %s (%v); want a record with prev %s", i+1, line, err, prev)
		}
		prev = LineHash(line).String()
	}
}
