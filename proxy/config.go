package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/internal/statefile"
	"github.com/robotsgate/robotsgate/proxy/auth"
	"github.com/robotsgate/robotsgate/proxy/mitm"
	"github.com/robotsgate/robotsgate/proxy/upstream"
	"github.com/robotsgate/robotsgate/robots"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// Config is robotsgate's configuration: DESIGN.md's keys. Default returns
// the built-in values, which config.toml in the repository documents.
type Config struct {
	Listen       string
	Mode         string // "enforce" or "report"
	DefaultAgent string // token when the User-Agent header yields none
	TLS          TLSConfig
	Upstream     UpstreamConfig
	Robots       RobotsConfig
	Audit        AuditConfig
	Limits       LimitsConfig
	Auth         AuthConfig
	Agents       []AgentRule
	Sites        []SiteRule
	Politeness   PolitenessConfig
	Cluster      ClusterConfig
	Responses    ResponsesConfig

	// Source is the file the config was read from; "" for the defaults.
	Source string
}

// TLSConfig is the [tls] table.
type TLSConfig struct {
	Mode     string // "mitm" or "tunnel"
	CACert   string // "" = <state_dir>/ca.pem
	CAKey    string // "" = <state_dir>/ca-key.pem
	StateDir string // "" = $XDG_DATA_HOME/robotsgate or ~/.local/share/robotsgate
}

// UpstreamConfig is the [upstream] table.
type UpstreamConfig struct {
	Proxy        string // next-hop proxy URL; "" = direct
	CA           string // extra PEM roots for upstream TLS
	BlockPrivate bool
	Timeout      time.Duration
}

// RobotsConfig is the [robots] table.
type RobotsConfig struct {
	CacheTTL         time.Duration
	UnreachableLimit time.Duration
	RetryAfter       time.Duration
	FetchTimeout     time.Duration
	MaxBytes         int
	MaxRedirects     int
	AuthErrors       string // "allow" or "disallow"
	FetchUserAgent   string // "VERSION" is replaced by the build version
	CacheMaxBytes    int64
	MaxFetches       int // robots.txt fetches in flight at once
}

// AuditConfig is the [audit] table.
type AuditConfig struct {
	File       string // "" = stdout
	LogAllowed bool
}

// LimitsConfig is the [limits] table.
type LimitsConfig struct {
	ReadHeaderTimeout time.Duration
	MaxHeaderBytes    int
	IdleTimeout       time.Duration
	TunnelIdleTimeout time.Duration
	MaxConnections    int
}

// AuthConfig is the [auth] table.
type AuthConfig struct {
	Users []AuthUser
}

// AuthUser is one [[auth.users]] entry.
type AuthUser struct {
	Name         string
	PasswordHash string
}

// AgentRule is one [[agents]] entry: which requests it matches and the
// tokens they obey.
type AgentRule struct {
	UserAgent string   // glob on the whole header, case-insensitive
	Client    []string // CIDRs or IPs
	User      string   // authenticated proxy user
	Token     string
	Also      []string
	Purpose   []string // purposes declared for matching requests: "ai-train", "ai-input", "search"
}

// SiteRule is one [[sites]] entry.
type SiteRule struct {
	Host        string // exact host or "*.example.com"
	Policy      string // "allow", "deny" or "robots"
	Agents      []string
	Reason      string
	MinInterval time.Duration
}

// ClusterConfig is the [cluster] table: state shared by several instances
// through Redis (DESIGN "Fleet"). A change needs a restart.
type ClusterConfig struct {
	Redis     string // redis:// or rediss:// URL; "" = this instance alone
	KeyPrefix string // every key and channel starts with it
	// Secret keys the MAC on every value the fleet shares through Redis
	// (cluster.MinSecretBytes or more, the same on every instance). With
	// Redis, exactly one of Secret and SecretFile is required. Never
	// printed.
	Secret string
	// SecretFile names a file holding the secret (trailing line breaks
	// are not part of it): a regular file, at most maxSecretFile bytes,
	// whose mode grants nothing to group or others. Symbolic links are
	// followed (a Kubernetes Secret's files are links).
	SecretFile string
}

