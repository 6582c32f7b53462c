package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/elazarl/goproxy"

	"github.com/robotsgate/robotsgate/proxy/answer"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/proxy/upstream"
	"github.com/robotsgate/robotsgate/proxy/wire"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// The entry points below are adapters: each builds a request value, has
// the policy decide it, renders the answer, and hands the outcome to
// finish, which counts and audits it from the same evidence.

// onRequest is goproxy's request hook: it sees plain HTTP requests and
// those read inside a tunnel alike. An allowed request is forwarded here,
// so that the decision and the answer stay together.
func (s *Server) onRequest(r *http.Request, _ *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	sn := s.snap.Load()
	req := requestOf(r, policy.KindPlain, r.URL.Scheme, r.URL.Host, policy.RequestTarget(r.RequestURI))
	var ci *connectInfo
	if c, ok := r.Context().Value(connectKey{}).(*connectInfo); ok {
		ci = c
		req.Kind, req.Tunnel = policy.KindInner, &c.tunnel
	}
	var d policy.Decision
	sn.pol.Decide(r.Context(), &sn.env, &req, &d)
	if resp := s.respond(r, &d); resp != nil {
		r.Body.Close() // not sent: its server may drop it (h1 waits for this)
		s.finish(sn.pol, r, &d, outcome{}, resp.StatusCode, "")
		return r, resp
	}
	return r, s.forward(sn, r, &req, ci, &d)
}

// onConnect is goproxy's CONNECT hook (docs/decision.md step 9). An allowed CONNECT
// is served by serveTunnel: decrypted in MITM mode, and in tunnel mode
// relayed to the target, dialled first so that a failure is an answer.
func (s *Server) onConnect(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	r := ctx.Req
	sn := s.snap.Load()
	p := sn.pol
	req := requestOf(r, policy.KindConnect, "https", host, "/")
	var d policy.Decision
	p.Decide(r.Context(), &sn.env, &req, &d)
	if resp := s.respond(r, &d); resp != nil {
		ctx.Resp = resp
		s.finish(p, r, &d, outcome{}, resp.StatusCode, host)
		return goproxy.RejectConnect, host
	}
	ci := &connectInfo{tunnel: policy.Tunnel{Authority: host, User: req.User, Purposes: d.Purposes}}
	if s.mitm == nil {
		up, err := sn.out.dialTunnel(r.Context(), d.Origin.HostPort()) // the host decided, not its spelling (2130706433, "host.")
		if err != nil {
			ctx.Resp = s.upstreamFailure(p, r, r.Context(), d.Origin.HostPort(), err, &d)
			s.finish(p, r, &d, outcome{}, ctx.Resp.StatusCode, host)
			return goproxy.RejectConnect, host
		}
		// A tunnel-mode CONNECT is a decision (a MITM one is not), finished
		// once the tunnel's first bytes are seen: a TLS ClientHello must
		// name the site decided (see serveTunnel).
		ci.upstream, ci.decision, ci.policy = up, &d, p
	}
	return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: func(r *http.Request, c net.Conn, _ *goproxy.ProxyCtx) {
		s.serveTunnel(r, c, ci)
	}}, host
}

// requestOf is what the policy is told of r, an entry point's request
// of kind for scheme://authority with target.
func requestOf(r *http.Request, kind policy.Kind, scheme, authority, target string) policy.Request {
	req := policy.Request{
		Kind:        kind,
		Method:      r.Method,
		Content:     hasContent(r),
		ContentType: len(r.Header["Content-Type"]) > 0,
		URILen:      len(r.RequestURI),
		Scheme:      scheme,
		Authority:   authority,
		Target:      target,
		UserAgent:   r.Header.Get("User-Agent"),
		Client:      wire.ClientAddr(r),
		Credentials: r.Header.Get("Proxy-Authorization"),
	}
	req.Purposes, req.OtherPurposeSpelling = policy.PurposeValues(r.Header)
	return req
}

// shareBackoff tells the fleet, if any, of host's back-off, without
// holding up the response (the call is bounded by the cluster client).
func (s *Server) shareBackoff(host string) {
	if s.cluster == nil {
		return
	}
	until, why := s.backoffs.Hold(host)
	if until.IsZero() {
		return
	}
	go s.cluster.PublishBackoff(context.Background(), host, until, why)
}

