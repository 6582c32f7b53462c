package proxy

import (
	"maps"
	"net/http"
	"slices"
	"testing"
)

// TestH2FieldsAsSent: an answer over h2 carries exactly the fields it
// carries over HTTP/1.1 in the same tunnel: an origin's page without
// Content-Type or Date gets neither (net/http would sniff text/html;
// charset=utf-8, and a browser would then decode a Latin-1 page as
// UTF-8), one with them keeps the origin's values, and robotsgate's own
// answer (a 403) keeps its text/plain and its Date.
func TestH2FieldsAsSent(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, testRobots, "a.example")
	latin1 := "<p>caf\xe9 cr\xe8me</p>"
	o.handler = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bare" {
			w.Header()["Content-Type"] = nil // net/http's origin server adds neither either
			w.Header()["Date"] = nil
		} else {
			w.Header().Set("Content-Type", "text/html; charset=iso-8859-1")
			w.Header().Set("Date", "Sat, 28 Nov 2026 08:00:00 GMT")
		}
		w.Write([]byte(latin1))
	}
	p := startMITM(t, pki, nil)
	base := "https://a.example:" + port
	h1c, h2c := p.mitmClient(t, nil, false), p.mitmClient(t, nil, true)
	for _, tc := range []struct {
		path, ctype string
		date        bool
	}{
		{"/bare", "", false},
		{"/public/typed", "text/html; charset=iso-8859-1", true},
		{"/private/x", "text/plain; charset=utf-8", true},
	} {
		r1, b1 := get(t, h1c, base+tc.path)
		r2, b2 := get(t, h2c, base+tc.path)
		if r1.ProtoMajor != 1 || r2.ProtoMajor != 2 {
			t.Fatalf("%s: over %s and %s; want HTTP/1.1 and HTTP/2", tc.path, r1.Proto, r2.Proto)
		}
		k1, k2 := slices.Sorted(maps.Keys(r1.Header)), slices.Sorted(maps.Keys(r2.Header))
		if !slices.Equal(k1, k2) {
			t.Errorf("%s: fields over HTTP/1.1 %v, over h2 %v; want the same", tc.path, k1, k2)
		}
		for _, r := range []*http.Response{r1, r2} {
			if got := r.Header.Values("Content-Type"); tc.ctype == "" && len(got) != 0 || tc.ctype != "" && (len(got) != 1 || got[0] != tc.ctype) {
				t.Errorf("%s over %s: Content-Type %q; want %q", tc.path, r.Proto, got, tc.ctype)
			}
			if _, ok := r.Header["Date"]; ok != tc.date {
				t.Errorf("%s over %s: Date %q; want one: %v", tc.path, r.Proto, r.Header.Get("Date"), tc.date)
			}
		}
		if tc.path != "/private/x" && (b1 != latin1 || b2 != latin1) {
			t.Errorf("%s: bodies %q and %q; want the origin's bytes %q", tc.path, b1, b2, latin1)
		}
	}
	if got := o.count("/bare"); got != 2 {
		t.Errorf("the origin saw /bare %d times; want 2", got)
	}
}
