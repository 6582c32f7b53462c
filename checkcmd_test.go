package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckUnseen: an allowed URL checked for purposes says what check
// did not see and can still refuse them (the page's own response headers
// and HTML meta; with -robots, the site's usage files too), in text and in
// -json's unseen; a URL refused, one checked for no purpose, robots.txt
// itself and a [[sites]] allow say nothing of it.
func TestCheckUnseen(t *testing.T) {
	t.Parallel()
	const robots = "testdata/check/usage.txt"
	cfg := filepath.Join(t.TempDir(), "sites.toml")
	if err := os.WriteFile(cfg, []byte("[[sites]]\nhost = \"trusted.example\"\npolicy = \"allow\"\nreason = \"ours\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const robotsNote = "search not refused by the robots.txt given, but check read none of the site's usage files " +
		"(-robots: RSL licences, tdmrep.json), and the page's own response headers or HTML meta can still refuse it"
	tests := []struct {
		name     string
		args     []string
		wantText string // a part of the line; "" for no note
		wantJSON string // unseen, as JSON
	}{
		{"allowed, a purpose", []string{"-purpose", "search", "https://example.com/a"}, robotsNote,
			`{"purposes":["search"],"sources":["rsl licence","tdmrep.json","response header","html meta"]}`},
		{"allowed, two purposes", []string{"-purpose", "ai-input,search", "https://example.com/open/a"},
			"ai-input, search not refused by the robots.txt given", `{"purposes":["ai-input","search"],"sources":["rsl licence","tdmrep.json","response header","html meta"]}`},
		{"refused", []string{"-purpose", "ai-train", "https://example.com/a"}, "", "null"},
		{"disallowed", []string{"-purpose", "search", "https://example.com/private/a"}, "", "null"},
		{"no purpose", []string{"https://example.com/a"}, "", "null"},
		{"robots.txt itself", []string{"-purpose", "search", "https://example.com/robots.txt"}, "", "null"},
		{"a [[sites]] allow: no statement is judged", []string{"-config", cfg, "-purpose", "search", "https://trusted.example/a"}, "", "null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"check", "-robots", robots}, tt.args...)
			out, errOut, _ := runCmd(t, "", args...)
			if errOut != "" {
				t.Fatalf("stderr %q", errOut)
			}
			if has := strings.Contains(out, "can still refuse"); tt.wantText == "" && has || tt.wantText != "" && !strings.Contains(out, tt.wantText) {
				t.Errorf("check %v:\n%s\nwant %q", tt.args, out, tt.wantText)
			}
			out, _, _ = runCmd(t, "", append(args, "-json")...)
			var got struct{ Unseen json.RawMessage }
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			if string(got.Unseen) != tt.wantJSON {
				t.Errorf("check -json %v: unseen %s; want %s", tt.args, got.Unseen, tt.wantJSON)
			}
		})
	}
}

// TestCheckUnseenIsTrue: a page whose robots.txt, RSL licence and
// tdmrep.json say nothing of ai-train, but whose response header or HTML
// meta refuses it, is allowed by check, which says those can still refuse
// it, and refused by the proxy when fetched: check's note is the truth.
func TestCheckUnseenIsTrue(t *testing.T) {
	t.Parallel()
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/robots.txt":
			io.WriteString(w, "User-agent: *\nDisallow: /private\n")
		case "/hdr":
			w.Header().Set("Content-Usage", "train-ai=n")
			io.WriteString(w, "a page")
		case "/meta":
			io.WriteString(w, `<!DOCTYPE html><html><head><meta name="robots" content="noai"></head><body>a page</body></html>`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(site.Close)
	cfgPath, client, stop := serveCheckProxy(t)
	defer stop()
	for _, path := range []string{"/hdr", "/meta"} {
		out, errOut, code := runCmd(t, "", "check", "-config", cfgPath, "-purpose", "ai-train", site.URL+path)
		const note = "ai-train not refused by what check reads (robots.txt, the RSL licences it names, tdmrep.json), " +
			"but the page's own response headers or HTML meta, which check does not fetch, can still refuse it"
		if code != 0 || !strings.HasPrefix(out, "allowed\t") || !strings.Contains(out, note) {
			t.Errorf("check %s: exit %d\n%s%s\nwant allowed, and %q", path, code, out, errOut, note)
		}
		req, _ := http.NewRequest("GET", site.URL+path, nil)
		req.Header.Set("X-Robots-Gate-Purpose", "ai-train")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate") != "usage-refused" || strings.Contains(string(body), "a page") {
			t.Errorf("GET %s through the proxy: %d %q %q; want 403 usage-refused, the body withheld", path, resp.StatusCode, resp.Header.Get("X-Robots-Gate"), body)
		}
	}
}

// TestCheckBadURLAndAdvice: a URL no request could carry as written is
// bad-request in text as in -json, its byte named as a byte; a site whose
// certificate does not verify gets check's advice (the config check
// reads), not the running proxy's (a reload, a purge).
func TestCheckBadURLAndAdvice(t *testing.T) {
	t.Parallel()
	out, _, code := runCmd(t, "User-agent: *\nDisallow: /x\n", "check", "-robots", "-", "-agent", "Bot", "https://s.example/caf\xc3\xa9/1")
	if !strings.HasPrefix(out, "bad-request\t") || !strings.Contains(out, "the byte 0xC3") || code == 0 {
		t.Errorf("text: %q, exit %d; want bad-request naming the byte 0xC3, exit non-zero", out, code)
	}
	out, _, _ = runCmd(t, "User-agent: *\nDisallow: /x\n", "check", "-json", "-robots", "-", "-agent", "Bot", "https://s.example/caf\xc3\xa9/1")
	if !strings.Contains(out, `"decision":"bad-request"`) {
		t.Errorf("-json: %s; want decision bad-request", out)
	}

	site := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "User-agent: *\nDisallow: /x\n")
	}))
	t.Cleanup(site.Close)
	cfg := filepath.Join(t.TempDir(), "check.toml")
	if err := os.WriteFile(cfg, []byte("[upstream]\nblock_private = false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, _ := runCmd(t, "", "check", "-config", cfg, site.URL+"/a")
	if !strings.Contains(out, "add the site's CA to upstream.ca if you trust it, in the config given with -config") ||
		strings.Contains(out, "SIGHUP") || strings.Contains(out, "purge") {
		t.Errorf("a certificate that does not verify: %q (stderr %q); want check's advice, not the proxy's", out, errOut)
	}
}
