package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/robotsgate/robotsgate/proxy/h1"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/proxy/wire"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// connectKey marks the context of a request read inside a MITM tunnel.
type connectKey struct{}

// serveTunnel serves an accepted CONNECT (goproxy's ConnectHijack): it
// confirms the CONNECT and looks at what the client sends. TLS is relayed
// to the target in tunnel mode and terminated with a leaf for the CONNECT
// host in MITM mode; plain HTTP is taken as it is, in either mode; the
// requests inside are then served by h1's loop, or, for a MITM client that
// chose h2 by ALPN, by serveH2, each through the proxy's one hook
// (serveInner); anything else is closed.
func (s *Server) serveTunnel(r *http.Request, client net.Conn, ci *connectInfo) {
	defer client.Close()
	if ci.upstream != nil {
		defer ci.upstream.Close()
	}
	lim := s.snap.Load().pol.Config().Limits
	tc := trackedOf(client)
	if tc != nil {
		tc.setIdle(0) // the tunnel's own server keeps time from here on
	}
	major, minor := r.ProtoMajor, r.ProtoMinor
	if major == 0 {
		major, minor = 1, 1
	}
	if _, err := fmt.Fprintf(client, "HTTP/%d.%d 200 Connection established\r\n\r\n", major, minor); err != nil {
		return
	}
	client.SetReadDeadline(time.Now().Add(lim.ReadHeaderTimeout))
	br := bufio.NewReader(client)
	var conn net.Conn = &wire.BufferedConn{Conn: client, R: br}
	scheme := "http"
	proto := tunnelProtocol(br)
	if ci.upstream != nil && proto != "tls" {
		s.finishTunnel(r, ci, "") // plain HTTP inside is decided request by request
	}
	switch proto {
	case "tls":
		if ci.upstream != nil { // tunnel mode: relayed as it is, paths unseen (step 9)
			hello, misdirected := s.checkServerName(conn, ci)
			s.finishTunnel(r, ci, misdirected)
			if misdirected != "" {
				return
			}
			client.SetReadDeadline(time.Time{})
			if tc != nil {
				tc.setIdle(lim.TunnelIdleTimeout)
			}
			if _, err := ci.upstream.Write(hello); err != nil {
				return
			}
			wire.Relay(conn, ci.upstream)
			return
		}
		o, err := fetch.OriginOf("https", ci.tunnel.Authority) // the normal form: punycode, no trailing dot
		if err != nil {
			return
		}
		t, err := s.mitm.Terminate(conn, o.Host, lim.ReadHeaderTimeout)
		if err != nil {
			s.log.Debug("tunnel: client TLS handshake failed", "authority", ci.tunnel.Authority, "err", err)
			return
		}
		conn, scheme = t, "https"
	case "http":
	case "none":
		return
	default:
		s.log.Warn("tunnel: neither TLS nor HTTP/1.x: closed", "authority", ci.tunnel.Authority, "client", wire.ClientAddr(r))
		return
	}
	client.SetReadDeadline(time.Time{})
	// Inner requests are for this origin only (421 otherwise): found once
	// here, not at every request. The CONNECT's own decision parsed it.
	ci.tunnel.Origin, _ = fetch.OriginOf(scheme, ci.tunnel.Authority)
	ctx := context.WithValue(s.stopping, connectKey{}, ci) // ends, like every request's, when a shutdown's drain time is up
	if tlsConn, ok := conn.(*tls.Conn); ok && tlsConn.ConnectionState().NegotiatedProtocol == "h2" {
		s.serveH2(ctx, tlsConn, r.RemoteAddr, lim) // [tls] http2: each stream to serveInner too
		return
	}
	opts := h1.Options{
		Scheme: scheme, Authority: ci.tunnel.Authority, RemoteAddr: r.RemoteAddr, Logger: s.log,
		Context: ctx,
		Active:  &s.tunnelRequests,
	}
	if tc != nil {
		opts.OnUpgrade = func() { tc.setIdle(lim.TunnelIdleTimeout) } // a WebSocket is idle-timed like a tunnel
		if cw, ok := tc.Conn.(interface{ CloseWrite() error }); ok {
			opts.CloseWrite = cw.CloseWrite
		}
	}
	h1.Serve(conn, opts, h1.Limits{
		ReadHeaderTimeout: lim.ReadHeaderTimeout, MaxHeaderBytes: lim.MaxHeaderBytes,
		IdleTimeout: lim.IdleTimeout, TunnelIdleTimeout: lim.TunnelIdleTimeout,
	}, s.serveInner)
}

