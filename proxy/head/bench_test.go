package head

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/usage"
	"github.com/robotsgate/robotsgate/usage/source"
)

// benchHeadPage is a typical page: a 2 KB head (a charset, a title, 30
// preloads, a robots meta that refuses nothing), then 60 KB of body.
func benchHeadPage() []byte {
	head := "<!doctype html><html><head><meta charset=utf-8><title>A page</title>" +
		strings.Repeat(`<link rel="preload" href="/static/app.css" as="style">`, 30) +
		`<meta name="robots" content="index, follow"></head><body>`
	return []byte(head + strings.Repeat("<p>Some text of the article, as real pages have it.</p>\n", 1000) + "</body></html>")
}

// BenchmarkHeadRead is what reading a typical page's head costs, through
// Reader.Read (with its bounds, identity and gzip), beside the tokenizer
// scan it replaced (baselineReadHead: source.HeadUsage over the bytes
// read, up to 8 times) in the same process; "ratio" is the new reader's
// time over the old one's.
func BenchmarkHeadRead(b *testing.B) {
	page := benchHeadPage()
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(page)
	zw.Close()
	tokens := []string{"GPTBot"}
	hr := NewReader(10 * time.Second)
	respOf := func(body []byte, coding string) *http.Response {
		h := http.Header{"Content-Type": {"text/html; charset=utf-8"}}
		if coding != "" {
			h.Set("Content-Encoding", coding)
		}
		return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(bytes.NewReader(body))}
	}
	readNew := func(body []byte, coding string) usage.Usage { return hr.Read(respOf(body, coding), tokens) }
	readOld := func(body []byte, coding string) usage.Usage { return baselineReadHead(respOf(body, coding), tokens) }
	for _, enc := range []struct {
		name, coding string
		body         []byte
	}{{"page", "", page}, {"page.gz", "gzip", zb.Bytes()}} {
		if got, old := readNew(enc.body, enc.coding), readOld(enc.body, enc.coding); got != old {
			b.Fatalf("%s: %s; the baseline %s", enc.name, usageString(got), usageString(old))
		}
		b.Run(enc.name+"/new", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(2 << 10)
			for b.Loop() {
				readNew(enc.body, enc.coding)
			}
		})
		b.Run(enc.name+"/baseline", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(2 << 10)
			for b.Loop() {
				readOld(enc.body, enc.coding)
			}
		})
		b.Run(enc.name+"/ratio", func(b *testing.B) {
			b.ReportAllocs()
			var nw, old time.Duration
			for b.Loop() {
				t0 := time.Now()
				readNew(enc.body, enc.coding)
				t1 := time.Now()
				readOld(enc.body, enc.coding)
				nw, old = nw+t1.Sub(t0), old+time.Since(t1)
			}
			b.ReportMetric(float64(nw.Nanoseconds())/float64(b.N), "new-ns/op")
			b.ReportMetric(float64(old.Nanoseconds())/float64(b.N), "baseline-ns/op")
			b.ReportMetric(nw.Seconds()/old.Seconds(), "ratio")
		})
	}
}

// baselineReadHead is the head reader this one replaced (before issue
// 34), kept to measure against: the page decoded from its coding, read
// until "</head" or "<body" and source.HeadUsage over the bytes so far
// agrees the head ended (at most 8 such scans), or maxHead.
func baselineReadHead(resp *http.Response, tokens []string) usage.Usage {
	raw := &recorder{r: resp.Body, max: 2 * maxHead}
	coding := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	dec, err := decoder(coding, raw)
	if err != nil {
		return unreadableHead(err)
	}
	buf := make([]byte, 0, 4<<10)
	checks := 0
	for len(buf) < maxHead {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := dec.Read(buf[len(buf):min(cap(buf), maxHead)])
		from := max(0, len(buf)-len("</head"))
		buf = buf[:len(buf)+n]
		if checks < 8 && (bytes.Contains(bytes.ToLower(buf[from:]), []byte("</head")) || bytes.Contains(bytes.ToLower(buf[from:]), []byte("<body"))) {
			checks++
			if u, done := source.HeadUsage(buf, tokens); done {
				return u
			}
		}
		if err != nil {
			break
		}
	}
	u, _ := source.HeadUsage(buf, tokens)
	return u
}
