package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// hostileConfig has short limits so that the tests are quick. The header
// timeout also bounds a MITM tunnel's TLS handshake (a leaf made and
// signed): 1 s rather than 300 ms, so that a busy machine's is not cut.
func hostileConfig(c *config.Config) {
	c.Limits.ReadHeaderTimeout = time.Second
	c.Limits.MaxHeaderBytes = 4096
}

// closedWithin reports whether the peer closes c (possibly after an
// answer) within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil // io.Copy returns nil on EOF; a timeout is an error
}

func TestHostileClients(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, port := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n", "a.example")
	p := startMITM(t, pki, hostileConfig)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.srv.CA().PEM())
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", p.url.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// inTunnel opens a MITM tunnel and returns its TLS connection.
	inTunnel := func() net.Conn {
		c := dial()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "CONNECT a.example:"+port+" HTTP/1.1\r\nHost: a.example\r\n\r\n")
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "a.example"})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Time{})
		return tc
	}
	bigHeader := "X-Big: " + strings.Repeat("a", 8192) + "\r\n"
	for _, tt := range []struct {
		name string
		conn func() net.Conn
	}{{"plain", dial}, {"in a MITM tunnel", inTunnel}} {
		t.Run(tt.name, func(t *testing.T) {
			// Slowloris: headers that never end are cut after read_header_timeout.
			c := tt.conn()
			io.WriteString(c, "GET https://a.example:"+port+"/ HTTP/1.1\r\nHost: a.example:"+port+"\r\nX-Slow: ")
			if !closedWithin(c, 5*time.Second) {
				t.Error("slowloris connection still open after read_header_timeout")
			}
			// Oversized headers: 431.
			c = tt.conn()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "GET https://a.example:"+port+"/ HTTP/1.1\r\nHost: a.example:"+port+"\r\n"+bigHeader+"\r\n")
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("oversized headers: %v %v; want 431", resp, err)
			}
			// A malformed request line: 400, never a panic.
			c = tt.conn()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "GET\x00 /\r\n\r\n")
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 400 {
				t.Errorf("malformed request line: %v %v; want 400", resp, err)
			}
		})
	}
	// A malformed URL the parser accepts but robotsgate cannot decide: 400.
	c := dial()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET http://exa%20mple.com:99999/ HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 400 {
		t.Errorf("bad URL: %v %v; want 400", resp, err)
	}
	if strings.Contains(p.log.String(), "panic") {
		t.Errorf("a panic was logged:\n%s", p.log.String())
	}
}
