package proxy

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestH2CleartextInTunnelIsClosed: HTTP/2's connection preface in the
// clear inside a CONNECT (h2c with prior knowledge: curl
// --http2-prior-knowledge --proxytunnel), plain or inside a MITM TLS
// connection that chose HTTP/1.1, is neither TLS nor HTTP/1.x: the
// connection is closed with nothing written (no 505 an h2c client would
// not read) and the log says why, as for any such traffic.
func TestH2CleartextInTunnelIsClosed(t *testing.T) {
	t.Parallel()
	p := startMITM(t, nil, nil)
	for _, plain := range []bool{true, false} {
		c, br := p.rawTunnel(t, "a.example:443", "a.example", plain)
		io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := io.Copy(io.Discard, br)
		if err != nil || n != 0 {
			t.Errorf("plain %v: read %d bytes, then %v; want the connection closed (EOF) at once, nothing written", plain, n, err)
		}
	}
	waitForLog(t, p.log, "HTTP/2 without TLS (h2c prior knowledge) is not served: closed")
	if n := strings.Count(p.log.String(), "h2c prior knowledge"); n != 2 {
		t.Errorf("logged %d times; want 2", n)
	}
}
