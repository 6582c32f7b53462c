package head

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/robotsgate/robotsgate/usage"
	"golang.org/x/net/html/charset"
	"golang.org/x/text/transform"
)

// xhtmlType is the media type browsers parse as XML whose head robotsgate
// reads (policy.NeedsHead routes it here): readXHTMLHeadOf, not the HTML
// standard's tree construction, reads it.
const xhtmlType = "application/xhtml+xml"

// xhtmlNS is the namespace of HTML elements (the XHTML namespace).
const xhtmlNS = "http://www.w3.org/1999/xhtml"

// xmlSpace is XML's white space (the S production).
const xmlSpace = " \t\r\n"

// maxXHTMLDepth is how deeply elements may nest before the head of an
// XHTML page ends: deeper, it is unreadable. Chromium reads deeper pages
// (3000 levels checked), no real page nests so deep, and the bound keeps
// what encoding/xml holds per open element to a few hundred KiB whatever
// the 64 KiB read hold.
const maxXHTMLDepth = 1 << 10

// maxXHTMLTokens is how many tokens (tags, text, comments) an XHTML page
// may have before its head ends: more, it is unreadable. encoding/xml
// spends some 100 bytes a token where the HTML tokenizer spends none;
// this keeps a hostile head's cost below an HTML one's of 64 KiB
// (BenchmarkHeadHostile) and is some 10 times what a large real head
// holds.
const maxXHTMLTokens = 1 << 12

// xhtmlEntityDoctypes are the public identifiers of the DOCTYPEs for which
// browsers define HTML's named character references in an XML document
// (the HTML standard's "Parsing XML documents"; Chromium's list). Without
// one of them, &nbsp; is a well-formedness error there.
var xhtmlEntityDoctypes = [...]string{
	"-//W3C//DTD XHTML 1.0 Transitional//EN",
	"-//W3C//DTD XHTML 1.1//EN",
	"-//W3C//DTD XHTML 1.0 Strict//EN",
	"-//W3C//DTD XHTML 1.0 Frameset//EN",
	"-//W3C//DTD XHTML Basic 1.0//EN",
	"-//W3C//DTD XHTML 1.1 plus MathML 2.0//EN",
	"-//W3C//DTD XHTML 1.1 plus MathML 2.0 plus SVG 1.1//EN",
	"-//W3C//DTD MathML 2.0//EN",
	"-//WAPFORUM//DTD XHTML Mobile 1.0//EN",
	"-//WAPFORUM//DTD XHTML Mobile 1.1//EN",
	"-//WAPFORUM//DTD XHTML Mobile 1.2//EN",
}

// readXHTMLHeadOf reads the head of the XHTML page r yields (its content,
// decoded from its coding; label the charset its Content-Type names) as
// browsers read application/xhtml+xml, with an XML parser, and returns
// what the meta elements of its head say for tokens; an error when the
// head cannot be known from what r yields.
//
// The head is Chromium's document.head: the first head element child of
// the root element (html, or any: the HTML standard asks for an html
// root, Chromium does not), HTML's elements being those of the XHTML
// namespace (or, when the root is an html element of no namespace, as a
// page that forgot its xmlns, those of none too: Chromium finds no head
// there, robotsgate reads the one its author wrote). The head may follow
// the body: the page is read to the head's end, or the root's. Its meta
// elements are those under it, at any depth, but not in a template's
// content. Nothing but the head's end ends it: text, a <title/>, a meta
// after other elements stay in it; a meta after </head> is not in it. The page is decoded as its byte
// order mark, its Content-Type's charset, its XML declaration's encoding
// say, or as UTF-8. A well-formedness error before the head ends (a
// browser shows an error there, and what its head holds depends on the
// browser), an encoding that cannot be read, an entity defined in the
// DOCTYPE, elements nested deeper than maxXHTMLDepth, or a bound (maxHead
// bytes, maxXHTMLTokens tokens) reached first: the head cannot be known.
func readXHTMLHeadOf(r io.Reader, label string, tokens []string) (usage.Usage, error) {
	page := bufio.NewReader(r)
	first, err := page.Peek(3) // room for a byte order mark
	if err != nil && err != io.EOF {
		return usage.Usage{}, xmlReadError(err)
	}
	in := io.Reader(page)
	decided := certainEncoding(first, label)
	if decided { // the byte order mark or the Content-Type's charset, not the XML declaration
		enc, name, bom := sniffEncoding(first, label)
		if name == "replacement" {
			return usage.Usage{}, errors.New("the replacement encoding")
		}
		page.Discard(bom)
		if name != "utf-8" {
			in = transform.NewReader(page, enc.NewDecoder())
		}
	}
	d := xml.NewDecoder(in)
	d.CharsetReader = func(label string, in io.Reader) (io.Reader, error) {
		if decided { // decoded already: the declaration does not count
			return in, nil
		}
		enc, name := charset.Lookup(label)
		switch {
		case enc == nil:
			return nil, fmt.Errorf("unknown encoding %q", label)
		case name == "replacement":
			return nil, errors.New("the replacement encoding")
		case name == "utf-8":
			return in, nil
		}
		return transform.NewReader(in, enc.NewDecoder()), nil
	}
	x := xhtmlHead{tokens: tokens}
	for n := 0; !x.done; n++ {
		if n == maxXHTMLTokens {
			return usage.Usage{}, fmt.Errorf("the head did not end within %d XML tokens", maxXHTMLTokens)
		}
		tok, err := d.Token()
		switch {
		case err == io.EOF && x.depth == 0: // no root element: no head
			return x.u, nil
		case err != nil:
			return usage.Usage{}, xmlReadError(err)
		}
		if err := x.step(d, tok); err != nil {
			return usage.Usage{}, err
		}
	}
	return x.u, nil
}

