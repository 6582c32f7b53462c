package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/robots/fetch"
)

// fakeLookup resolves "inward.example" to 10.0.0.1, "gone.example" to
// nothing, and any other name to 203.0.113.7 (TEST-NET-3: public to
// IsPrivate), counting its calls.
func fakeLookup(calls *atomic.Int64) LookupFunc {
	return func(_ context.Context, _, host string) ([]netip.Addr, error) {
		calls.Add(1)
		switch host {
		case "inward.example":
			return []netip.Addr{netip.MustParseAddr("203.0.113.8"), netip.MustParseAddr("10.0.0.1")}, nil
		case "gone.example":
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return []netip.Addr{netip.MustParseAddr("203.0.113.7")}, nil
	}
}

// TestGuardCheck: one check for every URL robotsgate asks for of its own
// accord: literals (in every numeric spelling a next hop would read as
// an address) as they are, names resolved with the configured resolver,
// robotsgate's own listener always.
func TestGuardCheck(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	self := &Self{}
	self.Listen(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
	guard := &Guard{Block: true, Private: NewPrivateCache(fakeLookup(&calls), time.Now), Self: self, Timeout: time.Second}
	open := &Guard{Block: false, Private: NewPrivateCache(fakeLookup(&calls), time.Now), Self: self, Timeout: time.Second}
	for _, tt := range []struct {
		url         string
		refused     bool // by guard
		openRefused bool // by open (block_private off): robotsgate itself only
		bad         bool // not an origin: refused, not as private
	}{
		{url: "http://169.254.169.254/latest/meta-data/iam", refused: true},
		{url: "http://127.0.0.1:6379/", refused: true},
		{url: "http://[::1]:2375/containers/json", refused: true},
		{url: "http://10.0.0.1/.well-known/tdmrep.json", refused: true},
		{url: "http://127.1/x", refused: true},
		{url: "http://0xa9fea9fe/latest", refused: true},
		{url: "http://2130706433:6379/", refused: true},
		{url: "http://[64:ff9b::a9fe:a9fe]/", refused: true},
		{url: "http://[::ffff:10.0.0.1]/", refused: true},
		{url: "https://user:pw@10.1.2.3/licence.xml", refused: true},
		{url: "http://inward.example/robots.txt", refused: true},
		{url: "http://INWARD.example./robots.txt", refused: true},
		{url: "http://127.0.0.1:8080/robots.txt", refused: true, openRefused: true},
		{url: "http://localhost:8080/robots.txt", refused: true, openRefused: true},
		{url: "http://site.example/robots.txt"},
		{url: "https://203.0.113.9/licence.xml"},
		{url: "http://gone.example/robots.txt"}, // left to the fetch, as at step 2
		{url: "http://999.1.1.1/", refused: true, openRefused: true, bad: true},
	} {
		for _, g := range []struct {
			guard *Guard
			want  bool
		}{{guard, tt.refused}, {open, tt.openRefused}} {
			err := g.guard.Check(t.Context(), tt.url)
			if got := err != nil; got != g.want {
				t.Errorf("Check(%q) with block_private = %v: %v; want refused = %v", tt.url, g.guard.Block, err, g.want)
				continue
			}
			if err == nil {
				continue
			}
			if private := errors.Is(err, ErrPrivateAddress); private == tt.bad {
				t.Errorf("Check(%q): %v; want private address = %v", tt.url, err, !tt.bad)
			}
			if !tt.bad && fetch.ErrorKind(err) != "private-address" {
				t.Errorf("ErrorKind(Check(%q)) = %q; want private-address", tt.url, fetch.ErrorKind(err))
			}
		}
	}
	if err := (*Guard)(nil).Check(t.Context(), "http://10.0.0.1/"); err != nil {
		t.Errorf("a nil Guard: %v; want nothing checked", err)
	}
}

// TestGuardTransport: a request refused never reaches the transport
// behind, and its body is closed.
func TestGuardTransport(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	var sent []string
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = append(sent, r.URL.String())
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	})
	tr := (&Guard{Block: true, Private: NewPrivateCache(fakeLookup(&calls), time.Now)}).Transport(base)
	for _, u := range []string{"http://10.0.0.1/", "http://site.example/robots.txt", "http://inward.example/"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
		if resp, err := tr.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	}
	if len(sent) != 1 || sent[0] != "http://site.example/robots.txt" {
		t.Errorf("sent %q; want only http://site.example/robots.txt", sent)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
