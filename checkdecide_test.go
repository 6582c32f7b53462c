package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
)

// TestCheckAndDecideAgree: POST /v1/decide, on a real proxy's own
// address, answers for each URL the object check -json prints for the
// same URL, agent and purpose (DESIGN.md, Operator surface), unseen
// included: both read the site's usage files, so an allowed URL's answer
// can still refuse ai-train by its headers or HTML meta, and nothing else
// is unseen. Only when each fetched the site's files differs.
func TestCheckAndDecideAgree(t *testing.T) {
	t.Parallel()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, "User-agent: *\nDisallow: /private\nContent-Usage: /train/ train-ai=n\n")
	}))
	t.Cleanup(site.Close)
	cfgPath, client, stop := serveCheckProxy(t)
	defer stop()
	proxyURL, err := client.Transport.(*http.Transport).Proxy(nil)
	if err != nil {
		t.Fatal(err)
	}

	urls := []string{site.URL + "/a", site.URL + "/private/x", site.URL + "/train/x", site.URL + "/robots.txt"}
	wantUnseen := []string{`{"purposes":["ai-train"],"sources":["response header","html meta"]}`, "null", "null", "null"}
	out, errOut, _ := runCmd(t, "", append([]string{"check", "-json", "-config", cfgPath, "-agent", "DataBot", "-purpose", "ai-train"}, urls...)...)
	var fromCheck []map[string]any
	for line := range strings.Lines(out) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("check -json: %v in %q (stderr %q)", err, line, errOut)
		}
		fromCheck = append(fromCheck, m)
	}

	body, _ := json.Marshal(map[string]any{"agent": "DataBot", "purpose": []string{"ai-train"}, "urls": urls})
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(proxyURL.String()+"/v1/decide", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var fromAPI struct{ Results []map[string]any }
	if err := json.NewDecoder(resp.Body).Decode(&fromAPI); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /v1/decide: %d, %v", resp.StatusCode, err)
	}

	if len(fromCheck) != len(urls) || len(fromAPI.Results) != len(urls) {
		t.Fatalf("check -json gave %d objects, /v1/decide %d; want %d each", len(fromCheck), len(fromAPI.Results), len(urls))
	}
	for i := range urls {
		c, a := withoutFetchTimes(fromCheck[i]), withoutFetchTimes(fromAPI.Results[i])
		if !reflect.DeepEqual(c, a) {
			cb, _ := json.Marshal(c)
			ab, _ := json.Marshal(a)
			t.Errorf("%s:\ncheck -json  %s\n/v1/decide   %s", urls[i], cb, ab)
		}
		if got, _ := json.Marshal(a["unseen"]); string(got) != wantUnseen[i] {
			t.Errorf("%s: unseen %s; want %s", urls[i], got, wantUnseen[i])
		}
	}
}

// serveCheckProxy serves a real proxy for check's tests: tunnel mode,
// sites on loopback allowed, no crawl-delay. It returns its config file
// (for check -config), a client through it, and stop.
func serveCheckProxy(t *testing.T) (cfgPath string, client *http.Client, stop func()) {
	t.Helper()
	cfgDir := t.TempDir()
	toml := fmt.Sprintf("[tls]\nmode = \"tunnel\"\nstate_dir = %q\n[upstream]\nblock_private = false\n[politeness]\ncrawl_delay = false\n", cfgDir)
	cfgPath = filepath.Join(cfgDir, "robotsgate.toml")
	client, stop = serveProxyConfig(t, cfgPath, toml, testkit.NewClock(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)).Now)
	return cfgPath, client, stop
}

// withoutFetchTimes returns a check -json object less the times its
// site's files were fetched at (fetch.fetched_at and age_s, each copy's
// fetched), which differ between two readers of a site.
func withoutFetchTimes(m map[string]any) map[string]any {
	if f, ok := m["fetch"].(map[string]any); ok {
		delete(f, "fetched_at")
		delete(f, "age_s")
	}
	copies, _ := m["copies"].([]any)
	for _, c := range copies {
		if c, ok := c.(map[string]any); ok {
			delete(c, "fetched")
		}
	}
	return m
}
