package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
)

// seenRequest is what an origin received.
type seenRequest struct {
	Method, URI, Host string
	Header, Trailer   http.Header
	Body              string
	BodyErr           error
}

// loggingOrigin logs every request it receives, body and trailer read,
// and serves a path as a lenient server resolves it (lenientPath).
type loggingOrigin struct {
	mu   sync.Mutex
	seen []seenRequest
}

func (l *loggingOrigin) serve(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	l.mu.Lock()
	l.seen = append(l.seen, seenRequest{r.Method, r.RequestURI, r.Host, r.Header.Clone(), r.Trailer.Clone(), string(b), err})
	l.mu.Unlock()
	fmt.Fprintf(w, "page %s\n", lenientPath(r.RequestURI))
}

func (l *loggingOrigin) requests() []seenRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]seenRequest(nil), l.seen...)
}

// lenientPath is the path of a request target as a lenient origin reads
// it: an absolute URL's path, percent-decoded, backslashes as slashes,
// dot segments resolved.
func lenientPath(target string) string {
	if u, err := url.Parse(target); err == nil && u.IsAbs() {
		target = u.RequestURI()
	}
	target, _, _ = strings.Cut(target, "?")
	if p, err := url.PathUnescape(target); err == nil {
		target = p
	}
	return path.Clean("/" + strings.ReplaceAll(target, "\\", "/"))
}

// markedRequests are those the origin received whose target holds mark.
func (l *loggingOrigin) markedRequests(mark string) []seenRequest {
	var out []seenRequest
	for _, q := range l.requests() {
		if strings.Contains(q.URI, mark) {
			out = append(out, q)
		}
	}
	return out
}

// h2Attack is a request sent raw on a tunnel's h2 connection and what
// must come of it: "400" or another status (and the origin sees it
// whole only if that is 200), "reset" (a stream error, the origin never
// sees it whole), or "refused", either a 4xx or 5xx or a reset. Its :path holds a mark of its own.
type h2Attack struct {
	name string
	kv   []string // the header block
	body []byte   // a DATA frame, if not nil
	tkv  []string // a trailer block ending the stream, if not nil
	want string
}

// h2AttackRun is a MITM proxy, a logging origin (a.example) behind it,
// a raw h2 connection to it, and the attacks to send on it.
type h2AttackRun struct {
	p       *testProxy
	lo      *loggingOrigin
	r       *rawH2
	port    string
	attacks []h2Attack
}

func newH2AttackRun(t *testing.T) *h2AttackRun {
	t.Helper()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "a.example")
	lo := &loggingOrigin{}
	o.handler = lo.serve
	p := startMITM(t, pki, nil)
	return &h2AttackRun{p: p, lo: lo, r: p.rawH2(t, "a.example:"+port), port: port}
}

// add adds an attack: method on path, in which "M" is replaced by the
// attack's mark, then the pairs kv; body and tkv as in h2Attack.
func (a *h2AttackRun) add(name, method, path string, body []byte, tkv []string, want string, kv ...string) {
	path = strings.ReplaceAll(path, "M", fmt.Sprintf("mk%03d", len(a.attacks)))
	if name == "" {
		name = method + " " + path
	}
	a.attacks = append(a.attacks, h2Attack{name, append([]string{":method", method, ":scheme", "https", ":authority", a.r.authority, ":path", path}, kv...), body, tkv, want})
}

// seen is what the origin received of attack i.
func (a *h2AttackRun) seen(i int) []seenRequest { return a.lo.markedRequests(fmt.Sprintf("mk%03d", i)) }

