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
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/proxy/mitm"
	"github.com/robotsgate/robotsgate/proxy/pace"
	"github.com/robotsgate/robotsgate/proxy/upstream"
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
	private *upstream.PrivateCache
	srv     *http.Server
	// mitm terminates the TLS of MITM tunnels; nil in tunnel mode.
	mitm *mitm.Terminator
	// metrics are served at /metrics.
	metrics *metrics
	// status keeps what /status shows: counts per origin, recent blocks.
	status *statusBoard
	// self is the listener's address, which nothing robotsgate dials may reach.
	self upstream.Self
	// decideCalls are the /v1/decide calls running (maxDecideCalls slots).
	decideCalls chan struct{}
	// upstream holds the connections to origins, closed at shutdown.
	upstream *upstream.Conns
	// pacer spaces request starts per origin ([politeness]).
	pacer *pace.Pacer
	// cluster is the fleet's shared state ([cluster] redis); nil alone.
	cluster *cluster.Client
	// stopping ends when a shutdown's drain time is up: requests still
	// waiting on an origin are then answered 503 rather than cut.
	stopping context.Context
	stop     context.CancelFunc

	// Read once at start: a change needs a restart.
	listen        string
	tlsConfig     TLSConfig
	cacheMaxBytes int64
	maxFetches    int
	clusterConfig ClusterConfig
	retryAfter    time.Duration // the cache's, for the log of failed fetches
}

// NewServer builds a Server for cfg, which it compiles first: a config
// with problems is refused with all of them. Nothing runs until Serve.
func NewServer(cfg *Config, o Options) (*Server, error) {
	pol, err := Compile(cfg)
	if err != nil {
		return nil, err
	}
	o.fill()
	stopping, stop := context.WithCancel(context.Background())
	s := &Server{
		stopping: stopping, stop: stop, log: o.Logger, opts: o,
		listen: cfg.Listen, tlsConfig: cfg.TLS, cacheMaxBytes: cfg.Robots.CacheMaxBytes, maxFetches: cfg.Robots.MaxFetches,
		retryAfter: cfg.Robots.RetryAfter, clusterConfig: cfg.Cluster,
		upstream: upstream.NewConns(),
		private:  upstream.NewPrivateCache(o.LookupNetIP, o.Now),
		pacer:    pace.NewPacer(o.Now),
		conns:    newConnTracker(cfg.Limits.MaxConnections),
	}
	s.pol.Store(pol)
	s.metrics = newMetrics(func() fetch.CacheStats { return s.cache.Stats() }, s.conns)
	s.status = newStatusBoard(o.Now)
	s.decideCalls = make(chan struct{}, maxDecideCalls)
	s.conns.overloaded = s.overloaded
	if s.tr, err = newTransport(pol, o.LookupNetIP, s.upstream, &s.self); err != nil {
		return nil, err
	}
	if cfg.TLS.Mode == "mitm" {
		if s.mitm, err = loadMITM(cfg, o.Now); err != nil {
			return nil, err
		}
	}
	if s.audit, err = newAudit(cfg.Audit.File, o.AuditOut, o.Logger, o.Now); err != nil {
		return nil, err
	}
	store, err := s.openStore(cfg)
	if err != nil {
		s.audit.Close()
		return nil, err
	}
	s.cache, err = newRobotsCache(pol, s.tr, o.Version, o.Now, []robots.Option{robots.WithNormalization()}, s.observeFetch, store, s.badRecord)
	if err != nil {
		s.audit.Close()
		if s.cluster != nil {
			s.cluster.Close()
		}
		return nil, err
	}
	s.world = &world{rules: s.cache.Get, private: s.private, pacer: s.pacer, backoffs: pace.NewBackoffs(o.Now), self: &s.self, now: o.Now}
	if s.cluster != nil {
		s.world.fleet = s.cluster
		s.cluster.SubscribeBackoffs(func(host string, until time.Time, why string) {
			s.world.backoffs.Apply(host, until, why, s.pol.Load().cfg.Politeness.MaxBackoff)
		})
		s.cluster.SubscribePurges(func(o fetch.Origin) { s.cache.Forget(o) }) // the store is the purger's to clear
	}
	s.gp = s.newGoproxy(pol.upstreamProxy)
	s.srv = s.newHTTPServer(cfg.Limits, o.Logger)
	return s, nil
}

