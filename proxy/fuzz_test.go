package proxy

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// FuzzRequestTarget: any request-line URI gives a target that starts with
// "/" and holds no fragment.
func FuzzRequestTarget(f *testing.F) {
	for _, s := range []string{"http://h/p?q#f", "/a", "https://h", "h?x", "", "*", "http://h:1#x/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		got := requestTarget(uri)
		if !strings.HasPrefix(got, "/") || strings.Contains(got, "#") {
			t.Fatalf("requestTarget(%q) = %q", uri, got)
		}
	})
}

// FuzzProxyAuthorization: hostile Proxy-Authorization values never pass
// and never panic.
func FuzzProxyAuthorization(f *testing.F) {
	hash, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	a := newAuthenticator([]AuthUser{{Name: "u", PasswordHash: string(hash)}}, time.Now)
	for _, s := range []string{"Basic " + base64.StdEncoding.EncodeToString([]byte("u:wrong")), "Basic", "basic !!", "Bearer x", "Basic " + base64.StdEncoding.EncodeToString([]byte("u"))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := &http.Request{Header: http.Header{"Proxy-Authorization": {h}}}
		raw, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(h, "Basic"), "basic")))
		if user, ok := a.check(r, false); ok && string(raw) != "u:right" {
			t.Fatalf("%q authenticated as %q", h, user)
		}
	})
}
