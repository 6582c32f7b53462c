package fetch

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
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
)

// fakeClock is a clock tests move by hand.
type fakeClock = testkit.Clock

func newFakeClock() *fakeClock {
	return testkit.NewClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
}

// origin serves robots.txt with handler and counts requests per path.
type origin struct {
	*httptest.Server
	hits sync.Map // path → *atomic.Int64
}

func newOrigin(t *testing.T, handler http.HandlerFunc) *origin {
	t.Helper()
	o := &origin{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := o.hits.LoadOrStore(r.URL.Path, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		handler(w, r)
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *origin) count(path string) int64 {
	n, ok := o.hits.Load(path)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

func (o *origin) origin(t *testing.T) Origin {
	t.Helper()
	or, err := ParseOrigin(o.URL)
	if err != nil {
		t.Fatal(err)
	}
	return or
}

func serveText(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, body)
	}
}

func testFetcher(opts FetcherOptions) *Fetcher {
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Second
	}
	return NewFetcher(opts)
}

func TestFetchStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code        int
		authDeny    bool
		want        Outcome
		disallowAll bool
	}{
		{200, false, Fetched, false},
		{204, false, Fetched, false},
		{206, false, Fetched, false},
		{400, false, Unavailable, false},
		{401, false, Unavailable, false},
		{403, false, Unavailable, false},
		{401, true, Unavailable, true},
		{403, true, Unavailable, true},
		{404, true, Unavailable, false},
		{410, false, Unavailable, false},
		{451, false, Unavailable, false},
		{429, false, Unreachable, false},
		{500, false, Unreachable, false},
		{502, false, Unreachable, false},
		{503, false, Unreachable, false},
		{504, false, Unreachable, false},
		{599, false, Unreachable, false},
		{600, false, Unreachable, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-authdeny-%v", tt.code, tt.authDeny), func(t *testing.T) {
			t.Parallel()
			o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.code)
				fmt.Fprint(w, "User-agent: *\nDisallow: /x\n")
			})
			res := testFetcher(FetcherOptions{AuthErrorsDisallow: tt.authDeny}).Fetch(t.Context(), o.origin(t))
			if res.Outcome != tt.want || res.Status != tt.code || res.DisallowAll != tt.disallowAll {
				t.Errorf("Fetch: outcome %s status %d disallowAll %v (err %v); want %s %d %v", res.Outcome, res.Status, res.DisallowAll, res.Err, tt.want, tt.code, tt.disallowAll)
			}
			if (res.Rules != nil) != (tt.want == Fetched) {
				t.Errorf("Fetch: Rules = %v; want rules only when fetched", res.Rules)
			}
		})
	}
}

func TestFetchRedirects(t *testing.T) {
	t.Parallel()
	// hop/N redirects to hop/N-1 … hop/0, which serves the file.
	var other *origin
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/robots.txt":
			http.Redirect(w, r, "/hop/"+r.URL.Query().Get("n"), http.StatusMovedPermanently)
		case r.URL.Path == "/loop":
			http.Redirect(w, r, "/loop2", http.StatusFound)
		case r.URL.Path == "/loop2":
			http.Redirect(w, r, "/loop", http.StatusTemporaryRedirect)
		case r.URL.Path == "/away":
			http.Redirect(w, r, other.URL+"/file", http.StatusPermanentRedirect)
		case r.URL.Path == "/nolocation":
			w.WriteHeader(http.StatusFound)
		case r.URL.Path == "/badlocation":
			w.Header().Set("Location", "ftp://example.com/x")
			w.WriteHeader(http.StatusFound)
		case r.URL.Path == "/hop/0":
			fmt.Fprint(w, "User-agent: *\nDisallow: /redirected\n")
		default:
			var n int
			fmt.Sscanf(strings.TrimPrefix(r.URL.Path, "/hop/"), "%d", &n)
			http.Redirect(w, r, fmt.Sprintf("/hop/%d", n-1), http.StatusFound)
		}
	})
	other = newOrigin(t, serveText("User-agent: *\nDisallow: /other\n"))
	f := testFetcher(FetcherOptions{})
	fetchFrom := func(path string) *Result {
		// Start the chain at path by fetching an origin whose robots.txt
		// redirects there: the test server's /robots.txt reads ?n, so use
		// a one-off origin for each start.
		start := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, o.URL+path, http.StatusFound)
		})
		return f.Fetch(t.Context(), start.origin(t))
	}
	for hops := 0; hops <= 4; hops++ { // plus the first hop from start: 1…5
		res := fetchFrom(fmt.Sprintf("/hop/%d", hops))
		if res.Outcome != Fetched || res.Redirects != hops+1 || res.Rules.Allowed("Bot", "http://x/redirected") {
			t.Errorf("%d hops: outcome %s, %d redirects, err %v; want fetched after %d", hops+1, res.Outcome, res.Redirects, res.Err, hops+1)
		}
	}
	if res := fetchFrom("/hop/5"); res.Outcome != Unavailable || res.Status != http.StatusFound {
		t.Errorf("6 hops: outcome %s status %d; want unavailable (counted as 404) after the 3xx", res.Outcome, res.Status)
	}
	if res := fetchFrom("/loop"); res.Outcome != Unavailable || !strings.Contains(res.Err.Error(), "loop") {
		t.Errorf("loop: outcome %s err %v; want unavailable, loop", res.Outcome, res.Err)
	}
	if res := fetchFrom("/away"); res.Outcome != Fetched || res.Rules.Allowed("Bot", "http://x/other") || !strings.HasPrefix(res.URL, other.URL) {
		t.Errorf("cross-host: outcome %s url %s; want the other host's file", res.Outcome, res.URL)
	}
	for _, p := range []string{"/nolocation", "/badlocation"} {
		if res := fetchFrom(p); res.Outcome != Unreachable {
			t.Errorf("%s: outcome %s; want unreachable", p, res.Outcome)
		}
	}
}