// upstreamFailure turns a failure to reach hostport into d's outcome and
// the client's answer: 503 when a shutdown cut it, the private-address
// answer (403, in p's block style) when the dialler found a private address
// (DNS rebinding, or a resolver that changed its mind since step 2), else
// 502, or 504 for a timeout, naming the kind; client-left when client, the
// client's own context (not r's, which a forwarded request detaches from
// it), was cancelled: the client went away, and the origin is not blamed
// for it. A request whose client
// failed to send its body (stalled: 408; cut short: 400) is the client's
// failure, logged at debug, never one of the origin's.
func (s *Server) upstreamFailure(p *policy.Policy, r *http.Request, client context.Context, hostport string, err error, d *policy.Decision) *http.Response {
	bodyStatus, bodyWhy := bodyFailed(r.Body, err)
	switch {
	case s.stopping.Err() != nil: // Shutdown closed the upstream connections
		d.Action, d.Reason = policy.ActionShuttingDown, "shutting down before the origin answered"
		return s.respond(r, d)
	case bodyStatus != 0:
		s.log.Debug("request body failed on the client's side", "url", r.URL.Redacted(), "status", bodyStatus, "err", err)
		d.Action, d.Reason, d.Status = policy.ActionBadRequest, bodyWhy, bodyStatus
		resp := s.respond(r, d)
		resp.Header.Set("Connection", "close") // the rest of the body is not read: nothing more can follow on the connection
		return resp
	case errors.Is(err, upstream.ErrPrivateAddress):
		d.Action, d.Reason = policy.ActionPrivate, policy.ReasonPrivate
		return s.respond(r, d)
	}
	if clientLeft(client) { // nobody to answer, and not the origin's failure
		d.Action, d.Reason = policy.ActionClientLeft, "client left before the origin answered"
		return s.respond(r, d)
	}
	code := http.StatusBadGateway
	if fetch.ErrorKind(err) == "timeout" {
		code = http.StatusGatewayTimeout
	}
	why := fetch.Describe(err)
	s.log.Warn("upstream request failed", "upstream", hostport, "err", err)
	d.Action, d.Reason = policy.ActionUpstream, "upstream "+why
	return answer.Text(r, code, policy.ActionUpstream, s.opts.Now(), fmt.Sprintf("upstream %s: %s\n", hostport, why))
}

// clientLeft reports whether client, a client request's context, ended
// because its client went away (net/http cancels it when the connection
// closes or, on HTTP/2, the stream is reset), not for a deadline.
func clientLeft(client context.Context) bool {
	return client.Err() != nil && errors.Is(context.Cause(client), context.Canceled)
}

// finish accounts for one answer: it is counted once in
// robotsgate_requests_total under its decision and audited, both from d
// and, for a request forwarded, up (what happened upstream); status is
// what the client was sent: a client-left answer (503) is written on
// HTTP/1 (a client that only closed its sending side reads it), and on
// HTTP/2 cannot be (status 0),
// connect the CONNECT authority when the answer was to a CONNECT. Every
// answer robotsgate makes, and every request or tunnel it lets through,
// passes here exactly once.
func (s *Server) finish(p *policy.Policy, r *http.Request, d *policy.Decision, up outcome, status int, connect string) {
	if d.Action == policy.ActionClientLeft && r.ProtoMajor == 2 {
		status = 0 // its stream was reset or its connection closed: nothing can be written
	}
	scheme := d.Origin.Scheme
	switch {
	case scheme != "":
	case r.Method == http.MethodConnect:
		scheme = "https"
	default:
		scheme = r.URL.Scheme
	}
	s.metrics.countRequest(d.Action, scheme)
	// The origin's own answer, when it gave one: a request let through,
	// or one whose answer robotsgate withheld (a tunnel-mode CONNECT's
	// 200 is robotsgate's).
	class, answered := audit.ClassOf(up.answered)
	if answered {
		s.metrics.answers[class].Inc()
	}
	s.board.Count(d, class, answered)
	if d.Paced {
		s.metrics.pacedWait.Observe(d.Waited.Seconds())
	}
	s.record(p, r, d, up, status, connect)
}

// respond returns robotsgate's own answer to r for d, in d's block style;
// nil when d lets r go to its origin.
func (s *Server) respond(r *http.Request, d *policy.Decision) *http.Response {
	return answer.For(d.Style, r, d, s.opts.Now())
}

// record writes the audit record of an answer, when it is to be logged
// (allowed ones only with log_allowed, and any a site charged for or
// that pay-per-crawl has something to say of: up.audited), and keeps the
// non-allowed ones for /status.
func (s *Server) record(p *policy.Policy, r *http.Request, d *policy.Decision, up outcome, status int, connect string) {
	msg := audit.MsgOf(d)
	if msg == audit.MsgAllowed && !p.Config().Audit.LogAllowed && up.charged.Currency == "" && !up.audited { // a payment is always audited
		return
	}
	rec := audit.RecordOf(s.opts.Now(), d, status)
	rec.SetClient(wire.ClientAddr(r))
	rec.SetCharged(up.charged)
	rec.Method, rec.UserAgent = r.Method, r.Header.Get("User-Agent")
	switch {
	case connect != "":
		rec.URL = connect
	case rec.URL == "":
		rec.URL = answer.DisplayURL(r)
	}
	s.audit.Write(&rec)
	if s.named != nil && len(rec.Copies) > 0 {
		s.named(d.Copies())
	}
	if msg != audit.MsgAllowed {
		s.board.Remember(&rec)
	}
}
