// Package headtest holds the pages the head reader's tests (package head)
// and the proxy's tests of head reading share: the pages of
// testdata/, and Cases, the pages of issue 34 whose meta elements a
// browser puts in the head (and a few it does not), with robotsgate's
// answer to a request that declares ai-train. Only tests import it.
package headtest

import (
	"bytes"
	"compress/gzip"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"testing"
	"unicode/utf16"
)

// pages are testdata's pages: HTML (.html) and XHTML (.xhtml) heads.
//
//go:embed testdata
var pages embed.FS

// Page is a page a test origin serves: its fields and its body as sent.
type Page struct {
	Header http.Header
	Body   []byte
}

// Case is a page and robotsgate's answer to a request for it that
// declares ai-train: 403 with the rule (X-Robots-Gate-Rule), or 200 and
// no rule.
type Case struct {
	Page   Page
	Status int
	Rule   string
}

// Serve answers with the case's page: its header fields and body.
func (c Case) Serve(w http.ResponseWriter) {
	for k, v := range c.Page.Header {
		w.Header()[k] = v
	}
	w.Write(c.Page.Body)
}

// File returns testdata/name.
func File(t testing.TB, name string) []byte {
	t.Helper()
	b, err := pages.ReadFile(path.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Files returns the pages of testdata whose names pattern matches
// (path.Match), in the order of their names.
func Files(t testing.TB, pattern string) [][]byte {
	t.Helper()
	names, err := fs.Glob(pages, path.Join("testdata", pattern))
	if err != nil {
		t.Fatal(err)
	}
	var files [][]byte
	for _, name := range names {
		files = append(files, File(t, path.Base(name)))
	}
	return files
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

// HTMLPage is a text/html page served as UTF-8, with fields (name,
// value, …) replacing its own (a name repeated adds a field line).
func HTMLPage(body []byte, fields ...string) Page {
	h := http.Header{"Content-Type": {"text/html; charset=utf-8"}}
	for i := 0; i+1 < len(fields); i += 2 {
		if i == 0 || fields[i] != fields[i-2] {
			delete(h, fields[i])
		}
		h.Add(fields[i], fields[i+1])
	}
	return Page{Header: h, Body: body}
}

// XHTMLPage is an application/xhtml+xml page, with fields (name, value,
// …) replacing its own, as HTMLPage's.
func XHTMLPage(body []byte, fields ...string) Page {
	p := HTMLPage(body, fields...)
	if len(fields) == 0 || fields[0] != "Content-Type" {
		p.Header.Set("Content-Type", "application/xhtml+xml")
	}
	return p
}

// Cases are the pages of the issue whose meta elements a browser puts in
// the head (and a few it does not), by name, with robotsgate's answer to
// a request that declares ai-train: 403 with the rule, or 200.
func Cases(t testing.TB) map[string]Case {
	noai := `<!DOCTYPE html><html><head><title>t</title><meta name="robots" content="noai"></head><body>secret</body></html>`
	utf16Page := string(File(t, "utf16.html"))
	return map[string]Case{
		// A meta after </head>, before <body>: the tree builder puts it in the head.
		"after-head": {HTMLPage(File(t, "after-head.html")), 403, "meta robots: noai"},
		// Elements the head holds, before the meta.
		"basefont": {HTMLPage(File(t, "basefont.html")), 403, "meta robots: noai"},
		"bgsound":  {HTMLPage(File(t, "bgsound.html")), 403, "meta tdm-reservation: 1"},
		"noframes": {HTMLPage(File(t, "noframes.html")), 403, "meta robots: noai"},
		// Whitespace written as character references.
		"charref": {HTMLPage(File(t, "charref.html")), 403, "meta robots: noai"},
		// A meta in a <noscript> in the head: the head's for a reader
		// without scripts (see TestHeadInChromium for Chromium's).
		"noscript": {HTMLPage(File(t, "noscript.html")), 403, "meta robots: noai"},
		// UTF-16 named by Content-Type alone, no byte order mark.
		"utf16": {HTMLPage(utf16LE(utf16Page), "Content-Type", "text/html; charset=utf-16"), 403, "meta robots: noai"},
		// Two Content-Type fields: browsers read the last.
		"two-types": {HTMLPage([]byte(noai), "Content-Type", "text/plain", "Content-Type", "text/html"), 403, "meta robots: noai"},
		"two-charsets": {HTMLPage(utf16LE(utf16Page), "Content-Type", "text/html; charset=utf-8", "Content-Type", "text/html; charset=utf-16"),
			403, "meta robots: noai"},
		// A gzip body whose first 128 KiB decode to a doctype: the head is
		// not known where robotsgate stops reading.
		"gzip-slow": {HTMLPage(gzipSlow("<!DOCTYPE html>", noai, 30_000), "Content-Encoding", "gzip"),
			403, "html head: unreadable (the head did not end within the first 128 KiB sent)"},
		// The same under the bound is read through.
		"gzip-slow-short": {HTMLPage(gzipSlow("<!DOCTYPE html>", noai, 10_000), "Content-Encoding", "gzip"), 403, "meta robots: noai"},
		// A head longer than robotsgate reads: not known, refused.
		"long-head": {HTMLPage([]byte("<html><head><script>" + strings.Repeat("var x = 1;\n", 7000) + "</script>" + noai[len("<!DOCTYPE html><html><head>"):])),
			403, "html head: unreadable (the head did not end within the first 64 KiB)"},
		// A page that ends in its head: all of it read.
		"ends-in-head": {HTMLPage([]byte(`<html><head><meta name="robots" content="noai">`)), 403, "meta robots: noai"},
		// A label no encoding has is passed over; the replacement
		// encoding decodes to nothing anyone can read.
		"unknown-charset": {HTMLPage([]byte(noai), "Content-Type", "text/html; charset=x-nonsense"), 403, "meta robots: noai"},
		"replacement":     {HTMLPage([]byte(noai), "Content-Type", "text/html; charset=iso-2022-kr"), 403, "html head: unreadable (the replacement encoding)"},
		// Raw text that says </head> or <body> does not end the head.
		"raw-text":       {HTMLPage(File(t, "raw-text.html")), 403, "meta robots: noai"},
		"after-template": {HTMLPage(File(t, "after-template.html")), 403, "meta robots: noai"},
		// Not the head's: a template's content, the body's, after text.
		"template":            {HTMLPage(File(t, "template.html")), 200, ""},
		"body-meta":           {HTMLPage(File(t, "body-meta.html")), 200, ""},
		"nbsp":                {HTMLPage(File(t, "nbsp.html")), 200, ""},
		"noscript-after-head": {HTMLPage(File(t, "noscript-after-head.html")), 200, ""},

		// application/xhtml+xml is parsed as XML: a <title/> ends itself,
		// text does not end the head, nothing but </head> does.
		"xhtml-title":         {XHTMLPage(File(t, "xhtml-title.xhtml")), 403, "meta robots: noai"},
		"xhtml-text":          {XHTMLPage(File(t, "xhtml-text.xhtml")), 403, "meta robots: noai"},
		"xhtml-self-closing":  {XHTMLPage(File(t, "xhtml-self-closing.xhtml")), 403, "meta robots: noai"},
		"xhtml-nested":        {XHTMLPage(File(t, "xhtml-nested.xhtml")), 403, "meta robots: noai"},
		"xhtml-prefixed":      {XHTMLPage(File(t, "xhtml-prefixed.xhtml")), 403, "meta tdm-reservation: 1"},
		"xhtml-body-first":    {XHTMLPage(File(t, "xhtml-body-first.xhtml")), 403, "meta robots: noai"},
		"xhtml-nbsp-doctype":  {XHTMLPage(File(t, "xhtml-nbsp-doctype.xhtml")), 403, "meta robots: noai"},
		"xhtml-latin1":        {XHTMLPage(File(t, "xhtml-latin1.xhtml")), 403, "meta robots: noai"},
		"xhtml-charset-label": {XHTMLPage(utf16LE(string(File(t, "xhtml-title.xhtml"))), "Content-Type", "application/xhtml+xml; charset=utf-16le"), 403, "meta robots: noai"},
		"xhtml-gzip": {XHTMLPage(gzipSlow("", string(File(t, "xhtml-title.xhtml")), 0), "Content-Encoding", "gzip"),
			403, "meta robots: noai"},
		// The head is the root's first head child, whatever the root.
		"xhtml-svg": {XHTMLPage(File(t, "xhtml-svg.xhtml")), 403, "meta robots: noai"},
		// A page that forgot its xmlns: Chromium finds no head, robotsgate
		// reads the one its author wrote (see TestHeadInChromium).
		"xhtml-no-xmlns": {XHTMLPage(File(t, "xhtml-no-xmlns.xhtml")), 403, "meta robots: noai"},
		// Not the head's: after </head>, the body's, a template's content,
		// another namespace's meta or one whose attribute names are not
		// name and content.
		"xhtml-after-head": {XHTMLPage(File(t, "xhtml-after-head.xhtml")), 200, ""},
		"xhtml-body-meta":  {XHTMLPage(File(t, "xhtml-body-meta.xhtml")), 200, ""},
		"xhtml-template":   {XHTMLPage(File(t, "xhtml-template.xhtml")), 200, ""},
		"xhtml-not-meta":   {XHTMLPage(File(t, "xhtml-not-meta.xhtml")), 200, ""},
		// Well-formed up to the head's end: judged on the head.
		"xhtml-malformed-after-head": {XHTMLPage(File(t, "xhtml-malformed-after-head.xhtml")), 403, "meta robots: noai"},
		// Not well-formed before the head ends (a browser shows an error),
		// an entity only the DOCTYPE defines, an encoding no one reads, a
		// head that did not end within the bound: unreadable, refused.
		"xhtml-malformed": {XHTMLPage(File(t, "xhtml-malformed.xhtml")),
			403, "html head: unreadable (not well-formed XML: line 2: element <p> closed by </div>)"},
		"xhtml-dup-attr": {XHTMLPage(File(t, "xhtml-dup-attr.xhtml")),
			403, "html head: unreadable (not well-formed XML: attribute name twice)"},
		"xhtml-nbsp": {XHTMLPage(File(t, "xhtml-nbsp.xhtml")),
			403, "html head: unreadable (not well-formed XML: line 3: invalid character entity &nbsp;)"},
		"xhtml-entity": {XHTMLPage(File(t, "xhtml-entity.xhtml")),
			403, "html head: unreadable (not well-formed XML: line 3: invalid character entity &robots;)"},
		"xhtml-ends-in-head": {XHTMLPage([]byte(`<html xmlns="http://www.w3.org/1999/xhtml"><head><meta name="robots" content="noai"/>`)),
			403, "html head: unreadable (not well-formed XML: line 1: unexpected EOF)"},
		"xhtml-replacement": {XHTMLPage(File(t, "xhtml-title.xhtml"), "Content-Type", "application/xhtml+xml; charset=iso-2022-kr"),
			403, "html head: unreadable (the replacement encoding)"},
		"xhtml-long-head": {XHTMLPage([]byte(`<html xmlns="http://www.w3.org/1999/xhtml"><head><script>` + strings.Repeat("var x = 1;\n", 7000) + `</script></head><body>secret</body></html>`)),
			403, "html head: unreadable (the head did not end within the first 64 KiB)"},
		// Bounds of a hostile head's cost: tokens, depth.
		"xhtml-many-tokens": {XHTMLPage([]byte(`<html xmlns="http://www.w3.org/1999/xhtml"><head>` + strings.Repeat("<link/>", 5000) + `</head><body>secret</body></html>`)),
			403, "html head: unreadable (the head did not end within 4096 XML tokens)"},
		"xhtml-deep": {XHTMLPage([]byte(`<html xmlns="http://www.w3.org/1999/xhtml"><head>` + strings.Repeat("<div>", 1100) + strings.Repeat("</div>", 1100) + `</head><body>secret</body></html>`)),
			403, "html head: unreadable (elements nested deeper than 1024)"},
	}
}
