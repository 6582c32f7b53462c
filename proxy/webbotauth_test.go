package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity/identitytest"
)

// TestSignatureAgentForms: robotsgate sends Signature-Agent in
// [identity]'s signature_agent_form, or in the form of the [[sites]] rule
// that matches, and each request's signature covers the component of the
// form sent; its own robots.txt fetch keeps [identity]'s.
func TestSignatureAgentForms(t *testing.T) {
	t.Parallel()
	var got received
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", func(w http.ResponseWriter, r *http.Request) {
		got.record(r)
		io.WriteString(w, "page\n")
	})
	_, port, _ := strings.Cut(strings.TrimPrefix(o.URL, "http://"), ":")
	cfg := loopbackConfig()
	cfg.Identity.SignatureAgent, cfg.Identity.SignatureAgentForm = testAgent, "string"
	cfg.Sites = []config.SiteRule{{Host: "modern.example", Policy: "robots", SignatureAgentForm: "dictionary"}}
	p := startProxyWith(t, cfg, Options{LookupNetIP: loopbackLookup})
	resp, body := get(t, http.DefaultClient, p.url.String()+"/.well-known/http-message-signatures-directory")
	if resp.StatusCode != 200 {
		t.Fatalf("directory: %d", resp.StatusCode)
	}
	dir := []byte(body)

	want := map[string]string{"legacy.example": "string", "modern.example": "dictionary"}
	for host := range want {
		if resp, _ := get(t, p.client(), "http://"+host+":"+port+"/page"); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", host, resp.StatusCode)
		}
	}
	var pages []*http.Request
	for _, r := range got.all() {
		host, _, _ := strings.Cut(r.Host, ":")
		sig, err := identitytest.Verify(r, dir, time.Now())
		if err != nil {
			t.Errorf("%s%s: %v\n%v", r.Host, r.URL.Path, err, r.Header)
			continue
		}
		field := r.Header.Get("Signature-Agent")
		if sig.Form != want[host] || sig.Agent != testAgent || (sig.Form == "string") != (field == `"`+testAgent+`"`) {
			t.Errorf("%s: form %s, Signature-Agent %s; want the %s form", host, sig.Form, field, want[host])
		}
		pages = append(pages, r)
	}
	if len(pages) != 2 {
		t.Fatalf("the origin saw %d signed pages; want 2", len(pages))
	}
	if n := o.count("/robots.txt"); n != 2 {
		t.Errorf("robots.txt fetched %d times; want 2 (one per host)", n)
	}

}
