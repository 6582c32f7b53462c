package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/check"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots"
)

// lenientRobots is the robots.txt of the red-team tests: a private tree
// with an open corner, and a suffix rule.
const lenientRobots = "User-agent: *\nDisallow: /private\nAllow: /private/open\nDisallow: /*.secret$\n"

// lenientOrigin is an origin that logs every request-target it receives,
// byte for byte, and serves files the way lenient servers resolve paths
// (serverResolve): what a red team aims at.
type lenientOrigin struct {
	*httptest.Server
	rules robots.Group

	mu      sync.Mutex
	targets []string // as received
	served  []string // what each resolved to
}

// newLenientOrigin starts one, plain or (with pki) TLS for names, on ln
// (nil: a loopback port of its own).
func newLenientOrigin(t testing.TB, ln net.Listener, pki *testPKI, names ...string) *lenientOrigin {
	t.Helper()
	o := &lenientOrigin{rules: robots.Parse([]byte(lenientRobots), robots.WithNormalization()).Group("*")}
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := policy.RequestTarget(r.RequestURI) // absolute-form too
		file := serverResolve(target)
		o.mu.Lock()
		o.targets = append(o.targets, target)
		o.served = append(o.served, file)
		o.mu.Unlock()
		if file == "/robots.txt" {
			io.WriteString(w, lenientRobots)
			return
		}
		fmt.Fprintf(w, "file %s\n", file)
	}))
	o.Config.ErrorLog = log.New(io.Discard, "", 0)
	if ln != nil {
		o.Listener.Close()
		o.Listener = ln
	}
	if pki != nil {
		o.TLS = &tls.Config{Certificates: []tls.Certificate{pki.serverCert(t, names...)}}
		o.StartTLS()
	} else {
		o.Start()
	}
	t.Cleanup(o.Close)
	return o
}

// last returns the last request-target received and the file it served.
func (o *lenientOrigin) last() (target, file string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.targets) == 0 {
		return "", "", 0
	}
	return o.targets[len(o.targets)-1], o.served[len(o.served)-1], len(o.targets)
}

// leaked returns the request-targets that reached a disallowed file.
func (o *lenientOrigin) leaked() []string { return o.leakedSince(0) }

// leakedSince is leaked for the requests after the first n.
func (o *lenientOrigin) leakedSince(n int) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for i := n; i < len(o.served); i++ {
		for _, f := range []string{o.served[i], pythonResolve(o.targets[i]), tomcatResolve(o.targets[i])} {
			if f != "/robots.txt" && !o.rules.Test(robots.Normalize(fileURLPath(f))).Allowed {
				out = append(out, fmt.Sprintf("%q served %q", o.targets[i], f))
			}
		}
	}
	return out
}

