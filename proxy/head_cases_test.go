package proxy

import (
	"bytes"
	"compress/gzip"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/robotsgate/robotsgate/proxy/policy"
)

// headPage is a page a test origin serves: its fields and its body as
// sent.
type headPage struct {
	header http.Header
	body   []byte
}

// readHeadPage reads testdata/head/name.
func readHeadPage(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "head", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// utf16LE encodes s as UTF-16LE, without a byte order mark.
func utf16LE(s string) []byte {
	var b []byte
	for _, u := range utf16.Encode([]rune(s)) {
		b = append(b, byte(u), byte(u>>8))
	}
	return b
}

// gzipSlow gzip-encodes page after prefix and flushes empty blocks in
// between, flushes times: the encoded body grows by some 5 bytes a flush
// while its decoded bytes do not.
func gzipSlow(prefix, page string, flushes int) []byte {
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte(prefix))
	for range flushes {
		zw.Flush()
	}
	zw.Write([]byte(page))
	zw.Close()
	return zb.Bytes()
}

// htmlPage is a text/html page served as UTF-8, with fields (name,
// value, …) replacing its own (a name repeated adds a field line).
func htmlPage(body []byte, fields ...string) headPage {
	h := http.Header{"Content-Type": {"text/html; charset=utf-8"}}
	for i := 0; i+1 < len(fields); i += 2 {
		if i == 0 || fields[i] != fields[i-2] {
			delete(h, fields[i])
		}
		h.Add(fields[i], fields[i+1])
	}
	return headPage{header: h, body: body}
}

// xhtmlPage is an application/xhtml+xml page, with fields (name, value,
// …) replacing its own, as htmlPage's.
func xhtmlPage(body []byte, fields ...string) headPage {
	p := htmlPage(body, fields...)
	if len(fields) == 0 || fields[0] != "Content-Type" {
		p.header.Set("Content-Type", "application/xhtml+xml")
	}
	return p
}

