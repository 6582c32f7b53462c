package head

import (
	"bytes"
	"compress/gzip"
	"encoding/xml"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/robotsgate/robotsgate/proxy/head/headtest"
	"github.com/robotsgate/robotsgate/usage"
)

// FuzzReadHead reads any body, in any of the codings robotsgate reads a
// head through (or another), as a page whose head it must judge: no panic,
// the body then reads back exactly as sent, a head that could not be read
// refuses every purpose with a statement that says so, and a page sent
// as it is, UTF-8 and whole within the bound, is decided as html.Parse of
// the whole page decides it (TestHeadDifferential's oracle). Seeded from
// usage/source/testdata/usage and headtest's pages.
func FuzzReadHead(f *testing.F) {
	page, err := os.ReadFile("../../usage/source/testdata/usage/head.html")
	if err != nil {
		f.Fatal(err)
	}
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(page)
	zw.Close()
	f.Add(page, "")
	f.Add(zb.Bytes(), "gzip")
	f.Add(zb.Bytes()[:40], "gzip")
	f.Add([]byte("\x78\x9c\x01\x00\x00\xff\xff"), "deflate")
	f.Add([]byte("\x28\xb5\x2f\xfd"), "zstd")
	f.Add(page, "br")
	addPages(f, "*.html")
	f.Fuzz(func(t *testing.T, body []byte, coding string) {
		resp := &http.Response{Header: http.Header{"Content-Encoding": {coding}}, Body: io.NopCloser(bytes.NewReader(body))}
		tokens := []string{"GPTBot"}
		u := readBack(t, resp, body, tokens, 0)
		if strings.TrimSpace(coding) != "" || len(body) >= maxHead || !utf8.Valid(body) ||
			bytes.Contains(bytes.ToLower(body), []byte("charset")) || bytes.HasPrefix(body, []byte("\xEF\xBB\xBF")) {
			return // decoded otherwise than html.Parse reads bytes, or not whole
		}
		want := headOracle(t, body, tokens)
		for p := range u {
			if u[p].State != want[p].State {
				t.Fatalf("Read(%q) = %s; html.Parse says %s", body, usageString(u), usageString(want))
			}
		}
	})
}

// addPages seeds f with each page of headtest's that pattern matches,
// sent as it is.
func addPages(f *testing.F, pattern string) {
	for _, b := range headtest.Files(f, pattern) {
		f.Add(b, "")
	}
}

// FuzzReadXHTMLHead reads any body, served as application/xhtml+xml in
// any coding, as a page whose head it must judge, with FuzzReadHead's
// checks; and a page sent as it is, UTF-8, whole within the bound and
// well-formed to its root's end, is decided as xhtmlOracle (a tree of the
// whole page) decides it. Seeded from headtest's XHTML pages.
func FuzzReadXHTMLHead(f *testing.F) {
	addPages(f, "*.xhtml")
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte(`<html xmlns="http://www.w3.org/1999/xhtml"><head><title/><meta name="robots" content="noai"/></head></html>`))
	zw.Close()
	f.Add(zb.Bytes(), "gzip")
	f.Add([]byte(`<?xml version="1.0" encoding="`+strings.Repeat("x", 500)+`"?><html/>`), "")
	f.Add([]byte(`<html xmlns="http://www.w3.org/1999/xhtml"><head><`+strings.Repeat("é", 300)+`></a></head></html>`), "")
	f.Fuzz(func(t *testing.T, body []byte, coding string) {
		resp := &http.Response{Header: http.Header{"Content-Type": {xhtmlType}, "Content-Encoding": {coding}}, Body: io.NopCloser(bytes.NewReader(body))}
		tokens := []string{"GPTBot"}
		u := readBack(t, resp, body, tokens, 300)
		if strings.TrimSpace(coding) != "" || len(body) >= maxHead || !utf8.Valid(body) || bytes.HasPrefix(body, []byte("\xEF\xBB\xBF")) {
			return // decoded otherwise than the oracle reads bytes, or not whole
		}
		want, ok := xhtmlOracle(body, tokens)
		if ok && u != want {
			t.Fatalf("Read(%q) = %s; the tree says %s", body, usageString(u), usageString(want))
		}
	})
}

// xhtmlNode is an element of xhtmlOracle's tree.
type xhtmlNode struct {
	name xml.Name
	attr []xml.Attr
	kids []*xhtmlNode
}

// xhtmlOracle builds the tree of page's root element with encoding/xml
// (no named entity but XML's) and returns what the meta elements of its
// head say for tokens: those under the root's first head child, not in
// a template, HTML's elements being the XHTML namespace's (and no
// namespace's under a root html of none). ok is false when page is not
// well-formed to its root's end, or has more than readXHTMLHeadOf reads.
func xhtmlOracle(page []byte, tokens []string) (u usage.Usage, ok bool) {
	d := xml.NewDecoder(bytes.NewReader(page))
	var stack []*xhtmlNode
	var root *xhtmlNode
	for root == nil || len(stack) > 0 {
		tok, err := d.Token()
		if err != nil {
			return u, false
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if len(stack) == maxXHTMLDepth || uniqueAttrs(tok.Attr) != nil {
				return u, false
			}
			n := &xhtmlNode{name: tok.Name, attr: slices.Clone(tok.Attr)}
			if len(stack) == 0 {
				root = n
			} else {
				top := stack[len(stack)-1]
				top.kids = append(top.kids, n)
			}
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if root == nil && len(bytes.Trim(tok, " \t\r\n")) > 0 {
				return u, false
			}
		}
	}
	lenient := root.name == xml.Name{Local: "html"}
	isHTML := func(n *xhtmlNode, local string) bool {
		return n.name.Local == local && (n.name.Space == xhtmlNS || lenient && n.name.Space == "")
	}
	var metas func(n *xhtmlNode)
	metas = func(n *xhtmlNode) {
		for _, k := range n.kids {
			switch {
			case isHTML(k, "template"):
			case isHTML(k, "meta"):
				var name, content string
				for _, a := range k.attr {
					switch a.Name {
					case xml.Name{Local: "name"}:
						name = a.Value
					case xml.Name{Local: "content"}:
						content = a.Value
					}
				}
				if name != "" {
					v := usage.MetaUsage(name, content, tokens)
					u.Combine(&v)
				}
				metas(k)
			default:
				metas(k)
			}
		}
	}
	for _, k := range root.kids {
		if isHTML(k, "head") {
			metas(k)
			break
		}
	}
	return u, true
}

// readBack is what both fuzz targets check of every body: Read gives
// the body back whole, and says only what a meta element stated, or that
// the head was unreadable, refusing every purpose then (with a statement
// of at most maxStatement bytes, when maxStatement > 0).
func readBack(t *testing.T, resp *http.Response, body []byte, tokens []string, maxStatement int) usage.Usage {
	t.Helper()
	u := NewReader(time.Second).Read(resp, tokens)
	back, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(back, body) {
		t.Fatalf("the body after Read: %d bytes, %v; want the %d sent", len(back), err, len(body))
	}
	unreadable := strings.HasPrefix(u[usage.AITrain].Statement, "html head: unreadable (")
	for p, v := range u {
		if v.State != usage.Unstated && !strings.HasPrefix(v.Statement, "meta ") && !strings.HasPrefix(v.Statement, "html head: unreadable (") ||
			unreadable && (v.State != usage.Refused || maxStatement > 0 && len(v.Statement) > maxStatement) {
			t.Fatalf("Read: %s = %+v", usage.Purpose(p), v)
		}
	}
	return u
}
