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
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/evidence"
	"github.com/robotsgate/robotsgate/proxy/admin"
	"github.com/robotsgate/robotsgate/proxy/answer"
	"github.com/robotsgate/robotsgate/proxy/audit"
	"github.com/robotsgate/robotsgate/proxy/auth"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/head"
	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/mitm"
	"github.com/robotsgate/robotsgate/proxy/pace"
	"github.com/robotsgate/robotsgate/proxy/pay"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/proxy/upstream"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
	"github.com/robotsgate/robotsgate/robots/fetch/filestore"
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

	// keep, for tests, is handed every body of a site's file read (the
	// Server's keep, which the evidence store may take over).
	keep evidence.Keeper
	// decideTimeout, for tests, bounds each /v1/decide call; 0: a minute.
	decideTimeout time.Duration
}

// Server is the robotsgate proxy: an http.Handler that decides every
// proxied request, answers blocked ones itself and forwards the rest.
// Every request on its listener enters through goproxy's handler: plain
// proxy requests through its request hook, CONNECTs through its CONNECT
// hook, requests to the proxy itself through its non-proxy handler.
type Server struct {
	log   *slog.Logger
	opts  Options
	cache *fetch.Cache
	gp    *goproxy.ProxyHttpServer
	audit *audit.Log
	// snap is the policy in force, and the egress it sends through,
	// swapped whole by a reload.
	snap  atomic.Pointer[snapshot]
	conns *connTracker
	// private remembers which hosts resolve to private addresses.
	private *upstream.PrivateCache
	srv     *http.Server
	// mitm terminates the TLS of MITM tunnels; nil in tunnel mode.
	mitm *mitm.Terminator
	// metrics are served at /metrics.
	metrics *metrics
	// board keeps what /status shows: counts per origin, recent blocks.
	board *admin.Board
	// admin serves the requests to the proxy itself.
	admin *admin.Handler
	// self is the listener's address, which nothing robotsgate dials may reach.
	self upstream.Self
	// files holds the other files sites state usage in: tdmrep.json, RSL
	// licences.
	files *fetch.Files
	// heads reads HTML answers' heads for requests that declare purposes.
	heads *head.Reader
	// upstream holds the connections to origins, of every egress, closed
	// at shutdown.
	upstream *upstream.Conns
	// pacer spaces request starts per origin ([politeness]).
	pacer *pace.Pacer
	// backoffs hold hosts whose origins asked for a pause.
	backoffs *pace.Backoffs
	// cluster is the fleet's shared state ([cluster] redis); nil alone.
	cluster *cluster.Client
	// evidence keeps the copies of sites' files that decided
	// (docs/auditors.md); nil when evidence is off.
	evidence *evidence.Store
	// keep is handed every body of a site's file this process reads,
	// fetched or taken from the fleet's store or the state directory
	// (fetch.CacheOptions.Keeper): the evidence store when it is on, set
	// before the caches are built; nil (never a nil pointer in it): none
	// is kept.
	keep evidence.Keeper
	// named is told of the copies each audit record written names (never
	// called for a record that names none); nil: no one is.
	named func([]evidence.Copy)
	// budget is what pay-per-crawl spends from each day: the fleet's with
	// [cluster], else this process's.
	budget pay.Budget
	// charging remembers the sections of origins that charged today,
	// which are offered crawler-max-price at once (offerPrice).
	charging *pay.Recent
	// holds is what this process's paid requests and offers in flight
	// hold of the budget.
	holds *pay.Holds
	// stopping ends, with policy.ErrShuttingDown, when a shutdown's drain
	// time is up: every request's context derives from it, so that
	// requests still held or waiting on an origin are then answered 503
	// rather than cut.
	stopping context.Context
	stop     func()
	// tunnelRequests counts the requests being served inside tunnels,
	// which a shutdown waits for as http.Server.Shutdown waits for the
	// others.
	tunnelRequests atomic.Int64

	// started is the config the server started with, to read only: what
	// it builds from some keys is kept until a restart (RestartNeeded).
	started    config.Config
	retryAfter time.Duration // the cache's, for the log of failed fetches
}

