package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/attack"
	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/admin"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// postDecide sends body to POST /v1/decide over loopback and returns the
// status and the decoded JSON answer.
func postDecide(t *testing.T, p *testProxy, body string) (int, map[string]any) {
	t.Helper()
	// A hang guard, not a bound on the work: that is counted, in units
	// of work, by the API itself (TestDecideAPIWorkBounded), and a call
	// at its bound took over 30 s under -race on a loaded 2-core machine.
	c := &http.Client{Timeout: 5 * time.Minute}
	resp, err := c.Post(p.url.String()+"/v1/decide", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q; want application/json", ct)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("decode answer: %v", err)
	}
	return resp.StatusCode, out
}

// TestDecideAPI: POST /v1/decide answers check -json's objects, one per URL
// in order, through the proxy's cache (one fetch per origin), and refuses
// bad input with a message naming the problem.
func TestDecideAPI(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, usageRobots+"\nUser-agent: GPTBot\nDisallow: /\n", nil)
	down := "http://" + closedAddr(t)
	p := startProxy(t, loopbackConfig())

	urls := []string{o.URL + "/ok", o.URL + "/private/x", o.URL + "/train/set", down + "/x", "not a url", o.URL + "/robots.txt",
		o.URL + "/" + strings.Repeat("a/..", admin.MaxDecideURLBytes/4)}
	body, _ := json.Marshal(map[string]any{"user_agent": "DataBot/1.0", "purpose": []string{"ai-train"}, "urls": urls})
	code, out := postDecide(t, p, string(body))
	if code != 200 {
		t.Fatalf("status %d: %v", code, out)
	}
	results, _ := out["results"].([]any)
	if len(results) != len(urls) {
		t.Fatalf("%d results; want %d: %v", len(results), len(urls), out)
	}
	want := []struct{ decision, rule string }{
		{"allowed", ""},
		{"disallowed", "disallow: /private"},
		{"usage-refused", "content-usage: /train/ train-ai=n"},
		{"unreachable", ""},
		{"bad-request", ""},
		{"allowed", ""},
		{"bad-request", ""}, // too long
	}
	fields := []string{"url", "origin", "agent", "allowed", "decision", "reason", "robots_url", "rule", "line", "fetch", "crawl_delay", "purpose", "usage", "copies", "unseen"}
	for i, r := range results {
		m := r.(map[string]any)
		if m["url"] != urls[i] || m["decision"] != want[i].decision || want[i].rule != "" && m["rule"] != want[i].rule {
			t.Errorf("result %d = %v; want %s %q", i, m, want[i].decision, want[i].rule)
		}
		if len(m) != len(fields) {
			t.Errorf("result %d has %d fields; want check -json's %d: %v", i, len(m), len(fields), m)
		}
		for _, f := range fields {
			if _, ok := m[f]; !ok {
				t.Errorf("result %d lacks %q", i, f)
			}
		}
	}
	if a, _ := results[0].(map[string]any)["agent"].([]any); len(a) != 1 || a[0] != "DataBot" {
		t.Errorf("agent = %v; want [DataBot]", a)
	}
	// unseen as check -json gives it, the usage files read: an allowed
	// URL's answer can still refuse ai-train; a refusal, robots.txt
	// itself and a bad request have nothing unseen.
	for i, want := range []string{`{"purposes":["ai-train"],"sources":["response header","html meta"]}`, "null", "null", "null", "null", "null", "null"} {
		if got, _ := json.Marshal(results[i].(map[string]any)["unseen"]); string(got) != want {
			t.Errorf("result %d (%.60s): unseen %s; want %s", i, urls[i], got, want)
		}
	}
	if n := o.count("/robots.txt"); n != 1 {
		t.Errorf("robots.txt fetched %d times; want once for the batch", n)
	}

	// Many URLs of one origin, looked up once (the lookups of a batch
	// must not undo each other).
	sameOrigin := make([]string, 3000)
	for i := range sameOrigin {
		sameOrigin[i] = fmt.Sprintf("%s/p%d", o.URL, i)
	}
	sameBody, _ := json.Marshal(map[string]any{"agent": "Bot", "urls": sameOrigin})
	if code, out := postDecide(t, p, string(sameBody)); code != 200 || len(out["results"].([]any)) != len(sameOrigin) {
		t.Errorf("3000 URLs of one origin: %d %.200v", code, out)
	}
	if n := o.count("/ok"); n != 0 {
		t.Errorf("deciding fetched the page itself %d times", n)
	}

	// agent instead of user_agent; the same cache, no new fetch.
	code, out = postDecide(t, p, fmt.Sprintf(`{"agent": "GPTBot", "urls": [%q]}`, o.URL+"/ok"))
	if r := out["results"].([]any)[0].(map[string]any); code != 200 || r["decision"] != "disallowed" || o.count("/robots.txt") != 1 {
		t.Errorf("agent GPTBot: %d %v", code, r)
	}

	many := make([]string, admin.MaxDecideURLs+1)
	for i := range many {
		many[i] = o.URL + "/"
	}
	tooMany, _ := json.Marshal(map[string]any{"urls": many})
	for _, tt := range []struct {
		name, body string
		code       int
		msg        string
	}{
		{"not JSON", "urls=1", 400, "bad JSON"},
		{"empty", "", 400, "empty body"},
		{"unknown field", `{"url": ["x"]}`, 400, `unknown field "url"`},
		{"a field in another case", `{"URLS": ["x"]}`, 400, `unknown field "URLS"`},
		{"not an object", `["x"]`, 400, "bad JSON"},
		{"wrong type", `{"urls": "http://a/"}`, 400, `"urls"`},
		{"no urls", `{"agent": "x"}`, 400, `"urls" is missing`},
		{"two objects", `{"urls": []} {}`, 400, "more after the object"},
		{"both agents", `{"agent": "a", "user_agent": "b", "urls": []}`, 400, "exclusive"},
		{"agent with a version", `{"agent": "CCBot/2.0", "urls": []}`, 400, "not a product token"},
		{"unknown purpose", `{"purpose": ["training"], "urls": []}`, 400, "known purposes are ai-train, ai-input, search"},
		{"too many", string(tooMany), 413, "at most 10000"},
		{"empty list", `{"urls": []}`, 200, ""},
	} {
		code, out := postDecide(t, p, tt.body)
		if msg, _ := out["error"].(string); code != tt.code || !strings.Contains(msg, tt.msg) {
			t.Errorf("%s: %d %v; want %d with %q", tt.name, code, out, tt.code, tt.msg)
		}
	}
	resp, err := http.Get(p.url.String() + "/v1/decide")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/decide: %d Allow %q; want 405 Allow POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// TestOpenAPIResultFields: docs/openapi.yaml requires exactly the fields a