// run sends each attack, and checks the client's answer and that the
// origin received none whole but those answered 200.
func (a *h2AttackRun) run(t *testing.T) {
	t.Helper()
	p, r, attacks := a.p, a.r, a.attacks
	for i, a := range attacks {
		id := uint32(2*i + 1)
		if a.tkv != nil {
			r.trailed(id, a.body, a.kv, a.tkv)
		} else {
			r.request(id, a.body, true, a.kv...)
		}
		st, how := r.stream(t, id)
		if how != "" {
			t.Fatalf("%s: the connection ended (%s); want the stream alone answered", a.name, how)
		}
		got := st.status()
		if st.reset {
			got = "reset"
		}
		if a.want == "refused" && (got == "reset" || got >= "400") {
			continue
		}
		if got != a.want || a.want == "reset" && st.code != http2.ErrCodeProtocol {
			t.Errorf("%s: %s %v %q; want %s", a.name, got, st.code, st.body, a.want)
		}
	}
	checkHealthy(t, p, "https://"+r.authority) // a request after all: the origin has whatever it will get
	for i, at := range attacks {
		for _, q := range a.seen(i) {
			if at.want != "200" && q.BodyErr == nil {
				t.Errorf("%s: the origin received it whole (%+v); want it refused before, or cut", at.name, q)
			}
		}
	}
}

// TestH2MalformedRequests: header fields h2 forbids or that no field may
// be, a content-length the DATA disagrees with, and trailers that try to
// add pseudo-header fields, Host or hop-by-hop fields, through the real
// proxy: each stream is refused (net/http's 400 for a connection-specific
// field, a stream error for the others), the connection goes on, and the
// origin never receives the request whole.
func TestH2MalformedRequests(t *testing.T) {
	t.Parallel()
	a := newH2AttackRun(t)
	for _, kv := range [][2]string{
		{"connection", "close"}, {"keep-alive", "5"}, {"proxy-connection", "keep-alive"},
		{"transfer-encoding", "chunked"}, {"upgrade", "websocket"}, {"te", "gzip"},
	} {
		a.add(kv[0]+": "+kv[1], "GET", "/public?M", nil, nil, "400", kv[0], kv[1])
	}
	a.add("te: trailers", "GET", "/public?M", nil, nil, "200", "te", "trailers")
	for _, kv := range [][2]string{
		{"X-Upper", "1"}, {"x-cr", "a\rb"}, {"x-lf", "a\nx-injected: 1"}, {"x-nul", "a\x00b"},
		{"x space", "1"}, {"x:colon", "1"}, {"", "empty name"},
	} {
		a.add(fmt.Sprintf("field %q: %q", kv[0], kv[1]), "GET", "/public?M", nil, nil, "reset", kv[0], kv[1])
	}
	a.add("content-length 10, 3 bytes sent", "POST", "/public?M", []byte("abc"), nil, "400", "content-length", "10") // the client's fault: TestClientBodyCutShort
	a.add("content-length 2, 3 bytes sent", "POST", "/public?M", []byte("abc"), nil, "reset", "content-length", "2")
	a.add("declared trailer", "POST", "/public?M", []byte("body"), []string{"x-sum", "1"}, "200", "trailer", "x-sum")
	for _, tkv := range [][]string{
		{":path", "/private/x"}, {":authority", "b.example"}, {"host", "b.example"}, {"X-Sum", "1"},
		{"connection", "close"}, {"authorization", "Basic eDp5"}, {"content-length", "9"},
	} {
		a.add(fmt.Sprintf("trailer %s: %s", tkv[0], tkv[1]), "POST", "/public?M", []byte("body"), append(tkv, "x-sum", "1"), "reset", "trailer", "x-sum, "+strings.TrimPrefix(tkv[0], ":"))
	}
	a.run(t)
	for i, at := range a.attacks {
		seen := a.seen(i)
		switch {
		case at.name == "te: trailers" && (len(seen) != 1 || len(seen[0].Header.Values("Te")) > 1 || seen[0].Header.Get("Te") != "" && seen[0].Header.Get("Te") != "trailers"):
			t.Errorf("te: trailers: the origin saw %+v; want the request, TE trailers at most", seen)
		case at.name == "declared trailer" && (len(seen) != 1 || seen[0].Trailer.Get("X-Sum") != "1" || seen[0].Body != "body"):
			t.Errorf("declared trailer: the origin saw %+v; want the body and X-Sum: 1 after it", seen)
		case at.want == "400" && !strings.HasPrefix(at.name, "content-length") || strings.HasPrefix(at.name, "field"): // a body cut short reached the origin, cut
			if len(seen) != 0 {
				t.Errorf("%s: the origin saw %+v; want nothing", at.name, seen)
			}
		}
	}
}

