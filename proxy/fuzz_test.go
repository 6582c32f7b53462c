package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/xml"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/robotsgate/robotsgate/usage"
)

// FuzzProxyTarget sends request-targets through the real proxy to a
// lenient origin (see lenientOrigin) and fails if the origin serves a file
// that robots.txt disallows, or receives a target other than the one the
// client sent.
func FuzzProxyTarget(f *testing.F) {
	for _, tt := range redTeamTargets {
		f.Add(tt.target)
	}
	for _, s := range []string{"/", "/private/open", "/p/./../private", "/%2e%2e/private", "/private%2F", "/x/%2E%2E%5Cprivate", "/;/private", "/.secret"} {
		f.Add(s)
	}
	o := newLenientOrigin(f, nil, nil)
	p := startProxy(f, loopbackConfig())
	host := strings.TrimPrefix(o.URL, "http://")
	f.Fuzz(func(t *testing.T, target string) {
		if !strings.HasPrefix(target, "/") || strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r == 0x7F }) {
			return // not something a request line can carry
		}
		_, _, before := o.last()
		resp, _ := p.raw(t, "GET http://"+host+target+" HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		l := o.leakedSince(before)
		if strings.Contains(target, "?") {
			// The documented limit (docs/security.md, "What is not covered"): a "$" rule ends at
			// the end of the URL, query included, as Google matches it, so
			// "Disallow: /*.secret$" does not match "/x.secret?".
			l = slices.DeleteFunc(l, func(leak string) bool { return strings.HasSuffix(leak, ".secret\"") })
		}
		if len(l) > 0 {
			t.Fatalf("proxy answered %d, and the origin served disallowed files:\n%s", resp.StatusCode, strings.Join(l, "\n"))
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, got := range o.targets[before:] {
			if got != target && got != "/robots.txt" {
				t.Fatalf("sent %q; the origin received %q", target, got)
			}
		}
	})
}

// FuzzInnerStream sends any bytes into a tunnel, as requests inside it:
// whatever they are, no disallowed file is served, no answer is the 500
// of a panic, and the proxy answers or closes the tunnel once the client
// has sent all it will (its side closed), within a bound.
func FuzzInnerStream(f *testing.F) {
	o := newLenientOrigin(f, nil, nil)
	host := strings.TrimPrefix(o.URL, "http://")
	for _, s := range []string{
		"GET /public HTTP/1.1\r\nHost: H\r\n\r\n",
		"GET /private/x HTTP/1.1\r\nHost: H\r\n\r\nGET /public HTTP/1.1\r\nHost: H\r\n\r\n",
		"POST /private/x HTTP/1.1\r\nHost: H\r\nContent-Length: 33\r\n\r\nGET /private/y HTTP/1.1\r\nHost: H\r\n\r\n",
		"POST /public HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"POST /public HTTP/1.1\r\nHost: H\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /private/z HTTP/1.1\r\nHost: H\r\n\r\n",
		"GET /public HTTP/1.0\r\n\r\n",
		"GET /public HTTP/1.1\r\nHost: H\r\nExpect: 100-continue\r\n\r\n",
		"GET http://H/private/x HTTP/1.1\r\nHost: H\r\n\r\n",
		"CONNECT H HTTP/1.1\r\nHost: H\r\n\r\n",
	} {
		f.Add(strings.ReplaceAll(s, "H", host))
	}
	p := startProxy(f, loopbackConfig())
	f.Fuzz(func(t *testing.T, stream string) {
		if stream == "" || stream[0] < 'A' || stream[0] > 'Z' {
			return // not HTTP/1.x: closed at once (TestMITMGarbageInTunnelIsClosed)
		}
		_, _, before := o.last()
		resp, c, br := connect(t, p, host)
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %d", resp.StatusCode)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, stream)
		c.(*net.TCPConn).CloseWrite()
		for range 100 { // more answers than requests the bytes can hold
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("no answer and no close within 10 s of the client's end: %v", err)
				}
				break
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusInternalServerError {
				t.Fatalf("500: %s", body)
			}
		}
		if l := o.leakedSince(before); len(l) > 0 {
			t.Fatalf("the origin served disallowed files:\n%s", strings.Join(l, "\n"))
		}
	})
}

