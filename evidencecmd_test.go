package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/internal/testkit"
)

// evidenceRun is a proxy run whose evidence the commands read: requests
// through the proxy to an origin whose robots.txt changes between two
// days, an [[agents]] rule deriving a token, the audit log and the store.
type evidenceRun struct {
	dir, cfgPath, auditPath, store string
	origin                         *httptest.Server
	v1, v2                         []byte    // the robots.txt bodies
	day1, day2                     time.Time // when each copy was in force
}

// The origin's robots.txt on each day: the first with a usage statement
// and a licence (RSL) that refuse ai-train on some paths.
const (
	robotsV1 = "User-agent: *\nDisallow: /private\nContent-Usage: /cu train-ai=n\n\nUser-agent: FooBot\nDisallow: /foo-only\n\nLicense: %s/license.xml\n"
	robotsV2 = "User-agent: *\nAllow: /open\nDisallow: /\n"
	license  = `<rsl><content url="/rsl/*"><license><prohibits type="usage">ai-train</prohibits></license></content></rsl>`
)

func runEvidenceProxy(t *testing.T) *evidenceRun {
	t.Helper()
	var robotsBody atomic.Value
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/robots.txt":
			w.Write(robotsBody.Load().([]byte))
		case "/license.xml":
			io.WriteString(w, license)
		case "/.well-known/tdmrep.json":
			io.WriteString(w, `[{"location": "/tdm/*", "tdm-reservation": 1}]`)
		case "/tdm/lifted":
			w.Header().Set("TDM-Reservation", "0") // lifts the reservation for this response
			io.WriteString(w, "page")
		default:
			io.WriteString(w, "page")
		}
	}))
	t.Cleanup(origin.Close)
	run := &evidenceRun{dir: t.TempDir(), origin: origin, v1: []byte(fmt.Sprintf(robotsV1, origin.URL)), v2: []byte(robotsV2)}
	robotsBody.Store(run.v1)
	run.cfgPath = filepath.Join(run.dir, "robotsgate.toml")
	run.auditPath = filepath.Join(run.dir, "audit.log")
	run.store = filepath.Join(run.dir, "evidence")
	toml := fmt.Sprintf("[tls]\nmode = \"tunnel\"\nstate_dir = %q\n[upstream]\nblock_private = false\n[audit]\nfile = %q\nlog_allowed = true\n"+
		"[politeness]\ncrawl_delay = false\n[[agents]]\nuser_agent = \"*FooCrawler*\"\ntoken = \"FooBot\"\n", run.dir, run.auditPath)
	clk := testkit.NewClock(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC))
	client, stop := serveProxyConfig(t, run.cfgPath, toml, clk.Now)
	get := func(path, ua string, want int, purpose ...string) {
		t.Helper()
		req, _ := http.NewRequest("GET", origin.URL+path, nil)
		req.Header.Set("User-Agent", ua)
		for _, p := range purpose {
			req.Header.Add("X-Robots-Gate-Purpose", p)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s as %q: %d; want %d", path, ua, resp.StatusCode, want)
		}
	}
	run.day1 = clk.Now()
	get("/private/x", "Mozilla/5.0 FooCrawler/1.0", 200) // FooBot's group does not disallow /private
	get("/foo-only", "Mozilla/5.0 FooCrawler/1.0", 403)
	get("/private/x", "BarBot/1.0", 403)
	get("/open", "BarBot/1.0", 200)
	get("/cu/x", "BarBot/1.0", 403, "ai-train")       // robots.txt's Content-Usage
	get("/rsl/x", "BarBot/1.0", 403, "ai-train")      // the licence it names
	get("/other", "BarBot/1.0", 200, "ai-train")      // both read, neither refuses
	get("/tdm/x", "BarBot/1.0", 403, "ai-train")      // tdmrep.json reserves it, and the response does not lift it
	get("/tdm/lifted", "BarBot/1.0", 200, "ai-train") // the response lifts it: not replayable, responses are not kept
	clk.Advance(25 * time.Hour)                       // past cache_ttl: robots.txt is fetched again, and has changed
	robotsBody.Store(run.v2)
	run.day2 = clk.Now()
	get("/open", "BarBot/1.0", 200)
	get("/private/x", "BarBot/1.0", 403)
	get("/anything", "BarBot/1.0", 403)
	stop()
	return run
}