// TestH2Paths: a :path is decided as sent and sent as decided: "*",
// empty, not starting with "/", absolute-form (for this host or another:
// the :authority is the host), with dot segments or percent-encodings a
// lenient origin resolves into /private, with backslashes; CONNECT and
// extended CONNECT inside the tunnel are refused. Whatever reaches the
// origin is the :path as sent (its origin form), and no request the
// origin receives resolves, leniently, to a disallowed path.
func TestH2Paths(t *testing.T) {
	t.Parallel()
	a := newH2AttackRun(t)
	port := a.port
	for _, c := range [][3]string{
		{"GET", "*", "400"},
		{"OPTIONS", "*", "400"}, // as over HTTP/1.1 (below), not net/http's own 200
		{"GET", "", "reset"},
		{"GET", "private/x?M", "reset"},
		{"GET", "https://a.example:" + port + "/private/x?M", "403"},
		{"GET", "https://b.example/private/x?M", "403"},
		{"GET", "https://b.example/public?M", "200"},
		{"GET", "/public/../private/x?M", "403"},
		{"GET", "/public/%2e%2e/private/x?M", "403"},
		{"GET", "/public/..%2fprivate/x?M", "403"},
		{"GET", "/public/..%2Fprivate/x?M", "403"},
		{"GET", "/%70rivate/x?M", "403"},
		{"GET", "/public/%2e%2e%2fprivate?M", "403"},
		{"GET", "/public\\..\\private\\x?M", "400"},
		{"GET", "/public/./x?M", "200"},
		{"GET", "/public?M&next=/../private", "200"},
	} {
		a.add("", c[0], c[1], nil, nil, c[2])
	}
	a.attacks = append(a.attacks,
		h2Attack{"CONNECT", []string{":method", "CONNECT", ":authority", "b.example:443"}, nil, nil, "400"},
		h2Attack{"extended CONNECT", []string{":method", "CONNECT", ":protocol", "websocket", ":scheme", "https", ":authority", a.r.authority, ":path", "/public?mkxxx"}, nil, nil, "reset"},
	)
	a.run(t)
	for i, at := range a.attacks {
		for _, q := range a.seen(i) {
			sent := at.kv[7]
			if u, err := url.Parse(sent); err == nil && u.IsAbs() {
				sent = u.RequestURI()
			}
			if q.URI != sent || q.Host != a.r.authority {
				t.Errorf("%s: the origin received %s for %s; want the :path as sent, for the :authority", at.name, q.URI, q.Host)
			}
			if lp := lenientPath(q.URI); strings.HasPrefix(lp, "/private") {
				t.Errorf("%s: the origin received %s, which a lenient server reads as %s", at.name, q.URI, lp)
			}
		}
	}
	c, br := a.p.rawTunnel(t, "a.example:"+port, "a.example", false)
	if resp, body := roundTripRaw(t, c, br, "OPTIONS * HTTP/1.1\r\nHost: a.example:"+port+"\r\n\r\n"); resp.StatusCode != 400 {
		t.Errorf("OPTIONS * over HTTP/1.1: %d %q; the h2 test wants 400 as here", resp.StatusCode, body)
	}
}

// heldSink is an audit output that can be held shut, as a blocked pipe
// would be: a write waits until it is released.
type heldSink struct {
	testkit.Buffer
	mu   sync.Mutex
	gate chan struct{} // nil: open
}

func (s *heldSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return s.Buffer.Write(p)
}

func (s *heldSink) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		s.gate = make(chan struct{})
	}
}

func (s *heldSink) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

