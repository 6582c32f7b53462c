package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// wsOrigin is a WebSocket origin on a raw loopback listener (TLS with a
// certificate from pki when set), so that every byte it receives is seen
// as it came. It answers /robots.txt with "allow all" and an upgrade with
// 101 followed, in the same write, by "world\n" (an origin's first frame
// sent with its answer). It then records every byte it receives after the
// request head until it has "bye\n", answers "end\n", and records on to
// the connection's end; the record goes to got.
type wsOrigin struct {
	addr     string
	headSeen chan struct{} // closed when the upgrade's head has been read
	hold     chan struct{} // if not nil, the 101 waits until it is closed
	got      chan string   // what the origin received after the upgrade's head
}

// newWSOrigin starts one; its 101 waits for hold when hold is set.
func newWSOrigin(t *testing.T, pki *testPKI, hold bool, names ...string) *wsOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if pki != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{pki.serverCert(t, names...)}})
	}
	o := &wsOrigin{addr: ln.Addr().String(), headSeen: make(chan struct{}), got: make(chan string, 1)}
	if hold {
		o.hold = make(chan struct{})
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go o.serve(c)
		}
	}()
	return o
}

// serve answers one connection, within a bound of 10 s.
func (o *wsOrigin) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	r, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if r.URL.Path == "/robots.txt" {
		const robots = "User-agent: *\nAllow: /\n"
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(robots), robots)
		return
	}
	close(o.headSeen)
	if o.hold != nil {
		select {
		case <-o.hold:
		case <-time.After(10 * time.Second):
			return
		}
	}
	io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nworld\n")
	var got []byte
	buf := make([]byte, 4<<10)
	for sentEnd := false; ; {
		n, err := br.Read(buf)
		got = append(got, buf[:n]...)
		if !sentEnd && strings.Contains(string(got), "bye\n") {
			io.WriteString(c, "end\n")
			sentEnd = true
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				got = append(got, fmt.Sprintf(" (then %v)", err)...)
			}
			o.got <- string(got)
			return
		}
	}
}

// TestWebSocketBytesRelayedOnce: what a client sends right after its
// upgrade request (in the same write, or while the origin has not yet
// answered) is held by the proxy's server when the connection is taken
// over. The plain path relayed it twice (hello\nhello\n, or hhello when
// one byte had been read by net/http's background read): the
// connection handed out read through the reader that held those bytes,
// and goproxy relays what that reader holds before it reads the
// connection. Each byte must reach the origin once, and the origin's own
// first bytes, sent with its 101, the client once: plain, inside a MITM
// tunnel, and as plain HTTP inside a CONNECT sent in the same write.
func TestWebSocketBytesRelayedOnce(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	plain := startProxy(t, loopbackConfig())
	mitm := startMITM(t, pki, nil)
	for _, tt := range []struct {
		name  string
		entry string // "plain", "mitm" (TLS in a CONNECT tunnel), "connect" (plain HTTP in one)
		// early: the client's first bytes go in the upgrade's write;
		// otherwise they are sent once the origin has the request, and
		// the origin answers only then.
		early bool
	}{
		{"plain, with the request", "plain", true},
		{"plain, before the 101", "plain", false},
		{"MITM, with the request", "mitm", true},
		{"MITM, before the 101", "mitm", false},
		{"CONNECT, upgrade and first bytes in one write", "connect", true},
		{"CONNECT, before the 101", "connect", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var o *wsOrigin
			var c net.Conn
			var br *bufio.Reader
			var target, host, connect string
			switch tt.entry {
			case "mitm":
				o = newWSOrigin(t, pki, !tt.early, "ws.example")
				_, port, _ := net.SplitHostPort(o.addr)
				host = "ws.example:" + port
				c, br = mitm.rawTunnel(t, host, "ws.example", false)
				target = "/ws"
			default:
				o = newWSOrigin(t, nil, !tt.early)
				p := plain
				host, target = o.addr, "http://"+o.addr+"/ws"
				if tt.entry == "connect" {
					p, target = mitm, "/ws"
					connect = fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
				}
				var err error
				if c, err = net.DialTimeout("tcp", p.url.Host, 5*time.Second); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				br = bufio.NewReader(c)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			upgrade := connect + fmt.Sprintf(wsUpgrade, target, host)
			if tt.early {
				upgrade += "hello\n" // one write: buffered with the head, every time
			}
			if _, err := io.WriteString(c, upgrade); err != nil {
				t.Fatal(err)
			}
			if !tt.early {
				select {
				case <-o.headSeen:
				case <-time.After(10 * time.Second):
					t.Fatal("the upgrade never reached the origin")
				}
				if _, err := io.WriteString(c, "hello\n"); err != nil {
					t.Fatal(err)
				}
				close(o.hold)
			}
			if connect != "" {
				resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("CONNECT: %v %v; want 200", resp, err)
				}
			}
			checkRelayedOnce(t, c, br, o)
		})
	}
}

