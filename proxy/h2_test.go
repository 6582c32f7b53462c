package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
)

// h2Tunnel opens a CONNECT tunnel to authority and speaks TLS in it with
// serverName, offering only h2; it fails the test unless h2 is chosen.
func (p *testProxy) h2Tunnel(t *testing.T, authority, serverName string) *tls.Conn {
	t.Helper()
	resp, c, _ := connect(t, p, authority)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v", authority, resp.Status)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.srv.CA().PEM())
	tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: serverName, NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS to %s: %v", serverName, err)
	}
	if got := tc.ConnectionState().NegotiatedProtocol; got != "h2" {
		t.Fatalf("ALPN chose %q; want h2", got)
	}
	return tc
}

// h2Conn is an HTTP/2 client connection inside a MITM tunnel to authority
// (net/http's, through a CONNECT to the proxy): its requests go on this
// one connection whatever they name.
func (p *testProxy) h2Conn(t *testing.T, authority string) *http.ClientConn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.srv.CA().PEM())
	tr := &http.Transport{Proxy: http.ProxyURL(p.url), TLSClientConfig: &tls.Config{RootCAs: pool}, Protocols: h2Only()}
	cc, err := tr.NewClientConn(t.Context(), "https", authority)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func roundTripH2(t *testing.T, cc *http.ClientConn, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestH2BlockedAndAllowed: Go's client, offered h2 inside the tunnel,
// takes it; each stream is decided and audited as an HTTP/1.1 request.
func TestH2BlockedAndAllowed(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "shop.example")
	p := startMITM(t, pki, nil)
	var dials atomic.Int64
	c := p.mitmClient(t, &dials, true)
	base := "https://shop.example:" + port

	resp, body := get(t, c, base+"/private/a", "User-Agent", "ShopBot/1.0")
	if resp.ProtoMajor != 2 || resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate") != "disallowed" || resp.Header.Get("X-Robots-Gate-Rule") != "disallow: /private (line 2)" {
		t.Errorf("blocked: %d over %s %v\n%s", resp.StatusCode, resp.Proto, resp.Header, body)
	}
	rec := p.lastAudit(t)
	if rec["origin"] != base || rec["url"] != base+"/private/a" || rec["msg"] != "blocked" || rec["status"] != 403.0 {
		t.Errorf("audit = %v", rec)
	}
	resp, body = get(t, c, base+"/public", "User-Agent", "ShopBot/1.0")
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || body != "secure page /public host shop.example:"+port+"\n" {
		t.Errorf("allowed: %d over %s %q", resp.StatusCode, resp.Proto, body)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("client opened %d connections to the proxy; want 1", n)
	}
	if o.count("/private/a") != 0 || o.count("/public") != 1 {
		t.Errorf("origin hits: /private/a %d, /public %d", o.count("/private/a"), o.count("/public"))
	}
}

// TestH2HostileStreams: the raw attacks of the h1 loop, over h2: an
// :authority unlike the CONNECT host (and SNI) is refused 421 as a Host
// header is; a GET with content, of stated length or none, is refused
// 400; a :path is decided as sent.
func TestH2HostileStreams(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "a.example")
	o.handler = func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "secure page %s body %q\n", r.URL.Path, b)
	}
	p := startMITM(t, pki, nil)
	cc := p.h2Conn(t, "a.example:"+port)

	req, _ := http.NewRequest(http.MethodGet, "https://a.example:"+port+"/public", nil)
	req.Host = "b.example:" + port
	resp, body := roundTripH2(t, cc, req)
	if resp.StatusCode != http.StatusMisdirectedRequest || resp.Header.Get("X-Robots-Gate") != "misdirected" {
		t.Errorf(":authority of another host: %d %q %q", resp.StatusCode, resp.Header.Get("X-Robots-Gate"), body)
	}
	if rec := p.lastAudit(t); rec["decision"] != "misdirected" || rec["status"] != 421.0 {
		t.Errorf("audit = %v", rec)
	}

	for _, tc := range []struct {
		name   string
		length int64
	}{{"stated length", 5}, {"no stated length", -1}} {
		req, _ := http.NewRequest(http.MethodGet, "https://a.example:"+port+"/public", io.NopCloser(strings.NewReader("hello")))
		req.ContentLength = tc.length
		resp, body := roundTripH2(t, cc, req)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "GET with content") {
			t.Errorf("GET with content, %s: %d %q", tc.name, resp.StatusCode, body)
		}
	}

	req, _ = http.NewRequest(http.MethodGet, "https://a.example:"+port+"/x", nil)
	req.URL.Opaque = "/pub/../private/z" // sent as the :path, as written
	resp, _ = roundTripH2(t, cc, req)
	if resp.StatusCode != 403 {
		t.Errorf(":path /pub/../private/z: %d; want 403 (decided as the origin reads it)", resp.StatusCode)
	}

	for _, length := range []int64{6, -1} { // stated, and sent until the stream ends
		req, _ = http.NewRequest(http.MethodPost, "https://a.example:"+port+"/public", io.NopCloser(strings.NewReader("form=1")))
		req.ContentLength = length
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, body = roundTripH2(t, cc, req)
		if resp.StatusCode != 200 || body != "secure page /public body \"form=1\"\n" {
			t.Errorf("POST with a body of length %d: %d %q", length, resp.StatusCode, body)
		}
	}
	if o.count("/public") != 2 || o.count("/private/z") != 0 {
		t.Errorf("origin hits: /public %d, /private/z %d; want 2, 0", o.count("/public"), o.count("/private/z"))
	}
}

