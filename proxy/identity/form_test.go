package identity_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/identity/identitytest"
)

// TestSignForms: each form sends Signature-Agent as it says and covers
// the component that matches it (draft-ietf-webbotauth-httpsig-protocol-01
// and RFC 9421 section 2.1.2: the member with key="sig1" in the dictionary
// form, the whole field in the string form); Form switches between the
// two with the same key, and ParseForm knows their names only.
func TestSignForms(t *testing.T) {
	t.Parallel()
	k := testKey(t)
	const agent = "https://bot.example/.well-known/http-message-signatures-directory"
	dir := identity.Directory([]*identity.Key{k})
	now := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name, field, covers string
		form                identity.Form
	}{
		{"dictionary", `sig1="` + agent + `"`, `("@authority" "signature-agent";key="sig1")`, identity.FormDictionary},
		{"string", `"` + agent + `"`, `("@authority" "signature-agent")`, identity.FormString},
	}
	for _, tt := range tests {
		form, err := identity.ParseForm(tt.name)
		if err != nil || form != tt.form || form.String() != tt.name {
			t.Fatalf("ParseForm(%q) = %v, %v", tt.name, form, err)
		}
		s, err := identity.NewSigner(k, agent, tt.form, time.Minute, func() time.Time { return now })
		if err != nil {
			t.Fatal(err)
		}
		// The signer of either form, reached from the other's, is this one's.
		for _, sg := range []*identity.Signer{s, s.Form(tt.form), s.Form(0), s.Form(3 - tt.form).Form(tt.form)} {
			r, _ := http.NewRequest(http.MethodGet, "https://shop.example:8443/p", nil)
			sg.Sign(r.Header, r.URL.Host)
			r.Host = r.URL.Host
			if got := r.Header.Get("Signature-Agent"); got != tt.field {
				t.Errorf("%s: Signature-Agent = %s; want %s", tt.name, got, tt.field)
			}
			if got := r.Header.Get("Signature-Input"); len(got) < 5+len(tt.covers) || got[5:5+len(tt.covers)] != tt.covers {
				t.Errorf("%s: Signature-Input = %s; want it to cover %s", tt.name, got, tt.covers)
			}
			sig, err := identitytest.Verify(r, dir, now)
			if err != nil || sig.Form != tt.name || sig.Agent != agent {
				t.Errorf("%s: Verify = %+v, %v", tt.name, sig, err)
			}
		}
	}
	for _, bad := range []string{"", "Dictionary", "list", "sf-string"} {
		if _, err := identity.ParseForm(bad); err == nil {
			t.Errorf("ParseForm(%q): no error", bad)
		}
	}
}

// TestAuthorityPorts: "@authority" as RFC 9421 section 2.2.3 and the
// draft have it: the host lower-cased, the scheme's default port left
// out, any other port kept (even the other scheme's default).
func TestAuthorityPorts(t *testing.T) {
	t.Parallel()
	tests := []struct{ target, want string }{
		{"https://Shop.Example/p", "shop.example"},
		{"https://shop.example:443/p", "shop.example"},
		{"http://shop.example:80/p", "shop.example"},
		{"https://shop.example:80/p", "shop.example:80"},
		{"http://shop.example:443/p", "shop.example:443"},
		{"https://shop.example:8443/p", "shop.example:8443"},
		{"http://SHOP.example:8080/p", "shop.example:8080"},
		{"https://[2001:DB8::1]:443/p", "[2001:db8::1]"},
		{"https://[2001:db8::1]:8443/p", "[2001:db8::1]:8443"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.target)
		if err != nil {
			t.Fatal(err)
		}
		if got := identity.Authority(&http.Request{URL: u, Host: u.Host}); got != tt.want {
			t.Errorf("Authority(%s) = %q; want %q", tt.target, got, tt.want)
		}
	}
}
