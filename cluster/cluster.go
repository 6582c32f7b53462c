// Package cluster shares robotsgate's state among instances through Redis
// (docs/operations.md, "Running several instances"): robots.txt entries and
// last good copies, with one fetch per origin for the whole fleet (a lock in
// Redis); pacing slots per host (reserved atomically by a script, on Redis's
// clock); and origin back-offs (published to every instance). Redis is never
// on the path of a decision that can do without it: a call that fails, or
// takes longer than a short bound, fails at once for a while afterwards (a
// breaker), and callers go on with their local state. Every key is under a
// prefix and has a TTL.
//
// Redis is not trusted with the gate: every value an instance writes and
// every message it publishes is sealed with an HMAC keyed by the fleet's
// secret and bound to its key (see seal.go). A value that does not
// verify, does not decode, or holds times no instance would write, is
// ignored and counted as an error (Status.Errors, Options.OnError) without
// opening the breaker: whoever can write to Redis without the secret can
// make instances fetch again, never obey rules they did not fetch.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/robotsgate/robotsgate/robots/fetch"
)

// ErrDown is returned, at once, by calls made while the breaker is open:
// Redis failed recently and is not tried again before Options.RetryAfter.
var ErrDown = errors.New("redis unavailable")

// Defaults of Options.
const (
	DefaultOpTimeout  = 250 * time.Millisecond
	DefaultRetryAfter = 2 * time.Second
	DefaultKeepFor    = 30 * 24 * time.Hour
)

// Options configures a Client. Each zero value means the default named in
// its comment.
type Options struct {
	// URL is a single Redis server's URL:
	// redis://[user:password@]host:port/db, or rediss:// for TLS.
	// Exactly one of URL, Sentinels and Nodes names the fleet's Redis.
	URL string
	// Sentinels are the addresses (host:port) of the Redis Sentinels that
	// watch the primary named Master: writes go to the primary of the
	// moment, and a failover is followed without a restart.
	Sentinels []string
	Master    string
	// Nodes are addresses (host:port) of a Redis Cluster's nodes, which
	// tell the rest: every key of one origin shares a slot (hash tags), so
	// that each script and transaction touches one node.
	Nodes []string
	// Password is Sentinels' primary's and replicas', or Nodes', password.
	Password string
	// SentinelAuth sends Password to the Sentinels too (Sentinels that
	// require one, as the Bitnami chart sets them up by default).
	SentinelAuth bool
	// Secret keys the MAC sealed on every value and message (at least
	// MinSecretBytes, the same for every instance of the fleet): values
	// and messages whose MAC does not verify are ignored. Required.
	Secret []byte
	// MaxTTL is the longest an instance keeps a robots.txt copy fresh
	// ([robots] cache_ttl, fetch.CacheOptions.TTL): a stored copy that
	// expires later than now + MaxTTL (give or take fetch.MaxClockSkew)
	// was not written by an instance, and is ignored. 0: fetch.DefaultTTL.
	MaxTTL time.Duration
	// MaxWait is [politeness] max_wait, the furthest ahead an instance
	// reserves a pacing start: a stored start further ahead than that
	// (and the gap, and a second) was written by none, and is reserved
	// over. A request with less of its own max_wait left (a back-off held
	// it) still reads a start this far ahead as the fleet's. Zero: each
	// call's own max wait.
	MaxWait time.Duration
	// MaxDocBytes bounds the body of a stored usage file
	// (fetch.StoredDoc): [robots] max_bytes. 0: fetch.DefaultMaxBytes.
	MaxDocBytes int
	// Prefix starts every key and channel name ("robotsgate:").
	Prefix string
	// OpTimeout bounds each call to Redis. 0: DefaultOpTimeout.
	OpTimeout time.Duration
	// RetryAfter is how long calls fail at once after one failed. 0:
	// DefaultRetryAfter.
	RetryAfter time.Duration
	// KeepFor is the TTL of stored robots.txt copies and failure marks,
	// renewed by every write. 0: DefaultKeepFor.
	KeepFor time.Duration
	// Logger gets "redis lost" and "redis regained" (once each per
	// change) and malformed values. Nil: discarded.
	Logger *slog.Logger
	// OnError, if set, is called for each failed call and each value or
	// message ignored as foreign (for robotsgate_cluster_errors_total).
	OnError func()
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
}