// TestH2StreamsPaced: many concurrent streams on one connection are
// decided and paced one by one, as as many HTTP/1.1 requests are.
func TestH2StreamsPaced(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, port := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n", "a.example")
	p := startMITM(t, pki, func(c *config.Config) { c.Politeness.MinInterval = 150 * time.Millisecond })
	starts := logStarts(p)
	var dials atomic.Int64
	c := p.mitmClient(t, &dials, true)
	base := "https://a.example:" + port
	get(t, c, base+"/warm") // the connection, and its first start
	codes := fire(t, c, base+"/page", 8)
	for _, code := range codes {
		if code != 200 {
			t.Fatalf("statuses %v; want all 200", codes)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d connections; want the 9 requests as streams of one", n)
	}
	checkGaps(t, starts.gaps(t, base), 8, 150*time.Millisecond)
}

// TestH2Off: [tls] http2 = false offers HTTP/1.1 only.
func TestH2Off(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, port := tlsOrigin(t, pki, testRobots, "a.example")
	p := startMITM(t, pki, func(c *config.Config) { c.TLS.HTTP2 = false })
	c := p.mitmClient(t, nil, true)
	resp, _ := get(t, c, "https://a.example:"+port+"/private")
	if resp.StatusCode != 403 || resp.ProtoMajor != 1 {
		t.Errorf("h2-offering client: %d over %s; want 403 over HTTP/1.1", resp.StatusCode, resp.Proto)
	}
	c2, _ := p.rawTunnel(t, "a.example:"+port, "", true)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.srv.CA().PEM())
	tc := tls.Client(c2, &tls.Config{RootCAs: pool, ServerName: "a.example", NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err == nil && tc.ConnectionState().NegotiatedProtocol == "h2" {
		t.Error("the proxy negotiated h2 with http2 = false")
	}
}

// TestH2Curl: curl --http2 through the proxy.
func TestH2Curl(t *testing.T) {
	t.Parallel()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed: curl --http2 is not tried")
	}
	pki := newTestPKI(t)
	_, port := tlsOrigin(t, pki, testRobots, "a.example")
	p := startMITM(t, pki, nil)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, p.srv.CA().PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/private": "2 403", "/public": "2 200"} {
		out, err := exec.Command(curl, "-sS", "--max-time", "10", "--http2", "--proxy", p.url.String(), "--cacert", ca,
			"-o", os.DevNull, "-w", "%{http_version} %{http_code}", "https://a.example:"+port+path).CombinedOutput()
		if err != nil || string(out) != want {
			t.Errorf("curl --http2 %s: %q, %v; want %q", path, out, err, want)
		}
	}
}