// openStore opens where the cache keeps last good copies beyond itself:
// the fleet's Redis with [cluster] redis, else files under state_dir. A
// state directory that cannot be used is logged, and the proxy runs
// without persistence: it is never a reason not to start.
func (s *Server) openStore(cfg *Config) (fetch.Store, error) {
	if cfg.Cluster.Redis != "" {
		secret, err := cfg.Cluster.ReadSecret()
		if err != nil {
			return nil, fmt.Errorf("[cluster]: %w", err)
		}
		c, err := cluster.New(cluster.Options{
			URL:     cfg.Cluster.Redis,
			Prefix:  cfg.Cluster.KeyPrefix,
			Secret:  secret,
			MaxTTL:  cfg.Robots.CacheTTL,
			KeepFor: cfg.Robots.UnreachableLimit + cfg.Robots.CacheTTL,
			Logger:  s.log,
			OnError: s.metrics.clusterErrors.Inc,
		})
		if err != nil {
			return nil, err
		}
		s.cluster = c
		return c, nil
	}
	dir, err := cfg.StateDir()
	if err == nil {
		var st *fetch.FileStore
		if st, err = fetch.OpenFileStore(filepath.Join(dir, "robots"), cfg.Robots.CacheMaxBytes, s.log); err == nil {
			return st, nil
		}
	}
	s.log.Warn("no robots.txt store: last good copies will not survive a restart", "err", err)
	return nil, nil
}

// fill puts the defaults in o's zero fields.
func (o *Options) fill() {
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
}

// loadMITM loads (or makes) the MITM CA and the terminator of tunnels'
// TLS that presents its leaves.
func loadMITM(cfg *Config, now func() time.Time) (*mitm.Terminator, error) {
	files, err := cfg.CAFiles()
	if err != nil {
		return nil, err
	}
	ca, err := mitm.LoadOrCreate(files, now())
	if err != nil {
		return nil, err
	}
	return mitm.NewTerminator(ca, now)
}

// newGoproxy sets goproxy up with robotsgate's hooks, and against each of
// its defaults that would let something through undecided or leak.
func (s *Server) newGoproxy(next *url.URL) *goproxy.ProxyHttpServer {
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = log.New(slogWriter{s.log}, "", 0)
	gp.Tr = s.tr
	// Never the environment's HTTPS_PROXY: dial through the guarded dialer.
	gp.ConnectDial, gp.ConnectDialWithReq = nil, nil
	gp.KeepAcceptEncoding = true // bodies pass as the origin encoded them
	gp.KeepHeader = false        // Proxy-Authorization never reaches the origin
	gp.NonproxyHandler = http.HandlerFunc(s.serveAdmin)
	gp.OnRequest().DoFunc(s.onRequest)
	gp.OnRequest().HandleConnectFunc(s.onConnect)
	if next != nil {
		// Tunnels go through the next hop too, with its credentials.
		gp.ConnectDial = gp.NewConnectDialToProxyWithHandler(next.String(), func(req *http.Request) {
			if next.User != nil {
				pw, _ := next.User.Password()
				req.SetBasicAuth(next.User.Username(), pw)
				req.Header.Set("Proxy-Authorization", req.Header.Get("Authorization"))
				req.Header.Del("Authorization")
			}
		})
	}
	return gp
}

// newHTTPServer is the server of the proxy's listener, with [limits].
func (s *Server) newHTTPServer(lim LimitsConfig, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler: s,
		// A request's body is read from its connection, whose deadline
		// guardBody sets before each read.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			// A hijacked connection (a tunnel, a WebSocket) is no longer the
			// server's: it times out after tunnel_idle_timeout with no
			// traffic either way.
			if tc, ok := c.(*trackedConn); ok && st == http.StateHijacked {
				tc.hijacked.Store(true)
				tc.t.tunnels.Add(1)
				tc.setIdle(lim.TunnelIdleTimeout)
			}
		},
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ErrorLog:          log.New(slogWriter{logger}, "", 0),
	}
}

// observeFetch accounts for one robots.txt fetch: its metrics, and for a
// failure a line in the operational log with the origin, the kind of
// failure and the next attempt. The cache tries an origin again no sooner
// than retry_after (or the origin's own longer Retry-After), so this is at
// most one line per origin per retry_after.
func (s *Server) observeFetch(o fetch.Origin, r *fetch.Result) {
	s.metrics.observeFetch(o, r)
	if r.Outcome != fetch.Unreachable {
		return
	}
	kind, why := fetch.ErrorKind(r.Err), fetch.Describe(r.Err)
	var se *fetch.StatusError
	switch {
	case r.Err == nil:
		kind, why = "status", fmt.Sprintf("status %d", r.Status)
	case errors.As(r.Err, &se):
		kind = "status" // 429 or 5xx: the origin answered
	}
	next := s.opts.Now().Add(max(s.retryAfter, r.RetryAfter))
	s.log.Warn("robots.txt fetch failed", "origin", o.String(), "kind", kind, "err", why, "next_attempt", next.UTC().Format(time.RFC3339))
}

// badRecord logs a record of the state_dir store that the cache ignored:
// its times are not ones robotsgate writes (someone else wrote it). The
// fleet's Redis store logs and counts its own (cluster_errors_total).
func (s *Server) badRecord(o fetch.Origin, err error) {
	if s.cluster == nil {
		s.log.Warn("robots.txt store: ignoring a record robotsgate did not write", "origin", o.String(), "err", err)
	}
}

