package proxy

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/robotsgate/robotsgate/robots/fetch"
)

// What goes upstream names the authority decided, however the client
// spelt it: in the request line (absolute-form for "//" paths and for a
// plain-HTTP next hop), in Host, and in the address dialled.
func TestSendAsDecidedAuthority(t *testing.T) {
	o := fetch.Origin{Scheme: "http", Host: "93.184.215.14", Port: 80}
	for _, tt := range []struct {
		host, target string
		viaProxy     bool
		want         string
	}{
		{"1572395042", "//x", false, "http://93.184.215.14//x"},
		{"93.184.215.14:0080", "/a?b", true, "http://93.184.215.14/a?b"},
		{"93.184.215.14.", "/a", false, "/a"},
	} {
		r := &http.Request{URL: &url.URL{Scheme: "http", Host: tt.host}, Host: tt.host, Header: http.Header{}}
		sendAsDecided(r, tt.target, o, tt.viaProxy)
		if got := r.URL.RequestURI(); got != tt.want || r.Host != "93.184.215.14" || r.URL.Host != "93.184.215.14" {
			t.Errorf("client host %q, target %q: request line %q, Host %q, dialled %q; want %q and the decided authority",
				tt.host, tt.target, got, r.Host, r.URL.Host, tt.want)
		}
	}
}