// Client is one instance's connection to the fleet's Redis. It is safe
// for concurrent use.
type Client struct {
	opts Options
	rdb  redis.UniversalClient // a single server's, a Sentinel-managed primary's or a Cluster's: one code path above them
	id   string                // this instance, in lock values and back-off messages
	seal *sealer

	reserve, unlock *redis.Script

	mu        sync.Mutex
	down      bool
	downSince time.Time
	retryAt   time.Time
	okBegun   time.Time // when the latest call that succeeded began
	lastErr   string
	// server is the Redis server the latest connection made went to
	// (the primary of the moment, with Sentinels), since serverSince;
	// "" with Nodes or before any.
	server      string
	serverSince time.Time
	errors      atomic.Int64
	lastDial    atomic.Pointer[dialFailure] // the last connection that could not be made

	lastMalformed atomic.Int64 // unix nanos of the last malformed-value log line
	// lost wakes the watcher when a call finds Redis gone, so that it
	// probes every RetryAfter from then, not after its next watchEvery.
	lost chan struct{}

	ctx    context.Context // ends at Close: subscriptions
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newRedis returns the client of o's Redis, whichever way it is named,
// every call bounded by o.OpTimeout and no retries (the breaker retries,
// later); dial is wrapped around each dial.
func newRedis(o *Options, dial func(func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error)) (redis.UniversalClient, error) {
	t := o.OpTimeout
	switch {
	case len(o.Sentinels) > 0:
		fo := &redis.FailoverOptions{
			MasterName: o.Master, SentinelAddrs: o.Sentinels, Password: o.Password,
			DialTimeout: t, ReadTimeout: t, WriteTimeout: t, PoolTimeout: t, MaxRetries: -1, ContextTimeoutEnabled: true,
		}
		if o.SentinelAuth {
			fo.SentinelPassword = o.Password
		}
		fo.Dialer = dial(netDialer(t))
		return redis.NewFailoverClient(fo), nil
	case len(o.Nodes) > 0:
		co := &redis.ClusterOptions{
			Addrs: o.Nodes, Password: o.Password,
			DialTimeout: t, ReadTimeout: t, WriteTimeout: t, PoolTimeout: t, MaxRetries: -1, ContextTimeoutEnabled: true,
		}
		co.Dialer = dial(netDialer(t))
		return redis.NewClusterClient(co), nil
	}
	ro, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("cluster: redis URL: %w", err)
	}
	ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = t, t, t
	ro.PoolTimeout = t
	ro.MaxRetries = -1
	ro.ContextTimeoutEnabled = true
	ro.Dialer = dial(redis.NewDialer(ro))
	return redis.NewClient(ro), nil
}

// netDialer dials TCP within timeout.
func netDialer(timeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
	return d.DialContext
}

// ParseURL checks a Redis URL as New reads it.
func ParseURL(u string) error {
	_, err := redis.ParseURL(u)
	return err
}