func TestFetchBody(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("# padding padding padding padding padding padding\n", 600<<10/50) + "User-agent: *\nDisallow: /after-cap\n"
	// A gzip bomb: a member holding a rule, then 1024 members of 1 MiB of
	// zeros each (gzip readers read concatenated members as one stream):
	// 1 GiB decoded from about a megabyte.
	bomb := func() []byte {
		var b, zeros bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		zw.Write([]byte("User-agent: *\nDisallow: /bomb\n"))
		zw.Close()
		zw, _ = gzip.NewWriterLevel(&zeros, gzip.BestCompression)
		zw.Write(make([]byte, 1<<20))
		zw.Close()
		b.Write(bytes.Repeat(zeros.Bytes(), 1024))
		return b.Bytes()
	}()
	var deflated bytes.Buffer
	zw := zlib.NewWriter(&deflated)
	zw.Write([]byte("User-agent: *\nDisallow: /deflated\n"))
	zw.Close()

	tests := []struct {
		name      string
		handler   http.HandlerFunc
		want      Outcome
		rule      string // a path the file must disallow, if fetched
		truncated bool
	}{
		{"600 KiB, rule after the cap ignored", serveText(big), Fetched, "", true},
		{"gzip bomb", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(bomb)
		}, Fetched, "/bomb", true},
		{"deflate", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "deflate")
			w.Write(deflated.Bytes())
		}, Fetched, "/deflated", false},
		{"garbage gzip", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write([]byte("not gzip at all"))
		}, Unreachable, "", false},
		{"short body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			w.Write([]byte("User-agent: *\nDisallow: /"))
		}, Unreachable, "", false},
		{"reset mid-body", func(w http.ResponseWriter, r *http.Request) {
			conn, buf, _ := w.(http.Hijacker).Hijack()
			buf.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1a\r\nUser-agent: *\nDisallow: /\n\r\n")
			buf.Flush()
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		}, Unreachable, "", false},
		{"binary", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte{0, 1, 2, 0xff, 0xfe, '\n', 'x'})
		}, Fetched, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newOrigin(t, tt.handler)
			res := testFetcher(FetcherOptions{}).Fetch(t.Context(), o.origin(t))
			if res.Outcome != tt.want || res.Truncated != tt.truncated {
				t.Fatalf("outcome %s truncated %v (err %v); want %s %v", res.Outcome, res.Truncated, res.Err, tt.want, tt.truncated)
			}
			if res.Outcome == Fetched {
				if got := res.Rules.Size(); got > DefaultMaxBytes {
					t.Errorf("parsed %d bytes; want at most %d", got, DefaultMaxBytes)
				}
				if tt.rule != "" && res.Rules.Allowed("Bot", "http://x"+tt.rule) {
					t.Errorf("%s allowed; want disallowed by the file", tt.rule)
				}
				if res.Rules.Allowed("Bot", "http://x/after-cap") == false {
					t.Errorf("/after-cap disallowed by a rule past the cap")
				}
			}
		})
	}
}

