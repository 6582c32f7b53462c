package answer

import (
	"image/gif"
	"strings"
	"testing"

	"github.com/robotsgate/robotsgate/proxy/policy"
)

func TestChooseBrowser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dest, target, accept string
		want                 browserChoice
	}{
		// Sec-Fetch-Dest decides, whatever the extension says.
		{"script", "/js/app.js", "*/*", chooseScript},
		{"script", "/img/a.png", "*/*", chooseScript},
		{"Script", "/x", "", chooseScript},
		{"worker", "/w", "", chooseScript},
		{"sharedworker", "/w", "", chooseScript},
		{"audioworklet", "/w", "", chooseScript},
		{"paintworklet", "/w", "", chooseScript},
		{"style", "/a.css", "text/css,*/*;q=0.1", chooseStyle},
		{"image", "/a.png", "image/avif,image/webp,*/*", chooseImage},
		{"image", "/pixel", "", chooseImage},
		{"font", "/f.woff2", "", browserChoice{status: 200, contentType: "font/woff2"}},
		{"font", "/f.woff", "", browserChoice{status: 200, contentType: "font/woff"}},
		{"font", "/f.TTF", "", browserChoice{status: 200, contentType: "font/ttf"}},
		{"font", "/f.otf?v=1", "", browserChoice{status: 200, contentType: "font/otf"}},
		{"font", "/font", "", browserChoice{status: 200, contentType: "font/woff2"}},
		{"empty", "/api/items", "*/*", chooseNoBody},
		{"empty", "/api/items.json", "*/*", chooseNoBody},
		{"empty", "/api/items", "application/json, text/plain, */*", chooseJSON},
		{"empty", "/api/items", "application/vnd.api+json", chooseJSON},
		{"empty", "/api/items", "application/json;q=0, */*", chooseNoBody},
		{"empty", "/api/items", "text/html", chooseNoBody},
		{"json", "/data", "", chooseJSON},
		{"manifest", "/site.webmanifest", "", chooseManifest},
		{"track", "/subs.vtt", "", chooseTrack},
		{"audio", "/a.mp3", "", chooseNoBody},
		{"video", "/v.mp4", "", chooseNoBody},
		{"report", "/csp", "", chooseNoBody},
		{"document", "/page", "text/html", choosePage},
		{"document", "/app.js", "", choosePage},
		{"iframe", "/frame", "", choosePage},
		{"frame", "/frame", "", choosePage},
		{"fencedframe", "/ad", "", choosePage},
		{"object", "/doc.pdf", "", choosePage},
		{"embed", "/doc.pdf", "", choosePage},
		{"serviceworker", "/sw.js", "", choosePlain},
		{"websocket", "/ws", "", choosePlain},
		{"xslt", "/style.xsl", "", choosePlain},
		{"webidentity", "/fedcm", "", choosePlain},
		// No Sec-Fetch-Dest (or one not known): the extension.
		{"", "/js/app.js", "", chooseScript},
		{"", "/m.MJS", "", chooseScript},
		{"", "/app.js?v=3", "text/html", chooseScript},
		{"", "/app.js;jsessionid=1", "", chooseScript},
		{"", "/a.css", "", chooseStyle},
		{"", "/a.png", "", chooseImage},
		{"", "/a.jpg", "", chooseImage},
		{"", "/a.jpeg", "", chooseImage},
		{"", "/a.gif", "", chooseImage},
		{"", "/a.webp", "", chooseImage},
		{"", "/a.svg", "", chooseImage},
		{"", "/favicon.ico", "", chooseImage},
		{"", "/a.avif", "", chooseImage},
		{"", "/f.woff", "", browserChoice{status: 200, contentType: "font/woff"}},
		{"", "/f.woff2", "", browserChoice{status: 200, contentType: "font/woff2"}},
		{"", "/f.ttf", "", browserChoice{status: 200, contentType: "font/ttf"}},
		{"", "/f.otf", "", browserChoice{status: 200, contentType: "font/otf"}},
		{"", "/data.json", "", chooseJSON},
		{"future-dest", "/a.css", "", chooseStyle},
		// Then Accept: a page for text/html, else the plain answer.
		{"", "/page", "text/html,application/xhtml+xml,*/*;q=0.8", choosePage},
		{"", "/page", "TEXT/HTML", choosePage},
		{"", "/page", "text/html;q=0", choosePlain},
		{"", "/page", "*/*", choosePlain},
		{"", "/page", "", choosePlain},
		{"", "/report.pdf", "application/pdf", choosePlain},
		{"", "/js.d/", "", choosePlain},
		{"", "/", "", choosePlain},
	}
	for _, tt := range tests {
		if got := chooseBrowser(tt.dest, tt.target, tt.accept); got != tt.want {
			t.Errorf("chooseBrowser(%q, %q, %q) = %+v; want %+v", tt.dest, tt.target, tt.accept, got, tt.want)
		}
	}
}

// TestTransparentGIF: the image a blocked image becomes is a valid 1×1
// GIF whose one pixel is transparent.
func TestTransparentGIF(t *testing.T) {
	t.Parallel()
	img, err := gif.Decode(strings.NewReader(TransparentGIF))
	if err != nil {
		t.Fatalf("gif.Decode = %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1 || b.Dy() != 1 {
		t.Errorf("bounds %v; want 1×1", b)
	}
	if _, _, _, a := img.At(0, 0).RGBA(); a != 0 {
		t.Errorf("alpha %d; want 0 (transparent)", a)
	}
}

// TestBrowserSafe: only robots-style refusals change their answer; every
// answer whose status a client acts on keeps it.
func TestBrowserSafe(t *testing.T) {
	t.Parallel()
	for action, want := range map[policy.Action]bool{
		policy.ActionDisallowed: true, policy.ActionDenied: true, policy.ActionUsageRefused: true, policy.ActionUnreachable: true, policy.ActionPrivate: true,
		policy.ActionAllowed: false, policy.ActionWouldBlock: false, policy.ActionPaced: false, policy.ActionUpstream: false, policy.ActionBadRequest: false,
		policy.ActionMisdirected: false, policy.ActionAuth: false, policy.ActionOverloaded: false,
	} {
		if got := browserSafe(action); got != want {
			t.Errorf("browserSafe(%q) = %v; want %v", action, got, want)
		}
	}
}
