package proxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/elazarl/goproxy"

	"github.com/robotsgate/robotsgate/internal/rotate"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/proxy/upstream"
)

// egress is how robotsgate reaches origins under one [upstream]: the
// transports of forwarded and of paid requests, the dialer of tunnels,
// and the transport of its own fetches (robots.txt, usage files) behind
// the guard. It is built whole from one config and lives in the snapshot:
// a reload that changes what it was built from replaces it with the
// policy, a request goes out the way of the snapshot it loaded (so one
// in flight ends on the old egress), and the old one's idle connections
// are closed.
type egress struct {
	key egressKey
	// tr is the base the others clone: the guarded dialer, the roots,
	// the next hop. It sends nothing itself.
	tr   *http.Transport
	send *rotate.Transport // forwarded requests (see package rotate)
	paid *http.Transport   // paid requests, each once on a connection of its own (paidTransport)
	// connectVia opens a tunnel through upstream.proxy's own CONNECT;
	// nil: tunnels dial with tr's dialer.
	connectVia func(network, addr string) (net.Conn, error)
	// fetch sends robotsgate's own fetches; the caches reach it through
	// Server.fetchTransport.
	fetch *upstream.FetchTransport
}

// egressKey is what an egress is built from: a reload whose key is the
// same keeps the egress in force, and its connections.
type egressKey struct {
	upstream config.UpstreamConfig
	// The bounds [limits] puts on the transport.
	maxIdle, maxHeaderBytes int
}

// egressKeyOf returns the key of the egress cfg builds.
func egressKeyOf(cfg *config.Config) egressKey {
	return egressKey{upstream: cfg.Upstream, maxIdle: cfg.Limits.MaxConnections, maxHeaderBytes: cfg.Limits.MaxHeaderBytes}
}

// newEgress builds the egress of pol's [upstream], trusting roots (the
// system's and upstream.ca's, as upstream.ReadPool read them).
func (s *Server) newEgress(pol *policy.Policy, roots *x509.CertPool) (*egress, error) {
	cfg := pol.Config()
	next := pol.UpstreamProxy()
	uo := upstream.OptionsFor(cfg, next) // MaxIdle and MaxHeaderBytes as egressKeyOf has them
	uo.Lookup, uo.Conns, uo.Self, uo.Roots = s.opts.LookupNetIP, s.upstream, &s.self, roots
	tr, err := upstream.NewTransport(uo)
	if err != nil {
		return nil, fmt.Errorf("build the upstream transport: %w", err)
	}
	e := &egress{
		key:  egressKeyOf(cfg),
		tr:   tr,
		send: rotate.New(tr, 0),
		paid: paidTransport(tr),
		fetch: upstream.NewFetchTransport(upstream.FetchOptions{
			Transport: tr, Proxy: next,
			Guard:  &upstream.Guard{Block: cfg.Upstream.BlockPrivate, Private: s.private, Self: &s.self, Timeout: cfg.Upstream.Timeout},
			Signer: s.signer, OnSign: s.metrics.signed.Inc,
		}),
	}
	if next != nil {
		// Tunnels go through the next hop too, with its credentials, over
		// tr's dialer and TLS config (goproxy's CONNECT client reads them
		// from the ProxyHttpServer it is made by, which does nothing else).
		e.connectVia = (&goproxy.ProxyHttpServer{Tr: tr}).NewConnectDialToProxyWithHandler(next.String(), func(req *http.Request) {
			if next.User != nil {
				pw, _ := next.User.Password()
				req.SetBasicAuth(next.User.Username(), pw)
				req.Header.Set("Proxy-Authorization", req.Header.Get("Authorization"))
				req.Header.Del("Authorization")
			}
		})
		if e.connectVia == nil {
			return nil, fmt.Errorf("build the upstream transport: upstream.proxy %s cannot be read", next.Redacted())
		}
	}
	return e, nil
}

// dialTunnel connects to a tunnel's target: through upstream.proxy's own
// CONNECT when there is one, else with the guarded dialer.
func (e *egress) dialTunnel(ctx context.Context, hostport string) (net.Conn, error) {
	if e.connectVia != nil {
		return e.connectVia("tcp", hostport)
	}
	return e.tr.DialContext(ctx, "tcp", hostport)
}

// closeIdle closes the idle connections of e's transports, and those
// that go idle later as the requests in flight on them end.
func (e *egress) closeIdle() {
	e.send.CloseIdleConnections()
	e.paid.CloseIdleConnections()
	e.fetch.CloseIdleConnections()
}

// egressFor returns the egress for pol: e, the one in force, when pol's
// [upstream] (and upstream.ca's content, read again: a renewed file is
// trusted at the reload) would build the same; else a new one. A CA file
// that cannot be read is a config error of upstream.ca, so that the
// reload is refused with it.
func (s *Server) egressFor(pol *policy.Policy, e *egress) (out *egress, changed bool, err error) {
	cfg := pol.Config()
	roots, err := upstream.ReadPool(cfg.Upstream.CA)
	if err != nil {
		pb := cfg.Problems()
		pb.Addf("upstream.ca", "%v", err)
		return nil, false, pb.Err()
	}
	if e != nil && e.key == egressKeyOf(cfg) && e.tr.TLSClientConfig.RootCAs.Equal(roots) {
		return e, false, nil
	}
	out, err = s.newEgress(pol, roots)
	if err != nil {
		pb := cfg.Problems()
		pb.Addf("upstream", "%v", err)
		return nil, false, pb.Err()
	}
	return out, true, nil
}

// fetchTransport hands each of robotsgate's own fetches to the egress in
// force: the caches are built once, their way out is the snapshot's.
type fetchTransport struct{ s *Server }

func (t fetchTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sn := t.s.snap.Load()
	if sn == nil { // not serving yet: nothing fetches before the first snapshot
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errNoEgress
	}
	return sn.out.fetch.RoundTrip(req)
}

// CloseIdleConnections closes the idle connections of the egress in
// force's fetches.
func (t fetchTransport) CloseIdleConnections() {
	if sn := t.s.snap.Load(); sn != nil {
		sn.out.fetch.CloseIdleConnections()
	}
}

// errNoEgress fails a fetch made before the server has a config in force.
var errNoEgress = errors.New("robotsgate is not serving yet")