// /v1/decide result (check -json's object) has.
func TestOpenAPIResultFields(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	rt := reflect.TypeOf(audit.Result{})
	for i := range rt.NumField() {
		fields = append(fields, strings.Split(rt.Field(i).Tag.Get("json"), ",")[0])
	}
	want := "required: [" + strings.Join(fields, ", ") + "]"
	if !strings.Contains(string(doc), want) {
		t.Errorf("docs/openapi.yaml lacks %q: the Result schema is out of date", want)
	}
}

// TestDecideAPIOneLookupPerOrigin: every URL is decided on its origin's
// answer looked up for the call, never a second lookup (which, for an
// origin whose fetch failed longer than retry_after ago, would fetch it
// again, one URL at a time).
func TestDecideAPIOneLookupPerOrigin(t *testing.T) {
	t.Parallel()
	failing := newTestOrigin(t, testRobots, nil)
	failing.robotsStatus.Store(http.StatusServiceUnavailable)
	slow := newTestOrigin(t, testRobots, nil)
	slow.robotsDelay.Store(int64(1500 * time.Millisecond)) // the call's lookups outlast retry_after
	cfg := loopbackConfig()
	cfg.Robots.RetryAfter = time.Second
	p := startProxy(t, cfg)
	body, _ := json.Marshal(map[string]any{"agent": "Bot", "urls": []string{failing.URL + "/a", slow.URL + "/b", failing.URL + "/c", failing.URL + "/d"}})
	code, out := postDecide(t, p, string(body))
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	for i, r := range out["results"].([]any) {
		if want := map[bool]string{true: "allowed", false: "unreachable"}[i == 1]; r.(map[string]any)["decision"] != want {
			t.Errorf("result %d: %v; want %s", i, r, want)
		}
	}
	if n := failing.count("/robots.txt"); n != 1 {
		t.Errorf("the failing origin's robots.txt was fetched %d times for one call; want 1", n)
	}
}