// headCases are the pages of the issue whose meta elements a browser
// puts in the head (and a few it does not), with robotsgate's answer to a
// request that declares ai-train: 403 with the rule, or 200.
func headCases(t testing.TB) map[string]struct {
	page   headPage
	status int
	rule   string
} {
	noai := `<!DOCTYPE html><html><head><title>t</title><meta name="robots" content="noai"></head><body>secret</body></html>`
	utf16Page := string(readHeadPage(t, "utf16.html"))
	type c = struct {
		page   headPage
		status int
		rule   string
	}
	return map[string]c{
		// A meta after </head>, before <body>: the tree builder puts it in the head.
		"after-head": {htmlPage(readHeadPage(t, "after-head.html")), 403, "meta robots: noai"},
		// Elements the head holds, before the meta.
		"basefont": {htmlPage(readHeadPage(t, "basefont.html")), 403, "meta robots: noai"},
		"bgsound":  {htmlPage(readHeadPage(t, "bgsound.html")), 403, "meta tdm-reservation: 1"},
		"noframes": {htmlPage(readHeadPage(t, "noframes.html")), 403, "meta robots: noai"},
		// Whitespace written as character references.
		"charref": {htmlPage(readHeadPage(t, "charref.html")), 403, "meta robots: noai"},
		// A meta in a <noscript> in the head: the head's for a reader
		// without scripts (see TestHeadInChromium for Chromium's).
		"noscript": {htmlPage(readHeadPage(t, "noscript.html")), 403, "meta robots: noai"},
		// UTF-16 named by Content-Type alone, no byte order mark.
		"utf16": {htmlPage(utf16LE(utf16Page), "Content-Type", "text/html; charset=utf-16"), 403, "meta robots: noai"},
		// Two Content-Type fields: browsers read the last.
		"two-types": {htmlPage([]byte(noai), "Content-Type", "text/plain", "Content-Type", "text/html"), 403, "meta robots: noai"},
		"two-charsets": {htmlPage(utf16LE(utf16Page), "Content-Type", "text/html; charset=utf-8", "Content-Type", "text/html; charset=utf-16"),
			403, "meta robots: noai"},
		// A gzip body whose first 128 KiB decode to a doctype: the head is
		// not known where robotsgate stops reading.
		"gzip-slow": {htmlPage(gzipSlow("<!DOCTYPE html>", noai, 30_000), "Content-Encoding", "gzip"),
			403, "html head: unreadable (the head did not end within the first 128 KiB sent)"},
		// The same under the bound is read through.
		"gzip-slow-short": {htmlPage(gzipSlow("<!DOCTYPE html>", noai, 10_000), "Content-Encoding", "gzip"), 403, "meta robots: noai"},
		// A head longer than robotsgate reads: not known, refused.
		"long-head": {htmlPage([]byte("<html><head><script>" + strings.Repeat("var x = 1;\n", 7000) + "</script>" + noai[len("<!DOCTYPE html><html><head>"):])),
			403, "html head: unreadable (the head did not end within the first 64 KiB)"},
		// A page that ends in its head: all of it read.
		"ends-in-head": {htmlPage([]byte(`<html><head><meta name="robots" content="noai">`)), 403, "meta robots: noai"},
		// A label no encoding has is passed over; the replacement
		// encoding decodes to nothing anyone can read.
		"unknown-charset": {htmlPage([]byte(noai), "Content-Type", "text/html; charset=x-nonsense"), 403, "meta robots: noai"},
		"replacement":     {htmlPage([]byte(noai), "Content-Type", "text/html; charset=iso-2022-kr"), 403, "html head: unreadable (the replacement encoding)"},
		// Raw text that says </head> or <body> does not end the head.
		"raw-text":       {htmlPage(readHeadPage(t, "raw-text.html")), 403, "meta robots: noai"},
		"after-template": {htmlPage(readHeadPage(t, "after-template.html")), 403, "meta robots: noai"},
		// Not the head's: a template's content, the body's, after text.
		"template":            {htmlPage(readHeadPage(t, "template.html")), 200, ""},
		"body-meta":           {htmlPage(readHeadPage(t, "body-meta.html")), 200, ""},
		"nbsp":                {htmlPage(readHeadPage(t, "nbsp.html")), 200, ""},
		"noscript-after-head": {htmlPage(readHeadPage(t, "noscript-after-head.html")), 200, ""},

		// application/xhtml+xml is parsed as XML: a <title/> ends itself,
		// text does not end the head, nothing but </head> does.
		"xhtml-title":         {xhtmlPage(readHeadPage(t, "xhtml-title.xhtml")), 403, "meta robots: noai"},
		"xhtml-text":          {xhtmlPage(readHeadPage(t, "xhtml-text.xhtml")), 403, "meta robots: noai"},
		"xhtml-self-closing":  {xhtmlPage(readHeadPage(t, "xhtml-self-closing.xhtml")), 403, "meta robots: noai"},
		"xhtml-nested":        {xhtmlPage(readHeadPage(t, "xhtml-nested.xhtml")), 403, "meta robots: noai"},
		"xhtml-prefixed":      {xhtmlPage(readHeadPage(t, "xhtml-prefixed.xhtml")), 403, "meta tdm-reservation: 1"},
		"xhtml-body-first":    {xhtmlPage(readHeadPage(t, "xhtml-body-first.xhtml")), 403, "meta robots: noai"},
		"xhtml-nbsp-doctype":  {xhtmlPage(readHeadPage(t, "xhtml-nbsp-doctype.xhtml")), 403, "meta robots: noai"},
		"xhtml-latin1":        {xhtmlPage(readHeadPage(t, "xhtml-latin1.xhtml")), 403, "meta robots: noai"},
		"xhtml-charset-label": {xhtmlPage(utf16LE(string(readHeadPage(t, "xhtml-title.xhtml"))), "Content-Type", "application/xhtml+xml; charset=utf-16le"), 403, "meta robots: noai"},
		"xhtml-gzip": {xhtmlPage(gzipSlow("", string(readHeadPage(t, "xhtml-title.xhtml")), 0), "Content-Encoding", "gzip"),
			403, "meta robots: noai"},
		// The head is the root's first head child, whatever the root.
		"xhtml-svg": {xhtmlPage(readHeadPage(t, "xhtml-svg.xhtml")), 403, "meta robots: noai"},
		// A page that forgot its xmlns: Chromium finds no head, robotsgate
		// reads the one its author wrote (see TestHeadInChromium).
		"xhtml-no-xmlns": {xhtmlPage(readHeadPage(t, "xhtml-no-xmlns.xhtml")), 403, "meta robots: noai"},
		// Not the head's: after </head>, the body's, a template's content,
		// another namespace's meta or one whose attribute names are not
		// name and content.
		"xhtml-after-head": {xhtmlPage(readHeadPage(t, "xhtml-after-head.xhtml")), 200, ""},
		"xhtml-body-meta":  {xhtmlPage(readHeadPage(t, "xhtml-body-meta.xhtml")), 200, ""},
		"xhtml-template":   {xhtmlPage(readHeadPage(t, "xhtml-template.xhtml")), 200, ""},
		"xhtml-not-meta":   {xhtmlPage(readHeadPage(t, "xhtml-not-meta.xhtml")), 200, ""},
		// Well-formed up to the head's end: judged on the head.
		"xhtml-malformed-after-head": {xhtmlPage(readHeadPage(t, "xhtml-malformed-after-head.xhtml")), 403, "meta robots: noai"},
		// Not well-formed before the head ends (a browser shows an error),
		// an entity only the DOCTYPE defines, an encoding no one reads, a
		// head that did not end within the bound: unreadable, refused.
		"xhtml-malformed": {xhtmlPage(readHeadPage(t, "xhtml-malformed.xhtml")),
			403, "html head: unreadable (not well-formed XML: line 2: element <p> closed by </div>)"},
		"xhtml-dup-attr": {xhtmlPage(readHeadPage(t, "xhtml-dup-attr.xhtml")),
			403, "html head: unreadable (not well-formed XML: attribute name twice)"},
		"xhtml-nbsp": {xhtmlPage(readHeadPage(t, "xhtml-nbsp.xhtml")),
			403, "html head: unreadable (not well-formed XML: line 3: invalid character entity &nbsp;)"},
		"xhtml-entity": {xhtmlPage(readHeadPage(t, "xhtml-entity.xhtml")),
			403, "html head: unreadable (not well-formed XML: line 3: invalid character entity &robots;)"},
		"xhtml-ends-in-head": {xhtmlPage([]byte(`<html xmlns="http://www.w3.org/1999/xhtml"><head><meta name="robots" content="noai"/>`)),
			403, "html head: unreadable (not well-formed XML: line 1: unexpected EOF)"},
		"xhtml-replacement": {xhtmlPage(readHeadPage(t, "xhtml-title.xhtml"), "Content-Type", "application/xhtml+xml; charset=iso-2022-kr"),
			403, "html head: unreadable (the replacement encoding)"},
		"xhtml-long-head": {xhtmlPage([]byte(`<html xmlns="http://www.w3.org/1999/xhtml"><head><script>` + strings.Repeat("var x = 1;\n", 7000) + `</script></head><body>secret</body></html>`)),
			403, "html head: unreadable (the head did not end within the first 64 KiB)"},
		// Bounds of a hostile head's cost: tokens, depth.
		"xhtml-many-tokens": {xhtmlPage([]byte(`<html xmlns="http://www.w3.org/1999/xhtml"><head>` + strings.Repeat("<link/>", 5000) + `</head><body>secret</body></html>`)),
			403, "html head: unreadable (the head did not end within 4096 XML tokens)"},
		"xhtml-deep": {xhtmlPage([]byte(`<html xmlns="http://www.w3.org/1999/xhtml"><head>` + strings.Repeat("<div>", 1100) + strings.Repeat("</div>", 1100) + `</head><body>secret</body></html>`)),
			403, "html head: unreadable (elements nested deeper than 1024)"},
	}
}

