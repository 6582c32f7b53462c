package upstream

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestIsPrivate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr    string
		private bool
	}{
		{"127.0.0.1", true}, {"10.0.0.1", true}, {"8.8.8.8", false}, {"::1", true}, {"2606:4700::1111", false},
		{"64:ff9b::8.8.8.8", false}, {"64:ff9b::127.0.0.1", true}, {"64:ff9b::10.0.0.1", true}, {"64:ff9b::169.254.169.254", true},
		{"64:ff9b:1::a00:1", true}, {"64:ff9b:1:7f00:1::", true}, {"64:ff9b:1::808:808", false}, {"64:ff9b:1:808:8:800::", false},
		{"::ffff:0:7f00:1", true}, {"::ffff:0:808:808", false},
		{"2002:7f00:1::", true}, {"2002:a00:1::", true}, {"2002:808:808::", false},
		{"::127.0.0.1", true}, {"::10.1.2.3", true}, {"::8.8.8.8", false},
		{"::ffff:127.0.0.1", true}, {"::ffff:8.8.8.8", false},
		{"240.0.0.1", true}, {"255.255.255.255", true}, {"239.255.255.255", true}, {"223.255.255.255", false},
	} {
		if got := IsPrivate(netip.MustParseAddr(tt.addr)); got != tt.private {
			t.Errorf("IsPrivate(%s) = %v; want %v", tt.addr, got, tt.private)
		}
	}
}

// TestDialGuard: a host whose name passes step 2 but dials a private
// address (the resolver is asked again at dial time) is refused too.
func TestDialGuard(t *testing.T) {
	t.Parallel()
	lookup := net.DefaultResolver.LookupNetIP
	dial := guardedDialer(time.Second, true, "", lookup, nil, nil)
	o := httptest.NewServer(http.NotFoundHandler())
	defer o.Close()
	_, err := dial(t.Context(), "tcp", strings.TrimPrefix(o.URL, "http://"))
	if err == nil || !strings.Contains(err.Error(), ErrPrivateAddress.Error()) {
		t.Errorf("dial loopback with the guard: %v; want %v", err, ErrPrivateAddress)
	}
	exempt := strings.TrimPrefix(o.URL, "http://")
	if c, err := guardedDialer(time.Second, true, exempt, lookup, nil, nil)(t.Context(), "tcp", exempt); err != nil {
		t.Errorf("dial the exempt upstream proxy: %v", err)
	} else {
		c.Close()
	}
}