// New returns a Client for o.URL. It does not connect: Redis may be down
// at start, and the client joins once it is up. A secret shorter than
// MinSecretBytes is an error.
func New(o Options) (*Client, error) {
	if len(o.Secret) < MinSecretBytes {
		return nil, fmt.Errorf("cluster: a secret of %d bytes: want at least %d", len(o.Secret), MinSecretBytes)
	}
	if o.MaxDocBytes <= 0 {
		o.MaxDocBytes = fetch.DefaultMaxBytes
	}
	if o.MaxTTL <= 0 {
		o.MaxTTL = fetch.DefaultTTL
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	if o.KeepFor <= 0 {
		o.KeepFor = DefaultKeepFor
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	id := make([]byte, 8)
	rand.Read(id)
	seal := newSealer(o.Secret)
	o.Secret = nil // kept in the sealer only
	c := &Client{opts: o, id: hex.EncodeToString(id), seal: seal,
		reserve: redis.NewScript(reserveSource), unlock: redis.NewScript(unlockSource), lost: make(chan struct{}, 1)}
	// Short bounds everywhere: a slow Redis must cost a request no more
	// than OpTimeout, and then nothing while the breaker is open. A call
	// that cannot connect ends when its OpTimeout does, with "context
	// deadline exceeded": the dial's own error says what happened, and
	// is kept for Status.
	rdb, err := newRedis(&c.opts, func(dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				c.lastDial.Store(&dialFailure{err: err, at: c.opts.Now()})
			}
			return conn, err
		}
	})
	if err != nil {
		return nil, err
	}
	c.rdb = rdb
	if len(o.Nodes) == 0 { // a Cluster's nodes are many: none is "the" server
		rdb.AddHook(dialWatch{c})
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.watch()
	return c, nil
}

// watchEvery is how often a Client checks Redis with no calls to make, so
// that its Status (and /healthz) follows Redis going and coming back even
// when no request needs it.
const watchEvery = 5 * time.Second

// watch pings Redis at once, then every watchEvery while it is up and
// every RetryAfter while it is down (from the moment any call finds it
// gone), until Close: a client that starts with Redis away says so, and
// one whose Redis comes back rejoins without waiting for traffic.
func (c *Client) watch() {
	defer c.wg.Done()
	for {
		c.do(c.ctx, func(ctx context.Context) error { return c.rdb.Ping(ctx).Err() })
		wait := watchEvery
		if !c.Status().Up {
			wait = c.opts.RetryAfter
		}
		t := time.NewTimer(wait)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-c.lost:
			t.Stop()
			t = time.NewTimer(c.opts.RetryAfter) // its first probe, when the breaker lets one through
			select {
			case <-c.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		case <-t.C:
		}
	}
}

// RouteLibraryLogs sends go-redis's own log lines (a dial failure each
// time it retries) to l at debug level instead of stderr: the breaker
// reports Redis going and coming back once each. go-redis keeps one
// logger per process, so the program sets it once, at start.
func RouteLibraryLogs(l *slog.Logger) { redis.SetLogger(quietLogger{l}) }

// quietLogger takes go-redis's log lines to a slog.Logger at debug level.
type quietLogger struct{ l *slog.Logger }

func (q quietLogger) Printf(ctx context.Context, format string, v ...any) {
	q.l.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "redis")
}

// Close ends the subscriptions and closes the connections.
func (c *Client) Close() error {
	c.cancel()
	c.wg.Wait()
	return c.rdb.Close()
}

// Status is the breaker's state, and which Redis the client uses, for
// /healthz and /status.json.
type Status struct {
	Up        bool      `json:"up"`
	Since     time.Time `json:"since,omitzero"` // when it went down; zero (and left out of JSON) when up
	Errors    int64     `json:"errors"`
	LastError string    `json:"last_error"`
	// Topology is how the fleet's Redis is named: "redis" (a URL),
	// "sentinel" (Sentinels and Master) or "cluster" (Nodes).
	Topology string `json:"topology,omitempty"`
	Master   string `json:"master,omitempty"` // the Sentinels' name of the primary
	// Server is the address of the Redis server the latest connection
	// went to, as dialled (with Sentinels, the primary of the moment: it
	// changes at a failover), and ServerSince when the first connection
	// to it was made. "" and zero with a Redis Cluster, whose nodes are
	// many, and before any connection.
	Server      string    `json:"server,omitempty"`
	ServerSince time.Time `json:"server_since,omitzero"`
}

// Status returns the breaker's state and the server in use.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{Up: !c.down, Errors: c.errors.Load(), LastError: c.lastErr, Server: c.server, ServerSince: c.serverSince}
	switch {
	case len(c.opts.Sentinels) > 0:
		s.Topology, s.Master = "sentinel", c.opts.Master
	case len(c.opts.Nodes) > 0:
		s.Topology = "cluster"
	default:
		s.Topology = "redis"
	}
	if c.down {
		s.Since = c.downSince
	}
	return s
}

// dialWatch is a go-redis hook that tells its Client where each new
// connection went: with Sentinels, the primary the Sentinels named at
// that moment (go-redis closes the connections to a former primary, so
// that the next made goes to the new one).
type dialWatch struct{ c *Client }

// DialHook implements redis.Hook: it tells the Client the server each
// new connection reached, from its remote address (never under the
// Client's lock while dialling, never calling Redis).
func (h dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err == nil {
			h.c.connected(conn.RemoteAddr().String())
		}
		return conn, err
	}
}

