package head

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hostileHeads are heads of 64 KiB built to cost the most to read: of
// HTML (the tokenizer over many tags; a template html.Parse must build)
// and of XHTML (elements as deep as read, many of them, many attributes).
func hostileHeads() []struct{ name, ct, page string } {
	const x = `<html xmlns="http://www.w3.org/1999/xhtml"><head>`
	var attrs strings.Builder
	for i := 0; attrs.Len() < maxHead-100; i++ {
		fmt.Fprintf(&attrs, ` a%d=""`, i)
	}
	return []struct{ name, ct, page string }{
		{"html-tags", "text/html", "<html><head>" + strings.Repeat("<link>", maxHead/6)},
		{"html-attrs", "text/html", "<html><head><meta" + attrs.String() + ">"},
		{"html-template", "text/html", "<html><head><template><svg>" + strings.Repeat("<g>", maxHead/3)},
		{"xhtml-deep", xhtmlType, x + strings.Repeat("<a>", maxXHTMLDepth-3) + strings.Repeat("<b/>", maxHead/4)},
		{"xhtml-tags", xhtmlType, x + strings.Repeat("<a/>", maxHead/4)},
		{"xhtml-attrs", xhtmlType, x + "<meta" + attrs.String() + "/>"},
	}
}

// BenchmarkHeadHostile is what the hostile heads cost to read, each
// refused as unreadable at the bound: an XHTML head should cost no more
// than the HTML ones.
func BenchmarkHeadHostile(b *testing.B) {
	hr := NewReader(10 * time.Second)
	tokens := []string{"GPTBot"}
	for _, h := range hostileHeads() {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(h.page)))
			for b.Loop() {
				resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {h.ct}}, Body: io.NopCloser(bytes.NewReader([]byte(h.page)))}
				hr.Read(resp, tokens)
			}
		})
	}
}