// checkRelayedOnce reads the 101 on c, checks that the origin's "world\n"
// arrives once, sends "bye\n", reads the origin's "end\n", ends the
// client's side and checks what the origin received.
func checkRelayedOnce(t *testing.T, c net.Conn, br *bufio.Reader, o *wsOrigin) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v; want 101", resp, err)
	}
	if line, err := br.ReadString('\n'); line != "world\n" {
		t.Errorf("first line from the origin: %q %v; want %q", line, err, "world\n")
	}
	if _, err := io.WriteString(c, "bye\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); line != "end\n" {
		t.Errorf("next line from the origin: %q %v; want %q (the origin's first bytes once)", line, err, "end\n")
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(br); len(rest) != 0 || err != nil {
		t.Errorf("after end: %q %v; want nothing, then the connection's end", rest, err)
	}
	select {
	case got := <-o.got:
		if got != "hello\nbye\n" {
			t.Errorf("origin received %q; want %q (each byte once)", got, "hello\nbye\n")
		}
	case <-time.After(10 * time.Second):
		t.Error("the origin's side never ended after the client's did")
	}
}

// hijackWriter is a ResponseWriter whose Hijack hands out conn and a
// server reader that has already read buffered from it.
type hijackWriter struct {
	http.ResponseWriter
	conn     net.Conn
	buffered string
}

func (w *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	br := bufio.NewReader(io.MultiReader(strings.NewReader(w.buffered), w.conn))
	if _, err := br.Peek(len(w.buffered)); err != nil {
		return nil, nil, err
	}
	return w.conn, bufio.NewReadWriter(br, bufio.NewWriter(w.conn)), nil
}

// TestHijackHandsOutBytesOnce: whichever way a caller of respWriter's
// Hijack reads the client (the connection, the reader, or what the reader
// holds and then the connection, as goproxy's WebSocket relay does), it
// reads what the server had buffered once, then the rest.
func TestHijackHandsOutBytesOnce(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		read func(net.Conn, *bufio.ReadWriter) io.Reader
	}{
		{"the connection", func(c net.Conn, _ *bufio.ReadWriter) io.Reader { return c }},
		{"the reader", func(_ net.Conn, rw *bufio.ReadWriter) io.Reader { return rw.Reader }},
		{"what the reader holds, then the connection", func(c net.Conn, rw *bufio.ReadWriter) io.Reader {
			held, _ := rw.Reader.Peek(rw.Reader.Buffered())
			return io.MultiReader(strings.NewReader(string(held)), c)
		}},
	} {
		for _, buffered := range []string{"", "h", "hello\n"} {
			server, client := net.Pipe()
			go func() {
				io.WriteString(client, "world\n")
				client.Close()
			}()
			w := &respWriter{ResponseWriter: &hijackWriter{conn: server, buffered: buffered}}
			c, rw, err := w.Hijack()
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(tt.read(c, rw))
			if want := buffered + "world\n"; string(got) != want || err != nil {
				t.Errorf("%s, %q buffered: read %q %v; want %q", tt.name, buffered, got, err, want)
			}
			w.closeHijacked()
		}
	}
}
