package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/header"
)

// TestTunnelModeServerName: in tunnel mode a CONNECT is decided on its
// host's robots.txt, so the TLS ClientHello inside must name that host: a
// name-based server at the same address would serve the site it names.
// One naming another site is closed before a byte of it is relayed, and
// audited misdirected; one naming the CONNECT host (in any case, with a
// trailing dot) or none (a client that dialled an address) goes through.
func TestTunnelModeServerName(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o := newWireOrigin(t, pki, "a.example", "127.0.0.1")
	p := startMITM(t, pki, func(c *config.Config) { c.TLS.Mode = "tunnel" })
	roots := x509.NewCertPool()
	roots.AddCert(pki.cert)
	handshake := func(authority, serverName string) (*tls.Conn, error) {
		resp, c, _ := connect(t, p, authority)
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT %s: %s", authority, resp.Status)
		}
		tc := tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: roots})
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		return tc, tc.Handshake()
	}

	if _, err := handshake("a.example:"+o.port(), "b.example"); err == nil {
		t.Error("CONNECT a.example, ClientHello for b.example: handshake done; want the tunnel closed")
	}
	if raw := o.receivedRaw(); strings.Contains(raw, "b.example") {
		t.Errorf("the origin received a ClientHello naming b.example (%d bytes); want nothing relayed", len(raw))
	}
	rec := p.lastAudit(t)
	if rec["decision"] != "misdirected" || rec["msg"] != "refused" || rec["status"] != 421.0 || !strings.Contains(rec["reason"].(string), "b.example") {
		t.Errorf("audit = %v; want misdirected, 421, naming b.example", rec)
	}

	// Encrypted Client Hello hides the real server name: refused. A
	// trailing dot (which Go's own TLS stacks strip or refuse, but others
	// send) is the same host: relayed.
	for _, tt := range []struct {
		name   string
		hello  []byte
		relays bool
	}{
		{"ECH", handHello("a.example", true), false},
		{"trailing dot", handHello("a.example.", false), true},
	} {
		resp, c, _ := connect(t, p, "a.example:"+o.port())
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(tt.hello)
		buf := make([]byte, 64)
		c.Read(buf) // the origin's alert (it refuses a bare hello), or the close
		c.Close()
		relayed := bytes.Contains([]byte(o.receivedRaw()), tt.hello)
		if tt.relays { // what is refused is never relayed: the audit below says it was refused
			relayed = testkit.Poll(5*time.Second, func() bool { return bytes.Contains([]byte(o.receivedRaw()), tt.hello) })
		}
		if relayed != tt.relays {
			t.Errorf("%s: relayed %v; want %v", tt.name, relayed, tt.relays)
		}
		if rec := p.lastAudit(t); !tt.relays && (rec["decision"] != "misdirected" || !strings.Contains(rec["reason"].(string), "Encrypted Client Hello")) {
			t.Errorf("%s: audit %v %q; want misdirected, naming ECH", tt.name, rec["decision"], rec["reason"])
		}
	}

	for _, tt := range []struct{ authority, serverName string }{
		{"a.example:" + o.port(), "A.EXAMPLE."},
		{"127.0.0.1:" + o.port(), "127.0.0.1"},  // an IP: no server name is sent
		{"2130706433:" + o.port(), "127.0.0.1"}, // 127.0.0.1 spelt as a number: dialled as decided
	} {
		tc, err := handshake(tt.authority, tt.serverName)
		if err != nil {
			t.Errorf("CONNECT %s, ClientHello for %q: %v; want the tunnel opened", tt.authority, tt.serverName, err)
			continue
		}
		if _, err := fmt.Fprintf(tc, "GET /x HTTP/1.1\r\nHost: %s\r\n\r\n", tt.authority); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 512)
		n, _ := tc.Read(buf)
		if !strings.Contains(string(buf[:n]), "answer to /x") {
			t.Errorf("CONNECT %s, ClientHello for %q: %q; want the origin's answer", tt.authority, tt.serverName, buf[:n])
		}
		tc.Close()
	}
}