// snapshot is one config in force: its policy, the authenticator of its
// [auth] users, and what its decisions look at.
type snapshot struct {
	pol  *policy.Policy
	auth *auth.Authenticator // nil without [auth] users
	env  policy.Env
	// ring and signer are [identity]'s keys and the signer of every
	// request sent; nil when it is off.
	ring   *identity.KeyRing
	signer *identity.Signer
	// out is how requests and robotsgate's own fetches reach origins
	// under this config's [upstream].
	out *egress
}

// newSnapshot makes the snapshot of s for pol, a compiled cfg.
func (s *Server) newSnapshot(cfg *config.Config, pol *policy.Policy) *snapshot {
	users := make([]auth.User, len(cfg.Auth.Users))
	for i, u := range cfg.Auth.Users {
		users[i] = auth.User{Name: u.Name, PasswordHash: u.PasswordHash}
	}
	sn := &snapshot{pol: pol, auth: auth.New(users, s.opts.Now)}
	sn.env = policy.Env{Rules: s.cache.Get, Private: s.private, Pacer: s.pacer, Backoffs: s.backoffs, Self: &s.self, Files: s.files, Now: s.opts.Now}
	if sn.auth != nil { // a nil *Authenticator in the interface would not be nil
		sn.env.Auth = sn.auth
	}
	if s.cluster != nil {
		sn.env.Fleet = s.cluster
	}
	return sn
}

// NewServer builds a Server for cfg, which it compiles first: a config
// with problems is refused with all of them. Nothing runs until Serve.
func NewServer(cfg *config.Config, o Options) (*Server, error) {
	pol, err := policy.Compile(cfg, cluster.CheckConfig, admin.CheckConfig)
	if err != nil {
		return nil, err
	}
	o.fill()
	stopping, cancel := context.WithCancelCause(context.Background())
	stop := func() { cancel(policy.ErrShuttingDown) }
	s := &Server{
		stopping: stopping, stop: stop, log: o.Logger, opts: o, keep: o.keep,
		started: *pol.Config(), retryAfter: cfg.Robots.RetryAfter,
		upstream: upstream.NewConns(),
		private:  upstream.NewPrivateCache(o.LookupNetIP, o.Now),
		pacer:    pace.NewPacer(o.Now),
		backoffs: pace.NewBackoffs(o.Now),
		conns:    newConnTracker(cfg.Limits.MaxConnections, cfg.Limits.IdleTimeout),
		board:    admin.NewBoard(o.Now),
	}
	s.metrics = newMetrics(func() fetch.CacheStats { return s.cache.Stats() }, s.conns)
	ring, signer, err := s.loadIdentity(cfg)
	if err != nil {
		return nil, err
	}
	s.conns.overloaded = s.overloaded
	out, _, err := s.egressFor(pol, nil)
	if err != nil {
		return nil, err
	}
	if pol.TLSMode() == policy.TLSMITM {
		if s.mitm, err = loadMITM(cfg, o.Now); err != nil {
			return nil, err
		}
	}
	if s.audit, err = s.openAudit(cfg, ring); err != nil {
		return nil, err
	}
	store, err := s.openStore(cfg)
	if err != nil {
		s.audit.Close()
		return nil, err
	}
	ro := upstream.RobotsOptions{
		Transport: fetchTransport{s}, Version: o.Version, Now: o.Now, // out's, or a reload's
		Parse: []robots.Option{robots.WithNormalization()}, OnFetch: s.observeFetch, Store: store, OnBadRecord: s.badRecord,
	}
	if err := s.openBudget(cfg, pol); err != nil {
		s.audit.Close()
		return nil, err
	}
	if err := s.openEvidence(cfg); err != nil {
		s.audit.Close()
		return nil, err
	}
	ro.Keeper = s.keep // the evidence store when it is on
	s.cache, err = upstream.NewRobotsCache(&cfg.Robots, ro)
	var docs fetch.DocStore
	if s.cluster != nil {
		docs = s.cluster // the fleet shares them
	}
	s.files = upstream.NewUsageFiles(&cfg.Robots, ro, docs, s.observeFile)
	s.heads = head.NewReader(cfg.Upstream.Timeout)
	if err != nil {
		s.audit.Close()
		s.closeEvidence()
		if s.cluster != nil {
			s.cluster.Close()
		}
		return nil, err
	}
	s.metrics.reg.MustRegister(fleetMetrics(s.backoffs, s.cluster)...)
	sn := s.newSnapshot(cfg, pol)
	sn.ring, sn.signer, sn.out = ring, signer, out
	s.snap.Store(sn)
	s.subscribeFleet()
	s.gp = s.newGoproxy()
	s.srv = s.newHTTPServer(cfg.Limits, o.Logger)
	return s, nil
}