// rawH2 is a raw HTTP/2 client over a MITM tunnel, for attacks: frames
// are written to buf, then sent in one write by send. Its reader keeps
// what comes back stream by stream (rawStream), grants flow-control
// credit for the DATA it reads unless stingy is set, acknowledges the
// proxy's SETTINGS, and reports on ended how the connection ended.
type rawH2 struct {
	conn      *tls.Conn
	authority string
	buf       bytes.Buffer
	fr        *http2.Framer // writes to buf
	ended     chan string
	header    []byte // an encoded request header block: GET /x
	stingy    bool   // set before the first send: no WINDOW_UPDATE is sent

	wmu sync.Mutex // one write to conn at a time

	mu      sync.Mutex
	streams map[uint32]*rawStream
	how     string // how the connection ended, once it has
	last    uint32 // a GOAWAY's last stream: the highest the proxy took up
}

// rawStream is what the proxy sent on one stream.
type rawStream struct {
	header, trailer http.Header // the response's fields, :status among them
	body            []byte
	reset           bool
	code            http2.ErrCode // the RST_STREAM's, if reset
	done            bool          // ended or reset
}

// status is the response's :status, or "" if none came.
func (st *rawStream) status() string { return st.header.Get(":status") }

func (p *testProxy) rawH2(t *testing.T, authority string) *rawH2 {
	t.Helper()
	return p.rawH2With(t, authority, true)
}

// rawH2With is rawH2 with settings sent in the preface; unless read, what
// the proxy sends is left unread (start reads it).
func (p *testProxy) rawH2With(t *testing.T, authority string, read bool, settings ...http2.Setting) *rawH2 {
	t.Helper()
	host, _, _ := strings.Cut(authority, ":")
	r := &rawH2{conn: p.h2Tunnel(t, authority, host), authority: authority, ended: make(chan string, 1), streams: map[uint32]*rawStream{}}
	t.Cleanup(func() { r.conn.Close() })
	r.conn.SetDeadline(time.Now().Add(20 * time.Second))
	r.buf.WriteString(http2.ClientPreface)
	r.fr = http2.NewFramer(&r.buf, nil)
	r.fr.WriteSettings(settings...)
	r.header = encodeFields(":method", "GET", ":scheme", "https", ":authority", authority, ":path", "/x")
	r.send() // the preface before any acknowledgement the reader writes
	if read {
		r.start()
	}
	return r
}

// start reads what the proxy sends, from now on.
func (r *rawH2) start() { go r.read() }

// encodeFields is an HPACK block of the name, value pairs, as they are
// (upper case, CR, LF and all), never indexed.
func encodeFields(kv ...string) []byte {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := 0; i+1 < len(kv); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1], Sensitive: true})
	}
	return hb.Bytes()
}

// read reads what the proxy sends until the connection ends.
func (r *rawH2) read() {
	rf := http2.NewFramer(io.Discard, r.conn)
	rf.ReadMetaHeaders = hpack.NewDecoder(64<<10, nil)
	rf.MaxHeaderListSize = 1 << 20
	end := func(how string) {
		r.mu.Lock()
		r.how = how
		r.mu.Unlock()
		r.ended <- how
	}
	for {
		f, err := rf.ReadFrame()
		if err != nil {
			end("closed: " + err.Error())
			return
		}
		var ack func(*http2.Framer)
		r.mu.Lock()
		st := r.streams[f.Header().StreamID]
		if st == nil && f.Header().StreamID != 0 {
			st = &rawStream{}
			r.streams[f.Header().StreamID] = st
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			r.last = f.LastStreamID
			r.mu.Unlock()
			end("GOAWAY " + f.ErrCode.String())
			return
		case *http2.SettingsFrame:
			if !f.IsAck() {
				ack = func(w *http2.Framer) { w.WriteSettingsAck() }
			}
		case *http2.MetaHeadersFrame:
			h := http.Header{}
			for _, hf := range f.Fields {
				h.Add(hf.Name, hf.Value)
			}
			if st.header == nil {
				st.header = h
			} else {
				st.trailer = h
			}
			st.done = st.done || f.StreamEnded()
		case *http2.DataFrame:
			st.body = append(st.body, f.Data()...)
			st.done = st.done || f.StreamEnded()
			if n := uint32(len(f.Data())); n > 0 && !r.stingy {
				id := f.StreamID
				ack = func(w *http2.Framer) { w.WriteWindowUpdate(0, n); w.WriteWindowUpdate(id, n) }
			}
		case *http2.RSTStreamFrame:
			st.reset, st.code, st.done = true, f.ErrCode, true
		}
		r.mu.Unlock()
		if ack != nil {
			var b bytes.Buffer
			ack(http2.NewFramer(&b, nil))
			r.wmu.Lock()
			r.conn.Write(b.Bytes())
			r.wmu.Unlock()
		}
	}
}

