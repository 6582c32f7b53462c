package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/robotsgate/robotsgate/robots"
)

// Options are what a Server needs besides its Config.
type Options struct {
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
	// AuditOut receives the audit log when audit.file is ""; nil: discard.
	AuditOut io.Writer
	// Version replaces "VERSION" in robots.fetch_user_agent.
	Version string
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// LookupNetIP resolves host names, for block_private and for dialling;
	// nil: net.DefaultResolver.LookupNetIP.
	LookupNetIP func(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Server is the robotsgate proxy: an http.Handler that decides every
// proxied request, answers blocked ones itself and forwards the rest.
type Server struct {
	log   *slog.Logger
	opts  Options
	cache *robots.Cache
	gp    *goproxy.ProxyHttpServer
	tr    *http.Transport
	audit *Audit
	pol   atomic.Pointer[policy]
	conns *connTracker
	// private remembers which hosts resolve to private addresses.
	private *privateCache
	// rt sends forwarded requests upstream (made once: a method value
	// allocates at every use).
	rt     goproxy.RoundTripper
	srv    *http.Server
	closed chan struct{}
	// MITM: the CA, its leaf certificates, and the action for a CONNECT;
	// nil in tunnel mode.
	mitmCA *CA
	leaves *leafCache
	mitm   *goproxy.ConnectAction
	// metrics are served at /metrics.
	metrics *metrics
	// upstream holds the connections to origins, closed at shutdown.
	upstream *connSet
	// pacer spaces request starts per origin ([politeness]).
	pacer *pacer
	// stopping ends when a shutdown's drain time is up: requests still
	// waiting on an origin are then answered 503 rather than cut.
	stopping context.Context
	stop     context.CancelFunc

	// Read once at start: a change needs a restart.
	listen        string
	tlsConfig     TLSConfig
	cacheMaxBytes int64
}

// NewServer builds a Server for cfg.
func NewServer(cfg *Config, o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.AuditOut == nil {
		o.AuditOut = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LookupNetIP == nil {
		o.LookupNetIP = net.DefaultResolver.LookupNetIP
	}
	stopping, stop := context.WithCancel(context.Background())
	s := &Server{
		stopping:      stopping,
		stop:          stop,
		log:           o.Logger,
		opts:          o,
		closed:        make(chan struct{}),
		listen:        cfg.Listen,
		tlsConfig:     cfg.TLS,
		cacheMaxBytes: cfg.Robots.CacheMaxBytes,
	}
	s.upstream = &connSet{m: map[*setConn]struct{}{}}
	tr, err := newUpstreamTransport(cfg, o.LookupNetIP, s.upstream)
	if err != nil {
		return nil, err
	}
	s.tr = tr
	onFetch := func(o robots.Origin, r *robots.FetchResult) {
		if s.metrics != nil {
			s.metrics.observeFetch(o, r)
		}
	}
	cache, err := newRobotsCache(cfg, tr, o.Version, o.Now, []robots.Option{robots.WithNormalization()}, onFetch)
	if err != nil {
		return nil, err
	}
	s.cache = cache
	audit, err := newAudit(cfg.Audit.File, o.AuditOut, o.Logger, o.Now)
	if err != nil {
		cache.Close()
		return nil, err
	}
	s.audit = audit
	s.private = newPrivateCache(o.LookupNetIP, o.Now)
	s.pacer = newPacer(o.Now, cfg.Politeness)
	s.rt = goproxy.RoundTripperFunc(s.roundTrip)
	s.pol.Store(s.newPolicy(cfg))

	gp := goproxy.NewProxyHttpServer()
	gp.Logger = log.New(slogWriter{o.Logger}, "", 0)
	gp.Tr = tr
	// Never the environment's HTTPS_PROXY: dial through the guarded dialer.
	gp.ConnectDial, gp.ConnectDialWithReq = nil, nil
	gp.KeepAcceptEncoding = true // bodies pass as the origin encoded them
	gp.KeepHeader = false        // Proxy-Authorization never reaches the origin
	gp.NonproxyHandler = http.HandlerFunc(s.serveAdmin)
	gp.OnRequest().DoFunc(s.onRequest)
	gp.OnResponse().DoFunc(s.onResponse)
	gp.OnRequest().HandleConnectFunc(s.onConnect)
	if u := cfg.Upstream.proxyURL; u != nil {
		// Tunnels go through the next hop too, with its credentials.
		gp.ConnectDialWithReq = nil
		gp.ConnectDial = gp.NewConnectDialToProxyWithHandler(u.String(), func(req *http.Request) {
			if u.User != nil {
				pw, _ := u.User.Password()
				req.SetBasicAuth(u.User.Username(), pw)
				req.Header.Set("Proxy-Authorization", req.Header.Get("Authorization"))
				req.Header.Del("Authorization")
			}
		})
	}
	if cfg.TLS.Mode == "mitm" {
		ca, err := LoadOrCreateCA(cfg, o.Now())
		if err != nil {
			cache.Close()
			return nil, err
		}
		leaves, err := newLeafCache(ca, o.Now)
		if err != nil {
			cache.Close()
			return nil, err
		}
		s.mitmCA, s.leaves = ca, leaves
		s.mitm = &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: s.serveTunnel}
	}
	s.gp = gp

	s.conns = newConnTracker(cfg.Limits.MaxConnections)
	s.conns.overloaded = func(remote net.Addr) {
		s.metrics.countRequest(ActionOverloaded, "http")
		d := &Decision{Action: ActionOverloaded, Reason: "too many connections", CrawlDelay: -1}
		r := &http.Request{RemoteAddr: remote.String(), Header: http.Header{}, URL: &url.URL{}}
		s.record(r, d, http.StatusServiceUnavailable, "")
	}
	s.metrics = newMetrics(cache, s.conns)
	tunnelIdle := cfg.Limits.TunnelIdleTimeout
	s.srv = &http.Server{
		Handler: s,
		ConnState: func(c net.Conn, st http.ConnState) {
			// A hijacked connection (a tunnel, a WebSocket) is no longer the
			// server's: it times out after tunnel_idle_timeout with no
			// traffic either way.
			if tc, ok := c.(*trackedConn); ok && st == http.StateHijacked {
				tc.idle.Store(int64(tunnelIdle))
				tc.hijacked.Store(true)
				tc.t.tunnels.Add(1)
				tc.Conn.SetDeadline(time.Now().Add(tunnelIdle))
			}
		},
		ReadHeaderTimeout: cfg.Limits.ReadHeaderTimeout,
		IdleTimeout:       cfg.Limits.IdleTimeout,
		MaxHeaderBytes:    cfg.Limits.MaxHeaderBytes,
		ErrorLog:          log.New(slogWriter{o.Logger}, "", 0),
	}
	return s, nil
}

// newRobotsCache builds the robots.txt fetcher and cache for cfg. The
// fetcher dials with tr's dialer (block_private, upstream.proxy) and
// trusts the same roots.
func newRobotsCache(cfg *Config, tr *http.Transport, version string, now func() time.Time, parse []robots.Option, onFetch func(robots.Origin, *robots.FetchResult)) (*robots.Cache, error) {
	redirects := cfg.Robots.MaxRedirects
	if redirects == 0 {
		redirects = -1 // FetchOptions: 0 is the default, negative is none
	}
	fetcher := robots.NewFetcher(robots.FetchOptions{
		Transport: robots.NewTransport(robots.TransportOptions{
			Proxy:       cfg.Upstream.proxyURL,
			RootCAs:     tr.TLSClientConfig.RootCAs,
			DialContext: tr.DialContext,
		}),
		UserAgent:          strings.ReplaceAll(cfg.Robots.FetchUserAgent, "VERSION", version),
		MaxBytes:           cfg.Robots.MaxBytes,
		MaxRedirects:       redirects,
		Timeout:            cfg.Robots.FetchTimeout,
		AuthErrorsDisallow: cfg.Robots.AuthErrors == "disallow",
		Now:                now,
	})
	return robots.NewCache(robots.CacheOptions{
		Fetcher:          fetcher,
		Parse:            parse,
		TTL:              cfg.Robots.CacheTTL,
		UnreachableLimit: cfg.Robots.UnreachableLimit,
		RetryAfter:       cfg.Robots.RetryAfter,
		MaxBytes:         cfg.Robots.CacheMaxBytes,
		Now:              now,
		OnFetch:          onFetch,
	})
}

// Serve accepts proxy connections on l until Shutdown.
func (s *Server) Serve(l net.Listener) error {
	err := s.srv.Serve(s.conns.wrap(l))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, waits for in-flight requests until ctx ends,
// then closes every connection left, hijacked ones (tunnels, WebSockets)
// included, which http.Server.Shutdown does not track.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		// Drain time is up: requests still waiting on an origin are
		// answered 503 instead of being cut (closing their upstream
		// connections ends their wait); give them a moment to write.
		s.stop()
		s.upstream.closeAll()
		grace, cancel := context.WithTimeout(context.Background(), time.Second)
		s.srv.Shutdown(grace)
		cancel()
	}
	s.stop()
	s.conns.closeAll()
	s.cache.Close()
	s.tr.CloseIdleConnections()
	if cerr := s.audit.Close(); err == nil {
		err = cerr
	}
	return err
}

// Reload applies a new config: everything but listen, [tls] and
// robots.cache_max_bytes, which need a restart (logged). Cached rules are
// kept. The audit file is reopened.
func (s *Server) Reload(cfg *Config) error {
	if cfg.Listen != s.listen {
		s.log.Warn("listen changed: restart to apply", "listen", cfg.Listen)
	}
	if cfg.TLS != s.tlsConfig {
		s.log.Warn("[tls] changed: restart to apply")
	}
	if cfg.Robots.CacheMaxBytes != s.cacheMaxBytes {
		s.log.Warn("robots.cache_max_bytes changed: restart to apply")
	}
	old := s.pol.Load()
	if cfg.Audit.File != old.cfg.Audit.File {
		a, err := newAudit(cfg.Audit.File, s.opts.AuditOut, s.log, s.opts.Now)
		if err != nil {
			s.ReloadFailed()
			return err
		}
		prev := s.audit
		s.audit = a
		prev.Close()
	} else if err := s.audit.Reopen(); err != nil {
		s.ReloadFailed()
		return err
	}
	s.pol.Store(s.newPolicy(cfg))
	s.pacer.configure(cfg.Politeness)
	s.metrics.reloads.WithLabelValues("success").Inc()
	return nil
}

// ReloadFailed counts a reload that did not happen (a bad new config).
func (s *Server) ReloadFailed() { s.metrics.reloads.WithLabelValues("failure").Inc() }

// ServeHTTP serves one request on the proxy's listener.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ww := &respWriter{ResponseWriter: w}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic serving request", "panic", fmt.Sprint(v), "method", r.Method, "url", redactURL(r.RequestURI))
			if !ww.wrote {
				http.Error(ww, "robotsgate: internal error", http.StatusInternalServerError)
			}
		}
	}()
	s.gp.ServeHTTP(ww, r)
}

