package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// designFields are the audit log's fields, in docs/data-teams.md's order ("Audit log").
var designFields = []string{"time", "level", "msg", "client", "user", "method", "url", "path", "origin", "user_agent",
	"agent", "token", "purpose", "robots_url", "rule", "line", "status", "decision", "reason", "charged", "copies", "prev"}

// TestRecordFields: a record has docs/data-teams.md's fields, every one always
// written ("" or 0 or [] when empty), its time in UTC with milliseconds.
func TestRecordFields(t *testing.T) {
	t.Parallel()
	d := &policy.Decision{Action: policy.ActionBadRequest, Reason: "bad request URL"}
	r := RecordOf(time.Date(2026, 11, 23, 9, 41, 38, 637_400_000, time.FixedZone("CET", 3600)), d, 400)
	b, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range reflect.VisibleFields(reflect.TypeOf(r)) {
		names = append(names, f.Tag.Get("json"))
	}
	if !reflect.DeepEqual(names, designFields) || len(m) != len(designFields) {
		t.Errorf("fields %v (%d written); want %v", names, len(m), designFields)
	}
	want := map[string]any{"time": "2026-11-23T08:41:38.637Z", "level": "WARN", "msg": "refused", "agent": []any{}, "purpose": []any{},
		"status": 400.0, "decision": "bad-request", "line": 0.0, "origin": "", "url": ""}
	for k, v := range want {
		if !reflect.DeepEqual(m[k], v) {
			t.Errorf("%s = %#v; want %#v", k, m[k], v)
		}
	}
}

// TestRecordOf: the record of each kind of decision carries its msg and
// evidence, the canonical URL when the decision has an origin, and the
// usage statement's rule over the robots.txt one when that refused.
func TestRecordOf(t *testing.T) {
	t.Parallel()
	o := fetch.Origin{Scheme: "https", Host: "xn--bcher-kva.example", Port: 443}
	disallow := robots.Verdict{Allowed: false, Line: 3}
	tests := []struct {
		name string
		d    policy.Decision
		msg  Msg
		url  string
		path string
	}{
		{"disallowed", policy.Decision{Action: policy.ActionDisallowed, Origin: o, Target: "/a/%7Eb?x", Verdict: disallow}, MsgBlocked, "https://xn--bcher-kva.example/a/%7Eb?x", "/a/~b?x"},
		{"usage", policy.Decision{Action: policy.ActionUsageRefused, Origin: o, Target: "/"}, MsgBlocked, "https://xn--bcher-kva.example/", "/"},
		{"denied", policy.Decision{Action: policy.ActionDenied}, MsgOverride, "", ""},
		{"allowed by a site rule", policy.Decision{Action: policy.ActionAllowed, Site: &policy.Site{Policy: policy.SiteAllow}}, MsgOverride, "", ""},
		{"allowed by robots.txt", policy.Decision{Action: policy.ActionAllowed, Site: &policy.Site{Policy: policy.SiteRobots}}, MsgAllowed, "", ""},
		{"would-block", policy.Decision{Action: policy.ActionWouldBlock}, MsgWouldBlock, "", ""},
		{"unreachable", policy.Decision{Action: policy.ActionUnreachable}, MsgUnreachable, "", ""},
		{"paced", policy.Decision{Action: policy.ActionPaced}, MsgPaced, "", ""},
		{"auth", policy.Decision{Action: policy.ActionAuth, User: "mallory"}, MsgRefused, "", ""},
		{"origin, no target (a CONNECT)", policy.Decision{Action: policy.ActionPrivate, Origin: o}, MsgRefused, "", ""},
	}
	for _, tt := range tests {
		r := RecordOf(time.Now(), &tt.d, 403)
		level := "WARN"
		if tt.msg == MsgAllowed {
			level = "INFO"
		}
		if r.Msg != tt.msg || r.Level != level || r.URL != tt.url || r.Path != tt.path || r.Decision != tt.d.Action || r.User != tt.d.User {
			t.Errorf("%s: %+v; want msg %s, url %q, path %q", tt.name, r, tt.msg, tt.url, tt.path)
		}
		if !tt.d.Origin.IsZero() && r.Origin != o.String() {
			t.Errorf("%s: origin %q; want %q", tt.name, r.Origin, o)
		}
	}
	d := policy.Decision{Action: policy.ActionUsageRefused, Verdict: robots.Verdict{Allowed: true, Line: 2},
		Refusal: policy.Refusal{Statement: "Content-Usage: train-ai=n", Line: 5}}
	if r := RecordOf(time.Now(), &d, 403); r.Line != 5 || !strings.Contains(r.Rule, "train-ai=n") {
		t.Errorf("usage refusal: rule %q line %d; want the statement's, line 5", r.Rule, r.Line)
	}
}