// send writes the frames buffered; it reports false once the connection
// has ended.
func (r *rawH2) send() bool {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_, err := r.conn.Write(r.buf.Bytes())
	r.buf.Reset()
	return err == nil
}

// request sends a request on stream id: the header block of the name,
// value pairs, then body as one DATA frame if not nil, the stream ended
// after body, or after the header if body is nil and end is set.
func (r *rawH2) request(id uint32, body []byte, end bool, kv ...string) {
	r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: encodeFields(kv...), EndStream: end && body == nil, EndHeaders: true})
	if body != nil {
		r.fr.WriteData(id, end, body)
	}
	r.send()
}

// trailed sends a request on stream id whose body is followed by a
// trailer block of the pairs tkv, which ends the stream.
func (r *rawH2) trailed(id uint32, body []byte, kv, tkv []string) {
	r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: encodeFields(kv...), EndHeaders: true})
	r.fr.WriteData(id, false, body)
	r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: encodeFields(tkv...), EndStream: true, EndHeaders: true})
	r.send()
}

// get is the request header of a GET of path on the tunnel's authority,
// then any more name, value pairs.
func (r *rawH2) get(path string, kv ...string) []string {
	return append([]string{":method", "GET", ":scheme", "https", ":authority", r.authority, ":path", path}, kv...)
}

// stream waits up to 20 seconds for stream id to end (or be reset, or
// the connection to end) and returns what came on it, with how the
// connection ended ("" if it has not).
func (r *rawH2) stream(t *testing.T, id uint32) (rawStream, string) {
	t.Helper()
	var st rawStream
	var how string
	testkit.Poll(20*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		if s := r.streams[id]; s != nil {
			st = *s
		}
		how = r.how
		return st.done || how != ""
	})
	return st, how
}

// waitEnd returns how the connection ended, or "" if it did not within
// 10 seconds.
func (r *rawH2) waitEnd() string {
	select {
	case how := <-r.ended:
		return how
	case <-time.After(10 * time.Second):
		return ""
	}
}

// checkHealthy: the proxy still answers a new h2 client.
func checkHealthy(t *testing.T, p *testProxy, base string) {
	t.Helper()
	resp, _ := get(t, p.mitmClient(t, nil, true), base+"/public")
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Errorf("after the attack: %d over %s; want 200 over HTTP/2", resp.StatusCode, resp.Proto)
	}
}

// TestH2RapidReset: a client that opens streams and resets them at once
// (CVE-2023-44487) never has more than h2MaxConcurrentStreams handlers
// running, however long they take to end: the proxy queues the rest and
// ends the connection with GOAWAY ENHANCE_YOUR_CALM once more than four
// times as many are queued. The handlers here outlive their reset (each
// request is disallowed, and its audit line waits on an audit sink held
// shut, as a blocked pipe would), which makes the bound what is tested:
// exactly h2MaxConcurrentStreams requests are audited of the thousands
// sent, the GOAWAY comes within the bound, the proxy serves another client
// meanwhile, and once the sink drains the goroutines are back to where
// they were. Not parallel: it counts the process's goroutines.
func TestH2RapidReset(t *testing.T) {
	pki := newTestPKI(t)
	_, port := tlsOrigin(t, pki, testRobots, "a.example", "b.example")
	p, sink := startMITMHeldAudit(t, pki)
	r := p.rawH2(t, "a.example:"+port)
	flood := encodeFields(r.get("/private/flood")...)
	checkHealthy(t, p, "https://a.example:"+port) // robots.txt cached; a client's goroutines as they will be
	base := runtime.NumGoroutine()
	sink.hold()
	const batches, perBatch = 50, 200 // 10,000 streams at most
	how, sent := "", 0
	for b := uint32(0); b < batches && how == ""; b++ {
		for i := uint32(0); i < perBatch; i++ {
			id := 2*(b*perBatch+i) + 1
			r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: flood, EndStream: true, EndHeaders: true})
			r.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		}
		sent += perBatch
		if !r.send() {
			how = r.waitEnd()
		}
		select {
		case how = <-r.ended:
		default:
		}
	}
	if how == "" {
		how = r.waitEnd()
	}
	during, handlers := runtime.NumGoroutine(), goroutinesIn("(*Server).serveStream")
	if how != "GOAWAY ENHANCE_YOUR_CALM" {
		t.Errorf("after %d reset streams the connection: %q; want GOAWAY ENHANCE_YOUR_CALM", sent, how)
	}
	if handlers != h2MaxConcurrentStreams {
		t.Errorf("%d stream handlers running with the sink held; want %d", handlers, h2MaxConcurrentStreams)
	}
	r.mu.Lock()
	taken := (r.last + 1) / 2
	r.mu.Unlock()
	if bound := uint32(h2MaxConcurrentStreams + 4*h2MaxConcurrentStreams + 2); taken > bound {
		t.Errorf("GOAWAY's last stream is the %dth; want it within %d (100 running, 401 queued, the one refused)", taken, bound)
	}
	checkHealthy(t, p, "https://b.example:"+port) // meanwhile, with a hundred handlers held
	sink.release()
	testkit.Eventually(t, "the held handlers to end, the goroutines back to where they were", func() bool {
		return goroutinesIn("(*Server).serveStream") == 0 && runtime.NumGoroutine() <= base+30 // +30: the second client's connections
	})
	if n := strings.Count(sink.String(), `"path":"/private/flood"`); n != h2MaxConcurrentStreams {
		t.Errorf("%d flood requests were decided and audited; want %d, the handlers that may run at once", n, h2MaxConcurrentStreams)
	}
	t.Logf("rapid reset: %q at the %dth stream of %d sent; goroutines %d before, %d held", how, taken, sent, base, during)
}

