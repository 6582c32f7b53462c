package header

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestRemoveHopByHop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      http.Header
		upgrade bool
		want    http.Header
	}{
		{"hop-by-hop and named fields go", http.Header{
			"Connection": {"close, X-Secret", "keep-alive"}, "X-Secret": {"1"}, "Keep-Alive": {"5"}, "Te": {"trailers"},
			"Proxy-Authorization": {"Basic x"}, "Proxy-Connection": {"keep-alive"}, "Trailer": {"X"}, "Upgrade": {"h2c"}, "Accept": {"*/*"},
		}, false, http.Header{"Accept": {"*/*"}}},
		{"a WebSocket keeps Connection and Upgrade", http.Header{
			"Connection": {"Upgrade, X-Secret"}, "Upgrade": {"websocket"}, "X-Secret": {"1"}, "Sec-Websocket-Key": {"k"},
		}, true, http.Header{"Connection": {"Upgrade, X-Secret"}, "Upgrade": {"websocket"}, "Sec-Websocket-Key": {"k"}}},
	}
	for _, tt := range tests {
		RemoveHopByHop(tt.in, tt.upgrade)
		if !reflect.DeepEqual(tt.in, tt.want) {
			t.Errorf("%s: %v; want %v", tt.name, tt.in, tt.want)
		}
	}
}

func TestIsWebSocketUpgrade(t *testing.T) {
	t.Parallel()
	tests := []struct {
		h    http.Header
		want bool
	}{
		{http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"WebSocket"}}, true},
		{http.Header{"Connection": {"upgrade"}, "Upgrade": {"h2c"}}, false},
		{http.Header{"Upgrade": {"websocket"}}, false},
		{http.Header{"Connection": {"upgraded"}, "Upgrade": {"websocket"}}, false},
	}
	for _, tt := range tests {
		if got := IsWebSocketUpgrade(tt.h); got != tt.want {
			t.Errorf("IsWebSocketUpgrade(%v) = %v; want %v", tt.h, got, tt.want)
		}
	}
}

// TestFilterTrailer: a trailer keeps only what may come after the body:
// no framing, routing, authentication or robotsgate field, and nothing
// Connection named.
func TestFilterTrailer(t *testing.T) {
	t.Parallel()
	tr := http.Header{}
	for _, k := range []string{"Content-Length", "Host", "Authorization", "Proxy-Foo", "X-Robots-Gate-Purpose", "X_robots_gate", "Signature",
		"Transfer-Encoding", "X-Named", "X-Checksum", "Server-Timing"} {
		tr[k] = []string{"v"}
	}
	FilterTrailer(tr, []string{"x-named"})
	if want := (http.Header{"X-Checksum": {"v"}, "Server-Timing": {"v"}}); !reflect.DeepEqual(tr, want) {
		t.Errorf("trailer %v; want %v", tr, want)
	}
}

func TestTrailerNames(t *testing.T) {
	t.Parallel()
	got := strings.Split(TrailerNames(http.Header{"A": nil, "B": nil}), ", ")
	if len(got) != 2 || got[0] == got[1] {
		t.Errorf("TrailerNames = %q", got)
	}
}

// FuzzIsGateField: a field is robotsgate's exactly when, case aside and
// with "_" read as "-", it is X-Robots-Gate or starts X-Robots-Gate-.
func FuzzIsGateField(f *testing.F) {
	for _, s := range []string{"X-Robots-Gate", "x_robots_gate-rule", "X-Robots-Gates", "X-Robots-Gat", "", "X-Robots-Gate_", "X\x00Robots-Gate"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		norm := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		want := norm == "x-robots-gate" || strings.HasPrefix(norm, "x-robots-gate-")
		// ToLower maps some non-ASCII runes to ASCII ("K", the Kelvin sign,
		// to "k"); a field name is ASCII: compare only where name is.
		if ascii(name) && IsGateField(name) != want {
			t.Fatalf("IsGateField(%q) = %v; want %v", name, !want, want)
		}
		h := http.Header{name: {"x"}, "Accept": {"y"}}
		RemoveGateFields(h)
		if _, kept := h[name]; kept == IsGateField(name) && name != "Accept" {
			t.Fatalf("RemoveGateFields kept %q: %v", name, kept)
		}
	})
}

func ascii(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func TestIsGateField(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"X-Robots-Gate": true, "x_robots_gate_rule": true, "X-ROBOTS-GATE-Purpose": true,
		"X-Robots-Gates": false, "X-Robots-Gat": false, "X\rRobots\rGate": false, "X-Robots\x0dGate": false, "": false,
	} {
		if got := IsGateField(name); got != want {
			t.Errorf("IsGateField(%q) = %v; want %v", name, got, want)
		}
	}
}

// TestSameName: a field is another's in any case and with "_" for "-",
// never a longer or shorter name.
func TestSameName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		k    string
		want bool
	}{
		{"Crawler-Exact-Price", true},
		{"crawler_exact_price", true},
		{"CRAWLER_EXACT-PRICE", true},
		{"Crawler-Exact-Prices", false},
		{"Crawler-Exact-Pric", false},
		{"Crawler.Exact.Price", false},
	} {
		if got := SameName(tc.k, "crawler-exact-price"); got != tc.want {
			t.Errorf("SameName(%q, %q) = %v; want %v", tc.k, "crawler-exact-price", got, tc.want)
		}
	}
	h := http.Header{"Signature_input": {"a"}, "Accept": {"b"}, "SIGNATURE": {"c"}}
	RemoveSpellings(h, "signature-input", "signature")
	if len(h) != 1 || h.Get("Accept") != "b" {
		t.Errorf("RemoveSpellings left %v; want Accept only", h)
	}
}