// handHello is a ClientHello's records with a server name, and with an
// encrypted_client_hello extension when ech: what clients other than Go's
// send.
func handHello(serverName string, ech bool) []byte {
	name := []byte(serverName)
	sni := []byte{0, 0, 0, byte(len(name) + 5), 0, byte(len(name) + 3), 0, 0, byte(len(name))}
	sni = append(sni, name...)
	exts := sni
	if ech {
		exts = append(exts, 0xfe, 0x0d, 0, 1, 0)
	}
	body := append([]byte{3, 3}, bytes.Repeat([]byte{7}, 32)...)
	body = append(body, 0, 0, 2, 0x13, 0x01, 1, 0, byte(len(exts)>>8), byte(len(exts)))
	body = append(body, exts...)
	msg := append([]byte{1, 0, byte(len(body) >> 8), byte(len(body))}, body...)
	return append([]byte{0x16, 3, 1, byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

// TestRequestTrailersFiltered: a request's trailer is held to the rules
// of its header: Proxy-Authorization, the purpose header, Cookie and the
// other fields no trailer may carry never reach the origin, in any entry
// path; others do.
func TestRequestTrailersFiltered(t *testing.T) {
	t.Parallel()
	for _, e := range entryPaths {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			p, o := e.setUp(t, nil)
			c, br := e.open(t, p, o)
			resp, body := send(t, c, br, "POST "+e.target(o, "/upload")+" HTTP/1.1\r\nHost: "+o.addr+"\r\nContent-Type: text/plain\r\n"+
				"Transfer-Encoding: chunked\r\nTrailer: Proxy-Authorization, X-Robots-Gate-Purpose, X_Robots_Gate_Purpose, Cookie, Host, X-Check\r\n\r\n"+
				"5\r\nhello\r\n0\r\nProxy-Authorization: Basic c2VjcmV0OnNlY3JldA==\r\nX-Robots-Gate-Purpose: search\r\nX_Robots_Gate_Purpose: search\r\n"+
				"Cookie: session=secret\r\nHost: elsewhere.example\r\nX-Check: ok\r\n\r\n")
			if resp.StatusCode != 200 || body != "answer to /upload\n" {
				t.Fatalf("chunked POST with a trailer: %d %q", resp.StatusCode, body)
			}
			got := o.received()
			for _, leak := range []string{"Proxy-Authorization", "c2VjcmV0", "Robots-Gate-Purpose", "Robots_Gate_Purpose", "Cookie", "session=secret", "elsewhere.example"} {
				if strings.Contains(got, leak) {
					t.Errorf("the origin received %q; want no %q in it", got, leak)
				}
			}
			if !strings.Contains(got, "X-Check: ok") {
				t.Errorf("the origin received %q; want the X-Check trailer", got)
			}
		})
	}
}

// TestGateFieldsFromOriginRemoved: X-Robots-Gate and X-Robots-Gate-*
// fields in an origin's answer (any case, "_" for "-") never reach the
// client, who can then trust those it sees to be robotsgate's.
func TestGateFieldsFromOriginRemoved(t *testing.T) {
	t.Parallel()
	for _, e := range entryPaths {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			p, o := e.setUp(t, nil)
			o.mu.Lock()
			o.extra = "X-Robots-Gate: disallowed\r\nX-Robots-Gate-Rule: disallow: / (line 1)\r\nx_robots_gate: allowed\r\nx-robots-gate-purpose: search\r\nX-Robots-Gateway: kept\r\n"
			o.mu.Unlock()
			c, br := e.open(t, p, o)
			resp, body := send(t, c, br, "GET "+e.target(o, "/page")+" HTTP/1.1\r\nHost: "+o.addr+"\r\n\r\n")
			if resp.StatusCode != 200 || body != "answer to /page\n" {
				t.Fatalf("GET /page: %d %q", resp.StatusCode, body)
			}
			for k := range resp.Header {
				if header.IsGateField(k) {
					t.Errorf("the client got %s: %q from the origin; want it removed", k, resp.Header[k])
				}
			}
			if resp.Header.Get("X-Robots-Gateway") != "kept" {
				t.Errorf("X-Robots-Gateway = %q; want the origin's (it is not robotsgate's)", resp.Header.Get("X-Robots-Gateway"))
			}
		})
	}
}

