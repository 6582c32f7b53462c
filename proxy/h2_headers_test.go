package proxy

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// TestH2HeaderBound: what a header block past max_header_bytes gets over
// h2, exactly, beside HTTP/1.1's answer to a head past it. Go's h2 server
// bounds the header list at max_header_bytes + 320 (its allowance for
// ten fields' overhead), counted as HTTP/2 counts it (each field's name
// and value plus 32 bytes, pseudo-header fields included), and acts
// before any handler of robotsgate's runs:
//   - a list past the bound, passed in the block's last frame: 431 with
//     Go's own HTML body, no X-Robots-Gate, never decided, audited or
//     sent on; the connection goes on;
//   - one field longer than the bound: GOAWAY COMPRESSION_ERROR (its
//     HPACK string is refused), every stream of the connection ends;
//   - a CONTINUATION frame after the frame that passed the bound: GOAWAY
//     PROTOCOL_ERROR (the CONTINUATION flood's defence).
//
// Over HTTP/1.1 a head past max_header_bytes + 4096 (net/http's slack)
// gets robotsgate's h1 loop's text/plain 431, and the connection closes.
func TestH2HeaderBound(t *testing.T) {
	t.Parallel()
	const limit = 8 << 10
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "a.example")
	p := startMITM(t, pki, func(c *config.Config) { c.Limits.MaxHeaderBytes = limit })
	authority := "a.example:" + port
	checkHealthy(t, p, "https://"+authority) // robots.txt read
	audited := len(p.auditLines(t))
	// fields are n fields of 100-byte values: 137 bytes each as h2 counts.
	fields := func(path string, n int) []string {
		kv := append([]string(nil), (&rawH2{authority: authority}).get(path)...)
		for i := range n {
			kv = append(kv, fmt.Sprintf("x-f%02d", i), strings.Repeat("a", 100))
		}
		return kv
	}

	t.Run("list past the bound", func(t *testing.T) {
		r := p.rawH2(t, authority)
		r.request(1, nil, true, fields("/private/over", (limit+320)/137+1)...)
		st, how := r.stream(t, 1)
		const body = "<h1>HTTP Error 431</h1><p>Request Header Field(s) Too Large</p>"
		if st.status() != "431" || string(st.body) != body || st.header.Get("x-robots-gate") != "" || how != "" {
			t.Errorf("%q %q x-robots-gate %q, connection %q; want Go's 431, the connection on", st.status(), st.body, st.header.Get("x-robots-gate"), how)
		}
		r.request(3, nil, true, fields("/public/under", (limit-500)/137)...)
		if st, how := r.stream(t, 3); st.status() != "200" || how != "" {
			t.Errorf("a list within the bound after: %q, connection %q; want 200 on the same connection", st.status(), how)
		}
	})
	t.Run("one field longer than the bound", func(t *testing.T) {
		r := p.rawH2(t, authority)
		r.request(1, nil, true, r.get("/private/long", "x-long", strings.Repeat("a", limit+400))...)
		if how := r.waitEnd(); how != "GOAWAY COMPRESSION_ERROR" {
			t.Errorf("connection %q; want GOAWAY COMPRESSION_ERROR", how)
		}
	})
	t.Run("CONTINUATION after the bound", func(t *testing.T) {
		r := p.rawH2(t, authority)
		r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: encodeFields(fields("/private/cont", (limit+320)/137+1)...), EndStream: true})
		r.fr.WriteContinuation(1, true, encodeFields("x-more", "1"))
		r.send()
		if how := r.waitEnd(); how != "GOAWAY PROTOCOL_ERROR" {
			t.Errorf("connection %q; want GOAWAY PROTOCOL_ERROR", how)
		}
	})
	t.Run("HTTP/1.1", func(t *testing.T) {
		c, br := p.rawTunnel(t, authority, "a.example", false)
		var head strings.Builder
		fmt.Fprintf(&head, "GET /private/h1over HTTP/1.1\r\nHost: %s\r\n", authority)
		for i := 0; head.Len() <= limit+4096; i++ {
			fmt.Fprintf(&head, "X-F%03d: %s\r\n", i, strings.Repeat("a", 100))
		}
		resp, body := roundTripRaw(t, c, br, head.String()+"\r\n")
		if resp.StatusCode != 431 || body != "431 Request Header Fields Too Large" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || !resp.Close {
			t.Errorf("%d %q %v close %v; want the h1 loop's text/plain 431, the connection closed", resp.StatusCode, body, resp.Header, resp.Close)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, _ := io.Copy(io.Discard, br); n != 0 {
			t.Errorf("%d bytes after the 431; want the connection closed", n)
		}
	})
	// Each was for a disallowed path, whose 403 would be audited: none
	// reached a decision, nor the origin.
	if n := len(p.auditLines(t)) - audited; n != 0 {
		t.Errorf("%d more audit records; want none", n)
	}
	if n := o.count("/public/under"); n != 1 {
		t.Errorf("the origin saw the list within the bound %d times; want 1", n)
	}
}