// TestLog: records are written one per line, whole, from many writers at
// once; Reopen moves to a new file between two records; a failed write
// is reported with the record, never lost silently.
func TestLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, second := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	l, err := Open(first, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if fi, err := os.Stat(first); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("audit file: %v, %v; want mode 0640", fi, err)
	}
	long := strings.Repeat("é<&>", 5000) // written as is: no HTML escaping
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				l.Write(&Record{Msg: MsgBlocked, Line: i*100 + j, Reason: long})
			}
		})
	}
	wg.Wait()
	if err := l.Reopen(second); err != nil {
		t.Fatal(err)
	}
	l.Write(&Record{Msg: MsgPaced})
	lines := func(path string) []string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	a := lines(first)
	if len(a) != 400 {
		t.Fatalf("%d lines; want 400", len(a))
	}
	for _, line := range a {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil || r["reason"] != long || !strings.Contains(line, "é<&>") {
			t.Fatalf("line %.80q...: %v", line, err)
		}
	}
	if b := lines(second); len(b) != 1 || !strings.Contains(b[0], `"msg":"paced"`) {
		t.Errorf("after Reopen: %q", b)
	}
	// A missing directory is made (a fresh clone's .robotsgate/); a path
	// through a file cannot be.
	if err := l.Reopen(filepath.Join(dir, "missing", "c.log")); err != nil {
		t.Errorf("Reopen into a missing directory: %v; want it made", err)
	}
	if err := l.Reopen(filepath.Join(first, "c.log")); err == nil {
		t.Error("Reopen under a file: no error")
	}

	var failed []Msg
	broken, err := Open("", failingWriter{}, func(err error, r Record) { failed = append(failed, r.Msg) })
	if err != nil {
		t.Fatal(err)
	}
	broken.Write(&Record{Msg: MsgBlocked})
	if len(failed) != 1 || failed[0] != MsgBlocked {
		t.Errorf("failed writes reported: %v; want the blocked record", failed)
	}
	var out bytes.Buffer
	stdout, _ := Open("", &out, nil)
	stdout.Write(&Record{Msg: MsgAllowed})
	if !strings.HasPrefix(out.String(), `{"time":"0001-01-01T00:00:00.000Z","level":"","msg":"allowed"`) {
		t.Errorf("stdout: %s", out.String())
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestTimeRoundTrip: a record's time is written in TimeFormat and read
// back from any RFC 3339 time.
func TestTimeRoundTrip(t *testing.T) {
	t.Parallel()
	in := Time(time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC))
	b, _ := in.MarshalText()
	var out Time
	if string(b) != "2026-01-02T03:04:05.006Z" || out.UnmarshalText(b) != nil || !time.Time(out).Equal(time.Time(in)) {
		t.Errorf("%s -> %v", b, time.Time(out))
	}
	if err := out.UnmarshalText([]byte("yesterday")); err == nil {
		t.Error("UnmarshalText(yesterday): no error")
	}
}

// TestResultOf: check -json's object has its fields whatever the
// decision, null where nothing applies.
func TestResultOf(t *testing.T) {
	t.Parallel()
	d := &policy.Decision{Action: policy.ActionBadRequest, Reason: "bad request URL"}
	b, err := json.Marshal(ResultOf("ftp://x", d, true))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"url":"ftp://x","origin":null,"agent":[],"allowed":false,"decision":"bad-request","reason":"bad request URL",` +
		`"robots_url":"","rule":"","line":0,"fetch":null,"crawl_delay":null,"purpose":[],"usage":null,"copies":[],"unseen":null}`
	if string(b) != want {
		t.Errorf("ResultOf = %s\nwant       %s", b, want)
	}
}
