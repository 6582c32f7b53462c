package source

import (
	"bytes"
	"context"
	"strings"

	"github.com/robotsgate/robotsgate/usage"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// HeadUsage reads the head of an HTML page, page being its first bytes
// (robotsgate reads at most 64 KiB), and returns the usage preferences of
// its <meta> elements (see usage.MetaUsage) for a request that obeys tokens.
// done reports whether the head ended within page (its end tag, a <body>,
// or anything only a body holds: the rest of the page can state nothing
// more). The page is read as browsers read it, and never fails: what does
// not parse is skipped, and a tag cut at the end of page is not read.
func HeadUsage(page []byte, tokens []string) (u usage.Usage, done bool) {
	// A byte order mark is no text: browsers drop it.
	z := html.NewTokenizer(bytes.NewReader(bytes.TrimPrefix(page, []byte("\xEF\xBB\xBF"))))
	inText := false // in a title, style, script or the like: its text is the head's
	templates := 0  // the <template> elements open: their content is inert, no part of the head
	for {
		tt := z.Next()
		wasText := inText
		inText = false
		if tt == html.ErrorToken { // the end of page: nothing else fails reading from memory
			return u, false
		}
		if templates > 0 {
			// A template holds any markup, which neither ends the head
			// nor states anything (browsers parse it into an inert
			// fragment): only its own tags count, nested ones too.
			if name, _ := z.TagName(); atom.Lookup(name) == atom.Template {
				if tt == html.EndTagToken {
					templates--
				} else {
					templates++ // "<template/>" opens one too: HTML ignores the slash
				}
			}
			continue
		}
		switch tt {
		case html.TextToken:
			// Text the head cannot hold starts the body.
			if !wasText && strings.TrimSpace(string(z.Raw())) != "" {
				return u, true
			}
		case html.EndTagToken:
			if name, _ := z.TagName(); atom.Lookup(name) == atom.Head {
				return u, true
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			switch atom.Lookup(name) {
			case atom.Meta:
				if hasAttr {
					v := metaUsage(z, tokens)
					u.Combine(&v)
				}
			case atom.Template:
				templates = 1
			case atom.Title, atom.Style, atom.Script, atom.Noscript:
				// Their text is the head's: the tokenizer reads it raw even
				// after a self-closing tag ("<script/>"), as browsers do.
				inText = true
			case atom.Html, atom.Head, atom.Link, atom.Base:
			default:
				return u, true // <body>, or an element only a body holds
			}
		}
	}
}

// metaUsage reads the name and content of the <meta> element z is at.
func metaUsage(z *html.Tokenizer, tokens []string) usage.Usage {
	var name, content string
	for {
		k, v, more := z.TagAttr()
		switch string(k) { // the tokenizer lower-cases attribute names
		case "name":
			name = string(v)
		case "content":
			content = string(v)
		}
		if !more {
			break
		}
	}
	if name == "" {
		return usage.Usage{}
	}
	return usage.MetaUsage(name, content, tokens)
}

// metaSource is an HTML page's head: what its <meta> elements say
// (usage.MetaUsage), as the proxy's head reader found them, or its
// refusal of a head it could not read (Input.Head).
type metaSource struct{}

// Info declares the source (usage.FromMeta.Info).
func (metaSource) Info() usage.SourceInfo { return usage.FromMeta.Info() }

func (metaSource) Phase() usage.Phase { return usage.OnResponse }

func (metaSource) Judge(_ context.Context, in *Input) (usage.Usage, error) {
	if in.Head == nil {
		return usage.Usage{}, nil
	}
	return *in.Head, nil
}