// goroutinesIn counts the goroutines with fn on their stack.
func goroutinesIn(fn string) int {
	buf := make([]byte, 8<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), fn+"(")
}

// TestH2StreamBound: a client that opens more than h2MaxConcurrentStreams
// streams at once, none reset, against an origin that answers none of
// them yet, has those past the bound refused (RST_STREAM REFUSED_STREAM,
// or PROTOCOL_ERROR once it has acknowledged the bound), and the origin
// sees exactly the streams within it; once it answers, all of those are
// answered and the connection takes new streams.
func TestH2StreamBound(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "a.example")
	release := make(chan struct{})
	var arrived atomic.Int64
	o.handler = func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/stall/") {
			return
		}
		arrived.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "late\n")
	}
	p := startMITM(t, pki, nil)
	checkHealthy(t, p, "https://a.example:"+port) // robots.txt cached
	r := p.rawH2(t, "a.example:"+port)
	const over = 10
	for i := range uint32(h2MaxConcurrentStreams + over) {
		r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2*i + 1, BlockFragment: encodeFields(r.get(fmt.Sprintf("/stall/%d", i))...), EndStream: true, EndHeaders: true})
	}
	r.send()
	for i := range uint32(over) {
		id := 2*(h2MaxConcurrentStreams+i) + 1
		st, how := r.stream(t, id)
		if !st.reset || (st.code != http2.ErrCodeRefusedStream && st.code != http2.ErrCodeProtocol) || how != "" {
			t.Fatalf("stream %d, past the bound: reset %v %v, status %q, connection %q; want RST_STREAM REFUSED_STREAM\n%s", id, st.reset, st.code, st.status(), how, p.log.String())
		}
	}
	testkit.Eventually(t, "the streams within the bound to reach the origin", func() bool { return arrived.Load() == h2MaxConcurrentStreams })
	close(release)
	for i := range uint32(h2MaxConcurrentStreams) {
		if st, _ := r.stream(t, 2*i+1); st.status() != "200" || string(st.body) != "late\n" {
			t.Fatalf("stream %d within the bound: status %q, reset %v %v; want 200 late", 2*i+1, st.status(), st.reset, st.code)
		}
	}
	if n := arrived.Load(); n != h2MaxConcurrentStreams {
		t.Errorf("the origin saw %d requests; want %d", n, h2MaxConcurrentStreams)
	}
	id := uint32(2*(h2MaxConcurrentStreams+over) + 1)
	r.request(id, nil, true, r.get("/stall/after")...)
	if st, _ := r.stream(t, id); st.status() != "200" {
		t.Errorf("a new stream once the others ended: status %q, reset %v %v; want 200", st.status(), st.reset, st.code)
	}
}