// respWriter keeps net/http from adding Date or Content-Type to a
// forwarded response that had none: allowed traffic passes unchanged.
type respWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *respWriter) WriteHeader(code int) {
	if !w.wrote {
		h := w.Header()
		if _, ok := h["Date"]; !ok {
			h["Date"] = nil
		}
		if _, ok := h["Content-Type"]; !ok {
			h["Content-Type"] = nil
		}
	}
	w.wrote = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *respWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// ReadFrom copies a forwarded body as it arrives: each piece read from the
// origin is written and flushed at once, so that a slow or stalling
// origin's bytes (and the headers before them) are not held back in
// net/http's buffer. The buffer is pooled, not allocated per response.
func (w *respWriter) ReadFrom(r io.Reader) (int64, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	length := int64(-1)
	if cl := w.Header().Get("Content-Length"); cl != "" {
		length, _ = strconv.ParseInt(cl, 10, 64)
	}
	var n int64
	for {
		nr, rerr := r.Read(buf)
		if nr > 0 {
			nw, werr := w.ResponseWriter.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			// More to come (a streamed body, or part of a sized one): send
			// what is here now. A complete body is sent when the handler
			// ends, in one write with its headers.
			if length < 0 || n < length {
				w.Flush()
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// copyBufs are the buffers of respWriter.ReadFrom.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (w *respWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *respWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("hijack not supported")
	}
	return h.Hijack()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// reqState travels with a request from onRequest to onResponse; one
// allocation holds all a request needs.
type reqState struct {
	dec       Decision
	req       request
	d         *Decision // &dec
	forwarded bool
}

// newPolicy compiles the reloadable part of cfg.
func (s *Server) newPolicy(cfg *Config) *policy {
	return &policy{cfg: cfg, resolver: s.private, now: s.opts.Now, auth: newAuthenticator(cfg.Auth.Users, s.opts.Now), pacing: pacingActive(cfg)}
}

// CA returns the MITM CA; nil in tunnel mode.
func (s *Server) CA() *CA { return s.mitmCA }

// connectInfo is what inner requests of a MITM tunnel know of their CONNECT.
type connectInfo struct {
	authority string // the CONNECT target, host:port as sent
	user      string // the CONNECT's authenticated user
}

// onConnect decides a CONNECT (DESIGN step 9): the private-address check
// in both modes; in MITM mode nothing more (every inner request is decided
// on its own); in tunnel mode the whole origin.
func (s *Server) onConnect(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	r := ctx.Req
	p := s.pol.Load()
	d := &Decision{CrawlDelay: -1}
	user, authed := "", true
	if p.auth != nil {
		user, authed = p.auth.check(r, false)
	}
	o, err := robots.OriginOf("https", host)
	switch {
	case !authed:
		d.Action, d.Reason = ActionAuth, "proxy authentication required"
		ctx.Resp = s.authRequired(r)
		s.record(r, d, ctx.Resp.StatusCode, host)
		return goproxy.RejectConnect, host
	case err != nil:
		d.Action, d.Reason = ActionBadRequest, "bad CONNECT target: "+strings.TrimPrefix(err.Error(), robots.ErrBadOrigin.Error()+": ")
	case p.cfg.Upstream.BlockPrivate && p.private(r.Context(), o.Host):
		d.Origin, d.Action, d.Reason = o, ActionPrivate, reasonPrivate
	case s.mitm != nil:
		ctx.UserData = &connectInfo{authority: host, user: user}
		return s.mitm, host
	default:
		return s.decideTunnel(p, r, ctx, host, o, user)
	}
	ctx.Resp = s.respond(r, d)
	s.record(r, d, ctx.Resp.StatusCode, host)
	return goproxy.RejectConnect, host
}

// decideTunnel decides a CONNECT in tunnel mode, where paths cannot be
// seen: refused when a site rule denies it, when robots.txt shuts out the
// whole origin for an obeyed token, or when it is unreachable with no copy.
func (s *Server) decideTunnel(p *policy, r *http.Request, ctx *goproxy.ProxyCtx, host string, o robots.Origin, user string) (*goproxy.ConnectAction, string) {
	if o.Port == 80 {
		o.Scheme = "http"
	}
	req := &request{scheme: o.Scheme, authority: o.HostPort(), target: "/", userAgent: r.Header.Get("User-Agent"), client: clientAddr(r), user: user}
	d := &Decision{}
	p.decide(r.Context(), s.cache.Get, req, d)
	if (d.Action == ActionAllowed || d.Action == ActionDisallowed) && d.Site == nil && d.Fetch != nil {
		// The rules decided "/"; a tunnel is refused only when they shut
		// out every path for some obeyed token.
		d.Action, d.Reason, d.Verdict = ActionAllowed, "robots.txt allows some paths; tunnel mode cannot see which", robots.Verdict{}
		if a, err := s.cache.Get(r.Context(), o); err == nil && a.Entry != nil && a.Entry.Rules != nil {
			for _, tok := range d.Agents {
				if g := a.Entry.Rules.Group(tok); g.DisallowsAll() {
					d.Action, d.Reason, d.Token, d.Verdict = ActionDisallowed, "robots.txt disallows every path", tok, g.Test("/")
					break
				}
			}
		}
	}
	if p.cfg.Mode == "report" {
		switch d.Action {
		case ActionDisallowed, ActionDenied, ActionUnreachable:
			d.Blocked, d.Action = d.Action, ActionWouldBlock
			s.record(r, d, http.StatusOK, host)
		}
	}
	if resp := s.respond(r, d); resp != nil {
		ctx.Resp = resp
		s.record(r, d, resp.StatusCode, host)
		return goproxy.RejectConnect, host
	}
	if d.Action == ActionAllowed {
		if s.pace(r.Context(), p, d); d.Action == ActionPaced {
			ctx.Resp = s.respond(r, d)
			s.record(r, d, ctx.Resp.StatusCode, host)
			return goproxy.RejectConnect, host
		}
		s.record(r, d, http.StatusOK, host)
	}
	return goproxy.OkConnect, host
}

// pace waits for the request's turn at its origin when [politeness] is
// active; a request that would wait longer than max_wait, or whose client
// gave up, becomes a "paced" decision.
func (s *Server) pace(ctx context.Context, p *policy, d *Decision) {
	if !p.pacing || d.Origin.IsZero() {
		return
	}
	gap := paceGap(p.cfg, d)
	waited, err := s.pacer.wait(ctx, d.Origin, gap)
	var pe *pacedError
	switch {
	case err == nil:
		s.metrics.pacedWait.Observe(waited.Seconds())
	case errors.As(err, &pe):
		d.Action, d.Reason, d.PacedWait = ActionPaced, fmt.Sprintf("paced: would wait %v for its turn (gap %v)", pe.wait.Round(time.Millisecond), gap), pe.wait
	default: // the client gave up waiting
		d.Action, d.Reason = ActionPaced, "client left while waiting for its turn"
	}
}

// mitmTLS is the TLS config presented to a client in a MITM tunnel: a leaf
// for the CONNECT host, signed by robotsgate's CA, and HTTP/1.1 only, so
// that no HTTP/2 stream can be routed by its own :authority.
func (s *Server) mitmTLS(host string, _ *goproxy.ProxyCtx) (*tls.Config, error) {
	o, err := robots.OriginOf("https", host) // the normal form: punycode, no trailing dot
	if err != nil {
		return nil, err
	}
	cert, err := s.leaves.get(o.Host)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}, nil
}

func (s *Server) onRequest(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	p := s.pol.Load()
	user := ""
	ci, inTunnel := r.Context().Value(connectKey{}).(*connectInfo)
	switch {
	case inTunnel:
		user = ci.user // the CONNECT was authenticated
	case p.auth != nil:
		u, ok := p.auth.check(r, false)
		if !ok {
			d := &Decision{Action: ActionAuth, Reason: "proxy authentication required", CrawlDelay: -1}
			resp := s.authRequired(r)
			s.record(r, d, resp.StatusCode, "")
			return r, resp
		}
		user = u
	}
	if inTunnel {
		// Inside a MITM tunnel: the request goes to the CONNECT authority
		// only; one naming another origin is misdirected.
		want, err1 := robots.OriginOf(r.URL.Scheme, ci.authority)
		got, err2 := robots.OriginOf(r.URL.Scheme, r.URL.Host)
		if err1 != nil || err2 != nil || want != got {
			d := &Decision{Action: ActionMisdirected, Reason: fmt.Sprintf("request for %s inside a tunnel to %s", r.URL.Host, ci.authority), CrawlDelay: -1}
			resp := s.respond(r, d)
			s.record(r, d, resp.StatusCode, "")
			return r, resp
		}
		r.URL.Host = ci.authority
	}
	st := &reqState{req: request{
		scheme:    r.URL.Scheme,
		authority: r.URL.Host,
		target:    requestTarget(r.RequestURI),
		userAgent: r.Header.Get("User-Agent"),
		client:    clientAddr(r),
		user:      user,
	}}
	st.d = &st.dec
	d := st.d
	p.decide(r.Context(), s.cache.Get, &st.req, d)
	ctx.UserData = st
	if p.cfg.Mode == "report" {
		switch d.Action {
		case ActionDisallowed, ActionDenied, ActionUnreachable:
			d.Blocked, d.Action = d.Action, ActionWouldBlock
		}
	}
	if d.Action == ActionAllowed || d.Action == ActionWouldBlock {
		s.pace(r.Context(), p, d)
	}
	if resp := s.respond(r, d); resp != nil {
		s.metrics.countRequest(d.Action, r.URL.Scheme)
		s.record(r, d, resp.StatusCode, "")
		return r, resp
	}
	st.forwarded = true
	removeHopByHop(r.Header)
	if _, ok := r.Header["User-Agent"]; !ok {
		r.Header["User-Agent"] = []string{""} // send none, not Go's default
	}
	ctx.RoundTripper = s.rt
	return r, nil
}

func (s *Server) onResponse(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
	st, ok := ctx.UserData.(*reqState)
	if !ok || !st.forwarded || resp == nil {
		return resp
	}
	ours := resp.Header.Get("X-Robots-Gate") != "" // an upstream error made here
	if st.d.Action == ActionWouldBlock && !ours {
		resp.Header.Set("X-Robots-Gate", ActionWouldBlock)
		if st.d.Verdict.Line > 0 {
			resp.Header.Set("X-Robots-Gate-Rule", ruleHeader(st.d.Verdict.Rule, st.d.Verdict.Line))
		}
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		removeHopByHop(resp.Header)
	}
	decision := st.d.Action
	if ours {
		decision = resp.Header.Get("X-Robots-Gate")
	}
	s.metrics.countRequest(decision, ctx.Req.URL.Scheme)
	s.record(ctx.Req, st.d, resp.StatusCode, "")
	return resp
}

// roundTrip sends a request upstream and turns a failure into a response:
// goproxy would answer 500 with Go's error text, or close a MITM tunnel.
func (s *Server) roundTrip(r *http.Request, _ *goproxy.ProxyCtx) (*http.Response, error) {
	start := time.Now()
	resp, err := s.tr.RoundTrip(r)
	if err == nil {
		s.metrics.upstream.Observe(since(start))
		return resp, nil
	}
	if s.stopping.Err() != nil { // Shutdown closed the upstream connections
		return s.answer(r, http.StatusServiceUnavailable, ActionOverloaded, "robotsgate: shutting down before the origin answered; retry\n"), nil
	}
	if errors.Is(err, errPrivateAddress) {
		// The name resolved inward at dial time (DNS rebinding, or the
		// resolver changed its mind since step 2).
		d := &Decision{Action: ActionPrivate, Reason: reasonPrivate}
		resp := s.respond(r, d)
		s.record(r, d, resp.StatusCode, "")
		return resp, nil
	}
	if r.Context().Err() != nil {
		return nil, err // the client left: nobody to answer
	}
	code := http.StatusBadGateway
	if robots.ErrorKind(err) == "timeout" {
		code = http.StatusGatewayTimeout
	}
	hostport := r.URL.Host
	if r.URL.Port() == "" {
		hostport = net.JoinHostPort(r.URL.Hostname(), map[string]string{"http": "80", "https": "443"}[r.URL.Scheme])
	}
	s.log.Warn("upstream request failed", "upstream", hostport, "err", err)
	return s.answer(r, code, ActionUpstream, fmt.Sprintf("upstream %s: %s\n", hostport, robots.Describe(err))), nil
}

// respond returns the proxy's own answer for a decision, or nil to forward.
func (s *Server) respond(r *http.Request, d *Decision) *http.Response {
	switch d.Action {
	case ActionAllowed, ActionWouldBlock:
		return nil
	case ActionDisallowed:
		resp := s.answer(r, http.StatusForbidden, d.Action, blockBody(r, d))
		if d.Verdict.Line > 0 {
			resp.Header.Set("X-Robots-Gate-Rule", ruleHeader(d.Verdict.Rule, d.Verdict.Line))
		}
		return resp
	case ActionDenied:
		return s.answer(r, http.StatusForbidden, d.Action, fmt.Sprintf("robotsgate: %s is denied by a site rule: %s\n", displayURL(r), d.Site.Reason))
	case ActionPrivate:
		return s.answer(r, http.StatusForbidden, d.Action, fmt.Sprintf("robotsgate: %s: %s\n", displayHost(r), reasonPrivate))
	case ActionUnreachable:
		resp := s.answer(r, http.StatusServiceUnavailable, d.Action, blockBody(r, d))
		wait := time.Second
		if d.Fetch != nil && !d.Fetch.RetryAt.IsZero() {
			wait = max(d.Fetch.RetryAt.Sub(s.opts.Now()), time.Second)
		}
		resp.Header.Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		return resp
	case ActionBadRequest:
		return s.answer(r, http.StatusBadRequest, d.Action, "robotsgate: "+d.Reason+"\n")
	case ActionMisdirected:
		return s.answer(r, http.StatusMisdirectedRequest, d.Action, "robotsgate: "+d.Reason+"\n")
	case ActionPaced:
		resp := s.answer(r, http.StatusTooManyRequests, d.Action, fmt.Sprintf("robotsgate: %s is %s\n", displayURL(r), d.Reason))
		resp.Header.Set("Retry-After", strconv.Itoa(max(1, int((d.PacedWait+time.Second-1)/time.Second))))
		return resp
	}
	return s.answer(r, http.StatusInternalServerError, d.Action, "robotsgate: "+d.Reason+"\n")
}

// answer builds one of the proxy's own responses.
func (s *Server) answer(r *http.Request, code int, gate, body string) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set("Date", s.opts.Now().UTC().Format(http.TimeFormat))
	h.Set("X-Robots-Gate", gate)
	return &http.Response{
		StatusCode:    code,
		Status:        fmt.Sprintf("%d %s", code, http.StatusText(code)),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}
}

// blockBody explains a robots.txt block to a person reading a scraper's log.
func blockBody(r *http.Request, d *Decision) string {
	var b strings.Builder
	if d.Action == ActionUnreachable {
		fmt.Fprintf(&b, "robotsgate: %s is not allowed: robots.txt could not be fetched and no copy is held\n\n", displayURL(r))
	} else {
		fmt.Fprintf(&b, "robotsgate: %s is disallowed by robots.txt\n\n", displayURL(r))
	}
	fmt.Fprintf(&b, "agent:      %s\n", strings.Join(d.Agents, ", "))
	if d.Token != "" && len(d.Agents) > 1 {
		fmt.Fprintf(&b, "blocked for: %s\n", d.Token)
	}
	fmt.Fprintf(&b, "robots.txt: %s", d.RobotsURL)
	if f := d.Fetch; f != nil {
		fmt.Fprintf(&b, " (%s", f.Outcome)
		if f.Status != 0 {
			fmt.Fprintf(&b, " %d", f.Status)
		}
		if !f.FetchedAt.IsZero() {
			fmt.Fprintf(&b, ", %s ago", f.Age.Round(time.Second))
		}
		if f.Error != "" {
			fmt.Fprintf(&b, "; %s", f.Error)
		}
		b.WriteString(")")
	}
	b.WriteString("\n")
	if d.Verdict.Line > 0 {
		fmt.Fprintf(&b, "rule:       %s (line %d)\n", d.Verdict.Rule, d.Verdict.Line)
	}
	fmt.Fprintf(&b, "reason:     %s\n", d.Reason)
	return b.String()
}

// ruleHeader formats X-Robots-Gate-Rule: the directive, the pattern with
// bytes outside 0x21-0x7E percent-encoded, and the line.
func ruleHeader(rule string, line int) string {
	dir, pat, _ := strings.Cut(rule, ":")
	pat = strings.TrimPrefix(pat, " ")
	var b strings.Builder
	b.WriteString(strings.ToLower(dir))
	b.WriteString(": ")
	for i := 0; i < len(pat); i++ {
		if c := pat[i]; c < 0x21 || c > 0x7E {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	fmt.Fprintf(&b, " (line %d)", line)
	return b.String()
}

// record writes the audit line for a decision, when it is to be logged.
func (s *Server) record(r *http.Request, d *Decision, status int, connectHost string) {
	p := s.pol.Load()
	msg := auditMsg(d)
	if msg == "allowed" && !p.cfg.Audit.LogAllowed {
		return
	}
	rec := &auditRecord{
		msg:       msg,
		user:      d.User,
		client:    clientAddr(r),
		method:    r.Method,
		url:       displayURL(r),
		userAgent: r.Header.Get("User-Agent"),
		agents:    d.Agents,
		robotsURL: d.RobotsURL,
		rule:      d.Verdict.Rule,
		line:      d.Verdict.Line,
		status:    status,
		decision:  d.Action,
		reason:    d.Reason,
	}
	if connectHost != "" {
		rec.url = connectHost
	}
	if !d.Origin.IsZero() {
		rec.origin = d.Origin.String()
	}
	s.audit.write(rec)
}

// auditMsg is the audit log's msg for a decision.
func auditMsg(d *Decision) string {
	switch d.Action {
	case ActionDisallowed:
		return "blocked"
	case ActionDenied:
		return "override"
	case ActionUnreachable:
		return "unreachable"
	case ActionWouldBlock:
		return "would-block"
	case ActionPaced:
		return "paced"
	case ActionAllowed:
		if d.Site != nil && d.Site.Policy == "allow" {
			return "override"
		}
		return "allowed"
	}
	return "refused"
}

// displayURL is the request's URL as sent, with any userinfo removed and
// the host not percent-encoded.
func displayURL(r *http.Request) string {
	if r.URL == nil {
		return ""
	}
	host := r.URL.Host
	if host == "" {
		host = r.Host
	}
	if host == "" {
		return ""
	}
	target := r.URL.RequestURI()
	if r.RequestURI != "" {
		target = requestTarget(r.RequestURI)
	}
	return r.URL.Scheme + "://" + host + target
}

func displayHost(r *http.Request) string {
	if r.URL != nil && r.URL.Host != "" {
		return r.URL.Host
	}
	return r.Host
}

// clientAddr is the client's IP address.
func clientAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// removeHopByHop deletes the hop-by-hop headers that must not be forwarded
// (RFC 9110 section 7.6.1), and those named in Connection, keeping a
// WebSocket upgrade's Connection and Upgrade.
func removeHopByHop(h http.Header) {
	conn := h["Connection"]
	upgrade := len(conn) > 0 && headerHas(h, "Connection", "upgrade") && len(h["Upgrade"]) > 0
	for _, v := range conn {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			if name != "" && !(upgrade && strings.EqualFold(name, "Upgrade")) {
				h.Del(name)
			}
		}
	}
	// Canonical names, deleted from the map directly: Header.Del would
	// canonicalise each one again on every request.
	for _, name := range [...]string{"Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer"} {
		delete(h, name)
	}
	if !upgrade {
		delete(h, "Connection")
		delete(h, "Upgrade")
	}
}

func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// serveAdmin answers requests to the proxy itself: /healthz and the
// robots.txt cache.
func (s *Server) serveAdmin(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	case r.URL.Path == "/metrics" && r.Method == http.MethodGet:
		s.metrics.handler.ServeHTTP(w, r)
	case r.URL.Path == "/robots" && r.Method == http.MethodGet:
		s.serveRobotsEntry(w, r)
	case r.URL.Path == "/robots/purge" && r.Method == http.MethodPost:
		p := s.pol.Load()
		authed := false
		if p.auth != nil {
			_, authed = p.auth.check(r, true)
		}
		if c := clientAddr(r); !c.IsLoopback() && !authed {
			http.Error(w, "robotsgate: purge is only for loopback clients and authenticated users", http.StatusForbidden)
			return
		}
		o, err := robots.ParseOrigin(r.URL.Query().Get("origin"))
		if err != nil {
			http.Error(w, "robotsgate: origin: "+err.Error(), http.StatusBadRequest)
			return
		}
		if !s.cache.Purge(o) {
			http.Error(w, "robotsgate: nothing cached for "+o.String(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "purged %s\n", o)
	default:
		http.NotFound(w, r)
	}
}

// robotsEntry is the JSON of GET /robots?origin=O.
type robotsEntry struct {
	Origin    string       `json:"origin"`
	RobotsURL string       `json:"robots_url"`
	Outcome   string       `json:"outcome"`
	Status    int          `json:"status"`
	FetchedAt *time.Time   `json:"fetched_at"`
	Expires   *time.Time   `json:"expires"`
	Stale     bool         `json:"stale"`
	LastError string       `json:"last_error"`
	RetryAt   *time.Time   `json:"retry_at"`
	Bytes     int          `json:"bytes"`
	Truncated bool         `json:"truncated"`
	Sitemaps  []string     `json:"sitemaps"`
	Groups    []groupEntry `json:"groups"`
}

type groupEntry struct {
	Agents     []string `json:"agents"`
	Line       int      `json:"line"`
	Rules      int      `json:"rules"`
	CrawlDelay *float64 `json:"crawl_delay"`
}

func (s *Server) serveRobotsEntry(w http.ResponseWriter, r *http.Request) {
	o, err := robots.ParseOrigin(r.URL.Query().Get("origin"))
	if err != nil {
		http.Error(w, "robotsgate: origin: "+err.Error(), http.StatusBadRequest)
		return
	}
	a, ok := s.cache.Peek(o)
	if !ok {
		http.Error(w, "robotsgate: nothing cached for "+o.String(), http.StatusNotFound)
		return
	}
	e := robotsEntry{Origin: o.String(), RobotsURL: o.RobotsURL(), Stale: a.Stale, LastError: a.LastError, Groups: []groupEntry{}, Sitemaps: []string{}}
	if !a.RetryAt.IsZero() {
		e.RetryAt = &a.RetryAt
	}
	if en := a.Entry; en != nil {
		e.Outcome, e.Status, e.Truncated = string(en.Outcome), en.Status, en.Truncated
		e.FetchedAt, e.Expires = &en.FetchedAt, &en.Expires
		e.Bytes = en.Rules.Size()
		if en.Rules != nil {
			e.Sitemaps = append(e.Sitemaps, en.Rules.Sitemaps()...)
			for _, g := range en.Rules.Groups() {
				ge := groupEntry{Agents: g.Agents, Line: g.Line, Rules: g.Rules}
				if g.CrawlDelay >= 0 {
					cd := g.CrawlDelay
					ge.CrawlDelay = &cd
				}
				e.Groups = append(e.Groups, ge)
			}
		}
	} else {
		e.Outcome, e.Status = string(robots.Unreachable), a.LastStatus
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(e)
}

// slogWriter adapts the log package's output, used by goproxy and
// net/http, to the operational logger.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	level := slog.LevelDebug
	if strings.Contains(msg, "WARN:") || strings.HasPrefix(msg, "http: ") {
		level = slog.LevelWarn // goproxy's warnings (as a tunnel that speaks neither TLS nor HTTP), net/http's errors
	}
	w.l.Log(context.Background(), level, msg, "component", "http")
	return len(p), nil
}

// connTracker tracks the proxy's client connections: their number is
// bounded, and Shutdown closes those left, hijacked ones included.
type connTracker struct {
	max     int
	mu      sync.Mutex
	conns   map[*trackedConn]struct{}
	count   atomic.Int64 // open client connections
	tunnels atomic.Int64 // of which hijacked: tunnels, WebSockets
	// overloaded is called for each connection turned away.
	overloaded func(remote net.Addr)
}

func newConnTracker(max int) *connTracker {
	return &connTracker{max: max, conns: map[*trackedConn]struct{}{}}
}

func (t *connTracker) wrap(l net.Listener) net.Listener { return &trackingListener{Listener: l, t: t} }

func (t *connTracker) closeAll() { closeAll(&t.mu, t.conns) }

type trackingListener struct {
	net.Listener
	t *connTracker
}

// overloadedResponse answers a connection past max_connections.
const overloadedResponse = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"X-Robots-Gate: overloaded\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 39\r\n\r\n" +
	"robotsgate: too many connections, retry"

func (l *trackingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if int(l.t.count.Load()) >= l.t.max {
			go func() {
				c.SetWriteDeadline(time.Now().Add(time.Second))
				io.WriteString(c, overloadedResponse)
				c.Close()
			}()
			if l.t.overloaded != nil {
				l.t.overloaded(c.RemoteAddr())
			}
			continue
		}
		tc := &trackedConn{Conn: c, t: l.t}
		l.t.count.Add(1)
		l.t.mu.Lock()
		l.t.conns[tc] = struct{}{}
		l.t.mu.Unlock()
		return tc, nil
	}
}

type trackedConn struct {
	net.Conn
	t        *connTracker
	once     sync.Once
	idle     atomic.Int64 // once hijacked: the idle timeout, extended by every read and write
	hijacked atomic.Bool  // a tunnel or WebSocket: counted in open_tunnels
}

func (c *trackedConn) touch() {
	if idle := time.Duration(c.idle.Load()); idle > 0 {
		c.Conn.SetDeadline(time.Now().Add(idle))
	}
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.t.count.Add(-1)
		if c.hijacked.Load() {
			c.t.tunnels.Add(-1)
		}
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return err
}