// openBudget opens what pay-per-crawl spends from each day: the fleet's
// with [cluster], else this process's, kept in the state directory (in
// memory only, logged, when that cannot be used and pay-per-crawl is off),
// and registers robotsgate_budget_spent_today.
func (s *Server) openBudget(cfg *config.Config, pol *policy.Policy) error {
	var err error
	s.charging = pay.NewRecent(pay.MaxRecent)
	s.holds = pay.NewHolds()
	if s.cluster != nil {
		s.budget = fleetBudget{s.cluster.Counter(cfg.Payments.KeyPrefix)} // one budget for the fleet
	} else if s.budget, err = s.localBudget(cfg); err != nil {
		if _, _, on := pol.Payments(); on {
			return err
		}
		// Nothing is paid now: the state directory's trouble is for the
		// log, not a reason not to start.
		s.log.Warn("pay-per-crawl budget: kept in memory only", "err", err)
		s.budget, _ = pay.NewLocal("")
	}
	s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "robotsgate_budget_spent_today",
		Help: "Pay-per-crawl spending this UTC day, in [payments] max_price's currency (with [cluster], the fleet's), what paid requests and offers in flight hold included; 0 when pay-per-crawl is off.",
	}, s.spentToday))
	return nil
}

// subscribeFleet applies the back-offs and purges the fleet's other
// instances publish ([cluster]); nothing alone.
func (s *Server) subscribeFleet() {
	if s.cluster == nil {
		return
	}
	s.cluster.SubscribeBackoffs(func(host string, until time.Time, why string) {
		s.backoffs.Apply(host, until, why, s.snap.Load().pol.Config().Politeness.MaxBackoff)
	})
	s.cluster.SubscribePurges(func(o fetch.Origin) { // the store is the purger's to clear
		if s.files != nil {
			s.files.Forget(o, s.cache.Licenses(context.Background(), o)...)
		}
		s.cache.Forget(o)
	})
}

// spentToday is today's pay-per-crawl spending, for the metric; 0 when
// pay-per-crawl is off or the budget cannot be read.
func (s *Server) spentToday() float64 {
	_, budget, on := s.snap.Load().pol.Payments()
	if !on {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), pay.BudgetTimeout)
	defer cancel()
	spent, err := s.budget.Spent(ctx, pay.Day(s.opts.Now()), budget.Currency)
	if err != nil {
		return 0
	}
	return spent.Float()
}

// SigningKey returns the id of the key every request is signed with; ""
// when [identity] is off.
func (s *Server) SigningKey() string {
	if sg := s.signer(); sg != nil {
		return sg.KeyID()
	}
	return ""
}