func TestFetchSlowOrigins(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	tests := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"stalls after headers", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}},
		{"drips a byte a second", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(200)
			for i := 0; i < 60; i++ { // bounded: a minute at most
				if _, err := w.Write([]byte("#")); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-time.After(time.Second):
				case <-r.Context().Done():
					return
				case <-release:
					return
				}
			}
		}},
		{"never answers", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newOrigin(t, tt.handler)
			// Each origin holds its answer until the test ends (or drips
			// it for a minute): only the 1.5 s timeout ends the fetch,
			// so its outcome proves the timeout; how long it took would
			// only say how busy the machine was.
			res := testFetcher(FetcherOptions{Timeout: 1500 * time.Millisecond}).Fetch(t.Context(), o.origin(t))
			if res.Outcome != Unreachable || ErrorKind(res.Err) != "timeout" {
				t.Errorf("outcome %s, error %v (%s); want unreachable, timeout", res.Outcome, res.Err, ErrorKind(res.Err))
			}
		})
	}
}

func TestFetchNetworkErrors(t *testing.T) {
	t.Parallel()
	// A port with nothing listening: refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	tlsOrigin := httptest.NewUnstartedServer(serveText("User-agent: *\n"))
	tlsOrigin.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshake is the point
	tlsOrigin.StartTLS()
	t.Cleanup(tlsOrigin.Close)

	tests := []struct {
		name string
		url  string
		dial func(ctx context.Context, network, addr string) (net.Conn, error)
		kind string
	}{
		{"refused", "http://" + closed, nil, "refused"},
		{"dns", "http://no-such-host.test", func(ctx context.Context, network, addr string) (net.Conn, error) {
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: addr, IsNotFound: true}}
		}, "dns"},
		{"untrusted certificate", tlsOrigin.URL, nil, "tls-verify"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, err := ParseOrigin(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			f := testFetcher(FetcherOptions{Transport: NewTransport(TransportOptions{DialContext: tt.dial})})
			res := f.Fetch(t.Context(), o)
			if res.Outcome != Unreachable || ErrorKind(res.Err) != tt.kind {
				t.Errorf("outcome %s, error %v (%s); want unreachable, %s", res.Outcome, res.Err, ErrorKind(res.Err), tt.kind)
			}
		})
	}
	// Trusted through TransportOptions.RootCAs, the same origin is fetched.
	o, _ := ParseOrigin(tlsOrigin.URL)
	pool := tlsOrigin.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	f := testFetcher(FetcherOptions{Transport: NewTransport(TransportOptions{RootCAs: pool})})
	if res := f.Fetch(t.Context(), o); res.Outcome != Fetched {
		t.Errorf("trusted TLS origin: outcome %s (%v); want fetched", res.Outcome, res.Err)
	}
}

func TestFetchHeaders(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		header, value string
		maxAge        time.Duration
		retryAfter    time.Duration
	}{
		{"Cache-Control", "max-age=120", 120 * time.Second, 0},
		{"Cache-Control", "public, max-age=0", 0, 0},
		{"Cache-Control", "no-store", 0, 0},
		{"Cache-Control", "max-age=bogus", -1, 0},
		{"Retry-After", "120", -1, 120 * time.Second},
		{"Retry-After", "999999", -1, 24 * time.Hour},
		{"Retry-After", now.Add(time.Hour).Format(http.TimeFormat), -1, time.Hour},
		{"Retry-After", "soon", -1, 0},
	}
	for _, tt := range tests {
		h := http.Header{}
		h.Set(tt.header, tt.value)
		if got := maxAge(h); got != tt.maxAge {
			t.Errorf("maxAge(%s: %s) = %v; want %v", tt.header, tt.value, got, tt.maxAge)
		}
		if got := retryAfter(h.Get("Retry-After"), now); got != tt.retryAfter {
			t.Errorf("retryAfter(%q) = %v; want %v", h.Get("Retry-After"), got, tt.retryAfter)
		}
	}
}

// FuzzFetchHeaders feeds hostile Cache-Control and Retry-After values to
// their decoders: no panic, and results within their documented bounds.
func FuzzFetchHeaders(f *testing.F) {
	for _, s := range []string{"max-age=120", "no-store", "public, max-age=0", "max-age=\"60\"", "120", "Sun, 22 Nov 2026 13:00:00 GMT", "-1", "99999999999999999999", ""} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{"Cache-Control": {v}}
		if got := maxAge(h); got < -1 {
			t.Fatalf("maxAge(%q) = %v; want ≥ -1", v, got)
		}
		if got := retryAfter(v, now); got < 0 || got > 24*time.Hour {
			t.Fatalf("retryAfter(%q) = %v; want within [0, 24h]", v, got)
		}
	})
}