// maxSecretFile bounds what is read of [cluster] secret_file.
const maxSecretFile = 4 << 10

// ReadSecret returns the fleet's secret: Secret, or what SecretFile holds
// without its trailing line breaks. It fails when neither is set, both
// are, the file is not a regular file readable by its owner only, or the
// secret is shorter than cluster.MinSecretBytes. Its errors never show the
// secret.
func (c *ClusterConfig) ReadSecret() ([]byte, error) {
	var secret []byte
	switch {
	case c.Secret != "" && c.SecretFile != "":
		return nil, errors.New("secret and secret_file are both set: give one")
	case c.Secret != "":
		secret = []byte(c.Secret)
	case c.SecretFile != "":
		b, mode, err := statefile.ReadFollowing(c.SecretFile, maxSecretFile)
		if err != nil {
			return nil, fmt.Errorf("read the cluster secret: %w", err)
		}
		if mode.Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%s is mode %#o: a secret file must grant nothing to group or others (chmod 0400)", c.SecretFile, mode.Perm())
		}
		secret = bytes.TrimRight(b, "\r\n")
	default:
		return nil, errors.New("no secret: set secret or secret_file")
	}
	if len(secret) < cluster.MinSecretBytes {
		return nil, fmt.Errorf("a secret of %d bytes: want at least %d (make one with: head -c 32 /dev/urandom | base64)", len(secret), cluster.MinSecretBytes)
	}
	return secret, nil
}

// PolitenessConfig is the [politeness] table.
type PolitenessConfig struct {
	CrawlDelay  bool
	MinInterval time.Duration
	MaxDelay    time.Duration
	MaxWait     time.Duration
	// HonourRetryAfter backs a host off when its origin answers 429, or
	// 503 with Retry-After (DESIGN step 8), pacing on or off.
	HonourRetryAfter bool
	MaxBackoff       time.Duration // the longest such back-off
}

// ResponsesConfig is the [responses] table: how the proxy's own answers
// are written.
type ResponsesConfig struct {
	// BlockStyle is BlockStylePlain (every block is the plain-text 403 or
	// 503) or BlockStyleBrowser (a blocked sub-resource gets an empty answer
	// of its type and a blocked page an HTML explanation; see browser.go).
	BlockStyle string
}

// Default returns the built-in configuration.
func Default() *Config {
	return &Config{
		Listen:       "127.0.0.1:8080",
		Mode:         "enforce",
		DefaultAgent: "*",
		TLS:          TLSConfig{Mode: "mitm"},
		Upstream:     UpstreamConfig{BlockPrivate: true, Timeout: 30 * time.Second},
		Robots: RobotsConfig{
			CacheTTL:         fetch.DefaultTTL,
			UnreachableLimit: fetch.DefaultUnreachableLimit,
			RetryAfter:       fetch.DefaultRetryAfter,
			FetchTimeout:     fetch.DefaultFetchTimeout,
			MaxBytes:         fetch.DefaultMaxBytes,
			MaxRedirects:     fetch.DefaultMaxRedirects,
			AuthErrors:       "allow",
			FetchUserAgent:   "robotsgate/VERSION (+https://github.com/robotsgate/robotsgate)",
			CacheMaxBytes:    fetch.DefaultCacheMaxBytes,
			MaxFetches:       fetch.DefaultMaxFetches,
		},
		Limits: LimitsConfig{
			ReadHeaderTimeout: 10 * time.Second,
			MaxHeaderBytes:    65536,
			IdleTimeout:       90 * time.Second,
			TunnelIdleTimeout: 5 * time.Minute,
			MaxConnections:    4096,
		},
		Politeness: PolitenessConfig{MaxDelay: 30 * time.Second, MaxWait: 2 * time.Minute, HonourRetryAfter: true, MaxBackoff: 10 * time.Minute},
		Cluster:    ClusterConfig{KeyPrefix: "robotsgate:"},
		Responses:  ResponsesConfig{BlockStyle: BlockStylePlain},
	}
}