// TestHeadAsBrowsersRead: through the proxy, a request that declares
// ai-train is refused for every page whose head, as a browser builds it,
// holds a meta element that refuses it, and for every page whose head
// cannot be known within robotsgate's bounds; the pages whose head holds
// none are delivered whole.
func TestHeadAsBrowsersRead(t *testing.T) {
	t.Parallel()
	cases := headCases(t)
	o := newTestOrigin(t, "User-agent: *\nDisallow: /private\n", func(w http.ResponseWriter, r *http.Request) {
		c, ok := cases[strings.TrimPrefix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		for k, v := range c.page.header {
			w.Header()[k] = v
		}
		w.Write(c.page.body)
	})
	p := startProxy(t, loopbackConfig())
	c := p.client()
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		tt := cases[name]
		t.Run(name, func(t *testing.T) {
			resp, body := get(t, c, o.URL+"/"+name, policy.PurposeHeader, "ai-train", "Accept-Encoding", "gzip")
			if resp.StatusCode != tt.status || resp.Header.Get("X-Robots-Gate-Rule") != tt.rule {
				t.Errorf("%s for ai-train: %d %q; want %d %q", name, resp.StatusCode, resp.Header.Get("X-Robots-Gate-Rule"), tt.status, tt.rule)
			}
			if tt.status == 403 && strings.Contains(body, "secret") {
				t.Errorf("%s: the withheld body reached the client", name)
			}
			if tt.status == 200 && body != string(tt.page.body) {
				t.Errorf("%s: %d bytes delivered; want the %d sent, byte for byte", name, len(body), len(tt.page.body))
			}
			// With no purpose declared the head is not read: the page passes.
			if resp, body := get(t, c, o.URL+"/"+name, "Accept-Encoding", "gzip"); resp.StatusCode != 200 || body != string(tt.page.body) {
				t.Errorf("%s with no purpose: %d, %d bytes; want 200 and the page", name, resp.StatusCode, len(body))
			}
		})
	}
}