// overloaded answers a connection turned away past max_connections (the
// tracker writes the 503 itself): counted and audited like any answer.
func (s *Server) overloaded(remote net.Addr) {
	d := &Decision{Action: ActionOverloaded, Reason: "too many connections"}
	r := &http.Request{RemoteAddr: remote.String(), Header: http.Header{}, URL: &url.URL{Scheme: "http"}}
	s.finish(s.pol.Load(), r, d, http.StatusServiceUnavailable, "")
}

// newTransport is the upstream transport for p's [upstream] and
// [limits].
func newTransport(p *Policy, lookup upstream.LookupFunc, conns *upstream.Conns, self *upstream.Self) (*http.Transport, error) {
	return upstream.NewTransport(upstream.Options{
		Timeout:        p.cfg.Upstream.Timeout,
		BlockPrivate:   p.cfg.Upstream.BlockPrivate,
		Proxy:          p.upstreamProxy,
		CA:             p.cfg.Upstream.CA,
		MaxIdle:        p.cfg.Limits.MaxConnections,
		MaxHeaderBytes: p.cfg.Limits.MaxHeaderBytes,
		Lookup:         lookup,
		Conns:          conns,
		Self:           self,
	})
}

// newRobotsCache builds the robots.txt fetcher and cache for cfg. The
// fetcher dials with tr's dialer (block_private, upstream.proxy) and
// trusts the same roots.
func newRobotsCache(pol *Policy, tr *http.Transport, version string, now func() time.Time, parse []robots.Option, onFetch func(fetch.Origin, *fetch.Result), store fetch.Store, onBad func(fetch.Origin, error)) (*fetch.Cache, error) {
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
		OnBadRecord:      onBad,
		Store:            store,
		PeerWait:         cfg.Robots.FetchTimeout + 2*time.Second,
	})
}

// Serve accepts proxy connections on l until Shutdown.
func (s *Server) Serve(l net.Listener) error {
	s.self.Listen(l.Addr())
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
		s.upstream.CloseAll()
		grace, cancel := context.WithTimeout(context.Background(), time.Second)
		s.srv.Shutdown(grace)
		cancel()
	}
	s.stop()
	s.conns.closeAll()
	s.cache.Close()
	if s.cluster != nil {
		s.cluster.Close()
	}
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
	if cfg.Cluster != s.clusterConfig {
		s.log.Warn("[cluster] changed: restart to apply")
	}
	// The audit log moves (or reopens, after rotation) under its own lock:
	// each line goes whole to the old file or to the new one.
	if err := s.audit.Open(cfg.Audit.File); err != nil {
		s.ReloadFailed()
		return err
	}
	s.pol.Store(pol) // one snapshot: [politeness] limits come with it
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
	if r.Method != http.MethodConnect && r.URL.IsAbs() && !isWebSocketUpgrade(r.Header) {
		s.serveProxyRequest(ww, r)
		return
	}
	s.gp.ServeHTTP(ww, r) // CONNECT, WebSocket upgrades (goproxy relays them), the admin endpoints
}

// serveProxyRequest serves a plain proxy request: decided and answered by
// onRequest, as goproxy's handler would call it, and the answer written
// here, without goproxy's per-request context, handler chain and header
// copies (about 3% of a request's CPU). The answer's header is handed
// over whole, trailers are announced and passed on as goproxy does, and
// the body goes through respWriter.ReadFrom, sent as it arrives.
func (s *Server) serveProxyRequest(w *respWriter, r *http.Request) {
	_, resp := s.onRequest(r, nil)
	defer resp.Body.Close()
	h := w.Header()
	for k, vv := range resp.Header {
		h[k] = vv // resp is this request's alone: its slices can be shared
	}
	announced := len(resp.Trailer)
	if announced > 0 {
		h["Trailer"] = []string{trailerNames(resp.Trailer)}
	}
	w.WriteHeader(resp.StatusCode)
	w.ReadFrom(resp.Body)
	if len(resp.Trailer) > 0 {
		w.Flush() // chunked, whatever the body's size: trailers need it
	}
	for k, vv := range resp.Trailer {
		if len(resp.Trailer) > announced {
			k = http.TrailerPrefix + k // a trailer not announced (an HTTP/2 origin's)
		}
		h[k] = vv
	}
}

// trailerNames is the value of a Trailer header that announces t's names.
func trailerNames(t http.Header) string {
	names := make([]string, 0, len(t))
	for k := range t {
		names = append(names, k)
	}
	return strings.Join(names, ", ")
}

// closeHijacked closes a connection taken over during a request (a
// WebSocket, a tunnel) once its handler has returned: goproxy's WebSocket
// relay returns when one side ends and leaves the client's side open.
func (w *respWriter) closeHijacked() {
	if w.hijacked != nil {
		w.hijacked.Close()
	}
}

// CA returns the MITM CA; nil in tunnel mode.
func (s *Server) CA() *mitm.CA {
	if s.mitm == nil {
		return nil
	}
	return s.mitm.CA()
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
