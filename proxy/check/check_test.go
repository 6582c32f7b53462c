package check

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/usage"
)

// TestRun: every URL is decided and printed in order, one that cannot be
// decided is named on stderr without stopping the rest, and the error
// says which of the two outcomes the command exits with.
func TestRun(t *testing.T) {
	t.Parallel()
	robotsTxt := []byte("User-agent: *\nDisallow: /private\n\nUser-agent: FooBot\nDisallow: /\n")
	tests := []struct {
		name    string
		c       Checker
		urls    []string
		want    string // "url action" per printed URL
		wantErr error
		stderr  string
	}{
		{"allowed", Checker{}, []string{"http://a.example/x", "https://a.example/y"},
			"http://a.example/x allowed|https://a.example/y allowed", nil, ""},
		{"one disallowed", Checker{}, []string{"http://a.example/x", "http://a.example/private/1"},
			"http://a.example/x allowed|http://a.example/private/1 disallowed", ErrNotAllowed, ""},
		{"a bad URL among them", Checker{}, []string{"http://a.example/private", "mailto:x", "http://a.example/"},
			"http://a.example/private disallowed|http://a.example/ allowed", ErrInput, `"mailto:x"`},
		{"a product with a version", Checker{Token: "FooBot/2.0", TokenSet: true}, []string{"http://a.example/x"},
			"http://a.example/x disallowed", ErrNotAllowed, `deciding for "FooBot"`},
		{"exact takes any string", Checker{Exact: true}, []string{"example.com?a"}, "example.com?a allowed", nil, ""},
		{"exact refuses purposes", Checker{Exact: true, Purposes: []string{"search"}}, []string{"http://a.example/"}, "", ErrInput, ""},
		{"unknown purpose", Checker{Purposes: []string{"training"}}, []string{"http://a.example/"}, "", ErrInput, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := tt.c
			c.Robots = robotsTxt
			var got []string
			var stderr strings.Builder
			err := c.Run(t.Context(), tt.urls, func(u string, d *policy.Decision) error {
				got = append(got, u+" "+d.Action.String())
				return nil
			}, &stderr)
			if strings.Join(got, "|") != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("Run = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr %q; want it to hold %q", stderr.String(), tt.stderr)
			}
		})
	}
}

// TestPrefetch: the robots.txt of each origin among many URLs is fetched
// once, and the URLs decided on those answers, not on a second lookup.
func TestPrefetch(t *testing.T) {
	t.Parallel()
	var fetches atomic.Int64
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			fetches.Add(1)
			w.Write([]byte("User-agent: *\nDisallow: /private\n"))
		}
	}))
	defer o.Close()
	cfg := config.Default()
	cache, _, err := Cache(cfg, "test", false)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	var urls []string
	for range 50 {
		urls = append(urls, o.URL+"/x", o.URL+"/private/y")
	}
	rules := Prefetch(t.Context(), cache, urls)
	if n := fetches.Load(); n != 1 {
		t.Errorf("%d robots.txt fetches for one origin; want 1", n)
	}
	origin, _ := fetch.ParseOrigin(o.URL)
	a, err := rules(t.Context(), origin)
	if err != nil || a.Entry == nil || a.Entry.Status != 200 {
		t.Fatalf("the answer prefetched: %+v, %v", a, err)
	}
	c := &Checker{Cache: cache}
	blocked := 0
	err = c.Run(t.Context(), urls, func(_ string, d *policy.Decision) error {
		if !d.Allowed() {
			blocked++
		}
		return nil
	}, &strings.Builder{})
	if !errors.Is(err, ErrNotAllowed) || blocked != 50 || fetches.Load() != 1 {
		t.Errorf("Run: %v, %d blocked, %d fetches; want not allowed, 50, 1", err, blocked, fetches.Load())
	}
}

// TestRunUsageFiles: check -purpose reads the site's other usage files as
// the proxy does: an RSL licence's refusal, and tdmrep.json's reservation
// (which a response of the site's own could lift; check sees none), with
// their statements as evidence; with no purpose, neither is fetched.
func TestRunUsageFiles(t *testing.T) {
	t.Parallel()
	var files atomic.Int64
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/robots.txt":
			w.Write([]byte("User-agent: *\nDisallow: /private\nLicense: /license.xml\n")) // a path: resolved against the origin
		case "/license.xml":
			files.Add(1)
			w.Write([]byte(`<rsl><content url="/"><license><permits type="usage">all</permits></license></content>
<content url="/news/*"><license><prohibits type="usage">ai-train</prohibits></license></content></rsl>`))
		case "/.well-known/tdmrep.json":
			files.Add(1)
			w.Write([]byte(`[{"location": "/books/*", "tdm-reservation": 1}]`))
		}
	}))
	defer o.Close()
	cache, usageFiles, err := Cache(config.Default(), "test", false)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	run := func(purposes []string) map[string]string {
		t.Helper()
		got := map[string]string{}
		c := &Checker{Cache: cache, Files: usageFiles, Purposes: purposes}
		c.Run(t.Context(), []string{o.URL + "/news/a", o.URL + "/books/b", o.URL + "/other"}, func(u string, d *policy.Decision) error {
			// What check shows of ai-train agrees with its decision.
			got[strings.TrimPrefix(u, o.URL)] = d.Action.String() + " " + d.Refusal.Rule() + " | " + d.Usage[usage.AITrain].State.String()
			return nil
		}, &strings.Builder{})
		return got
	}
	if got := run(nil); files.Load() != 0 || !strings.HasPrefix(got["/news/a"], "allowed  |") {
		t.Errorf("no purpose: %v, %d usage files fetched; want allowed, none", got, files.Load())
	}
	got := run([]string{"ai-train"})
	want := map[string]string{
		"/news/a":  "usage-refused rsl " + o.URL + "/license.xml: prohibits usage ai-train | refused",
		"/books/b": "usage-refused tdmrep.json: /books/* tdm-reservation=1 | refused", // though the licence permits all
		"/other":   "allowed  | allowed",
	}
	for path, w := range want {
		if got[path] != w {
			t.Errorf("%s for ai-train: %q; want %q", path, got[path], w)
		}
	}
}