// localBudget returns this instance's pay-per-crawl budget, kept in
// <state_dir>/pay-budget.json so that a restart does not spend the day's
// budget again.
func (s *Server) localBudget(cfg *config.Config) (*pay.Local, error) {
	dir, err := cfg.StateDir()
	if err != nil {
		return nil, fmt.Errorf("pay-per-crawl budget: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pay-per-crawl budget: create the state directory: %w", err)
	}
	return pay.NewLocal(filepath.Join(dir, "pay-budget.json"))
}

// IdentityKeys returns the ids (JWK thumbprints) of the keys the key
// directory lists now, the signing key first; nil when [identity] is off.
// A reload that read other keys (robotsgate keys -rotate or -remove) lists
// others: what it compares to say so.
func (s *Server) IdentityKeys() []string {
	sn := s.snap.Load()
	if sn == nil || sn.ring == nil {
		return nil
	}
	keys := sn.ring.Keys()
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	return ids
}

// signer returns the signer in force; nil when [identity] is off.
func (s *Server) signer() *identity.Signer {
	if sn := s.snap.Load(); sn != nil {
		return sn.signer
	}
	return nil
}

// published returns what the key directory and the card serve: the card,
// the key ring and the signer of the config in force, read from one
// snapshot, so that a reload never pairs one config's card with
// another's keys.
func (s *Server) published() admin.Identity {
	sn := s.snap.Load()
	return admin.Identity{Card: sn.pol.Card(), Ring: sn.ring, Signer: sn.signer}
}

// loadIdentity reads [identity]'s key ring (making its key on first
// start) and returns it with the signer of cfg; nil, nil when [identity]
// is off.
func (s *Server) loadIdentity(cfg *config.Config) (*identity.KeyRing, *identity.Signer, error) {
	ic := &cfg.Identity
	if ic.SignatureAgent == "" {
		return nil, nil, nil
	}
	// A key is made only at first start, in the state directory: a
	// key_file that is missing (a Secret not mounted), or a key gone at a
	// reload, is an error, never a new identity nobody published.
	ring, made, err := identity.OpenRing(cfg, s.snap.Load() == nil)
	if err != nil {
		return nil, nil, err
	}
	if made {
		s.log.Info("made an identity key: publish the key directory (robotsgate keys prints it)", "key_file", ring.Path, "keyid", ring.Current.ID)
	}
	signer, err := identity.NewSigner(ring.Current, ic.SignatureAgent, agentForm(ic.SignatureAgentForm), ic.Validity, s.opts.Now)
	if err != nil {
		return nil, nil, fmt.Errorf("identity: %w", err)
	}
	return ring, signer, nil
}

// agentForm is the identity.Form named s (CheckConfig has checked it);
// FormDictionary when it names none.
func agentForm(s string) identity.Form {
	if f, err := identity.ParseForm(s); err == nil {
		return f
	}
	return identity.FormDictionary
}

// observeFile logs a usage file (tdmrep.json, an RSL licence) that could
// not be read: once per fetch, which is once per retry_after at most.
func (s *Server) observeFile(url string, outcome fetch.Outcome, problem string) {
	switch {
	case outcome == fetch.Unreachable:
		s.log.Warn("usage file unreachable: requests that declare a purpose it could refuse are answered 503 until it is fetched, or its last copy holds", "url", url, "err", problem)
	case outcome == fetch.Fetched && problem != "":
		s.log.Info("usage file does not read as one: a tdmrep.json reserves nothing, an RSL licence refuses ai-train and ai-input", "url", url, "err", problem)
	}
}

