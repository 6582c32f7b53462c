package head

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/head/headtest"
	"github.com/robotsgate/robotsgate/usage"
)

// chromiumHeadPage collects, once every frame has loaded, the name and
// content of each HTML meta element under each frame's document.head (a
// template's content is not under it; an XHTML page may have none, or
// hold another namespace's meta), as JSON in #out.
const chromiumHeadPage = `<!DOCTYPE html><html><head><meta charset="utf-8"><title>heads</title></head><body>
%s<pre id="out"></pre>
<script>
window.addEventListener("load", function () {
	var out = {};
	for (var f of document.querySelectorAll("iframe")) {
		var metas = [], head = f.contentDocument.head;
		for (var m of head ? head.querySelectorAll("meta") : []) {
			if (m.namespaceURI === "http://www.w3.org/1999/xhtml") {
				metas.push([m.getAttribute("name") || "", m.getAttribute("content") || ""]);
			}
		}
		out[f.dataset.name] = metas;
	}
	document.getElementById("out").textContent = JSON.stringify(out);
});
</script></body></html>
`

// TestHeadInChromium loads a sample of the tricky pages (those of
// TestHeadAsBrowsersRead that a browser reads whole) in headless Chromium
// and compares what the meta elements of its document.head say with
// robotsgate's head reader: the same for every page, but for a <noscript>
// in the head, whose meta elements Chromium (scripting on) keeps as text
// and robotsgate reads as a reader without scripts does, and for an XHTML
// page without its xmlns, where Chromium finds no head and robotsgate
// reads the one written (the differences are asserted here, and
// documented in docs/data-teams.md). XHTML pages are served as
// application/xhtml+xml, which Chromium parses as XML.
func TestHeadInChromium(t *testing.T) {
	t.Parallel()
	browser := testkit.Browser()
	if browser == "" {
		t.Skip("no headless browser (chromium) on PATH: install the Debian package chromium to run this test")
	}
	cases := headtest.Cases(t)
	for name, c := range cases {
		if strings.HasPrefix(c.Rule, "html head: unreadable") {
			delete(cases, name) // about robotsgate's bounds, or a page a browser shows an error for
		}
	}
	for i, page := range []string{ // a few of TestHeadDifferential's
		"<html><frameset><meta name=robots content=noai>",
		"<head><title>&lt;/title&gt;<meta name=robots content=noai></title>",
		"<head><script><!--<script></script><meta name=robots content=noai>--></script><meta name=tdm-reservation content=1>",
		"<head><template><body><meta name=robots content=noai></template><meta name=tdm-reservation content=1>",
		"<head></head> <meta name=GPTBot content=noai><body><meta name=robots content=noindex>",
		"<head><meta name=robots content=noindex name=x><meta content=noai name=robots/>",
	} {
		cases[fmt.Sprintf("table-%d", i)] = headtest.Case{Page: headtest.HTMLPage([]byte(page))}
	}
	names := slices.Sorted(maps.Keys(cases))
	var frames strings.Builder
	for _, name := range names {
		fmt.Fprintf(&frames, "<iframe data-name=%q src=\"/page/%s\"></iframe>\n", name, name)
	}
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, chromiumHeadPage, frames.String())
			return
		}
		c, ok := cases[strings.TrimPrefix(r.URL.Path, "/page/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		c.Serve(w)
	}))
	t.Cleanup(o.Close)
	seen := chromiumHeads(t, browser, o.URL+"/")
	tokens := []string{"GPTBot"}
	for _, name := range names {
		metas, ok := seen[name]
		if !ok {
			t.Errorf("%s: Chromium loaded no head", name)
			continue
		}
		var browser usage.Usage
		for _, m := range metas {
			v := usage.MetaUsage(m[0], m[1], tokens)
			browser.Combine(&v)
		}
		page := cases[name].Page
		resp := &http.Response{StatusCode: 200, Header: page.Header.Clone(), Body: io.NopCloser(bytes.NewReader(page.Body))}
		got := NewReader(10*time.Second).Read(resp, tokens)
		if why, ok := chromiumDiffers[name]; ok {
			if browser != (usage.Usage{}) || got[usage.AITrain].State != usage.Refused {
				t.Errorf("%s: Chromium %s, robotsgate %s; want Chromium none (%s) and robotsgate refusing", name, usageString(browser), usageString(got), why)
			}
			continue
		}
		if got != browser {
			t.Errorf("%s: robotsgate %s; Chromium's document.head %s (%q)", name, usageString(got), usageString(browser), metas)
		}
	}
}

// chromiumDiffers are the pages whose head Chromium reads with no meta
// element in it and robotsgate with one that refuses, and why Chromium's
// has none.
var chromiumDiffers = map[string]string{
	"noscript":       "scripting on: text",
	"xhtml-no-xmlns": "no XHTML root element: no head",
}

// chromiumHeads loads url in headless Chromium and returns what its
// chromiumHeadPage collected: each frame's head's (name, content) pairs.
func chromiumHeads(t *testing.T, browser, url string) map[string][][2]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=10000", "--dump-dom", url)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --dump-dom: %v\n%.2000s", browser, err, stderr.String())
	}
	m := regexp.MustCompile(`(?s)<pre id="out">(.*?)</pre>`).FindSubmatch(out)
	if m == nil || len(m[1]) == 0 {
		t.Fatalf("Chromium's page collected nothing:\n%.3000s", out)
	}
	var seen map[string][][2]string
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &seen); err != nil {
		t.Fatalf("decode %q: %v", m[1], err)
	}
	return seen
}