// xmlReadError is err, met reading an XHTML page before its head ended,
// as Read's statement says it: robotsgate's bounds as they are,
// XML errors as the parser's, cut to maxXMLError bytes (they quote the
// page: a name, an encoding label).
func xmlReadError(err error) error {
	var syntax *xml.SyntaxError
	switch {
	case errors.Is(err, errHeadBound), errors.Is(err, errRawBound):
		return err
	case errors.As(err, &syntax):
		return fmt.Errorf("not well-formed XML: line %d: %s", syntax.Line, clip(syntax.Msg, maxXMLError))
	}
	return fmt.Errorf("read the page as XML: %s", clip(err.Error(), maxXMLError))
}

// maxXMLError is how much of an XML error's text the statement of an
// unreadable head quotes: the 403's X-Robots-Gate-Rule carries it.
const maxXMLError = 120

// clip cuts s to at most n bytes, at a character's start, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// xhtmlHead follows an XHTML page's tokens to the end of its head,
// reading the meta elements in it (u).
type xhtmlHead struct {
	tokens    []string    // the tokens a request obeys, for meta elements named after one
	u         usage.Usage // what the head's meta elements read so far say
	depth     int         // elements open
	lenient   bool        // the root html element has no namespace: nor have HTML's elements
	inHead    bool        // in the root's first head element child
	templates int         // template elements open in the head
	done      bool        // the head has ended, or there is none
}

// isHTML reports whether n names the HTML element local.
func (x *xhtmlHead) isHTML(n xml.Name, local string) bool {
	return n.Local == local && (n.Space == xhtmlNS || x.lenient && n.Space == "")
}

// step moves x past one token of d.
func (x *xhtmlHead) step(d *xml.Decoder, tok xml.Token) error {
	switch tok := tok.(type) {
	case xml.StartElement:
		if err := uniqueAttrs(tok.Attr); err != nil {
			return err
		}
		if x.depth++; x.depth > maxXHTMLDepth {
			return fmt.Errorf("elements nested deeper than %d", maxXHTMLDepth)
		}
		switch {
		case x.depth == 1: // the root, html or not (as Chromium's document.head)
			x.lenient = tok.Name == xml.Name{Local: "html"}
		case x.depth == 2 && x.isHTML(tok.Name, "head"):
			x.inHead = true
		case !x.inHead:
		case x.isHTML(tok.Name, "template"):
			x.templates++
		case x.templates == 0 && x.isHTML(tok.Name, "meta"):
			x.meta(tok.Attr)
		}
	case xml.EndElement:
		x.depth--
		switch {
		case x.depth == 0: // the root's end: it had no head
			x.done = true
		case x.depth == 1 && x.inHead:
			x.done = true
		case x.inHead && x.isHTML(tok.Name, "template"):
			x.templates--
		}
	case xml.CharData:
		if x.depth == 0 && len(bytes.Trim(tok, xmlSpace)) > 0 {
			return errors.New("not well-formed XML: text before the root element")
		}
	case xml.Directive:
		if x.depth == 0 {
			d.Entity = doctypeEntities(tok)
		}
	}
	return nil
}

// meta reads the name and content of a meta element in the head into
// x.u. XML's attribute names are as written: NAME is not name.
func (x *xhtmlHead) meta(attrs []xml.Attr) {
	var name, content string
	for _, a := range attrs {
		switch a.Name {
		case xml.Name{Local: "name"}:
			name = a.Value
		case xml.Name{Local: "content"}:
			content = a.Value
		}
	}
	if name == "" {
		return
	}
	v := usage.MetaUsage(name, content, x.tokens)
	x.u.Combine(&v)
}

// uniqueAttrs fails when an element has an attribute twice, which XML
// does not allow (encoding/xml does not check it): a browser stops there.
func uniqueAttrs(attrs []xml.Attr) error {
	if len(attrs) < 2 {
		return nil
	}
	seen := make(map[xml.Name]struct{}, len(attrs))
	for _, a := range attrs {
		if _, ok := seen[a.Name]; ok {
			return fmt.Errorf("not well-formed XML: attribute %s twice", a.Name.Local)
		}
		seen[a.Name] = struct{}{}
	}
	return nil
}

// doctypeEntities returns the named entities an XML page whose prolog
// holds dir may use besides XML's five: HTML's under one of
// xhtmlEntityDoctypes, none otherwise. A DOCTYPE with an internal subset
// may define entities, markup included, which browsers expand and
// encoding/xml does not read: then no named entity but XML's five is
// read, and one in the head makes it unreadable.
func doctypeEntities(dir xml.Directive) map[string]string {
	s := string(dir)
	if !strings.HasPrefix(s, "DOCTYPE") {
		return nil
	}
	var quote byte
	for i := range len(s) { // an internal subset: a "[" outside quoted literals
		switch c := s[i]; {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
		case c == '"' || c == '\'':
			quote = c
		case c == '[':
			return nil
		}
	}
	// DOCTYPE name PUBLIC "public identifier" "system identifier"
	s = strings.TrimLeft(s[len("DOCTYPE"):], xmlSpace)
	i := strings.IndexAny(s, xmlSpace)
	if i <= 0 {
		return nil
	}
	rest, ok := strings.CutPrefix(strings.TrimLeft(s[i:], xmlSpace), "PUBLIC")
	rest = strings.TrimLeft(rest, xmlSpace)
	if !ok || rest == "" || rest[0] != '"' && rest[0] != '\'' {
		return nil
	}
	end := strings.IndexByte(rest[1:], rest[0])
	if end < 0 {
		return nil
	}
	for _, id := range xhtmlEntityDoctypes {
		if rest[1:1+end] == id {
			return xml.HTMLEntity
		}
	}
	return nil
}