// TestStalledBodyEnds: a request body that makes no progress for
// idle_timeout ends the request (408) and frees its upstream connection,
// which the origin sees closed.
func TestStalledBodyEnds(t *testing.T) {
	t.Parallel()
	for _, e := range entryPaths {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			p, o := e.setUp(t, func(c *config.Config) { c.Limits.IdleTimeout = 300 * time.Millisecond })
			c, br := e.open(t, p, o)
			resp, body := send(t, c, br, "POST "+e.target(o, "/upload")+" HTTP/1.1\r\nHost: "+o.addr+"\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nonly ten.")
			if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("X-Robots-Gate") != "bad-request" {
				t.Errorf("a body that stalls: %d %q %q; want 408 bad-request", resp.StatusCode, resp.Header.Get("X-Robots-Gate"), body)
			}
			if !testkit.Poll(10*time.Second, func() bool { return o.closed.Load() > 0 }) {
				t.Fatal("the origin's connection is still open; want it closed")
			}
			if rec := p.lastAudit(t); rec["status"] != 408.0 || rec["decision"] != "bad-request" {
				t.Errorf("audit = %v; want 408 bad-request", rec)
			}
		})
	}
}

// TestTunnelHostAsDecided: inside a tunnel the Host sent upstream is the
// authority decided on, not the client's spelling of it.
func TestTunnelHostAsDecided(t *testing.T) {
	t.Parallel()
	for _, e := range entryPaths[1:] { // those inside a CONNECT
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			p, o := e.setUp(t, nil)
			c, br := e.open(t, p, o)
			host, port := strings.Split(o.addr, ":")[0], o.port()
			spelt := strings.ToUpper(host) + ".:" + port
			resp, body := send(t, c, br, "GET /h HTTP/1.1\r\nHost: "+spelt+"\r\n\r\n")
			if resp.StatusCode != 200 {
				t.Fatalf("GET /h with Host %s: %d %q", spelt, resp.StatusCode, body)
			}
			want := "Host: " + o.addr + "\r\n"
			if port == "80" {
				want = "Host: " + host + "\r\n"
			}
			if got := o.received(); !strings.Contains(got, "GET /h HTTP/1.1\r\n"+want) {
				t.Errorf("the origin received %q; want %q", got, want)
			}
		})
	}
}

// TestSyntaxEscapesDecided: a rule that writes "$" or "*" escaped, or "$"
// where it is not last, names one file with either spelling, since
// servers decode "%24" and "%2A": both spellings are blocked.
func TestSyntaxEscapesDecided(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nDisallow: /price%24list\nDisallow: /cost$list\nDisallow: /star%2Aname\nDisallow: /q?a=%24x\n", nil)
	p := startProxy(t, loopbackConfig())
	c := p.client()
	for _, tt := range []struct {
		path   string
		status int
	}{
		{"/price%24list", 403}, {"/price$list", 403}, {"/price%2524list", 200},
		{"/cost$list", 403}, {"/cost%24list", 403},
		{"/star%2Aname", 403}, {"/star*name", 403},
		{"/q?a=%24x", 403}, {"/q?a=$x", 403},
		{"/pricelist", 200},
	} {
		resp, body := get(t, c, o.URL+tt.path)
		if resp.StatusCode != tt.status {
			t.Errorf("GET %s: %d %q; want %d", tt.path, resp.StatusCode, body, tt.status)
		}
	}
	if n := o.count("/price$list") + o.count("/cost%24list") + o.count("/star*name"); n != 0 {
		t.Errorf("the origin served a blocked spelling %d times", n)
	}
}