// serverResolve is the file a lenient server serves for a request-target,
// written apart from lenient.Reading so that each checks the other: every
// escape decoded once (Python's http.server, many frameworks), "\" taken
// as "/" (IIS, Windows), ";params" dropped from each segment (Tomcat,
// after decoding here: the more lenient order), runs of "/" merged
// (nginx), then dot segments resolved (RFC 3986 section 5.2.4).
func serverResolve(target string) string {
	path, _, _ := strings.Cut(target, "?")
	decoded := unescapeOnce(path)
	segs := strings.Split(strings.ReplaceAll(decoded, `\`, "/"), "/")
	for i, s := range segs {
		segs[i], _, _ = strings.Cut(s, ";")
	}
	merged := "/" + strings.Join(segs, "/")
	for strings.Contains(merged, "//") {
		merged = strings.ReplaceAll(merged, "//", "/")
	}
	return rfcRemoveDots(merged)
}

// isHexDigit reports whether c is a hexadecimal digit.
func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'f'
}

// unescapeOnce decodes every escape of s once, as most servers do.
func unescapeOnce(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '%' && i+2 < len(s) && isHexDigit(s[i+1]) && isHexDigit(s[i+2]) {
			b.WriteByte(unhexByte(s[i+1])<<4 | unhexByte(s[i+2]))
			i += 2
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func unhexByte(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// pythonResolve is the file Python's http.server serves for a
// request-target (SimpleHTTPRequestHandler.translate_path): every escape
// decoded once, ";" and "\" kept as names, posixpath.normpath (runs of
// "/" merged, dot segments resolved, no trailing "/"), and a trailing "/"
// only when the target's path, still escaped, ended with one.
func pythonResolve(target string) string {
	path, _, _ := strings.Cut(target, "?")
	decoded := unescapeOnce(path)
	var out []string
	for _, w := range strings.Split(decoded, "/") {
		switch w {
		case "", ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, w)
		}
	}
	file := "/" + strings.Join(out, "/")
	if strings.HasSuffix(path, "/") && file != "/" {
		file += "/"
	}
	return file
}

// tomcatResolve is the file a server in Tomcat's order serves: ";params"
// dropped from each segment as sent (up to the next "/" as sent, so a
// "%2F" inside them goes too), then every escape decoded once, runs of
// "/" merged and dot segments resolved.
func tomcatResolve(target string) string {
	path, _, _ := strings.Cut(target, "?")
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i], _, _ = strings.Cut(s, ";")
	}
	merged := "/" + unescapeOnce(strings.Join(segs, "/"))
	for strings.Contains(merged, "//") {
		merged = strings.ReplaceAll(merged, "//", "/")
	}
	return rfcRemoveDots(merged)
}

// rfcRemoveDots is RFC 3986 section 5.2.4, step by step as written.
func rfcRemoveDots(in string) string {
	out := ""
	for in != "" {
		switch {
		case strings.HasPrefix(in, "../"):
			in = in[3:]
		case strings.HasPrefix(in, "./"):
			in = in[2:]
		case strings.HasPrefix(in, "/./"):
			in = in[2:]
		case in == "/.":
			in = "/"
		case strings.HasPrefix(in, "/../"), in == "/..":
			in = "/" + in[min(len(in), 4):]
			if i := strings.LastIndexByte(out, '/'); i >= 0 {
				out = out[:i]
			} else {
				out = ""
			}
		case in == "." || in == "..":
			in = ""
		default:
			n := strings.IndexByte(in[1:], '/') + 1
			if n == 0 {
				n = len(in)
			}
			out += in[:n]
			in = in[n:]
		}
	}
	if out == "" {
		return "/"
	}
	return out
}

// fileURLPath is the URL path of a served file: the bytes a URL cannot
// hold as they are escaped, so that a file named "%70rivate" is not taken
// for "private".
func fileURLPath(file string) string {
	var b strings.Builder
	for i := 0; i < len(file); i++ {
		if c := file[i]; c <= ' ' || c >= 0x7F || c == '%' || c == '?' || c == '#' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// redTeamTargets are spellings of disallowed files, each with the answer
// robotsgate must give: every one reached /private/... or a .secret file
// on a lenient origin before the fix, or was sent re-encoded.
var redTeamTargets = []struct {
	target string
	status int
}{
	{"/x#/../private/secret.txt", 400},
	{"/public?q=1#/../../private", 400}, // decided on /x, sent as /x%23/../private/...
	{"/public/..%2Fprivate/x", 403},     // decoded %2F
	{"/public%2F..%2Fprivate%2Fx", 403}, // decoded %2F throughout
	{"/public/..%2fprivate/x", 403},     // lower-case escape
	{`/public/..\private/x`, 400},       // "\" as "/": a byte no URI path holds
	{"/public/..%5Cprivate/x", 403},     // escaped "\" (IIS)
	{"//private/x", 403},                // merged slashes
	{"/public/..;/private/x", 403},      // Tomcat's path parameters
	{"/public/..%3B/private/x", 403},    // the same, escaped
	{"/private/open/..;/x", 403},        // allowed exactly (Allow: /private/open), not leniently
	{"/a.secret;v=1", 403},              // "$" rule reached through params
	{"/public/x|/..%2F..%2Fprivate/x", 400},
	{"/public/\xc3\xa9/..%2F..%2Fprivate", 400},
	{"/x.secret\x85", 400},             // Python splits its request line on U+0085
	{"/x.secret\xa0", 400},             // and on U+00A0
	{"/a//../private/secret.txt", 403}, // ".." after "//": Normalize resolved it first, nginx merges first
	{"/public//../private/x", 403},     // the same
	{"/a/b%2F../../private", 403},      // ".." after a decoded %2F (Python's http.server)
	{`/a/b\../../private`, 400},        // ".." after "\"
	{"/a/b%5C../../private", 403},      // ".." after "%5C"
	{"/public/.;/../private", 403},     // ".." after a Tomcat-style ".;"
	{"/private/open/x%2F../../y", 403}, // allowed exactly (Allow: /private/open), not leniently
	// A reading that drops ";" (Tomcat) or reads "%5C" as "/" (IIS) has one
	// segment less for ".." than Python's, which keeps them as names: each
	// server's reading is decided, not one for all.
	{"/%2Fprivate/;/../secret.txt", 403},
	{"/%2Fprivate/%3B/../secret.txt", 403},
	{"/%2F/private/;x/../secret.txt", 403},
	{"/%2F/private/%5C/../secret.txt", 403},
	{"/%2F/private/..;/../secret.txt", 403},
	{"/a/..//private/;/../secret.txt", 403},
	{"/%2e//private%2F%5C%2F%2E%2e//", 403},
	// Python's normpath drops a trailing "/" the target did not end with.
	{"/x.secret/.", 403},
	{"/x.secret//.", 403},
	{"/x.secret/%2e", 403},
	{"/x.secret%2F", 403},
	{"/x.secret%2f", 403},
	{"/x.secret%2F.", 403},
	{"/x.secret/;/..", 403},
	// Tomcat drops ";params" up to the next "/" as sent, before decoding.
	{"/%2Fprivate;%2F..%2F/secret.txt", 403},
	{"/%2Fprivate;x%2F..", 403},
	{"/;%2fopen/%2Fprivate", 403},
	{"/%2F/;/private;x%2f..;", 403},
	{"/private", 403},
	{"/private/open/x", 200},
	{"/public/a%2Fb?c={\"d\"}|x", 200},
	{"/public/a[1].html", 200},            // "[" and "]" as Python's requests sends them    // allowed, and must arrive byte for byte
	{"/public/caf%C3%A9?q=%2F..%2F", 200}, // the query is not a path
	{"/public/%252F..%252Fprivate", 200},  // one decoding only: a file named "%2F..%2Fprivate"
}

// checkRedTeam sends every red-team target with send and checks the
// answer, that nothing disallowed was served, and that an allowed target
// reached the origin byte for byte.
func checkRedTeam(t *testing.T, o *lenientOrigin, send func(target string) *http.Response) {
	t.Helper()
	for _, tt := range redTeamTargets {
		_, _, before := o.last()
		resp := send(tt.target)
		if resp.StatusCode != tt.status {
			t.Errorf("GET %q: %d %q; want %d", tt.target, resp.StatusCode, resp.Header.Get("X-Robots-Gate"), tt.status)
		}
		got, _, after := o.last()
		switch {
		case tt.status == 200 && got != tt.target:
			t.Errorf("GET %q reached the origin as %q; want it byte for byte", tt.target, got)
		case tt.status != 200 && after > before && got == tt.target:
			t.Errorf("GET %q was answered %d but reached the origin", tt.target, resp.StatusCode)
		}
		if tt.status == 403 && !strings.Contains(resp.Header.Get("X-Robots-Gate-Rule"), "(line ") {
			t.Errorf("GET %q: X-Robots-Gate-Rule %q; want the deciding rule", tt.target, resp.Header.Get("X-Robots-Gate-Rule"))
		}
	}
	if l := o.leaked(); len(l) > 0 {
		t.Errorf("disallowed files served:\n%s", strings.Join(l, "\n"))
	}
}

// TestRedTeamPlain sends each spelling on a raw socket, as the client
// wrote it, through the proxy to a lenient origin.
func TestRedTeamPlain(t *testing.T) {
	t.Parallel()
	o := newLenientOrigin(t, nil, nil)
	p := startProxy(t, loopbackConfig())
	host := strings.TrimPrefix(o.URL, "http://")
	checkRedTeam(t, o, func(target string) *http.Response {
		resp, _ := p.raw(t, "GET http://"+host+target+" HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		return resp
	})
	rec := p.auditLines(t)
	found := false
	for _, r := range rec {
		if r["url"] == "http://"+host+"//private/x" {
			found = true
			if reason, _ := r["reason"].(string); !strings.Contains(reason, "ambiguous") || !strings.Contains(reason, "/private/x") {
				t.Errorf("audit reason for //private/x = %q; want it to say the path is ambiguous and what a lenient server serves", reason)
			}
		}
	}
	if !found {
		t.Errorf("no audit record for //private/x: %v", rec)
	}
}

// TestRedTeamMITM sends each spelling inside a MITM tunnel.
func TestRedTeamMITM(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o := newLenientOrigin(t, nil, pki, "lenient.example")
	_, port, _ := net.SplitHostPort(o.Listener.Addr().String())
	p := startMITM(t, pki, nil)
	checkRedTeam(t, o, func(target string) *http.Response {
		c, br := p.rawTunnel(t, "lenient.example:"+port, "lenient.example", false)
		defer c.Close()
		resp, _ := roundTripRaw(t, c, br, "GET "+target+" HTTP/1.1\r\nHost: lenient.example:"+port+"\r\nConnection: close\r\n\r\n")
		return resp
	})
}

// TestRedTeamViaUpstreamProxy: with a plain-HTTP next hop the target goes
// in absolute-form, still byte for byte.
func TestRedTeamViaUpstreamProxy(t *testing.T) {
	t.Parallel()
	o := newLenientOrigin(t, nil, nil)
	next := newRawForwarder(t)
	cfg := loopbackConfig()
	cfg.Upstream.Proxy = "http://" + next.Addr().String()
	p := startProxy(t, cfg)
	host := strings.TrimPrefix(o.URL, "http://")
	checkRedTeam(t, o, func(target string) *http.Response {
		resp, _ := p.raw(t, "GET http://"+host+target+" HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		return resp
	})
}

// newRawForwarder is a next-hop proxy that passes the request line on as
// it came (absolute-form, which any origin must accept) to the host it
// names, and the rest of the connection both ways: it rebuilds nothing.
func newRawForwarder(t testing.TB) net.Listener {
	return serveRawTCP(t, func(c net.Conn, br *bufio.Reader) {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.SplitN(line, " ", 3)
		if len(f) != 3 || !strings.HasPrefix(f[1], "http://") {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
			return
		}
		host, _, _ := strings.Cut(strings.TrimPrefix(f[1], "http://"), "/")
		up, err := net.DialTimeout("tcp", host, 5*time.Second)
		if err != nil {
			io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
			return
		}
		defer up.Close()
		io.WriteString(up, line)
		go io.Copy(up, br)
		io.Copy(c, up)
	})
}

// serveRawTCP serves each connection to a loopback listener of its own
// with handle, in a goroutine, under a 10 s deadline, and closes it after.
func serveRawTCP(t testing.TB, handle func(c net.Conn, br *bufio.Reader)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				handle(c, bufio.NewReader(c))
			}()
		}
	}()
	return ln
}

// TestRedTeamCheck: check decides URLs as the proxy does, both readings.
func TestRedTeamCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range redTeamTargets {
		if tt.status == 400 {
			continue // a URL's fragment is the client's own: check cuts it
		}
		var errOut strings.Builder
		var d *policy.Decision
		c := &check.Checker{Robots: []byte(lenientRobots)}
		err := c.Run(t.Context(), []string{"http://example.com" + tt.target}, func(_ string, got *policy.Decision) error {
			d = got
			return nil
		}, &errOut)
		if d == nil || d.Allowed() != (tt.status == 200) {
			t.Errorf("check %q: %+v %v %q; want allowed = %v", tt.target, d, err, errOut.String(), tt.status == 200)
		}
	}
}

// TestNonUpgradeResponseClosesNothing: an origin answering 200 with
// "Connection: Upgrade" and "Upgrade: websocket" made goproxy take the
// client's connection and leave it open for good; 20 such requests held
// 20 connections. The headers never reach the client now, and every
// connection ends when the client's does.
func TestNonUpgradeResponseClosesNothing(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "websocket")
		io.WriteString(w, "not upgraded\n")
	})
	p := startProxy(t, loopbackConfig())
	host := strings.TrimPrefix(o.URL, "http://")
	for i := range 20 {
		resp, body := p.raw(t, fmt.Sprintf("GET http://%s/ws%d HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", host, i, host))
		if resp.StatusCode != 200 || body != "not upgraded\n" || resp.Header.Get("Upgrade") != "" {
			t.Fatalf("request %d: %d %q, Upgrade %q; want 200, the body, no Upgrade", i, resp.StatusCode, body, resp.Header.Get("Upgrade"))
		}
	}
	waitForConns(t, p, 0)
}

// waitForConns polls until the proxy holds want client connections.
func waitForConns(t *testing.T, p *testProxy, want int64) {
	t.Helper()
	if !testkit.Poll(5*time.Second, func() bool { return p.srv.conns.count.Load() == want }) {
		t.Errorf("open connections: %d; want %d", p.srv.conns.count.Load(), want)
	}
}

// TestWebSocketEndsBothSides: when the origin ends a WebSocket, the
// client's side is closed too; when it goes idle, both are closed after
// tunnel_idle_timeout.
func TestWebSocketEndsBothSides(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/idle" {
			c, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			buf.Flush()
			select { // silent until the test ends
			case <-release:
			case <-time.After(10 * time.Second):
			}
			return
		}
		wsEcho(w, r) // echoes one line, then closes
	})
	// Two proxies: /ws on the default tunnel_idle_timeout, so that a slow
	// machine's pause between the 101 and "hello" is not taken for
	// idleness; /idle on one short enough to be reached before the
	// client's deadline.
	busy := startProxy(t, loopbackConfig())
	cfg := loopbackConfig()
	cfg.Limits.TunnelIdleTimeout = 300 * time.Millisecond
	idle := startProxy(t, cfg)
	host := strings.TrimPrefix(o.URL, "http://")
	for _, path := range []string{"/ws", "/idle"} {
		p := busy
		if path == "/idle" {
			p = idle
		}
		c, err := net.DialTimeout("tcp", p.url.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, wsUpgrade, o.URL+path, host)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("%s: %v %v; want 101", path, resp, err)
		}
		if path == "/ws" {
			io.WriteString(c, "hello\n")
			if line, _ := br.ReadString('\n'); line != "echo: hello\n" {
				t.Errorf("relayed %q; want the echo", line)
			}
		}
		if _, err := io.Copy(io.Discard, br); err != nil { // EOF is nil; the 5 s deadline is not
			t.Errorf("%s: client side still open after the origin ended or went idle: %v", path, err)
		}
		waitForConns(t, p, 0)
	}
}

// TestTunnelModePlainHTTPDecided: tunnel mode decides only whole origins
// at CONNECT time, so plain HTTP inside "CONNECT host:80" went through
// undecided. It is decided request by request now, as in MITM mode.
func TestTunnelModePlainHTTPDecided(t *testing.T) {
	t.Parallel()
	// The finding is about port 80: listen on it on a loopback address of
	// this test's own (root, as CI runs, may bind it).
	ln, err := net.Listen("tcp", "127.0.80.17:80")
	if err != nil {
		t.Skipf("cannot listen on port 80 here (%v): the tunnel-mode port-80 test needs it", err)
	}
	o := newLenientOrigin(t, ln, nil)
	p := startMITM(t, nil, func(c *config.Config) { c.TLS.Mode = "tunnel" })
	c, br := p.rawTunnel(t, "127.0.80.17:80", "", true)
	for _, tt := range []struct {
		target string
		status int
	}{{"/private/secret.txt", 403}, {"/public/..%2Fprivate/x", 403}, {"/public", 200}, {"/x#/../private/y", 400}} {
		resp, _ := roundTripRaw(t, c, br, "GET "+tt.target+" HTTP/1.1\r\nHost: 127.0.80.17\r\n\r\n")
		if resp.StatusCode != tt.status {
			t.Errorf("plain %q inside a tunnel-mode CONNECT: %d; want %d", tt.target, resp.StatusCode, tt.status)
		}
	}
	if l := o.leaked(); len(l) > 0 {
		t.Errorf("disallowed files served:\n%s", strings.Join(l, "\n"))
	}
	// Neither TLS nor an HTTP/1.x request line (a lower-case method, a
	// leading CRLF some servers skip): closed, never relayed.
	for _, first := range []string{"get /private/x HTTP/1.1\r\nHost: 127.0.80.17\r\n\r\n", "\r\nGET /private/x HTTP/1.1\r\nHost: 127.0.80.17\r\n\r\n", "\x16\x00\x00GET /private/x"} {
		c, br := p.rawTunnel(t, "127.0.80.17:80", "", true)
		io.WriteString(c, first)
		if resp, err := http.ReadResponse(br, nil); err == nil && resp.StatusCode == 200 {
			t.Errorf("%q inside a tunnel: 200; want it refused or closed", first)
		}
	}
	if l := o.leaked(); len(l) > 0 {
		t.Errorf("disallowed files served:\n%s", strings.Join(l, "\n"))
	}
}

// TestPrivateNumericHosts: numeric IPv4 forms and IPv4-embedding IPv6
// addresses are private when their address is, even when a next hop
// resolves names (which it would do to loopback).
func TestPrivateNumericHosts(t *testing.T) {
	t.Parallel()
	next := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("next hop reached for %s", r.RequestURI)
	}))
	t.Cleanup(next.Close)
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Upstream.Proxy = next.URL // block_private stays on
	p := startProxy(t, cfg)
	for _, host := range []string{"127.1", "2130706433", "0x7f000001", "017700000001", "0x7f.1", "0177.0.0.1", "127.0.0.1.",
		"10.1", "0xa9fea9fe", "[64:ff9b::7f00:1]", "[64:ff9b::a9fe:a9fe]", "[64:ff9b:1::7f00:1]", "[2002:7f00:1::1]", "[::127.0.0.1]", "[::ffff:7f00:1]"} {
		resp, _ := get(t, p.client(), "http://"+host+"/x")
		if resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate") != "private-address" {
			t.Errorf("%s: %d %q; want 403 private-address", host, resp.StatusCode, resp.Header.Get("X-Robots-Gate"))
		}
	}
	// With block_private off, a numeric form is dialled as the address it
	// was decided on (Go's resolver would look "0x7f.1" up in DNS) and
	// audited under the canonical origin.
	var host string
	origin := newTestOrigin(t, "User-agent: *\nAllow: /\n", func(w http.ResponseWriter, r *http.Request) { host = r.Host })
	_, port, _ := net.SplitHostPort(origin.Listener.Addr().String())
	cfg = loopbackConfig()
	cfg.Audit.LogAllowed = true
	p = startProxy(t, cfg)
	if resp, _ := get(t, p.client(), "http://0x7f.1:"+port+"/page"); resp.StatusCode != 200 || host != "127.0.0.1:"+port {
		t.Errorf("http://0x7f.1:%s/page: %d, Host %q; want 200 from 127.0.0.1:%s", port, resp.StatusCode, host, port)
	}
	if rec := p.lastAudit(t); rec["origin"] != "http://127.0.0.1:"+port {
		t.Errorf("audit origin = %v; want http://127.0.0.1:%s", rec["origin"], port)
	}
}

// TestRobotsFetchesBounded: requests to many cold origins that never
// answer, each client leaving at once, left a descriptor and a fetch
// behind each. Fetches in flight are bounded now: past the bound the
// answer is 503 overloaded at once, and fetches nobody waits for are
// given up to make room.
func TestRobotsFetchesBounded(t *testing.T) {
	t.Parallel()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	var mu sync.Mutex
	var open, accepted int
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open, accepted = open+1, accepted+1
			mu.Unlock()
			go func() { // never answers; counts the close
				io.Copy(io.Discard, c)
				c.Close()
				mu.Lock()
				open--
				mu.Unlock()
			}()
		}
	}()
	_, port, _ := net.SplitHostPort(silent.Addr().String())
	p := startMITM(t, nil, func(c *config.Config) { c.Robots.MaxFetches = 4 }) // every name resolves to 127.0.0.1
	client := p.client()
	// get asks for u until ctx ends (its client leaves), and reports
	// whether the answer was 503 overloaded.
	get := func(ctx context.Context, u string) bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := client.Do(req)
		if err != nil {
			return false // this client left
		}
		resp.Body.Close()
		return resp.StatusCode == 503 && resp.Header.Get("X-Robots-Gate") == "overloaded"
	}
	// The cache's own count of fetches in flight, sampled throughout (the
	// listener sees a given-up fetch's close a little after its slot is
	// free).
	peak, stop := 0, make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak = max(peak, p.srv.cache.Stats().FetchesInFlight)
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	// 30 cold origins: 4 fetches start and wait on the silent origin;
	// the other 26 are answered while those wait, however long a busy
	// machine takes. Then their clients leave.
	const n, slots = 30, 4
	first, leave := context.WithCancel(t.Context())
	var answered, overloaded atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if get(first, fmt.Sprintf("http://cold%d.test:%s/x", i, port)) {
				overloaded.Add(1)
			}
			if first.Err() == nil {
				answered.Add(1)
			}
		}()
	}
	if !testkit.Poll(10*time.Second, func() bool { return answered.Load() >= n-slots }) {
		leave()
		t.Fatalf("%d of %d requests answered while %d fetches wait; want %d", answered.Load(), n, slots, n-slots)
	}
	leave()
	wg.Wait()
	if overloaded.Load() == 0 {
		t.Error("no request was answered 503 overloaded past max_fetches = 4")
	}
	// Every client has left: a request for the next cold origin gives up
	// one of their fetches for its own, seen at the silent origin. Until
	// the proxy has noticed they left, such a request is answered
	// overloaded: then the next origin is asked, a bounded number of
	// times. These clients leave at the end.
	dialled := func() int { // connections the silent origin has accepted
		mu.Lock()
		defer mu.Unlock()
		return accepted
	}
	later, leaveLater := context.WithCancel(t.Context())
	defer func() {
		leaveLater()
		wg.Wait()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; dialled() <= slots; i++ {
		if i == 100 || time.Now().After(deadline) {
			t.Fatalf("%d requests for new cold origins, none given a fetch nobody waits for", i)
		}
		answered := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			get(later, fmt.Sprintf("http://later%d.test:%s/x", i, port))
			close(answered)
		}()
		// Until its fetch reaches the silent origin, or it is answered
		// (the loop's bound fails the test past the deadline).
		testkit.Poll(time.Until(deadline), func() bool { return dialled() > slots || chanClosed(answered) })
	}
	var o, a int
	if !testkit.Poll(5*time.Second, func() bool {
		mu.Lock()
		o, a = open, accepted
		mu.Unlock()
		return o <= 4 && a > 4
	}) {
		t.Fatalf("%d connections open at the silent origin, %d ever; want at most max_fetches = 4 open, and fetches nobody waited for given up for new ones", o, a)
	}
	close(stop)
	<-sampled
	if peak > 4 {
		t.Errorf("%d robots.txt fetches in flight at once; want at most max_fetches = 4", peak)
	}
}

// chanClosed reports whether ch is closed.
func chanClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