// startMITMHeldAudit runs a MITM proxy as startMITM does, its audit
// written to a heldSink (released before the proxy is shut down), which
// p.audit reads.
func startMITMHeldAudit(t *testing.T, pki *testPKI) (*testProxy, *heldSink) {
	t.Helper()
	sink := &heldSink{}
	p := startMITM(t, pki, nil, func(o *Options) { o.AuditOut = sink })
	p.audit = &sink.Buffer
	t.Cleanup(sink.release) // before the shutdown startMITM registered
	return p, sink
}

// bigAnswer is an origin's handler that answers /big with 256 MB, as
// fast as it can be written, and anything else with "small\n".
type bigAnswer struct {
	wrote atomic.Int64
	done  chan struct{} // closed when /big's handler returns
}

const bigAnswerSize = 256 << 20

func newBigAnswer() *bigAnswer { return &bigAnswer{done: make(chan struct{})} }

func (a *bigAnswer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/big" {
		io.WriteString(w, "small\n")
		return
	}
	defer close(a.done)
	chunk := make([]byte, 32<<10)
	for a.wrote.Load() < bigAnswerSize {
		if _, err := w.Write(chunk); err != nil {
			return
		}
		a.wrote.Add(int64(len(chunk)))
	}
}

// ended fails t unless /big's request ends within 30 s, its answer cut
// well short: less than 64 MB (socket buffers) sent, not the 256 MB a
// proxy holding the answer would take.
func (a *bigAnswer) ended(t *testing.T) {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the origin is still sending after 30 s (%d bytes): the upstream request is held", a.wrote.Load())
	}
	if n := a.wrote.Load(); n >= 64<<20 {
		t.Errorf("the origin sent %d MB before its request ended; want less than 64", n>>20)
	}
}

// TestH2ClientNeverReads: a client that asks for a large answer and never
// reads it, by a zero flow-control window or by not draining the
// connection at all, has its stream reset (or its connection closed) once
// a write has made no progress for idle_timeout: the origin's request
// ends, its connection released, well before the origin has sent what the
// proxy would have had to hold, and the proxy serves others. A small
// answer, whole in the stream's buffer when the handler returns, is reset
// too (net/http would otherwise wait for the window forever, its handler
// goroutine with it).
func TestH2ClientNeverReads(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		drain bool // the client reads the connection (with a zero window)
		set   []http2.Setting
		path  string
	}{
		{"zero window", true, []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 0}}, "/big"},
		{"zero window, small answer", true, []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 0}}, "/small"},
		{"connection not drained", false, []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}}, "/big"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pki := newTestPKI(t)
			o, port := tlsOrigin(t, pki, testRobots, "a.example")
			big := newBigAnswer()
			o.handler = big.serve
			p := startMITM(t, pki, func(c *config.Config) { c.Limits.IdleTimeout = 500 * time.Millisecond })
			r := p.rawH2With(t, "a.example:"+port, false, tc.set...)
			r.stingy = true
			r.fr.WriteWindowUpdate(0, 1<<31-1-65535)
			if tc.drain {
				r.start()
			}
			r.request(1, nil, true, r.get(tc.path)...)
			if tc.path == "/small" {
				if st, how := r.stream(t, 1); !st.reset || how != "" {
					t.Errorf("small answer: reset %v, connection %q; want the stream reset, the connection on", st.reset, how)
				}
				return
			}
			big.ended(t)
			if tc.drain {
				if st, how := r.stream(t, 1); !st.reset || how != "" || len(st.body) != 0 {
					t.Errorf("zero window: reset %v %v, %d bytes, connection %q; want the stream reset, the connection on", st.reset, st.code, len(st.body), how)
				}
			} else {
				r.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
				r.start()
				if how := r.waitEnd(); !strings.HasPrefix(how, "closed") || strings.Contains(how, "timeout") {
					t.Errorf("connection not drained: %q; want it closed by the proxy", how)
				}
			}
			checkHealthy(t, p, "https://a.example:"+port)
		})
	}
}