// openAudit opens the audit log, chained, and signed with checkpoints
// when evidence is on ([evidence] enabled, audit.file set): with the
// [identity] key ring's key, else the audit key in the state directory,
// made at first start.
func (s *Server) openAudit(cfg *config.Config, ring *identity.KeyRing) (*audit.Log, error) {
	o := audit.Options{Stdout: s.opts.AuditOut, OnError: s.auditFailed, Now: s.opts.Now, Warn: s.log.Warn, Info: s.log.Info}
	if cfg.EvidenceOn() {
		dir, err := cfg.StateDir()
		if err != nil {
			return nil, err
		}
		o.Checkpoints = audit.Checkpoints{Interval: cfg.Evidence.CheckpointInterval, HeadPath: filepath.Join(dir, audit.HeadFileName)}
		if ring != nil {
			o.Checkpoints.Key = ring.Current
		} else {
			k, sg, made, err := audit.LoadSigningKey(cfg, true)
			if err != nil {
				return nil, err
			}
			if made {
				s.log.Info("audit: made the key checkpoints are signed with (robotsgate audit key prints it)", "key_file", sg.Path, "key", k.ID)
			}
			o.Checkpoints.Key = k
		}
	}
	return audit.OpenWith(cfg.Audit.File, o)
}

// auditFailed reports a failed audit write on the operational log.
func (s *Server) auditFailed(err error, r audit.Record) {
	s.metrics.auditErrors.Inc()
	s.log.Error("audit log write failed", "err", err, "msg", r.Msg, "url", r.URL)
}

