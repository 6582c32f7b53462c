package head

import (
	"bytes"

	"github.com/robotsgate/robotsgate/usage"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// headMode is the insertion mode of the HTML standard's tree construction
// (§13.2.6) a headTracker is in, as far as the head is concerned.
type headMode uint8

const (
	modeBeforeHTML     headMode = iota // "initial" and "before html": nothing of them counts
	modeBeforeHead                     // "before head"
	modeInHead                         // "in head"
	modeInHeadNoscript                 // "in head noscript" (scripting disabled)
	modeAfterHead                      // "after head": a <meta> here is still put in the head
	modeText                           // "text": a title's, script's or style's content
	modeInTemplate                     // in a <template>'s content, which is no part of the head
	modeHeadDone                       // "in body", "in frameset": nothing can join the head now
)

// headTracker follows the tokens of an HTML page through the insertion
// modes that build its head (§13.2.6.4.1-6), to tell when the head is
// complete: once the tree builder has left them (a <body>, text or an
// element only a body holds), no later token can add to it. It builds no
// tree, but reads the meta elements the tree builder puts in the head
// element as it meets them (u); in a template whose end it cannot follow
// without the whole tree builder (lost), the head is read from
// html.Parse's tree of the bytes read instead (headUsage). It must never
// say the head is complete before the tree builder would; it may say so
// later (it reads on, to the page's end or the bound). TestHeadDifferential
// and FuzzReadHead hold it to html.Parse of the whole page.
type headTracker struct {
	z         *html.Tokenizer
	tokens    []string    // the tokens a request obeys, for meta elements named after one
	u         usage.Usage // what the head's meta elements read so far say
	hasAttr   bool        // the current tag has attributes
	scripting bool        // the scripting flag: with it, <noscript> is raw text
	mode      headMode    // where the tree builder is
	back      headMode    // the mode a text or template element returns to
	templates int         // templates open (nested ones too)
	lost      bool        // template content it does not follow (foreign content, select): never done
	noscript  bool        // saw a <noscript> start tag while the head was open
	read      int         // bytes of the page tokenized up to the current token's end
}

func newHeadTracker(z *html.Tokenizer, scripting bool, tokens []string) *headTracker {
	return &headTracker{z: z, scripting: scripting, tokens: tokens}
}

// run reads tokens until the head is complete (true) or the tokenizer's
// input ends (false).
func (t *headTracker) run() bool {
	for t.mode != modeHeadDone {
		tt := t.z.Next()
		if tt == html.ErrorToken {
			return false
		}
		t.read += len(t.z.Raw())
		t.step(tt)
	}
	return true
}

// htmlSpace is the HTML standard's ASCII whitespace, which the head may
// hold as text (strings.TrimSpace would trim more: U+00A0 starts a body).
const htmlSpace = " \t\n\f\r"

// step moves t past one token.
func (t *headTracker) step(tt html.TokenType) {
	switch tt {
	case html.CommentToken, html.DoctypeToken:
		return // ignored or inserted where they are: the mode stays
	case html.TextToken:
		switch t.mode {
		case modeText, modeInTemplate:
			return
		}
		// Character references are text too: "&#32;" is a space.
		if len(bytes.TrimLeft(t.z.Text(), htmlSpace)) > 0 {
			t.mode = modeHeadDone // text the head cannot hold starts the body
		}
		return
	}
	name, hasAttr := t.z.TagName()
	t.hasAttr = hasAttr
	t.tag(tt == html.StartTagToken || tt == html.SelfClosingTagToken, atom.Lookup(name)) // "<script/>" opens one too
}

// tag moves t past a start tag (start) or an end tag of the element a.
func (t *headTracker) tag(start bool, a atom.Atom) {
	switch t.mode {
	case modeText:
		if !start { // the tokenizer emits only the element's own end tag
			t.mode = t.back
		}
	case modeInTemplate:
		t.inTemplate(start, a)
	case modeBeforeHTML:
		switch {
		case start && a == atom.Html:
			t.mode = modeBeforeHead
		case !start && a != atom.Head && a != atom.Body && a != atom.Html && a != atom.Br:
			// ignored
		default:
			t.mode = modeBeforeHead
			t.tag(start, a)
		}
	case modeBeforeHead:
		switch {
		case start && a == atom.Head:
			t.mode = modeInHead
		case start && a == atom.Html:
		case !start && a != atom.Head && a != atom.Body && a != atom.Html && a != atom.Br:
		default:
			t.mode = modeInHead // an implied <head>
			t.tag(start, a)
		}
	case modeInHead, modeAfterHead:
		t.inHead(start, a)
	case modeInHeadNoscript:
		switch {
		case start && (a == atom.Basefont || a == atom.Bgsound || a == atom.Link || a == atom.Meta || a == atom.Noframes || a == atom.Style):
			t.inHead(start, a)
		case start && a == atom.Noscript:
			t.z.NextIsNotRawText()
		case start && (a == atom.Html || a == atom.Head):
		case !start && a == atom.Noscript:
			t.mode = modeInHead
		case !start && a != atom.Br:
		default: // the noscript closes, and the head reads the token
			t.mode = modeInHead
			t.tag(start, a)
		}
	}
}

// inHead moves t past a tag in "in head", "after head" (whose head tags
// go into the head), or "in head noscript" (for those it reads as in head).
func (t *headTracker) inHead(start bool, a atom.Atom) {
	if !start {
		switch {
		case a == atom.Head && t.mode == modeInHead:
			t.mode = modeAfterHead
		case a == atom.Body || a == atom.Html || a == atom.Br:
			t.mode = modeHeadDone // an implied </head>, then an implied <body>
		}
		return // </template> with none open, and any other end tag: ignored
	}
	switch a {
	case atom.Meta: // into the head element (after </head> too), or a noscript in it
		t.meta()
	case atom.Html, atom.Head, atom.Base, atom.Basefont, atom.Bgsound, atom.Link:
	case atom.Title, atom.Style, atom.Script, atom.Noframes:
		t.back, t.mode = t.mode, modeText
	case atom.Noscript:
		switch {
		case t.mode == modeAfterHead:
			t.mode = modeHeadDone // not a head element after </head>: the body's
		case t.scripting:
			t.noscript = true
			t.back, t.mode = t.mode, modeText
		default:
			t.noscript = true
			t.mode = modeInHeadNoscript
			t.z.NextIsNotRawText()
		}
	case atom.Template:
		t.back, t.mode, t.templates = t.mode, modeInTemplate, 1
	default:
		t.mode = modeHeadDone // <body>, <frameset>, or an element only a body holds
	}
}

// meta reads the name and content of the meta element the tokenizer is
// at (the first of duplicate attributes: the tokenizer drops the others,
// as browsers do) into t.u.
func (t *headTracker) meta() {
	var name, content string
	for more := t.hasAttr; more; {
		var k, v []byte
		k, v, more = t.z.TagAttr()
		switch string(k) { // lower-case
		case "name":
			name = string(v)
		case "content":
			content = string(v)
		}
	}
	t.hasAttr = false
	if name == "" {
		return
	}
	v := usage.MetaUsage(name, content, t.tokens)
	t.u.Combine(&v)
}

// inTemplate follows a template's content for the template's end tag
// only: nothing in it is the head's, nor ends the head.
func (t *headTracker) inTemplate(start bool, a atom.Atom) {
	switch {
	case a == atom.Template && start:
		t.templates++
	case a == atom.Template:
		if t.templates--; t.templates == 0 {
			t.mode = t.back
		}
	case start && (a == atom.Svg || a == atom.Math || a == atom.Select || a == atom.Col || a == atom.Colgroup):
		// Foreign content reads CDATA and raw text otherwise, and a select
		// or a column group ignores tags the tokenizer would read raw: the
		// template's end cannot be told here without the whole tree
		// builder. Read on to the end.
		t.lost = true
		t.mode = modeText
		t.back = modeText
	case start && a == atom.Noscript:
		if t.scripting {
			t.noscript = true
		} else {
			t.z.NextIsNotRawText()
		}
	}
}

// headUsage returns what the <meta> elements of the head of doc (a tree
// html.Parse built) say for tokens: every meta element under the head
// element, but not in a template's content (inert, as in browsers).
func headUsage(doc *html.Node, tokens []string) usage.Usage {
	var u usage.Usage
	head := child(child(doc, atom.Html), atom.Head)
	if head == nil {
		return u
	}
	for n := range head.Descendants() {
		if n.Type != html.ElementNode || n.Namespace != "" || n.DataAtom != atom.Meta || inTemplate(n, head) {
			continue
		}
		var name, content string
		var haveName, haveContent bool
		for _, at := range n.Attr { // the first of duplicates counts, as in browsers
			switch {
			case at.Namespace == "" && at.Key == "name" && !haveName:
				name, haveName = at.Val, true
			case at.Namespace == "" && at.Key == "content" && !haveContent:
				content, haveContent = at.Val, true
			}
		}
		if name == "" {
			continue
		}
		v := usage.MetaUsage(name, content, tokens)
		u.Combine(&v)
	}
	return u
}

// child returns n's first element child that is a for HTML, or nil.
func child(n *html.Node, a atom.Atom) *html.Node {
	if n == nil {
		return nil
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode && c.Namespace == "" && c.DataAtom == a {
			return c
		}
	}
	return nil
}

// inTemplate reports whether n is in a template's content, below head.
func inTemplate(n, head *html.Node) bool {
	for p := n.Parent; p != nil && p != head; p = p.Parent {
		if p.Type == html.ElementNode && p.Namespace == "" && p.DataAtom == atom.Template {
			return true
		}
	}
	return false
}
