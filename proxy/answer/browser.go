package answer

import (
	"html/template"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/robotsgate/robotsgate/proxy/header"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// browserChoice is how a block is answered in the browser style.
type browserChoice struct {
	page        bool   // the explanation as an HTML page, with the plain answer's status
	status      int    // with contentType and body: a neutral answer; 0 (and !page): the plain answer
	contentType string // "" for a 204
	body        string
}

// TransparentGIF is a 1×1 transparent GIF: what a blocked image becomes.
const TransparentGIF = "GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff" +
	"!\xf9\x04\x01\x00\x00\x00\x00" + // graphic control: colour 0 is transparent
	",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"

var (
	choosePlain    = browserChoice{}
	choosePage     = browserChoice{page: true}
	chooseScript   = browserChoice{status: http.StatusOK, contentType: "text/javascript; charset=utf-8"}
	chooseStyle    = browserChoice{status: http.StatusOK, contentType: "text/css; charset=utf-8"}
	chooseImage    = browserChoice{status: http.StatusOK, contentType: "image/gif", body: TransparentGIF}
	chooseJSON     = browserChoice{status: http.StatusOK, contentType: "application/json", body: "{}"}
	chooseManifest = browserChoice{status: http.StatusOK, contentType: "application/manifest+json", body: "{}"}
	chooseTrack    = browserChoice{status: http.StatusOK, contentType: "text/vtt; charset=utf-8", body: "WEBVTT\n"}
	chooseNoBody   = browserChoice{status: http.StatusNoContent}
)

// fontTypes are the font media types by extension; font/woff2 for others.
var fontTypes = map[string]string{".woff": "font/woff", ".woff2": "font/woff2", ".ttf": "font/ttf", ".otf": "font/otf"}

// chooseBrowser picks the browser-style answer to a blocked request from
// its Sec-Fetch-Dest header (dest), the path of its request-target and its
// Accept header. Sec-Fetch-Dest, sent by every current browser, decides
// when it is present and known; otherwise the path's extension; otherwise
// an Accept naming text/html gets the HTML page, and anything else the
// plain answer (a scraper that sends neither reads the status).
//
// Destinations where a 200 would do harm or no good keep the plain answer:
// a service worker (an empty one would install and persist), a WebSocket
// (a 200 is no handshake), XSLT and FedCM (errors are the right outcome).
// Media (audio, video) get 204: no playable empty file exists, and the
// element reports a media error however it is answered. Embedded objects
// get the HTML page with its 403, so that <object> shows its fallback.
func chooseBrowser(dest, target, accept string) browserChoice {
	ext := extOf(target)
	switch strings.ToLower(strings.TrimSpace(dest)) {
	case "script", "worker", "sharedworker", "audioworklet", "paintworklet":
		return chooseScript
	case "style":
		return chooseStyle
	case "image":
		return chooseImage
	case "font":
		return chooseFont(ext)
	case "empty":
		if acceptsJSON(accept) {
			return chooseJSON
		}
		return chooseNoBody
	case "json":
		return chooseJSON
	case "manifest":
		return chooseManifest
	case "track":
		return chooseTrack
	case "audio", "video", "report":
		return chooseNoBody
	case "document", "iframe", "frame", "fencedframe", "object", "embed":
		return choosePage
	case "serviceworker", "websocket", "xslt", "webidentity":
		return choosePlain
	}
	switch ext {
	case ".js", ".mjs":
		return chooseScript
	case ".css":
		return chooseStyle
	case ".png", ".jpg", ".jpeg", ".gif", ".webp", ".svg", ".ico", ".avif":
		return chooseImage
	case ".woff", ".woff2", ".ttf", ".otf":
		return chooseFont(ext)
	case ".json":
		return chooseJSON
	}
	if acceptsMedia(accept, func(mt string) bool { return mt == "text/html" }) {
		return choosePage
	}
	return choosePlain
}

func chooseFont(ext string) browserChoice {
	ct, ok := fontTypes[ext]
	if !ok {
		ct = "font/woff2"
	}
	return browserChoice{status: http.StatusOK, contentType: ct}
}

// extOf is the extension of a request-target's last path segment, lower
// case, without query or ";params": ".js" for "/app.JS?v=2".
func extOf(target string) string {
	p, _, _ := strings.Cut(target, "?")
	p = p[strings.LastIndexByte(p, '/')+1:]
	p, _, _ = strings.Cut(p, ";")
	return strings.ToLower(path.Ext(p))
}

// acceptsJSON reports whether an Accept header asks for JSON:
// application/json or a +json type such as application/ld+json.
func acceptsJSON(accept string) bool {
	return acceptsMedia(accept, func(mt string) bool {
		return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
	})
}

// acceptsMedia reports whether some media range of an Accept header,
// without a q of 0, satisfies match (given it lower-cased, without
// parameters). Wildcards are not expanded: "*/*" asks for nothing in
// particular.
func acceptsMedia(accept string, match func(string) bool) bool {
	for _, r := range strings.Split(accept, ",") {
		mt, params, _ := strings.Cut(r, ";")
		if !match(strings.ToLower(strings.TrimSpace(mt))) {
			continue
		}
		refused := false
		for _, p := range strings.Split(params, ";") {
			k, v, _ := strings.Cut(p, "=")
			if strings.EqualFold(strings.TrimSpace(k), "q") {
				q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				refused = err == nil && q == 0
			}
		}
		if !refused {
			return true
		}
	}
	return false
}

// browserSafe reports whether a block of this kind may be answered in the
// browser style: those where nothing was fetched because of the site's
// wishes or the proxy's guard, and where the status tells a browser
// nothing it can act on (retrying a sub-resource is not something a page
// does). Auth (407), bad requests, 421, 429, overload and upstream failures
// keep their status: a client acts on each of them.
func browserSafe(action policy.Action) bool {
	switch action {
	case policy.ActionDisallowed, policy.ActionDenied, policy.ActionUsageRefused, policy.ActionUnreachable, policy.ActionPrivate:
		return true
	}
	return false
}

// browserAnswer rewrites plain, the plain-text answer to r for d, in the
// browser style when d and r allow it: never for a CONNECT (a 2xx would
// open the tunnel) or a WebSocket handshake. The X-Robots-Gate headers and
// Cache-Control: no-store are kept; the status may change, and finish
// audits the one sent.
func browserAnswer(r *http.Request, d *policy.Decision, plain *http.Response) *http.Response {
	if !browserSafe(d.Action) || r.Method == http.MethodConnect || header.IsWebSocketUpgrade(r.Header) {
		return plain
	}
	target := d.Target
	if target == "" && r.URL != nil {
		target = r.URL.EscapedPath()
	}
	c := chooseBrowser(r.Header.Get("Sec-Fetch-Dest"), target, r.Header.Get("Accept"))
	switch {
	case c.page:
		text, _ := io.ReadAll(plain.Body) // robotsgate's own body, held in memory
		plain.Body.Close()
		body := blockPage(d, DisplayURL(r), string(text))
		h := plain.Header
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		h.Set("X-Content-Type-Options", "nosniff")
		plain.Body, plain.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
		return plain
	case c.status == 0:
		return plain
	}
	plain.Body.Close()
	h := plain.Header
	h.Del("Retry-After") // a 2xx is not to be retried
	if c.status == http.StatusNoContent {
		h.Del("Content-Type")
		h.Del("Content-Length")
		plain.Body, plain.ContentLength = http.NoBody, 0
	} else {
		h.Set("Content-Type", c.contentType)
		h.Set("Content-Length", strconv.Itoa(len(c.body)))
		plain.Body, plain.ContentLength = io.NopCloser(strings.NewReader(c.body)), int64(len(c.body))
	}
	h.Set("X-Content-Type-Options", "nosniff")
	plain.StatusCode, plain.Status = c.status, strconv.Itoa(c.status)+" "+http.StatusText(c.status)
	return plain
}

// blockTitles head the HTML page, by decision.
var blockTitles = map[policy.Action]string{
	policy.ActionDisallowed:   "Disallowed by robots.txt",
	policy.ActionDenied:       "Denied by a site rule",
	policy.ActionUsageRefused: "Refused: the site refuses this use",
	policy.ActionUnreachable:  "Blocked: robots.txt could not be fetched",
	policy.ActionPrivate:      "Refused: a private address",
}

// blockPageTemplate is the HTML page: the plain answer's text, which
// carries the evidence (URL, agent and token, robots.txt URL, rule and
// line, reason), escaped, under a heading. No script, no external assets.
var blockPageTemplate = template.Must(template.New("block").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>{{.Title}} – robotsgate</title>
<style>
body { font: 16px/1.5 system-ui, sans-serif; max-width: 50rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.4rem; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f4f4f4; padding: 1rem; border-radius: 4px; }
p.note { color: #555; font-size: .9rem; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p>Blocked: <code>{{.URL}}</code></p>
<pre>{{.Text}}</pre>
<p class="note">Answered by robotsgate, the proxy this browser goes through (X-Robots-Gate: {{.Decision}}).</p>
</body>
</html>
`))

// blockPage renders the HTML page for d, explaining text.
func blockPage(d *policy.Decision, url, text string) string {
	title, ok := blockTitles[d.Action]
	if !ok {
		title = "Blocked by robotsgate"
	}
	var b strings.Builder
	blockPageTemplate.Execute(&b, struct{ Title, URL, Text, Decision string }{title, url, text, d.Action.String()})
	return b.String()
}