// openStore opens where the cache keeps last good copies beyond itself:
// the fleet's Redis with [cluster] redis, else files under state_dir. A
// state directory that cannot be used is logged, and the proxy runs
// without persistence: it is never a reason not to start.
func (s *Server) openStore(cfg *config.Config) (fetch.Store, error) {
	if cfg.Cluster.Enabled() {
		secret, err := cfg.Cluster.ReadSecret()
		if err != nil {
			return nil, fmt.Errorf("[cluster]: %w", err)
		}
		password, err := cfg.Cluster.ReadPassword()
		if err != nil {
			return nil, err
		}
		c, err := cluster.New(cluster.Options{
			URL:          cfg.Cluster.Redis,
			Sentinels:    cfg.Cluster.Sentinels,
			Master:       cfg.Cluster.Master,
			Nodes:        cfg.Cluster.Nodes,
			Password:     password,
			SentinelAuth: cfg.Cluster.SentinelAuth,
			OpTimeout:    cfg.Cluster.OpTimeout,
			Prefix:       cfg.Cluster.KeyPrefix,
			Secret:       secret,
			MaxTTL:       cfg.Robots.CacheTTL,
			MaxDocBytes:  cfg.Robots.MaxBytes,
			MaxWait:      cfg.Politeness.MaxWait,
			KeepFor:      cfg.Robots.UnreachableLimit + cfg.Robots.CacheTTL,
			Logger:       s.log,
			OnError:      s.metrics.clusterErrors.Inc,
		})
		if err != nil {
			return nil, err
		}
		s.cluster = c
		return c, nil
	}
	dir, err := cfg.StateDir()
	if err == nil {
		var st *filestore.Store
		if st, err = filestore.Open(filepath.Join(dir, "robots"), cfg.Robots.CacheMaxBytes, s.log); err == nil {
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
func loadMITM(cfg *config.Config, now func() time.Time) (*mitm.Terminator, error) {
	files, err := mitm.FilesOf(cfg)
	if err != nil {
		return nil, err
	}
	ca, err := mitm.LoadOrCreate(files, now())
	if err != nil {
		return nil, err
	}
	return mitm.NewTerminator(ca, now, cfg.TLS.HTTP2)
}

// newGoproxy sets goproxy up with robotsgate's hooks, and against each of
// its defaults that would let something through undecided or leak.
func (s *Server) newGoproxy() *goproxy.ProxyHttpServer {
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = log.New(slogWriter{s.log}, "", 0)
	// goproxy sends nothing itself: every request is forwarded, and every
	// CONNECT hijacked, by robotsgate's hooks, through the snapshot's
	// egress. Should a path of goproxy's ever send, it fails rather than
	// go out undecided, or a way a reload has replaced.
	gp.Tr = &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("robotsgate sends through its own transports, never goproxy's")
	}}
	// Never the environment's HTTPS_PROXY: tunnels dial through the
	// egress (egress.dialTunnel).
	gp.ConnectDial, gp.ConnectDialWithReq = nil, nil
	// goproxy's KeepAcceptEncoding and KeepHeader are read only on its
	// way to its own RoundTrip, which no request takes (onRequest always
	// answers: TestOnRequestAlwaysAnswers) and whose transport, above,
	// refuses to send: they are left unset, and forward's steps are what
	// keep Accept-Encoding and drop Proxy-Authorization.
	var caPEM []byte
	if ca := s.CA(); ca != nil {
		caPEM = ca.PEM()
	}
	s.admin = admin.New(admin.Options{
		Snapshot: func() (*policy.Policy, *auth.Authenticator) { sn := s.snap.Load(); return sn.pol, sn.auth },
		Cache:    s.cache,
		Files:    s.files,
		Cluster:  s.cluster,
		Metrics:  s.metrics.handler,
		Board:    s.board,
		CA:       caPEM,
		Holds: func() map[string]pace.Hold {
			holds := s.backoffs.Holds()
			for h, n := range s.pacer.WaitingHosts() {
				hold := holds[h]
				hold.Held += n
				holds[h] = hold
			}
			return holds
		},
		Private:       s.private,
		Identity:      s.published,
		DecideTimeout: s.opts.decideTimeout,
		Now:           s.opts.Now,
	})
	gp.NonproxyHandler = s.admin
	gp.OnRequest().DoFunc(s.onRequest)
	gp.OnRequest().HandleConnectFunc(s.onConnect)
	return gp
}

// newHTTPServer is the server of the proxy's listener, with [limits].
func (s *Server) newHTTPServer(lim config.LimitsConfig, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler: s,
		// Every request's context ends, with policy.ErrShuttingDown, when
		// a shutdown's drain time is up: those still held are answered.
		BaseContext: func(net.Listener) context.Context { return s.stopping },
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
	switch {
	case errors.Is(err, fetch.ErrColdCopy):
		s.log.Warn("robots.txt cache: a last good copy could not be kept compact; the origin will be fetched again", "origin", o.String(), "err", err)
	case s.cluster == nil: // the fleet's client logs its own
		s.log.Warn("robots.txt store: ignoring a record robotsgate did not write", "origin", o.String(), "err", err)
	}
}

// overloaded answers a connection turned away past max_connections (the
// tracker writes the 503 itself): counted and audited like any answer.
func (s *Server) overloaded(remote net.Addr) {
	d := &policy.Decision{Action: policy.ActionOverloaded, Reason: "too many connections"}
	r := &http.Request{RemoteAddr: remote.String(), Header: http.Header{}, URL: &url.URL{Scheme: "http"}}
	s.finish(s.snap.Load().pol, r, d, outcome{}, http.StatusServiceUnavailable, "")
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

// Shutdown stops accepting, waits for in-flight requests, those inside
// tunnels included, until ctx ends, then closes every connection left,
// hijacked ones (tunnels, WebSockets) included, which http.Server.Shutdown
// does not track.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err == nil {
		err = s.drainTunnels(ctx)
	}
	if err != nil {
		// Drain time is up: requests still held, or waiting on an origin,
		// are answered 503 instead of being cut (closing their upstream
		// connections ends their wait); give them a moment to write.
		s.stop()
		s.upstream.CloseAll()
		grace, cancel := context.WithTimeout(context.Background(), time.Second)
		s.srv.Shutdown(grace)
		s.drainTunnels(grace)
		cancel()
	}
	s.stop()
	s.conns.closeAll()
	s.cache.Close()
	if s.cluster != nil {
		s.cluster.Close()
	}
	s.snap.Load().out.closeIdle()
	if cerr := s.audit.Close(); err == nil {
		err = cerr
	}
	if cerr := s.closeEvidence(); err == nil { // after the audit: its last records name copies
		err = cerr
	}
	return err
}

