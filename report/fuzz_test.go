package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// refRecord decodes line with encoding/json, as the reference for
// ParseRecord's scanner: one object, members matched exactly, the last
// of repeated names winning, null as absent.
func refRecord(line []byte) (audit.Record, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil || m == nil {
		return audit.Record{}, false
	}
	var r audit.Record
	var ts, decision string
	hasTime := false
	for name, dst := range map[string]*string{"time": &ts, "decision": &decision, "origin": &r.Origin, "token": &r.Token, "rule": &r.Rule} {
		raw, ok := m[name]
		if !ok || raw == nil || string(raw) == "null" {
			continue
		}
		if json.Unmarshal(raw, dst) != nil {
			return audit.Record{}, false
		}
		hasTime = hasTime || name == "time"
	}
	if !hasTime {
		return audit.Record{}, false
	}
	// Method, url, reason, charged, status and line are read leniently:
	// a method, url, reason or charged that is no string, a status that is no
	// integer from 100 to 999, and a line that is no integer from 0 to
	// 2^31-1, are as if absent.
	for name, dst := range map[string]*string{"method": &r.Method, "url": &r.URL, "reason": &r.Reason, "charged": &r.Charged} {
		if json.Unmarshal(m[name], dst) != nil {
			*dst = ""
		}
	}
	var lineNum any
	ldec := json.NewDecoder(bytes.NewReader(m["line"]))
	ldec.UseNumber()
	if ldec.Decode(&lineNum) == nil {
		if num, ok := lineNum.(json.Number); ok && !strings.ContainsAny(string(num), ".eE-") {
			if n, err := strconv.ParseInt(string(num), 10, 64); err == nil && n <= math.MaxInt32 {
				r.Line = int(n)
			}
		}
	}
	var status any
	dec := json.NewDecoder(bytes.NewReader(m["status"]))
	dec.UseNumber()
	if dec.Decode(&status) == nil {
		if num, ok := status.(json.Number); ok {
			if n, err := strconv.Atoi(string(num)); err == nil && n >= 100 && n <= 999 {
				r.Status = n
			}
		}
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	a, known := policy.ParseAction(decision)
	if err != nil || !known {
		return audit.Record{}, false
	}
	r.Time, r.Decision = audit.Time(t), a
	return r, true
}

// FuzzReportLine feeds untrusted bytes to the report: ParseRecord must
// agree with encoding/json and time.Parse, and a Summary must count every
// line once and write all three formats, the JSON valid; its refused-URL
// list (of two entries, so that lines replace them) keeps its bounds.
func FuzzReportLine(f *testing.F) {
	for _, name := range []string{"testdata/audit.jsonl", "testdata/malformed.jsonl", "testdata/proxy.jsonl"} {
		file, err := os.Open(name)
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			if !bytes.Contains(sc.Bytes(), []byte(`"msg":"checkpoint"`)) { // neither a record nor malformed: counted apart
				f.Add(bytes.Clone(sc.Bytes()))
			}
		}
		file.Close()
	}
	f.Add([]byte(`{"time":"2026-11-23T08:00:00.000Z","decision":"allowed","decision":null,"\u0074ime":"2026-11-23T08:00:00.000+01:00"}`))
	f.Add([]byte(`{"time":"2026-11-23T08:00:00.000Z","decision":"denied","token":"\ud800\udc00\ud800x\xff","origin":"<script>"}`))
	f.Add([]byte("{\"time\":\"2026-11-23T08:00:00.000Z\",\"decision\":\"paced\",\"a\":[{},[],{\"b\":[-0.5e+7,true]}]}\r\n\n{}"))
	f.Add([]byte(`{"time":"2026-11-23T08:00:00.000Z","decision":"allowed","method":"CONN\u0045CT","status":200,"status":2e2}`))
	f.Add([]byte(`{"time":"2026-11-23T08:00:00.000Z","decision":"would-block","method":7,"status":-101,"status":101}`))
	f.Add([]byte(`{"time":"2026-11-23T08:00:00.000Z","decision":"allowed","method":"GET","status":"429"}`))
	f.Add([]byte(`{"time":"2026-11-23T08:00:00.000Z","decision":"allowed","charged":"USD 0.1","charged":"usd 999999.999999999","line":2147483648}`))
	f.Add([]byte(`{"time":"2026-11-23T08:00:00.000Z","decision":"price-refused","charged":5,"url":["x"],"line":-0,"origin":"a"}`))
	f.Add([]byte(`{"time":"2026-11-23T08:00:00.000Z","decision":"usage-refused","method":"CONNECT","rule":"tdmrep.json: / tdm-reservation=1","url":"a:443","line":3e0}`))
	f.Add([]byte("{\"time\":\"2026-11-23T08:00:00.000Z\",\"decision\":\"denied\",\"url\":\"a\"}\n{\"time\":\"2026-11-23T08:00:00.000Z\",\"decision\":\"denied\",\"url\":\"b\"}\n" +
		"{\"time\":\"2026-11-23T08:00:00.000Z\",\"decision\":\"denied\",\"url\":\"c\"}\n{\"time\":\"2026-11-23T07:00:00.000Z\",\"decision\":\"denied\",\"url\":\"c\"}"))
	f.Fuzz(func(t *testing.T, line []byte) {
		got, err := ParseRecord(line)
		want, ok := refRecord(line)
		if (err == nil) != ok {
			t.Fatalf("ParseRecord(%q) error %v; encoding/json accepts it: %v", line, err, ok)
		}
		gt, wt := time.Time(got.Time), time.Time(want.Time)
		if ok && (!gt.Equal(wt) || gt.Format(time.RFC3339Nano) != wt.Format(time.RFC3339Nano) ||
			got.Decision != want.Decision || got.Origin != want.Origin || got.Token != want.Token || got.Rule != want.Rule ||
			got.Method != want.Method || got.Status != want.Status || got.URL != want.URL || got.Charged != want.Charged || got.Line != want.Line ||
			got.Reason != want.Reason) {
			t.Fatalf("ParseRecord(%q) = %+v; encoding/json: %+v", line, got, want)
		}

		s := &Summary{MaxRefused: 2}
		if err := s.Read("fuzz", bytes.NewReader(line)); err != nil {
			// Bytes that open as gzip (no audit line does) and are no
			// gzip stream: a clear error naming the file is the answer.
			if bytes.HasPrefix(line, []byte{0x1f, 0x8b}) && strings.Contains(err.Error(), "fuzz (gzip)") {
				return
			}
			t.Fatal(err)
		}
		lines := int64(0)
		for l := range bytes.Lines(line) {
			if len(bytes.TrimRight(l, "\r\n")) > 0 {
				lines++
			}
		}
		if n, _ := s.Malformed(); s.Total()+n != lines {
			t.Fatalf("%d records + %d malformed; want %d lines", s.Total(), n, lines)
		}
		var out bytes.Buffer
		if err := s.WriteJSON(&out); err != nil || !json.Valid(out.Bytes()) {
			t.Fatalf("WriteJSON: %v\n%s", err, out.Bytes())
		}
		var r reportJSON
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		counted := r.RefusedLeftOut
		for _, e := range r.RefusedURLs {
			if e.CountError < 0 || e.CountError >= e.Count {
				t.Fatalf("refused %s: count %d, error %d", e.URL, e.Count, e.CountError)
			}
			counted += e.Count - e.CountError
		}
		if refused := sum(slices.Collect(maps.Values(r.ByRefusalClass))); len(r.RefusedURLs) > 2 || r.RefusedLeftOut < 0 || counted != refused {
			t.Fatalf("%d refused records: %d entries, %d left out, %d counted: %+v", refused, len(r.RefusedURLs), r.RefusedLeftOut, counted, r.RefusedURLs)
		}
		if err := s.WriteText(io.Discard); err != nil {
			t.Fatal(err)
		}
		if s.Total() > 0 { // parsing the template is slow: only pages with names
			if err := s.WriteHTML(io.Discard); err != nil {
				t.Fatal(err)
			}
		}
	})
}