// TestH2ContinuationFlood: a header block sent as endless CONTINUATION
// frames is cut at max_header_bytes: the connection ends, the proxy goes
// on serving others.
func TestH2ContinuationFlood(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, port := tlsOrigin(t, pki, testRobots, "a.example")
	p := startMITM(t, pki, func(c *config.Config) { c.Limits.MaxHeaderBytes = 8 << 10 })
	r := p.rawH2(t, "a.example:"+port)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	enc.WriteField(hpack.HeaderField{Name: "x-flood", Value: strings.Repeat("a", 1000), Sensitive: true})
	r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: r.header, EndStream: true})
	sent, how := 0, ""
	for sent < 10000 && how == "" { // 10 MB at most, 1,250 times the limit
		r.fr.WriteContinuation(1, false, hb.Bytes())
		if sent++; sent%100 == 0 {
			select {
			case how = <-r.ended:
			default:
				if !r.send() {
					how = r.waitEnd()
				}
			}
		}
	}
	if how == "" {
		how = r.waitEnd()
	}
	if how != "GOAWAY PROTOCOL_ERROR" && !strings.HasPrefix(how, "closed") {
		t.Fatalf("after %d CONTINUATION frames of 1 kB: %q; want GOAWAY PROTOCOL_ERROR", sent, how)
	}
	t.Logf("CONTINUATION flood: %s after %d frames", how, sent)
	checkHealthy(t, p, "https://a.example:"+port)
}

// BenchmarkMITMH2Throughput: kept-alive requests through a MITM tunnel
// over h2 (benchConns streams on one connection) beside HTTP/1.1
// (benchConns connections), alternating in one run; ratio is h2's
// requests per second over HTTP/1.1's.
func BenchmarkMITMH2Throughput(b *testing.B) {
	const round = 2000
	m := newMITMBench(b)
	drive := func(h2 bool, n int) time.Duration {
		return driveClient(b, &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyURL(m.rg),
			TLSClientConfig:     &tls.Config{RootCAs: m.pool},
			MaxIdleConnsPerHost: benchConns,
			ForceAttemptHTTP2:   h2,
			DisableCompression:  true,
		}}, m.target, n)
	}
	drive(true, round/4)
	drive(false, round/4)
	var t1, t2 time.Duration
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			t1 += drive(false, round)
			t2 += drive(true, round)
		} else {
			t2 += drive(true, round)
			t1 += drive(false, round)
		}
		i++
	}
	n := float64(b.N * round)
	b.ReportMetric(n/t1.Seconds(), "h1-req/s")
	b.ReportMetric(n/t2.Seconds(), "h2-req/s")
	b.ReportMetric(t1.Seconds()/t2.Seconds(), "ratio")
}

// TestH2BodyAfterAnswer: an origin that answers before it reads a
// request's body has the stream's handler return while the upstream
// transport still reads the body; the body's deadline must not be set
// through the stream's forgotten ResponseWriter then (a nil dereference
// and a race in x/net, which took the whole proxy down).
func TestH2BodyAfterAnswer(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "a.example")
	o.handler = func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "answered unread\n") // the body is never read
	}
	p := startMITM(t, pki, nil)
	cc := p.h2Conn(t, "a.example:"+port)
	for i := range 20 {
		pr, pw := io.Pipe()
		go func() { // the body keeps coming after the answer, then ends
			defer pw.Close()
			for range 8 {
				if _, err := pw.Write(bytes.Repeat([]byte("x"), 16<<10)); err != nil {
					return
				}
			}
		}()
		req, _ := http.NewRequest(http.MethodPost, "https://a.example:"+port+"/public", pr)
		req.ContentLength = -1
		resp, err := cc.RoundTrip(req)
		if err != nil {
			continue // the stream may be reset once the answer is whole: either is fine
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST %d: %d; want 200", i, resp.StatusCode)
		}
	}
	// The proxy is still there.
	req, _ := http.NewRequest(http.MethodGet, "https://a.example:"+port+"/public", nil)
	resp, body := roundTripH2(t, p.h2Conn(t, "a.example:"+port), req)
	if resp.StatusCode != 200 {
		t.Errorf("after: %d %q; want 200", resp.StatusCode, body)
	}
}