// drainTunnels waits until no request is being served inside a tunnel, or
// ctx ends (its error then). Between requests a tunnel is idle, and closed
// as an idle keep-alive connection is.
func (s *Server) drainTunnels(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for s.tunnelRequests.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Reload applies a new config: everything but the keys RestartNeeded
// names, which need a restart (logged). A new [upstream] (or a renewed upstream.ca file) is
// applied at once: new transports, dialer and guard, which requests
// decided from then on use, while those in flight end on the old ones;
// and the robots.txt and usage files whose latest fetch failed for
// robotsgate's own configuration (tls-verify, private-address) are
// fetched again at their next request. Cached rules are kept. The audit
// file is reopened. A config that cannot be applied whole is refused,
// and the running one kept.
func (s *Server) Reload(cfg *config.Config) error {
	pol, err := policy.Compile(cfg, cluster.CheckConfig, admin.CheckConfig)
	if err != nil {
		s.ReloadFailed()
		return err
	}
	sn := s.newSnapshot(cfg, pol)
	// The key ring is read again: a key rotated with robotsgate keys
	// -rotate signs from the reload on.
	if sn.ring, sn.signer, err = s.loadIdentity(cfg); err != nil {
		s.ReloadFailed()
		return err
	}
	old := s.snap.Load()
	var newEgress bool
	if sn.out, newEgress, err = s.egressFor(pol, old.out); err != nil {
		s.ReloadFailed()
		return err
	}
	if prev := old.signer; sn.signer != nil && (prev == nil || prev.KeyID() != sn.signer.KeyID()) {
		s.log.Info("identity: signing with key "+sn.signer.KeyID(), "key_file", sn.ring.Path)
	}
	s.warnRestart(cfg)
	// The audit log moves (or reopens, after rotation) under its own lock:
	// each line goes whole to the old file or to the new one.
	if err := s.audit.Reopen(cfg.Audit.File); err != nil {
		s.ReloadFailed()
		return err
	}
	if sn.ring != nil {
		s.audit.SetKey(sn.ring.Current) // a rotated [identity] key signs the next checkpoints
	}
	s.snap.Store(sn) // one snapshot: [politeness] limits, [auth] users and [upstream] come with it
	s.heads.SetTimeout(cfg.Upstream.Timeout)
	if newEgress {
		// Requests that loaded the old snapshot end on the old egress; its
		// connections close as they go idle.
		old.out.closeIdle()
		robots, files := s.cache.RetryOwnFailures(), 0
		if s.files != nil {
			files = s.files.RetryOwnFailures()
		}
		s.log.Info("[upstream] applied: new connections to origins; robots.txt and usage files that failed on robotsgate's configuration (tls-verify, private-address) are fetched again at their next request",
			"robots_txt", robots, "usage_files", files)
	}
	s.metrics.reloads.WithLabelValues("success").Inc()
	s.metrics.reloadOK.Set(1)
	return nil
}

// ReloadFailed counts a reload that did not happen (a bad new config).
func (s *Server) ReloadFailed() {
	s.metrics.reloads.WithLabelValues("failure").Inc()
	s.metrics.reloadOK.Set(0)
}

// ServeHTTP serves one request on the proxy's listener: through goproxy's
// handler, whatever it is, behind a guard that turns a panic into a 500
// and a writer that forwards answers unchanged.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ww := &respWriter{ResponseWriter: w}
	defer ww.closeHijacked() // every handler below is done with it by then
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic serving request", "panic", fmt.Sprint(v), "method", r.Method, "url", answer.DisplayURL(r))
			if !ww.wrote {
				http.Error(ww, "robotsgate: internal error", http.StatusInternalServerError)
			}
		}
	}()
	s.gp.ServeHTTP(ww, r)
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
