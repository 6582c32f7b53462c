package pay

import (
	"net/http"
	"strings"
)

// Place is where a request falls among its origin's paths, as a Recent
// remembers charges (docs/identity.md, "crawler-max-price"): its section
// and its kind. A request is offered a price at once only in a place of
// its origin that charged today.
type Place struct {
	Section string // Section of the request-target
	Kind    Kind
}

// PlaceOf returns the place of a request whose target (path and query,
// as sent) is target and whose header is h: its section (Section) and
// its kind (KindOf). It does not allocate.
func PlaceOf(target string, h http.Header) Place {
	return Place{Section: Section(target), Kind: KindOf(target, h)}
}

// Section is the part of a request-target (path and query, as sent) that
// a Recent remembers charges by: the path's first segment when more of
// the path follows it ("/news/2026/a" and "/news/b" are in "news"), else
// "", the site's root ("/story-1", "/favicon.ico", "/news", "/"). The
// query is not looked at, nor are escapes read: a section spelt another
// way is another section (its price is then asked, as before any charge).
// It does not allocate.
func Section(target string) string {
	if len(target) < 2 || target[0] != '/' {
		return ""
	}
	rest := target[1:]
	end := strings.IndexAny(rest, "/?")
	if end < 0 || rest[end] != '/' {
		return ""
	}
	return rest[:end]
}

// maxExt is the longest extension a Kind tells apart.
const maxExt = 8

// Kind is what sort of request a charge is remembered for, within a
// section: the extension of its path's last segment (".css", ".png";
// none for "/story-1" or "/news/"), and whether the request says it is a
// page's sub-resource (an image, a script, a stylesheet: Sec-Fetch-Dest,
// or an Accept that names no page). A page charged for is then no reason
// to offer a price for the site's favicon, stylesheet or logo beside it,
// nor an image charged for one for the pages. The zero Kind is a
// request with no extension that does not say it is a sub-resource: a
// page.
type Kind struct {
	ext   [maxExt]byte // lower case, NUL after it; none when ext[0] == 0
	asset bool         // the request says it is a sub-resource
}

// String is the kind as docs/identity.md writes it: "page", or the
// extension (".png"), followed by " sub-resource" when the request says
// so.
func (k Kind) String() string {
	s := "page"
	if k.ext[0] != 0 {
		n := 0
		for n < maxExt && k.ext[n] != 0 {
			n++
		}
		s = "." + string(k.ext[:n])
	}
	if k.asset {
		s += " sub-resource"
	}
	return s
}

// KindOf returns the kind of a request whose target (path and query, as
// sent) is target and whose header is h. The extension is the last path
// segment's after its last dot, read as sent (escapes are not decoded),
// and its parameters (";v=2"), in any letter case, when it is a letter
// followed by at most 7 letters or digits ("/a.PNG" and "/a.png;v=2" are
// ".png"; "/v1.2", "/2026.11.28-news" and "/.env" have none, as
// "/story-1" has). The request is a sub-resource when its Sec-Fetch-Dest
// names one (image, script, style, font, audio, video, track, manifest,
// a worker, xslt, json) or its Accept names neither text/html,
// application/xhtml+xml nor text/*, and something other than */* (a
// browser's image or stylesheet Accept; not curl's "*/*", nor no Accept
// at all). It does not allocate.
func KindOf(target string, h http.Header) Kind {
	var k Kind
	if len(target) > 0 && target[0] == '/' {
		path, _, _ := strings.Cut(target, "?")
		seg := path[strings.LastIndexByte(path, '/')+1:]
		seg, _, _ = strings.Cut(seg, ";") // a segment's parameters ("/a.css;v=2")
		if dot := strings.LastIndexByte(seg, '.'); dot > 0 {
			k.ext, _ = extension(seg[dot+1:])
		}
	}
	// The fields by their canonical names, as net/http's server keeps
	// them (Header.Get would canonicalise the name each time).
	k.asset = assetDest(h["Sec-Fetch-Dest"]) || assetAccept(h["Accept"])
	return k
}

// extension returns s in lower case when it is an extension: a letter,
// then at most maxExt-1 letters or digits.
func extension(s string) (ext [maxExt]byte, ok bool) {
	if len(s) == 0 || len(s) > maxExt {
		return ext, false
	}
	for i := range len(s) {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if !('a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9') {
			return [maxExt]byte{}, false
		}
		ext[i] = c
	}
	return ext, true
}

// assetDest reports whether Sec-Fetch-Dest values (the first is read)
// name a page's sub-resource (Fetch's request destinations other than a
// document, a frame, an embed or object, a report, "empty" for fetch()
// and none).
func assetDest(values []string) bool {
	if len(values) == 0 {
		return false
	}
	switch strings.TrimSpace(values[0]) { // a token: its case is its own (RFC 8941)
	case "audio", "audioworklet", "font", "image", "json", "manifest", "paintworklet",
		"script", "serviceworker", "sharedworker", "style", "track", "video", "worker", "xslt":
		return true
	}
	return false
}

// assetAccept reports whether Accept field values name no page: none of
// text/html, application/xhtml+xml and text/*, and a media range other
// than */* (parameters and weights are not read).
func assetAccept(values []string) bool {
	named := false
	for _, v := range values {
		for v != "" {
			var r string
			r, v, _ = strings.Cut(v, ",")
			r, _, _ = strings.Cut(r, ";")
			switch r = strings.TrimSpace(r); {
			case r == "", r == "*/*":
			case strings.EqualFold(r, "text/html"), strings.EqualFold(r, "application/xhtml+xml"), strings.EqualFold(r, "text/*"):
				return false
			default:
				named = true
			}
		}
	}
	return named
}