// ConfigError is one problem in a config file: where, which key, what.
type ConfigError struct {
	File string
	Line int    // 0 when unknown
	Key  string // dotted key path, e.g. "robots.cache_ttl" or "agents[2].token"
	Msg  string
}

func (e *ConfigError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Key == "" {
		return loc + ": " + e.Msg
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Key, e.Msg)
}

// Validate reports every problem of c, as Compile does.
func (c *Config) Validate() error {
	_, err := Compile(c)
	return err
}

// Compile checks c and compiles it into a Policy: the only way to get one,
// so that no unchecked config can decide a request. Every problem is
// reported at once: the error joins one *ConfigError per problem, each
// naming its key (ParseConfig, which compiles what it reads, names lines
// too). The Policy
// keeps a copy of c: changing c afterwards changes nothing.
func Compile(c *Config) (*Policy, error) {
	file := c.Source
	if file == "" {
		file = "config"
	}
	d := &decoder{file: file}
	p := compile(c, d)
	if err := d.err(); err != nil {
		return nil, err
	}
	return p, nil
}

// compile checks c's values into d and builds the Policy (which is only
// usable when d holds no error).
func compile(c *Config, d *decoder) *Policy {
	p := &Policy{cfg: *c}
	p.cfg.Agents, p.cfg.Sites = slices.Clone(c.Agents), slices.Clone(c.Sites)
	p.cfg.Auth.Users = slices.Clone(c.Auth.Users)
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		d.errorf("listen", "%q is not host:port", c.Listen)
	}
	oneOf(d, "mode", c.Mode, "enforce", "report")
	if c.DefaultAgent != "*" && !robots.ValidToken(c.DefaultAgent) {
		d.errorf("default_agent", "%q is not \"*\" or a product token (letters, \"_\" and \"-\")", c.DefaultAgent)
	}
	oneOf(d, "tls.mode", c.TLS.Mode, "mitm", "tunnel")
	if (c.TLS.CACert == "") != (c.TLS.CAKey == "") {
		d.errorf("tls.ca_cert", "ca_cert and ca_key go together: give both or neither")
	}
	if c.Upstream.Proxy != "" {
		u, err := upstream.ProxyURL(c.Upstream.Proxy)
		if err != nil {
			d.errorf("upstream.proxy", "%v", err)
		}
		p.upstreamProxy = u
	}
	if c.Upstream.CA != "" {
		if _, err := upstream.ReadPool(c.Upstream.CA); err != nil {
			d.errorf("upstream.ca", "%v", err)
		}
	}
	oneOf(d, "robots.auth_errors", c.Robots.AuthErrors, "allow", "disallow")
	if c.Cluster.Redis != "" {
		if err := cluster.ParseURL(c.Cluster.Redis); err != nil {
			d.errorf("cluster.redis", "%q is not a Redis URL (redis://host:6379/0): %v", redactURL(c.Cluster.Redis), err)
		}
	}
	compileSecret(&c.Cluster, d)
	if strings.TrimSpace(c.Robots.FetchUserAgent) == "" {
		d.errorf("robots.fetch_user_agent", "must not be empty")
	}
	if c.Robots.RetryAfter > 24*time.Hour {
		d.errorf("robots.retry_after", "%v is more than 24h: a failure mark further ahead is taken for one robotsgate did not write", c.Robots.RetryAfter)
	}
	if c.Politeness.MaxDelay <= 0 {
		d.errorf("politeness.max_delay", "must be more than 0s")
	}
	if c.Politeness.MaxBackoff <= 0 {
		d.errorf("politeness.max_backoff", "must be more than 0s")
	}
	if c.Politeness.MaxWait < c.Politeness.MaxDelay {
		d.errorf("politeness.max_wait", "%v is less than max_delay (%v): a request paced max_delay apart would be refused, never held", c.Politeness.MaxWait, c.Politeness.MaxDelay)
	}
	oneOf(d, "responses.block_style", c.Responses.BlockStyle, BlockStylePlain, BlockStyleBrowser)
	users := compileUsers(c.Auth.Users, d)
	for i := range p.cfg.Agents {
		p.agentRules = append(p.agentRules, compileAgent(&p.cfg.Agents[i], fmt.Sprintf("agents[%d]", i), users, d))
	}
	for i := range p.cfg.Sites {
		p.siteRules = append(p.siteRules, compileSite(&p.cfg.Sites[i], fmt.Sprintf("sites[%d]", i), d))
	}
	authUsers := make([]auth.User, len(c.Auth.Users))
	for i, u := range c.Auth.Users {
		authUsers[i] = auth.User{Name: u.Name, PasswordHash: u.PasswordHash}
	}
	p.auth = auth.New(authUsers, time.Now)
	p.pacing = pacingActive(c)
	return p
}

