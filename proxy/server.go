package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
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
	cache *fetch.Cache
	gp    *goproxy.ProxyHttpServer
	tr    *http.Transport
	audit *Audit
	pol   atomic.Pointer[Policy]
	// world is what decisions look at: the cache, private lookups, clock.
	world *world
	conns *connTracker
	// private remembers which hosts resolve to private addresses.
	private *privateCache
	// rt sends forwarded requests upstream (made once: a method value
	// allocates at every use).
	rt  goproxy.RoundTripper
	srv *http.Server
	// MITM: the CA, its leaf certificates, and the action for a CONNECT;
	// nil in tunnel mode.
	mitmCA *CA
	leaves *leafCache
	mitm   *goproxy.ConnectAction
	// tunnel serves an accepted CONNECT (serveTunnel), in either mode.
	tunnel *goproxy.ConnectAction
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
	maxFetches    int
}

// NewServer builds a Server for cfg, which it compiles first: a config
// with problems is refused with all of them.
func NewServer(cfg *Config, o Options) (*Server, error) {
	pol, err := Compile(cfg)
	if err != nil {
		return nil, err
	}
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
		listen:        cfg.Listen,
		tlsConfig:     cfg.TLS,
		cacheMaxBytes: cfg.Robots.CacheMaxBytes,
		maxFetches:    cfg.Robots.MaxFetches,
	}
	s.upstream = &connSet{m: map[*setConn]struct{}{}}
	tr, err := newUpstreamTransport(pol, o.LookupNetIP, s.upstream)
	if err != nil {
		return nil, err
	}
	s.tr = tr
	onFetch := func(o fetch.Origin, r *fetch.Result) {
		if s.metrics != nil {
			s.metrics.observeFetch(o, r)
		}
	}
	cache, err := newRobotsCache(pol, tr, o.Version, o.Now, []robots.Option{robots.WithNormalization()}, onFetch)
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
	s.pol.Store(pol)
	s.world = &world{rules: cache.Get, private: s.private, now: o.Now}

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
	if u := pol.upstreamProxy; u != nil {
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
	}
	s.tunnel = &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: s.serveTunnel}
	if cfg.TLS.Mode == "mitm" {
		s.mitm = s.tunnel
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
				tc.hijacked.Store(true)
				tc.t.tunnels.Add(1)
				tc.setIdle(tunnelIdle)
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
func newRobotsCache(pol *Policy, tr *http.Transport, version string, now func() time.Time, parse []robots.Option, onFetch func(fetch.Origin, *fetch.Result)) (*fetch.Cache, error) {
	cfg := &pol.cfg
	redirects := cfg.Robots.MaxRedirects
	if redirects == 0 {
		redirects = -1 // FetchOptions: 0 is the default, negative is none
	}
	fetcher := fetch.NewFetcher(fetch.FetcherOptions{
		Transport: fetch.NewTransport(fetch.TransportOptions{
			Proxy:       pol.upstreamProxy,
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
	return fetch.NewCache(fetch.CacheOptions{
		Fetcher:          fetcher,
		Parse:            parse,
		TTL:              cfg.Robots.CacheTTL,
		UnreachableLimit: cfg.Robots.UnreachableLimit,
		RetryAfter:       cfg.Robots.RetryAfter,
		MaxBytes:         cfg.Robots.CacheMaxBytes,
		MaxFetches:       cfg.Robots.MaxFetches,
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
	pol, err := Compile(cfg)
	if err != nil {
		s.ReloadFailed()
		return err
	}
	if cfg.Listen != s.listen {
		s.log.Warn("listen changed: restart to apply", "listen", cfg.Listen)
	}
	if cfg.TLS != s.tlsConfig {
		s.log.Warn("[tls] changed: restart to apply")
	}
	if cfg.Robots.CacheMaxBytes != s.cacheMaxBytes {
		s.log.Warn("robots.cache_max_bytes changed: restart to apply")
	}
	if cfg.Robots.MaxFetches != s.maxFetches {
		s.log.Warn("robots.max_fetches changed: restart to apply")
	}
	// The audit log moves (or reopens, after rotation) under its own lock:
	// each line goes whole to the old file or to the new one.
	if err := s.audit.Open(cfg.Audit.File); err != nil {
		s.ReloadFailed()
		return err
	}
	s.pol.Store(pol)
	s.pacer.configure(cfg.Politeness)
	s.metrics.reloads.WithLabelValues("success").Inc()
	return nil
}

// ReloadFailed counts a reload that did not happen (a bad new config).
func (s *Server) ReloadFailed() { s.metrics.reloads.WithLabelValues("failure").Inc() }

// ServeHTTP serves one request on the proxy's listener.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ww := &respWriter{ResponseWriter: w}
	defer ww.closeHijacked() // every handler below is done with it by then
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

// closeHijacked closes a connection taken over during a request (a
// WebSocket, a tunnel) once its handler has returned: goproxy's WebSocket
// relay returns when one side ends and leaves the client's side open.
func (w *respWriter) closeHijacked() {
	if w.hijacked != nil {
		w.hijacked.Close()
	}
}

// reqState travels with a request from onRequest to onResponse; one
// allocation holds all a request needs.
type reqState struct {
	dec       Decision
	req       request
	forwarded bool
}

// CA returns the MITM CA; nil in tunnel mode.
func (s *Server) CA() *CA { return s.mitmCA }

// pace waits for the request's turn at its origin when [politeness] is
// active; a request that would wait longer than max_wait, or whose client
// gave up, becomes a "paced" decision.
func (s *Server) pace(ctx context.Context, p *Policy, d *Decision) {
	if !p.pacing || d.Origin.IsZero() {
		return
	}
	gap := paceGap(&p.cfg, d)
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
		want, err1 := fetch.OriginOf(r.URL.Scheme, ci.authority)
		got, err2 := fetch.OriginOf(r.URL.Scheme, r.URL.Host)
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
	d := &st.dec
	p.decide(r.Context(), s.world, &st.req, d)
	ctx.UserData = st
	p.report(d)
	if d.Action == ActionAllowed || d.Action == ActionWouldBlock {
		s.pace(r.Context(), p, d)
	}
	if resp := s.respond(r, d); resp != nil {
		s.metrics.countRequest(d.Action, r.URL.Scheme)
		s.record(r, d, resp.StatusCode, "")
		return r, resp
	}
	st.forwarded = true
	removeHopByHop(r.Header, isWebSocketUpgrade(r.Header))
	if _, ok := r.Header["User-Agent"]; !ok {
		r.Header["User-Agent"] = []string{""} // send none, not Go's default
	}
	sendAsDecided(r, st.req.target, d.Origin, s.tr.Proxy != nil)
	ctx.RoundTripper = s.rt
	return r, nil
}

// sendAsDecided binds r to what was decided (DESIGN step 7, "what is
// decided is what is sent"): the raw request-target goes upstream byte
// for byte, never rebuilt from the parsed URL (which re-encodes a path
// holding "|", "{" or bytes >= 0x80 and so turns "%2F" into "/"), and the
// host dialled is the origin's host as decided ("127.1" is 127.0.0.1, not
// a name for a next hop to resolve). The request goes in origin-form,
// except in absolute-form to a plain-HTTP next hop (viaProxy) and for a
// path that starts with "//", which origin-form would turn into an
// authority.
func sendAsDecided(r *http.Request, target string, o fetch.Origin, viaProxy bool) {
	u := r.URL
	if u.Hostname() != o.Host {
		authority := o.Host
		if strings.IndexByte(authority, ':') >= 0 {
			authority = "[" + authority + "]"
		}
		if p := u.Port(); p != "" {
			authority += ":" + p
		}
		if r.Host == u.Host {
			r.Host = authority
		}
		u.Host = authority
	}
	path, query, hasQuery := strings.Cut(target, "?")
	u.RawQuery, u.ForceQuery = query, hasQuery && query == ""
	u.Fragment, u.RawFragment = "", ""
	if viaProxy && u.Scheme == "http" || strings.HasPrefix(path, "//") {
		host := r.Host
		if host == "" {
			host = u.Host
		}
		u.Opaque = "//" + host + path // RequestURI: "http://host" + path
	} else {
		u.Opaque = path
	}
}

func (s *Server) onResponse(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
	st, ok := ctx.UserData.(*reqState)
	if !ok || !st.forwarded || resp == nil {
		return resp
	}
	ours := resp.Header.Get("X-Robots-Gate") != "" // an upstream error made here
	if st.dec.Action == ActionWouldBlock && !ours {
		resp.Header.Set("X-Robots-Gate", ActionWouldBlock)
		if st.dec.Verdict.Line > 0 {
			resp.Header.Set("X-Robots-Gate-Rule", ruleHeader(st.dec.Verdict.Rule, st.dec.Verdict.Line))
		}
	}
	removeHopByHop(resp.Header, resp.StatusCode == http.StatusSwitchingProtocols && isWebSocketUpgrade(resp.Header))
	decision := st.dec.Action
	if ours {
		decision = resp.Header.Get("X-Robots-Gate")
	}
	s.metrics.countRequest(decision, ctx.Req.URL.Scheme)
	s.record(ctx.Req, &st.dec, resp.StatusCode, "")
	return resp
}

// roundTrip sends a request upstream and turns a failure into a response:
// goproxy would answer 500 with Go's error text, or close a MITM tunnel.
func (s *Server) roundTrip(r *http.Request, _ *goproxy.ProxyCtx) (*http.Response, error) {
	start := time.Now()
	resp, err := s.tr.RoundTrip(r)
	if err == nil {
		s.metrics.upstream.Observe(time.Since(start).Seconds())
		return resp, nil
	}
	if s.stopping.Err() != nil { // Shutdown closed the upstream connections
		return s.answer(r, http.StatusServiceUnavailable, ActionOverloaded, "robotsgate: shutting down before the origin answered; retry\n"), nil
	}
	if r.Context().Err() != nil && !errors.Is(err, errPrivateAddress) {
		return nil, err // the client left: nobody to answer
	}
	hostport := r.URL.Host
	if r.URL.Port() == "" {
		hostport = net.JoinHostPort(r.URL.Hostname(), map[string]string{"http": "80", "https": "443"}[r.URL.Scheme])
	}
	d, resp := s.upstreamFailure(r, hostport, err)
	if d.Action == ActionPrivate {
		s.record(r, d, resp.StatusCode, "")
	}
	return resp, nil
}

// upstreamFailure is the decision and the answer for a request whose
// upstream, hostport, could not be reached: 403 when the dialler found a
// private address (DNS rebinding, or the resolver changed its mind since
// step 2), else 502, or 504 for a timeout, naming the kind of failure.
func (s *Server) upstreamFailure(r *http.Request, hostport string, err error) (*Decision, *http.Response) {
	if errors.Is(err, errPrivateAddress) {
		d := &Decision{Action: ActionPrivate, Reason: reasonPrivate, CrawlDelay: -1}
		return d, s.respond(r, d)
	}
	code := http.StatusBadGateway
	if fetch.ErrorKind(err) == "timeout" {
		code = http.StatusGatewayTimeout
	}
	s.log.Warn("upstream request failed", "upstream", hostport, "err", err)
	why := fetch.Describe(err)
	d := &Decision{Action: ActionUpstream, Reason: "upstream " + why, CrawlDelay: -1}
	return d, s.answer(r, code, ActionUpstream, fmt.Sprintf("upstream %s: %s\n", hostport, why))
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