// TestDecideAPIBusy: past admin.MaxDecideCalls calls at once, the next is told to
// retry at once, not queued behind their fetches.
func TestDecideAPIBusy(t *testing.T) {
	t.Parallel()
	// The calls' robots.txt is held until the test is done with them
	// (not for a time a busy machine might outlast).
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, testRobots)
	}))
	t.Cleanup(slow.Close)
	p := startProxy(t, loopbackConfig())
	body := fmt.Sprintf(`{"urls": [%q]}`, slow.URL+"/x")
	var wg sync.WaitGroup
	for range admin.MaxDecideCalls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			postDecide(t, p, body)
		}()
	}
	defer func() {
		close(release)
		wg.Wait()
	}()
	testkit.Eventually(t, fmt.Sprintf("%d decide calls running", admin.MaxDecideCalls), func() bool { return p.srv.admin.Running() >= admin.MaxDecideCalls })
	code, out := postDecide(t, p, body)
	if code != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(out["error"]), "retry") {
		t.Errorf("call %d: %d %v; want 503", admin.MaxDecideCalls+1, code, out)
	}
	resp, err := http.Post(p.url.String()+"/v1/decide", "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain body: %d; want 415", resp.StatusCode)
	}
}

// TestDecideAPIWorkBounded: a call's URLs are each decided within the
// work bound of one request, and the call within its own: URLs past it
// are answered "overloaded", not decided, so that one call cannot take
// minutes of CPU.
func TestDecideAPIWorkBounded(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, attack.Robots(fetch.DefaultMaxBytes), nil)
	p := startProxy(t, loopbackConfig())
	n := admin.MaxDecideWork/policy.DecideWork + 10
	urls := make([]string, n)
	for i := range urls {
		urls[i] = o.URL + attack.Path(policy.MaxTargetBytes)[:len(attack.Path(policy.MaxTargetBytes))-len(o.URL)]
	}
	urls = append(urls, o.URL+"/"+strings.Repeat("a", admin.MaxDecideURLBytes)) // past the bound of one URL
	body, _ := json.Marshal(map[string]any{"agent": "AnyBot", "urls": urls})
	code, out := postDecide(t, p, string(body))
	if code != 200 {
		t.Fatalf("status %d: %v", code, out)
	}
	results := out["results"].([]any)
	var costly, overloaded int
	for i, r := range results[:n] {
		m := r.(map[string]any)
		switch {
		case m["decision"] == "bad-request" && strings.Contains(m["reason"].(string), "work bound"):
			if overloaded > 0 {
				t.Errorf("result %d decided after the call's bound was reached", i)
			}
			costly++
		case m["decision"] == "overloaded" && m["reason"] == admin.ReasonDecideWork:
			overloaded++
		default:
			t.Errorf("result %d: %v %.80q; want bad-request past the work bound, or overloaded", i, m["decision"], m["reason"])
		}
	}
	if costly == 0 || costly > admin.MaxDecideWork/policy.DecideWork+1 || overloaded == 0 {
		t.Errorf("%d URLs decided past their bound, %d not decided; want at most %d decided, the rest not", costly, overloaded, admin.MaxDecideWork/policy.DecideWork+1)
	}
	if m := results[n].(map[string]any); m["decision"] != "bad-request" || !strings.Contains(m["reason"].(string), "longer than") {
		t.Errorf("a URL of more than %d bytes: %v %.80q; want bad-request", admin.MaxDecideURLBytes, m["decision"], m["reason"])
	}
}
