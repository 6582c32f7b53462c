package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"

	"github.com/robotsgate/robotsgate/proxy/policy"
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