// TestH2ControlFloods: a client that floods PING frames and never reads
// the acknowledgements has its connection closed once ten thousand of
// them wait to be written (net/http's bound), long before the 2,000,000
// sent at most. SETTINGS frames are acknowledged together, so a flood of
// 100,000 unread queues one acknowledgement: the connection lives and
// answers; a SETTINGS frame with a setting twice ends it. Either way the
// proxy serves others.
func TestH2ControlFloods(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "a.example")
	o.handler = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }
	p := startMITM(t, pki, nil)
	authority := "a.example:" + port
	t.Run("PING", func(t *testing.T) {
		r := p.rawH2With(t, authority, false)
		const batch, most = 10000, 2000000
		sent, ended := 0, false
		for sent < most && !ended {
			for range batch {
				r.fr.WritePing(false, [8]byte{1})
			}
			sent += batch
			ended = !r.send()
		}
		r.start()
		how := r.waitEnd()
		if !ended || !strings.HasPrefix(how, "closed") || strings.Contains(how, "timeout") {
			t.Errorf("%d PING frames sent, no acknowledgement read: the connection ended %v, %q; want it closed by the proxy", sent, ended, how)
		}
		t.Logf("PING flood: closed after %d frames sent (%q)", sent, how)
		checkHealthy(t, p, "https://"+authority)
	})
	t.Run("SETTINGS", func(t *testing.T) {
		r := p.rawH2With(t, authority, false)
		for range 10 {
			for range 10000 {
				r.fr.WriteSettings()
			}
			if !r.send() {
				t.Fatal("the connection ended during a SETTINGS flood; want it to absorb them")
			}
		}
		r.start()
		r.request(1, nil, true, r.get("/public")...)
		if st, how := r.stream(t, 1); st.status() != "200" || how != "" {
			t.Errorf("after 100,000 SETTINGS unread: %q, connection %q; want 200 on the same connection", st.status(), how)
		}
		r.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 14}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 15})
		r.send()
		if how := r.waitEnd(); how != "GOAWAY PROTOCOL_ERROR" {
			t.Errorf("a SETTINGS frame with a setting twice: %q; want GOAWAY PROTOCOL_ERROR", how)
		}
		checkHealthy(t, p, "https://"+authority)
	})
}

// TestH2PrefaceTimeout: a client that chooses h2 and sends nothing is
// closed after read_header_timeout (2 s here; net/http's own bound is a
// fixed 10 s, and the wait here stops short of it), and the bound is
// lifted once the preface is read. Which is shown by order, not by the
// clock: a connection that sent its preface at once and has been
// answered (so its deadline was set) comes first, the silent one after
// it, and the origin holds the first's request until the silent one has
// been closed, when the first's deadline, set earlier, has surely
// passed; that request is answered, and one after it too. The only
// timing left is the first client's from its handshake to its preface,
// against 2 s.
func TestH2PrefaceTimeout(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "a.example")
	silentClosed := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(silentClosed) }) }
	t.Cleanup(release)
	o.handler = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select { // held past the first connection's preface deadline
			case <-silentClosed:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok\n")
	}
	p := startMITM(t, pki, func(c *config.Config) { c.Limits.ReadHeaderTimeout = 2 * time.Second })
	r := p.rawH2(t, "a.example:"+port)
	get := func(id uint32, path string) {
		t.Helper()
		if st, how := r.stream(t, id); st.status() != "200" || how != "" {
			t.Errorf("%s after the preface: %q, connection %q; want 200", path, st.status(), how)
		}
	}
	r.request(1, nil, true, r.get("/first")...)
	get(1, "/first")
	r.request(3, nil, true, r.get("/slow")...)
	tc := p.h2Tunnel(t, "a.example:"+port, "a.example")
	tc.SetReadDeadline(time.Now().Add(9 * time.Second))
	if _, err := io.Copy(io.Discard, tc); err != nil {
		t.Errorf("a silent h2 client: %v; want its connection closed by the proxy within 9 s", err)
	}
	release()
	get(3, "/slow")
	r.request(5, nil, true, r.get("/after")...)
	get(5, "/after")
}
