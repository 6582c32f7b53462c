package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// TestForwardLeavesClientRequest: the forward path never edits the
// request the client sent (docs/development.md, "The forward path"): its
// header, URL, Host and request-target are as they were read, while the
// origin got the clone as forwarded (no hop-by-hop field, no purpose
// declaration, no proxy credentials, the decided authority).
func TestForwardLeavesClientRequest(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got *http.Request
	o := newTestOrigin(t, "User-agent: *\nDisallow: /private\n", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Clone(t.Context())
		mu.Unlock()
		io.WriteString(w, "ok")
	})
	p := startProxy(t, loopbackConfig())
	target := o.URL + "/page?q=1"
	r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, target, nil)
	r.RequestURI = target
	for k, v := range map[string]string{
		"Proxy-Connection": "keep-alive", "Keep-Alive": "timeout=5", "Connection": "X-Drop, keep-alive", "X-Drop": "1",
		"Proxy-Authorization": "Basic Zm9vOmJhcg==", policy.PurposeHeader: "search", "Range": "bytes=0-10", "User-Agent": "FooBot/1",
	} {
		r.Header.Set(k, v)
	}
	header, url, host := r.Header.Clone(), *r.URL, r.Host
	resp := p.srv.serveInner(r)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("answer %d %q; want 200 %q", resp.StatusCode, body, "ok")
	}
	if !reflect.DeepEqual(r.Header, header) {
		t.Errorf("the client's header after forwarding = %v; want it as sent, %v", r.Header, header)
	}
	if *r.URL != url || r.Host != host || r.RequestURI != target {
		t.Errorf("the client's URL, Host, request-target after forwarding = %v, %q, %q; want %v, %q, %q", r.URL, r.Host, r.RequestURI, &url, host, target)
	}
	mu.Lock()
	defer mu.Unlock()
	// Range too: a request that declares a purpose has its answer's head
	// read from the first byte.
	for _, k := range []string{"Proxy-Connection", "Keep-Alive", "X-Drop", "Proxy-Authorization", policy.PurposeHeader, "Range"} {
		if v, ok := got.Header[k]; ok {
			t.Errorf("the origin got %s: %q; want it removed", k, v)
		}
	}
	if got.Header.Get("User-Agent") != "FooBot/1" || got.RequestURI != "/page?q=1" {
		t.Errorf("the origin got User-Agent %q, request-target %q; want FooBot/1, /page?q=1", got.Header.Get("User-Agent"), got.RequestURI)
	}
}

// eofTrailer is a request body that fills its request's trailer as it
// ends, as net/http's server does when the last chunk is read.
type eofTrailer struct {
	io.Reader
	trailer http.Header
	fill    http.Header
}

func (b *eofTrailer) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF {
		for k, v := range b.fill {
			b.trailer[k] = v
		}
	}
	return n, err
}

func (b *eofTrailer) Close() error { return nil }

// TestForwardLeavesClientRequestBody: a request with content and a
// trailer is forwarded, its body and the trailer's allowed fields reach
// the origin, and the client's request keeps its own header, its trailer
// as its body's end filled it (a field the origin may not get included)
// and its length.
func TestForwardLeavesClientRequestBody(t *testing.T) {
	t.Parallel()
	type seen struct {
		body    string
		trailer http.Header
	}
	got := make(chan seen, 1)
	o := newTestOrigin(t, "User-agent: *\nDisallow: /private\n", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{string(b), r.Trailer.Clone()}
		io.WriteString(w, "ok")
	})
	p := startProxy(t, loopbackConfig())
	target := o.URL + "/form"
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, target, nil)
	r.RequestURI, r.ContentLength, r.TransferEncoding = target, -1, []string{"chunked"} // as net/http reads it
	r.Header.Set("Trailer", "X-Sum, Cookie")
	r.Header.Set("Connection", "keep-alive")
	r.Trailer = http.Header{"X-Sum": nil, "Cookie": nil}
	r.Body = &eofTrailer{Reader: strings.NewReader("a=1&b=2"), trailer: r.Trailer, fill: http.Header{"X-Sum": {"42"}, "Cookie": {"c=1"}}}
	header, url := r.Header.Clone(), *r.URL
	resp := p.srv.serveInner(r)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("answer %d %q; want 200 %q", resp.StatusCode, body, "ok")
	}
	if !reflect.DeepEqual(r.Header, header) || *r.URL != url || r.RequestURI != target || r.ContentLength != -1 || !reflect.DeepEqual(r.TransferEncoding, []string{"chunked"}) {
		t.Errorf("the client's header, URL, request-target, length, transfer coding after forwarding = %v, %v, %q, %d, %v; want %v, %v, %q, -1, [chunked]", r.Header, r.URL, r.RequestURI, r.ContentLength, r.TransferEncoding, header, &url, target)
	}
	if want := (http.Header{"X-Sum": {"42"}, "Cookie": {"c=1"}}); !reflect.DeepEqual(r.Trailer, want) {
		t.Errorf("the client's trailer after forwarding = %v; want it as its body's end filled it, %v", r.Trailer, want)
	}
	g := <-got
	if g.body != "a=1&b=2" || !reflect.DeepEqual(g.trailer, http.Header{"X-Sum": {"42"}}) {
		t.Errorf("the origin got body %q, trailer %v; want %q, X-Sum: 42 only", g.body, g.trailer, "a=1&b=2")
	}
}

// TestForwardLeavesClientRequestInTunnel: a request inside a tunnel goes
// to the CONNECT's authority (out's URL is rewritten to it) while the
// client's request keeps the authority it named, its Host and its header.
func TestForwardLeavesClientRequestInTunnel(t *testing.T) {
	t.Parallel()
	hosts := make(chan string, 1)
	o := newTestOrigin(t, "User-agent: *\nDisallow: /private\n", func(w http.ResponseWriter, r *http.Request) {
		hosts <- r.Host
		io.WriteString(w, "ok")
	})
	_, port, _ := net.SplitHostPort(o.Listener.Addr().String())
	p := startMITM(t, nil, nil) // loopbackLookup: a.example is 127.0.0.1
	authority := "a.example:" + port
	ci := &connectInfo{tunnel: policy.Tunnel{Authority: authority}}
	var err error
	if ci.tunnel.Origin, err = fetch.OriginOf("http", authority); err != nil {
		t.Fatal(err)
	}
	// As h1 hands it on: the authority as the client spelled it inside.
	named := "A.Example:" + port
	r := httptest.NewRequestWithContext(context.WithValue(t.Context(), connectKey{}, ci), http.MethodGet, "http://"+named+"/page", nil)
	r.RequestURI, r.Host = "/page", named
	r.Header.Set("Connection", "close")
	header, url := r.Header.Clone(), *r.URL
	resp := p.srv.serveInner(r)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("answer %d %q; want 200 %q", resp.StatusCode, body, "ok")
	}
	if !reflect.DeepEqual(r.Header, header) || *r.URL != url || r.Host != named || r.RequestURI != "/page" {
		t.Errorf("the client's header, URL, Host, request-target after forwarding = %v, %v, %q, %q; want %v, %v, %q, /page", r.Header, r.URL, r.Host, r.RequestURI, header, &url, named)
	}
	if h := <-hosts; h != authority {
		t.Errorf("the origin got Host %q; want the CONNECT's authority %q", h, authority)
	}
}
