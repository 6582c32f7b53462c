package proxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// TestH1ClientNeverReads: over HTTP/1.1, inside a tunnel (decrypted, or
// plain HTTP) or as a plain proxy request on the listener (GET http://…),
// a client that asks for a large answer and never reads it has its
// connection closed once a write has made no progress for idle_timeout:
// the origin's request ends, well before it has sent what the proxy would
// have had to hold, and the proxy serves others. As TestH2ClientNeverReads
// does for h2.
func TestH1ClientNeverReads(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"MITM", "plain HTTP", "listener"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			big := newBigAnswer()
			pki := newTestPKI(t)
			var authority, base string
			if mode == "MITM" {
				o, port := tlsOrigin(t, pki, testRobots, "a.example")
				o.handler = big.serve
				authority, base = "a.example:"+port, "https://a.example:"+port
			} else {
				o := newTestOrigin(t, testRobots, big.serve)
				authority = strings.TrimPrefix(o.URL, "http://")
				base = o.URL
			}
			p := startMITM(t, pki, func(c *config.Config) { c.Limits.IdleTimeout = 500 * time.Millisecond })
			var c net.Conn
			var br *bufio.Reader
			target := "/big"
			if mode == "listener" {
				var err error
				if c, err = net.Dial("tcp", p.url.Host); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				br, target = bufio.NewReader(c), base+"/big"
			} else {
				host, _, _ := net.SplitHostPort(authority)
				c, br = p.rawTunnel(t, authority, host, mode == "plain HTTP")
			}
			io.WriteString(c, "GET "+target+" HTTP/1.1\r\nHost: "+authority+"\r\n\r\n") // and nothing read
			big.ended(t)
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			n, err := io.Copy(io.Discard, br)
			if ne, ok := err.(net.Error); ok && ne.Timeout() || n >= bigAnswerSize {
				t.Errorf("the client read %d bytes, then %v; want the connection closed by the proxy, the answer cut", n, err)
			}
			resp, body := get(t, p.mitmClient(t, nil, false), base+"/public")
			if resp.StatusCode != 200 || body != "small\n" {
				t.Errorf("another client after: %d %q; want 200", resp.StatusCode, body)
			}
		})
	}
}
