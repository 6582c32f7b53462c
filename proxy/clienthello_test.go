package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"
)

// helloBytes returns the records of the ClientHello crypto/tls sends for
// cfg: what a real client writes into a tunnel first.
func helloBytes(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		c := tls.Client(client, cfg)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Handshake() // ends when the pipe closes
		client.Close()
	}()
	server.SetDeadline(time.Now().Add(5 * time.Second))
	var buf bytes.Buffer
	read, _, err := readClientHello(teeReader{server, &buf})
	if err != nil {
		t.Fatalf("readClientHello: %v", err)
	}
	return read
}

type teeReader struct {
	c   net.Conn
	buf *bytes.Buffer
}

func (r teeReader) Read(p []byte) (int, error) {
	n, err := r.c.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

// TestClientHello reads real ClientHellos and what crypto/tls reads of
// them agrees; hand-made ones with a trailing dot, ECH, or framing that
// does not add up are read (or refused) as a careful server would.
func TestClientHello(t *testing.T) {
	t.Parallel()
	for _, cfg := range []*tls.Config{
		{ServerName: "example.com"},
		{ServerName: "xn--mller-kva.example"},
		{ServerName: "127.0.0.1"}, // an IP: no server name is sent
		{ServerName: "a.example", MaxVersion: tls.VersionTLS12},
		{ServerName: "a.example", NextProtos: []string{"h2", "http/1.1"}},
	} {
		read := helloBytes(t, cfg)
		_, msg, err := readClientHello(bytes.NewReader(read))
		if err != nil {
			t.Fatalf("%s: %v", cfg.ServerName, err)
		}
		got, err := parseClientHello(msg)
		want := cfg.ServerName
		if want == "127.0.0.1" {
			want = ""
		}
		if err != nil || got.serverName != want || got.ech {
			t.Errorf("ClientHello for %q: %+v, %v; want server name %q, no ECH", cfg.ServerName, got, err, want)
		}
		name, ok := stdServerName(read)
		if !ok || name != got.serverName {
			t.Errorf("ClientHello for %q: crypto/tls reads %q (%v); we read %q", cfg.ServerName, name, ok, got.serverName)
		}
	}

	// Hand-made: a ClientHello of the given extensions.
	hello := func(exts ...[]byte) []byte {
		body := append([]byte{3, 3}, make([]byte, 32)...) // version, random
		body = append(body, 0)                            // session id
		body = append(body, 0, 2, 0x13, 0x01)             // one cipher suite
		body = append(body, 1, 0)                         // no compression
		var e []byte
		for _, x := range exts {
			e = append(e, x...)
		}
		body = append(body, byte(len(e)>>8), byte(len(e)))
		body = append(body, e...)
		return append([]byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	}
	sni := func(names ...string) []byte {
		var list []byte
		for _, n := range names {
			list = append(list, 0, byte(len(n)>>8), byte(len(n)))
			list = append(list, n...)
		}
		data := append([]byte{byte(len(list) >> 8), byte(len(list))}, list...)
		return append([]byte{0, 0, byte(len(data) >> 8), byte(len(data))}, data...)
	}
	ech := []byte{0xfe, 0x0d, 0, 1, 0}
	for _, tt := range []struct {
		name string
		msg  []byte
		want helloInfo
		ok   bool
	}{
		{"trailing dot", hello(sni("a.example.")), helloInfo{serverName: "a.example."}, true},
		{"ECH", hello(sni("public.example"), ech), helloInfo{serverName: "public.example", ech: true}, true},
		{"no extensions", hello(), helloInfo{}, true},
		{"two host names", hello(sni("a.example", "b.example")), helloInfo{}, false},
		{"server_name twice", hello(sni("a.example"), sni("b.example")), helloInfo{}, false},
		{"empty host name", hello(sni("")), helloInfo{}, false},
		{"truncated", hello(sni("a.example"))[:40], helloInfo{}, false},
	} {
		got, err := parseClientHello(tt.msg)
		if (err == nil) != tt.ok || tt.ok && got != tt.want {
			t.Errorf("%s: %+v, %v; want %+v (ok %v)", tt.name, got, err, tt.want, tt.ok)
		}
	}

	// Records: one split over two is read whole; other records are not hellos.
	msg := hello(sni("a.example"))
	split := append([]byte{0x16, 3, 1, 0, 10}, msg[:10]...)
	split = append(split, 0x16, 3, 1, byte((len(msg)-10)>>8), byte(len(msg)-10))
	split = append(split, msg[10:]...)
	if _, got, err := readClientHello(bytes.NewReader(split)); err != nil || !bytes.Equal(got, msg) {
		t.Errorf("a ClientHello over two records: %v; want it whole", err)
	}
	for _, bad := range [][]byte{[]byte("GET / HTTP/1.1\r\n"), {0x17, 3, 3, 0, 1, 0}, {0x16, 3, 3, 0xff, 0xff}} {
		if _, _, err := readClientHello(bytes.NewReader(bad)); !errors.Is(err, errNotHello) {
			t.Errorf("readClientHello(%q) = %v; want errNotHello", bad, err)
		}
	}
}

// stdServerName is crypto/tls's reading of a ClientHello's server name;
// ok is false when it could not read the hello.
func stdServerName(records []byte) (string, bool) {
	var name string
	var named bool
	c := tls.Server(&replayConn{r: bytes.NewReader(records)}, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name, named = h.ServerName, true
		return nil, errors.New("read")
	}})
	c.Handshake()
	return name, named
}

// replayConn reads from r and swallows writes.
type replayConn struct {
	net.Conn
	r *bytes.Reader
}

func (c *replayConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *replayConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// FuzzClientHello: on any bytes the reader never panics, never reads past
// its bound, and whenever crypto/tls reads a server name, it reads the
// same one.
func FuzzClientHello(f *testing.F) {
	for _, name := range []string{"example.com", "a.b.example", "127.0.0.1"} {
		f.Add(helloBytes(f, &tls.Config{ServerName: name}))
	}
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	odd := helloBytes(f, &tls.Config{ServerName: "example.com"})
	odd[1], odd[2] = 11, 1 // a record version crypto/tls takes on a first record
	f.Add(odd)
	f.Fuzz(func(t *testing.T, records []byte) {
		read, msg, err := readClientHello(bytes.NewReader(records))
		if len(read) > len(records) || len(read) > maxHello+maxRecord+5 {
			t.Fatalf("read %d bytes of %d", len(read), len(records))
		}
		var info helloInfo
		if err == nil {
			info, err = parseClientHello(msg)
		}
		if name, ok := stdServerName(records); ok && name != "" && (err != nil || info.serverName != name) {
			t.Fatalf("crypto/tls reads server name %q; we read %+v, %v", name, info, err)
		}
	})
}
