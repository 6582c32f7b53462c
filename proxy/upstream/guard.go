package upstream

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/robotsgate/robotsgate/robots/fetch"
)

// Guard is the one check of where robotsgate's own requests go: every
// request it makes of its own accord (robots.txt, the usage files, which
// are tdmrep.json and the RSL licences License lines name, each redirect
// hop of either, and so the decision API's fetches) passes Check before
// it is sent, to an origin or to the next hop, as a client's own target
// passes step 2: an IP literal (numeric IPv4 forms read as browsers read
// them, by fetch.ParseOrigin) is checked as it is, and a name is resolved
// with the configured resolver (the PrivateCache step 2 uses) and
// refused if any of its addresses is private. With no next hop the dialer
// checks again the address it actually dials, which catches a name that
// resolves elsewhere by then (DNS rebinding); through a next hop, which
// resolves names itself, Check is the only check this side can make.
//
// A nil *Guard checks nothing: for check, which has no client and applies
// no block_private.
type Guard struct {
	// Block refuses private addresses (block_private). robotsgate's own
	// listener is refused whatever it says.
	Block bool
	// Private resolves names and remembers which are private; nil: names
	// are not resolved here (literals are still checked).
	Private *PrivateCache
	// Self is robotsgate's own listener; nil: not known.
	Self *Self
	// Timeout bounds resolving a name (upstream.timeout); 0: 30 s.
	Timeout time.Duration
}

// Check returns nil if a request for rawURL may be sent; else an error
// wrapping ErrPrivateAddress (a *fetch.AddressError) when its host is, or
// resolves to, a private address under Block or is robotsgate itself, or
// one wrapping fetch.ErrBadOrigin when its origin cannot be read (it is
// then not sent either: what cannot be checked does not leave). A name
// that does not resolve here is let through, as at step 2: its fetch
// fails on its own, or a next hop resolves it (a limit the security
// documentation names).
func (g *Guard) Check(ctx context.Context, rawURL string) error {
	if g == nil {
		return nil
	}
	o, err := fetch.ParseOrigin(rawURL)
	if err != nil {
		return fmt.Errorf("check the address of %s: %w", rawURL, err)
	}
	if ip, err := netip.ParseAddr(o.Host); err == nil {
		return refuseAddrs([]netip.Addr{ip}, o.Host, strconv.Itoa(o.Port), g.Block, g.Self)
	}
	switch {
	case g.Self.IsOrigin(o):
		return &fetch.AddressError{Host: o.HostPort(), Self: true}
	case g.Block && g.Private != nil && g.Private.Private(ctx, o.Host, g.timeout()):
		return &fetch.AddressError{Host: o.Host}
	}
	return nil
}

func (g *Guard) timeout() time.Duration {
	if g.Timeout <= 0 {
		return 30 * time.Second
	}
	return g.Timeout
}

// Transport returns base behind g: each request is checked before base
// sees it, and one refused is never sent (nor signed, nor dialled). A
// client that follows redirects itself, as fetch.Fetcher does, sends each
// hop through it.
func (g *Guard) Transport(base http.RoundTripper) http.RoundTripper {
	return &guardedTransport{guard: g, base: base}
}

type guardedTransport struct {
	guard *Guard
	base  http.RoundTripper
}

func (t *guardedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.guard.Check(req.Context(), req.URL.String()); err != nil {
		if req.Body != nil {
			req.Body.Close() // a RoundTripper closes the body, even on error
		}
		return nil, err
	}
	return t.base.RoundTrip(req)
}

// CloseIdleConnections closes base's idle connections.
func (t *guardedTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