// TestHeadHostileOrigin: an origin cannot make the head reader read
// without end or wait without end: a gzip bomb whose head never ends is
// refused once 64 KiB are decoded, the origin's writes then failing (the
// proxy read no further); a page that stalls in its head is refused when
// upstream.timeout is up, and one that stalls after it (HTML or XHTML)
// is judged on it.
func TestHeadHostileOrigin(t *testing.T) {
	t.Parallel()
	bombEnded := make(chan error, 1)
	o := newTestOrigin(t, "User-agent: *\n", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/bomb": // 1 GiB of a title, some 1 MiB gzip-encoded
			w.Header().Set("Content-Encoding", "gzip")
			zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
			zw.Write([]byte("<html><head><title>"))
			chunk := bytes.Repeat([]byte("a"), 1<<20)
			var err error
			for i := 0; i < 1<<10 && err == nil; i++ {
				_, err = zw.Write(chunk)
			}
			if err == nil {
				err = zw.Close()
			}
			bombEnded <- err
		case "/stall":
			w.Write([]byte("<html><head><title>a title"))
			w.(http.Flusher).Flush()
			<-r.Context().Done() // until the proxy gives up on it
		case "/stall-after-head": // its charset named: no prescan waits for 1024 bytes
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte(`<html><head><meta name="robots" content="noai"></head><body>`))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case "/stall-after-xhtml-head": // the XML reader reads nothing past </head> either
			w.Header().Set("Content-Type", "application/xhtml+xml")
			w.Write([]byte(`<html xmlns="http://www.w3.org/1999/xhtml"><head><meta name="robots" content="noai"/></head>`))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	})
	cfg := loopbackConfig()
	// The head's time bound is the upstream timeout. Under -race on a busy
	// machine 1 s was too short for robots.txt and a response's header to
	// arrive before it (a 504); 3 s still ends the stalls the test is about.
	cfg.Upstream.Timeout = 3 * time.Second
	p := startProxy(t, cfg)
	c := p.client()
	resp, _ := get(t, c, o.URL+"/bomb", policy.PurposeHeader, "ai-train", "Accept-Encoding", "gzip")
	if want := "html head: unreadable (the head did not end within the first 64 KiB)"; resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate-Rule") != want {
		t.Errorf("gzip bomb: %d %q; want 403 %q", resp.StatusCode, resp.Header.Get("X-Robots-Gate-Rule"), want)
	}
	select {
	case err := <-bombEnded:
		if err == nil {
			t.Error("the origin wrote its whole gzip bomb: the proxy read it to the end")
		}
	case <-time.After(30 * time.Second):
		t.Error("the origin is still writing its gzip bomb 30 s after the answer")
	}
	resp, _ = get(t, c, o.URL+"/stall", policy.PurposeHeader, "ai-train")
	if want := "html head: unreadable (not read within 3s)"; resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate-Rule") != want {
		t.Errorf("a stalled head: %d %q; want 403 %q", resp.StatusCode, resp.Header.Get("X-Robots-Gate-Rule"), want)
	}
	// A page that stalls after its head is judged on its head.
	for _, path := range []string{"/stall-after-head", "/stall-after-xhtml-head"} {
		resp, _ = get(t, c, o.URL+path, policy.PurposeHeader, "ai-train")
		if want := "meta robots: noai"; resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate-Rule") != want {
			t.Errorf("%s, stalled after its head: %d %q; want 403 %q", path, resp.StatusCode, resp.Header.Get("X-Robots-Gate-Rule"), want)
		}
	}
}