// TestEvidenceAndReplay: the evidence command shows each copy at its
// time, and replay reproduces every record of a real run, and names the
// line of a record edited or whose copy is gone.
func TestEvidenceAndReplay(t *testing.T) {
	run := runEvidenceProxy(t)
	b, err := os.ReadFile(run.auditPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n < 7 {
		t.Fatalf("audit log has %d lines; want at least 7:\n%s", n, b)
	}
	v1, v2 := evidence.SumOf(run.v1), evidence.SumOf(run.v2)
	at := func(t time.Time) string { return t.Add(time.Minute).Format(time.RFC3339) }
	for _, tt := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"day 1", []string{"-agent", "BarBot", "-at", at(run.day1), "-audit", run.auditPath, run.origin.URL + "/private/x"}, 0,
			[]string{fmt.Sprintf("%x", v1), "status   200", "disallowed", `rule "disallow: /private" line 2`, `"msg":"blocked"`,
				"audit records of " + run.origin.URL + "/private/x, at any time (* : decided with the copy above):", "* " + run.auditPath + ":"}},
		{"day 2", []string{"-agent", "BarBot", "-at", at(run.day2), run.origin.URL + "/open"}, 0,
			[]string{fmt.Sprintf("%x", v2), "allowed", `rule "allow: /open" line 2`}},
		{"FooBot's group on day 1", []string{"-agent", "FooBot", "-at", at(run.day1), run.origin.URL + "/foo-only"}, 0,
			[]string{"disallowed", `rule "disallow: /foo-only" line 6`}},
		{"the token from a User-Agent, by [[agents]]", []string{"-user-agent", "Mozilla/5.0 FooCrawler/1.0", "-at", at(run.day1), run.origin.URL + "/foo-only"}, 0,
			[]string{`token ["FooBot"]`, "disallowed", `rule "disallow: /foo-only" line 6`}},
		{"before any fetch", []string{"-agent", "BarBot", "-at", "2026-03-01", run.origin.URL + "/open"}, 1,
			[]string{"no copy of " + run.origin.URL + "/robots.txt was fetched before 2026-03-01T23:59:59.999Z"}},
		{"bad time", []string{"-agent", "BarBot", "-at", "yesterday", run.origin.URL + "/open"}, 2, []string{"-at"}},
	} {
		out, errOut, code := runCmd(t, "", append([]string{"evidence", "-config", run.cfgPath}, tt.args...)...)
		if code != tt.code {
			t.Errorf("evidence %s: exit %d; want %d\n%s%s", tt.name, code, tt.code, out, errOut)
		}
		for _, w := range tt.want {
			if !strings.Contains(out+errOut, w) {
				t.Errorf("evidence %s: output lacks %q:\n%s%s", tt.name, w, out, errOut)
			}
		}
	}

	out, errOut, code := runCmd(t, "", "audit", "replay", "-config", run.cfgPath, run.auditPath)
	if code != 0 || !strings.Contains(out, "12 records: 11 reproduced, 0 differ") || !strings.Contains(out, "1 reservation the response may have lifted") {
		t.Fatalf("replay of the run: exit %d; want 0, every record reproduced:\n%s%s", code, out, errOut)
	}

	// A record's decision edited: replay exits 1 naming its line.
	lines := strings.SplitAfter(string(b), "\n")
	edited := -1
	for i, l := range lines {
		if strings.Contains(l, `"decision":"disallowed"`) {
			lines[i] = strings.Replace(l, `"decision":"disallowed"`, `"decision":"allowed"`, 1)
			edited = i + 1
			break
		}
	}
	editedPath := filepath.Join(run.dir, "edited.log")
	if err := os.WriteFile(editedPath, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = runCmd(t, "", "audit", "replay", "-config", run.cfgPath, editedPath)
	if want := fmt.Sprintf("%s:%d: does not reproduce", editedPath, edited); code != 1 || !strings.Contains(out, want) {
		t.Errorf("replay of an edited record: exit %d; want 1 and %q:\n%s", code, want, out)
	}

	// A FIFO given as an audit file is refused, not waited on for ever.
	fifo := filepath.Join(run.dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCmd(t, "", "evidence", "-config", run.cfgPath, "-agent", "BarBot", "-at", at(run.day1), "-audit", fifo, run.origin.URL+"/private/x")
	if code != 2 || !strings.Contains(errOut, fifo) {
		t.Errorf("evidence -audit FIFO: exit %d; want 2 naming it:\n%s%s", code, out, errOut)
	}

	// The second copy corrupted in the store: evidence exits 1 saying it
	// cannot be read, and why.
	v2Path := evidence.ObjectPath(run.store, v2)
	good, err := os.ReadFile(v2Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(v2Path, []byte("not gzip"), 0o640); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCmd(t, "", "evidence", "-config", run.cfgPath, "-agent", "BarBot", "-at", at(run.day2), run.origin.URL+"/open")
	if want := fmt.Sprintf("(sha256 %x): %s: corrupted copy", v2, v2Path); code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("evidence of a corrupted copy: exit %d; want 1 and %q:\n%s%s", code, want, out, errOut)
	}
	if err := os.WriteFile(v2Path, good, 0o640); err != nil {
		t.Fatal(err)
	}

	// The first copy removed from the store: replay exits 1 naming the
	// first line that needs it, and evidence says it is not stored.
	if err := os.Remove(evidence.ObjectPath(run.store, v1)); err != nil {
		t.Fatal(err)
	}
	out, _, code = runCmd(t, "", "audit", "replay", "-config", run.cfgPath, run.auditPath)
	if want := fmt.Sprintf("%s:%d: not replayed: copy missing", run.auditPath, firstNaming(t, run.auditPath, v1)); code != 1 || !strings.Contains(out, want) {
		t.Errorf("replay with a copy removed: exit %d; want 1 and %q:\n%s", code, want, out)
	}
	out, errOut, code = runCmd(t, "", "evidence", "-config", run.cfgPath, "-agent", "BarBot", "-at", at(run.day1), run.origin.URL+"/private/x")
	if want := fmt.Sprintf("the copy with sha256 %x is not in the store %s", v1, run.store); code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("evidence of a removed copy: exit %d; want 1 and %q:\n%s%s", code, want, out, errOut)
	}
}

// firstNaming returns the line of the first record of the audit log at
// path that names the copy with sum.
func firstNaming(t *testing.T, path string, sum [32]byte) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		var rec struct {
			Copies []struct{ SHA256 string } `json:"copies"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && len(rec.Copies) > 0 && rec.Copies[0].SHA256 == fmt.Sprintf("%x", sum) {
			return n
		}
	}
	t.Fatalf("no record of %s names %x", path, sum)
	return 0
}