// serveInner answers a request read inside a tunnel: the one hook.
func (s *Server) serveInner(r *http.Request) *http.Response {
	_, resp := s.onRequest(r, nil)
	return resp
}

// tunnelProtocol tells from the first bytes of a tunnel what the client
// speaks: "tls" (a TLS handshake record), "http" (an upper-case method:
// HTTP/1.x), "none" when it sent nothing before the deadline, or "" for
// anything else.
func tunnelProtocol(br *bufio.Reader) string {
	first, err := br.Peek(1)
	switch {
	case err != nil:
		return "none"
	case first[0] == 0x16:
		// A TLS record header: handshake, major version 3. Anything else
		// that starts with 0x16 is neither TLS nor HTTP.
		if first, err = br.Peek(3); err == nil && first[1] == 3 && first[2] <= 4 {
			return "tls"
		}
		return ""
	case 'A' <= first[0] && first[0] <= 'Z':
		return "http"
	}
	return ""
}

// connectInfo is what a tunnel's requests know of their CONNECT.
type connectInfo struct {
	// tunnel is what the policy is told of the CONNECT; its Origin is set
	// before the first request inside.
	tunnel   policy.Tunnel
	upstream net.Conn         // tunnel mode: the connection to the target, for TLS to be relayed to; nil in MITM mode
	decision *policy.Decision // tunnel mode: the CONNECT's, finished by finishTunnel
	policy   *policy.Policy   // that decision's
}

// finishTunnel accounts for a tunnel-mode CONNECT's decision, once: as
// allowed (200, the tunnel opened), or, with misdirected, refused because
// the TLS ClientHello named another site than the CONNECT (the client had
// its 200; the tunnel is closed before anything is relayed, and 421 is
// what the audit says it amounts to).
func (s *Server) finishTunnel(r *http.Request, ci *connectInfo, misdirected string) {
	d := ci.decision
	if d == nil {
		return
	}
	ci.decision = nil
	status := http.StatusOK
	if misdirected != "" {
		d.Action, d.Reason, status = policy.ActionMisdirected, misdirected, http.StatusMisdirectedRequest
	}
	s.finish(ci.policy, r, d, outcome{}, status, ci.tunnel.Authority)
}

// checkServerName reads the TLS ClientHello a tunnel-mode client sends
// first, and returns the bytes read (to be relayed first) and, when the
// tunnel must not be opened, why: its server name (SNI) names another
// host than the CONNECT (case and a trailing dot aside); it carries
// Encrypted Client Hello, whose real server name is hidden inside; or it
// cannot be read. A name-based server at the CONNECT's address would
// otherwise serve the named site, whose robots.txt was never read
// (docs/decision.md step 9). A ClientHello without a server name (a client
// that dialled an address) goes through.
func (s *Server) checkServerName(conn net.Conn, ci *connectInfo) ([]byte, string) {
	read, msg, err := readClientHello(conn)
	var hello helloInfo
	if err == nil {
		hello, err = parseClientHello(msg)
	}
	switch {
	case err != nil:
		return nil, "tunnel closed: the TLS ClientHello could not be read: " + err.Error()
	case hello.ech:
		return nil, "tunnel closed: the TLS ClientHello uses Encrypted Client Hello, which hides the site it is for; tunnel mode cannot check it (use MITM mode)"
	case hello.serverName == "":
		return read, ""
	}
	o, err := fetch.OriginOf("https", hello.serverName)
	if err != nil || o.Host != ci.decision.Origin.Host {
		return nil, fmt.Sprintf("tunnel closed: the TLS ClientHello names %q, not the CONNECT host %s", hello.serverName, ci.decision.Origin.Host)
	}
	return read, ""
}