// FuzzReadHead reads any body, in any of the codings robotsgate reads a
// head through (or another), as a page whose head it must judge: no panic,
// the body then reads back exactly as sent, a head that could not be read
// refuses every purpose with a statement that says so, and a page sent
// as it is, UTF-8 and whole within the bound, is decided as html.Parse of
// the whole page decides it (TestHeadDifferential's oracle). Seeded from
// usage/source/testdata/usage and testdata/head.
func FuzzReadHead(f *testing.F) {
	page, err := os.ReadFile("../usage/source/testdata/usage/head.html")
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
		u := newHeadReader(time.Second).readHeadFor(resp, tokens)
		back, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(back, body) {
			t.Fatalf("the body after readHead: %d bytes, %v; want the %d sent", len(back), err, len(body))
		}
		unreadable := strings.HasPrefix(u[usage.AITrain].Statement, "html head: unreadable (")
		for p, v := range u {
			if v.State != usage.Unstated && !strings.HasPrefix(v.Statement, "meta ") && !strings.HasPrefix(v.Statement, "html head: unreadable (") ||
				unreadable && v.State != usage.Refused {
				t.Fatalf("readHead: %s = %+v", usage.Purpose(p), v)
			}
		}
		if strings.TrimSpace(coding) != "" || len(body) >= MaxHead || !utf8.Valid(body) ||
			bytes.Contains(bytes.ToLower(body), []byte("charset")) || bytes.HasPrefix(body, []byte("\xEF\xBB\xBF")) {
			return // decoded otherwise than html.Parse reads bytes, or not whole
		}
		want := headOracle(t, body, tokens)
		for p := range u {
			if u[p].State != want[p].State {
				t.Fatalf("readHead(%q) = %s; html.Parse says %s", body, usageString(u), usageString(want))
			}
		}
	})
}

// addPages seeds f with each page of testdata/head that pattern matches,
// sent as it is.
func addPages(f *testing.F, pattern string) {
	pages, err := filepath.Glob(filepath.Join("testdata", "head", pattern))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range pages {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "")
	}
}

// FuzzReadXHTMLHead reads any body, served as application/xhtml+xml in
// any coding, as a page whose head it must judge, with FuzzReadHead's
// checks; and a page sent as it is, UTF-8, whole within the bound and
// well-formed to its root's end, is decided as xhtmlOracle (a tree of the
// whole page) decides it. Seeded from testdata/head's XHTML pages.
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
		u := newHeadReader(time.Second).readHeadFor(resp, tokens)
		back, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(back, body) {
			t.Fatalf("the body after readHead: %d bytes, %v; want the %d sent", len(back), err, len(body))
		}
		unreadable := strings.HasPrefix(u[usage.AITrain].Statement, "html head: unreadable (")
		for p, v := range u {
			if v.State != usage.Unstated && !strings.HasPrefix(v.Statement, "meta ") && !strings.HasPrefix(v.Statement, "html head: unreadable (") ||
				unreadable && (v.State != usage.Refused || len(v.Statement) > 300) {
				t.Fatalf("readHead: %s = %+v", usage.Purpose(p), v)
			}
		}
		if strings.TrimSpace(coding) != "" || len(body) >= MaxHead || !utf8.Valid(body) || bytes.HasPrefix(body, []byte("\xEF\xBB\xBF")) {
			return // decoded otherwise than the oracle reads bytes, or not whole
		}
		want, ok := xhtmlOracle(body, tokens)
		if ok && u != want {
			t.Fatalf("readHead(%q) = %s; the tree says %s", body, usageString(u), usageString(want))
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