// compileSecret checks [cluster] secret and secret_file: exactly one with
// redis, neither without it, and a secret ReadSecret accepts. No message
// shows the secret.
func compileSecret(c *ClusterConfig, d *decoder) {
	key := "cluster.secret"
	if c.SecretFile != "" && c.Secret == "" {
		key = "cluster.secret_file"
	}
	switch {
	case c.Redis == "" && (c.Secret != "" || c.SecretFile != ""):
		d.errorf(key, "set without cluster.redis: there is no fleet to share it with")
	case c.Redis == "":
	case c.Secret == "" && c.SecretFile == "":
		d.errorf(key, "required with cluster.redis: a secret of at least %d bytes (secret), or a file holding one (secret_file), the same on every instance", cluster.MinSecretBytes)
	default:
		if _, err := c.ReadSecret(); err != nil {
			d.errorf(key, "%v", err)
		}
	}
}

// compileUsers checks [[auth.users]] and returns their names.
func compileUsers(list []AuthUser, d *decoder) map[string]bool {
	users := map[string]bool{}
	for i, u := range list {
		key := fmt.Sprintf("auth.users[%d]", i)
		switch {
		case u.Name == "":
			d.errorf(key+".name", "must not be empty")
		case strings.ContainsAny(u.Name, ":\r\n"):
			d.errorf(key+".name", "%q has a colon or line break", u.Name)
		case users[u.Name]:
			d.errorf(key+".name", "user %q is listed twice", u.Name)
		}
		users[u.Name] = true
		if _, err := bcrypt.Cost([]byte(u.PasswordHash)); err != nil {
			d.errorf(key+".password_hash", "not a bcrypt hash (make one with robotsgate hash-password)")
		}
	}
	return users
}

// checkTokens reports the entries of toks that are not product tokens.
func checkTokens(d *decoder, key string, toks []string) {
	for j, t := range toks {
		if !robots.ValidToken(t) {
			d.errorf(fmt.Sprintf("%s[%d]", key, j), "%q is not a product token (letters, \"_\" and \"-\")", t)
		}
	}
}

func oneOf(d *decoder, key, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	d.errorf(key, "%q is not one of %q", v, allowed)
}

// redactURL hides a URL's password, for messages.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparsable)"
}

// CAFiles returns the MITM CA's files: [tls] ca_cert and ca_key, or
// ca.pem and ca-key.pem in the state directory.
func (c *Config) CAFiles() (mitm.Files, error) {
	if c.TLS.CACert != "" {
		return mitm.Files{Cert: c.TLS.CACert, Key: c.TLS.CAKey, Given: true}, nil
	}
	dir, err := c.StateDir()
	if err != nil {
		return mitm.Files{}, err
	}
	return mitm.StateFiles(dir), nil
}

// StateDir returns the directory for the CA, per [tls] state_dir.
func (c *Config) StateDir() (string, error) {
	if c.TLS.StateDir != "" {
		return c.TLS.StateDir, nil
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "robotsgate"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the state directory: %w (set tls.state_dir)", err)
	}
	return filepath.Join(home, ".local", "share", "robotsgate"), nil
}