// ProcessHook implements redis.Hook: commands pass through unwatched.
func (dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook implements redis.Hook: pipelines pass through
// unwatched.
func (dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// connected notes a connection made to server.
func (c *Client) connected(server string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if server != c.server {
		c.server, c.serverSince = server, c.opts.Now()
	}
}

// do runs one call to Redis under the breaker: at once ErrDown while it is
// open; otherwise fn with OpTimeout. A failure that is Redis's (not the
// caller's ctx, not a missing key) opens the breaker for RetryAfter; the
// first success after it closes it. Each change is logged once.
func (c *Client) do(ctx context.Context, fn func(context.Context) error) error {
	now := c.opts.Now()
	c.mu.Lock()
	if c.down && now.Before(c.retryAt) {
		c.mu.Unlock()
		return ErrDown
	}
	c.mu.Unlock()
	start := c.opts.Now()
	opCtx, cancel := context.WithTimeout(ctx, c.opts.OpTimeout)
	err := fn(opCtx)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = c.timedOut(start)
	}
	switch {
	case err == nil || errors.Is(err, redis.Nil):
		c.up(start)
		return err
	case ctx.Err() != nil: // the caller left: not Redis's failure
		return err
	}
	c.failed(err, start)
	return err
}

// A dialFailure is a connection to Redis that could not be made.
type dialFailure struct {
	err error
	at  time.Time
}

// timedOut describes a call begun at start that OpTimeout cut: by the
// error of a connection tried since, which is what happened (a refused
// or failed connection), or else as no answer in time.
func (c *Client) timedOut(start time.Time) error {
	if d := c.lastDial.Load(); d != nil && !d.at.Before(start) {
		return fmt.Errorf("connect to redis: %w", d.err)
	}
	return fmt.Errorf("no answer within %v (%w)", c.opts.OpTimeout, context.DeadlineExceeded)
}

// up closes the breaker: a call begun at start succeeded.
func (c *Client) up(start time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if start.After(c.okBegun) {
		c.okBegun = start
	}
	if c.down {
		c.down = false
		c.opts.Logger.Info("redis regained: sharing state with the fleet again", "down_for", c.opts.Now().Sub(c.downSince).Round(time.Millisecond))
	}
}

// failed counts err, the failure of a call begun at start, and opens the
// breaker for RetryAfter, unless a call begun after it has succeeded
// since: that failure is older news than the success (a call begun as
// Redis came back that timed out after another found it), and opening
// on it would cut the fleet off again for a whole RetryAfter.
func (c *Client) failed(err error, start time.Time) {
	c.errors.Add(1)
	if c.opts.OnError != nil {
		c.opts.OnError()
	}
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err.Error()
	if start.Before(c.okBegun) {
		return
	}
	c.retryAt = now.Add(c.opts.RetryAfter)
	if !c.down {
		c.down, c.downSince = true, now
		c.opts.Logger.Warn("redis lost: going on with this instance's own state", "err", err, "retry_every", c.opts.RetryAfter)
		select {
		case c.lost <- struct{}{}:
		default: // the watcher has been told already
		}
	}
}

// foreign ignores a value or message that Redis held under key (or on a
// channel) and that this instance will not use: not sealed with the
// fleet's secret for where it was found, malformed, or with times no
// instance would write. It counts as a cluster error (Status.Errors,
// Options.OnError) and is logged (at most once a minute), but does not
// open the breaker: Redis itself answered.
func (c *Client) foreign(key string, err error) {
	c.errors.Add(1)
	if c.opts.OnError != nil {
		c.opts.OnError()
	}
	c.mu.Lock()
	c.lastErr = "ignored a value under " + key + ": " + err.Error()
	c.mu.Unlock()
	c.malformed(key, err)
}

// malformed logs a value that Redis held and that could not be used, at
// most once a minute.
func (c *Client) malformed(key string, err error) {
	now := c.opts.Now().UnixNano()
	last := c.lastMalformed.Load()
	if now-last < int64(time.Minute) || !c.lastMalformed.CompareAndSwap(last, now) {
		return
	}
	c.opts.Logger.Warn("redis: ignoring a malformed or foreign value", "key", key, "err", err)
}

func (c *Client) key(parts ...string) string {
	k := c.opts.Prefix
	for i, p := range parts {
		if i > 0 {
			k += ":"
		}
		k += p
	}
	return k
}
