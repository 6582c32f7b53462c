// Package config is robotsgate's configuration: the Config type of
// docs/configuration.md's keys, its built-in defaults, and the TOML file it is read
// from, with the line of every key. It checks types only (a string where a
// duration goes, an unknown key); policy.Compile checks values, and is the
// only way to a config that can decide anything.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/robotsgate/robotsgate/internal/statefile"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// Config is robotsgate's configuration: docs/configuration.md's keys. Default returns
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
	Identity     IdentityConfig
	Payments     PaymentsConfig
	Evidence     EvidenceConfig

	// Source is the file the config was read from; "" for the defaults.
	Source string
	// lines finds each key's line in Source.
	lines lineIndex
	// unread holds the keys that reading Source found a problem with.
	unread []string
}

// TLSConfig is the [tls] table.
type TLSConfig struct {
	Mode     string // "mitm" or "tunnel"
	CACert   string // "" = <state_dir>/ca.pem
	CAKey    string // "" = <state_dir>/ca-key.pem
	StateDir string // "" = $XDG_DATA_HOME/robotsgate or ~/.local/share/robotsgate
	// HTTP2 offers h2 beside http/1.1 by ALPN to clients inside MITM
	// tunnels (true by default); false offers HTTP/1.x only.
	HTTP2 bool
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
	// BlockStyle, when set ("plain" or "browser"), answers the matching
	// requests' blocks in that style rather than [responses] block_style.
	BlockStyle string
}

// SiteRule is one [[sites]] entry.
type SiteRule struct {
	Host        string // exact host or "*.example.com"
	Policy      string // "allow", "deny" or "robots"
	Agents      []string
	Reason      string
	MinInterval time.Duration
	// SignatureAgentForm is the [identity] signature_agent_form for the
	// requests the rule matches; "": [identity]'s.
	SignatureAgentForm string
}

// ClusterConfig is the [cluster] table: state shared by several instances
// through Redis (docs/operations.md, "Running several instances"). A change
// needs a restart.
type ClusterConfig struct {
	Redis     string   // redis:// or rediss:// URL of a single server
	Sentinels []string // or the Sentinels ("host:26379") of a primary named Master
	Master    string   // the Sentinel master name
	Nodes     []string // or the nodes ("host:7000") of a Redis Cluster
	Password  string   // for Sentinels' primary and replicas, or Nodes (a URL carries its own)
	// PasswordFile names a file holding Password instead (trailing line
	// breaks are not part of it), as SecretFile does the secret: a
	// Kubernetes Secret's file.
	PasswordFile string
	// SentinelAuth sends the password to the Sentinels too, for Sentinels
	// that require it (the Bitnami chart's auth.sentinel, its default).
	SentinelAuth bool
	// OpTimeout bounds each call to Redis, connecting included: past it,
	// the instance goes on alone for a while (the breaker).
	OpTimeout time.Duration
	KeyPrefix string // every key and channel starts with it
	// Secret keys the MAC on every value the fleet shares through Redis
	// (MinSecretBytes or more, the same on every instance). With
	// Redis, exactly one of Secret and SecretFile is required. Never
	// printed.
	Secret string
	// SecretFile names a file holding the secret (trailing line breaks
	// are not part of it): a regular file, at most maxSecretFile bytes,
	// whose mode grants nothing to group or others. Symbolic links are
	// followed (a Kubernetes Secret's files are links).
	SecretFile string
}

// IdentityConfig is the [identity] table: Web Bot Auth (docs/identity.md,
// "Signing every request (Web Bot Auth)"), off when SignatureAgent is empty.
type IdentityConfig struct {
	// SignatureAgent is the https URL the key directory is published at,
	// named in every signed request's Signature-Agent field.
	SignatureAgent string
	// KeyFile is the Ed25519 private key (PEM, mode 0600); "" is
	// <state_dir>/identity-key.pem, made on first start.
	KeyFile string
	// Validity is expires - created of each signature.
	Validity time.Duration
	// SignatureAgentForm is how Signature-Agent is sent: "dictionary"
	// (sig1="URL", draft-ietf-webbotauth-httpsig-protocol-01) or
	// "string" (a bare quoted URL, for verifiers that predate it). A
	// [[sites]] rule's own wins for the requests it matches.
	SignatureAgentForm string
	// Card is the [identity.card] table: the Signature Agent Card; off
	// when its client_id is empty.
	Card CardConfig
}

// CardConfig is the [identity.card] table: the Signature Agent Card of
// draft-meunier-webbotauth-registry-04 (docs/identity.md, "The Signature
// Agent Card"), served at client_id's path on the proxy's own listener;
// off when ClientID is empty. Each key is the member of the card it
// fills, named as the draft names it; "" (or none) leaves it out.
type CardConfig struct {
	ClientID   string   // client_id: the https URL the card is published at
	ClientName string   // client_name
	ClientURI  string   // client_uri: a page about the bot
	LogoURI    string   // logo_uri
	Contacts   []string // contacts: URIs ("mailto:bots@example.com")
	// Keys is how the card gives the key directory's keys: "jwks"
	// (inline, the card signed) or "jwks_uri" (signature_agent's URL).
	Keys       string
	WebBotAuth WebBotAuthConfig
}

// WebBotAuthConfig is the [identity.card.web_bot_auth] table: the card's
// web_bot_auth members, keyed by the draft's names (the key tag, which
// Changed reports).
type WebBotAuthConfig struct {
	ExpectedUserAgent string `key:"expected-user-agent"`
	// RFC9309ProductToken "" is the token robotsgate obeys for requests
	// with ExpectedUserAgent (policy.Compile works it out).
	RFC9309ProductToken string `key:"rfc9309-product-token"`
	// RFC9309Compliance nil is true in enforce mode, false in report mode.
	RFC9309Compliance *bool    `key:"rfc9309-compliance"`
	Trigger           string   // "fetcher" or "crawler"
	Purpose           string   // the use of what is fetched (free text: the draft names no vocabulary yet)
	TargetedContent   string   `key:"targeted-content"`
	RateControl       string   `key:"rate-control"`
	RateExpectation   string   `key:"rate-expectation"`
	KnownURLs         []string `key:"known-urls"`
	IPsURI            string   `key:"ips_uri"`
}

// KeyPath returns the identity key's file: KeyFile, or its place in
// stateDir.
func (c *IdentityConfig) KeyPath(stateDir string) string {
	if c.KeyFile != "" {
		return c.KeyFile
	}
	return filepath.Join(stateDir, "identity-key.pem")
}

// PaymentsConfig is the [payments] table: pay-per-crawl (HTTP 402), off
// when MaxPrice is empty. Amounts are "<currency> <decimal>" strings.
type PaymentsConfig struct {
	MaxPrice  string // the most paid for one request: "USD 0.01"
	Budget    string // the most spent per UTC day, required with MaxPrice; by the fleet with [cluster]
	KeyPrefix string // Redis keys of the fleet's budget
}

// EvidenceConfig is the [evidence] table (docs/auditors.md): the copies
// of sites' files that decided, kept by SHA-256, and the signed
// checkpoints of the audit log's chain.
type EvidenceConfig struct {
	// Enabled keeps copies and writes checkpoints; it has effect only
	// with an audit file (On).
	Enabled bool
	// Dir is the store of copies; "" is <state_dir>/evidence.
	Dir string
	// Retention: a copy that no audit record has named for this long is
	// removed.
	Retention time.Duration
	// MaxBytes bounds the store; past it the copies named longest ago go
	// first.
	MaxBytes int64
	// CheckpointInterval: a signed checkpoint line at least this often
	// (while records are written), and one at shutdown.
	CheckpointInterval time.Duration
}

// EvidenceOn reports whether evidence is kept: enabled, with an audit file.
func (c *Config) EvidenceOn() bool { return c.Evidence.Enabled && c.Audit.File != "" }

// DirPath returns the store's directory: Dir, or its place in stateDir.
func (c *EvidenceConfig) DirPath(stateDir string) string {
	if c.Dir != "" {
		return c.Dir
	}
	return filepath.Join(stateDir, "evidence")
}

// Enabled reports whether a fleet's Redis is named: a server, Sentinels
// or a Cluster's nodes. "" for all: this instance alone.
func (c *ClusterConfig) Enabled() bool {
	return c.Redis != "" || len(c.Sentinels) > 0 || len(c.Nodes) > 0
}

// Equal reports whether c and o name the same Redis the same way (for a
// reload, which cannot change it).
func (c *ClusterConfig) Equal(o *ClusterConfig) bool {
	return c.Redis == o.Redis && slices.Equal(c.Sentinels, o.Sentinels) && c.Master == o.Master &&
		slices.Equal(c.Nodes, o.Nodes) && c.Password == o.Password && c.PasswordFile == o.PasswordFile && c.SentinelAuth == o.SentinelAuth && c.OpTimeout == o.OpTimeout && c.KeyPrefix == o.KeyPrefix &&
		c.Secret == o.Secret && c.SecretFile == o.SecretFile
}

// maxSecretFile bounds what is read of [cluster] secret_file.
const maxSecretFile = 4 << 10

// MinSecretBytes is the shortest [cluster] secret ReadSecret accepts: 256
// bits, what the fleet's seals are keyed with. The fleet client refuses a
// shorter one too (cluster.MinSecretBytes; a cluster test holds the two
// equal): config does not link the Redis client.
const MinSecretBytes = 32

// ReadPassword returns the password of Sentinels' primary or of Nodes:
// Password, or what PasswordFile holds without its trailing line breaks
// (a regular file that grants nothing to others, links followed); "" when
// neither is set.
func (c *ClusterConfig) ReadPassword() (string, error) {
	switch {
	case c.Password != "" && c.PasswordFile != "":
		return "", errors.New("password and password_file are both set: give one")
	case c.PasswordFile == "":
		return c.Password, nil
	}
	b, mode, err := statefile.ReadFollowing(c.PasswordFile, maxSecretFile)
	if err != nil {
		return "", fmt.Errorf("read the Redis password: %w", err)
	}
	if mode.Perm()&0o027 != 0 {
		return "", fmt.Errorf("%s is mode %#o: a password file must grant nothing to others, nor write to its group (chmod 0400)", c.PasswordFile, mode.Perm())
	}
	return string(bytes.TrimRight(b, "\r\n")), nil
}

// ReadSecret returns the fleet's secret: Secret, or what SecretFile holds
// without its trailing line breaks. It fails when neither is set, both
// are, the file is not a regular file, grants anything to others or write
// to its group (read by its group is allowed: a Kubernetes Secret mounted
// for a pod with an fsGroup is 0440), or the secret is shorter than
// MinSecretBytes. Its errors never show the
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
		if mode.Perm()&0o027 != 0 {
			// Read by the group is allowed: a Kubernetes Secret mounted
			// for a pod with an fsGroup is 0440.
			return nil, fmt.Errorf("%s is mode %#o: a secret file must grant nothing to others, nor write to its group (chmod 0400)", c.SecretFile, mode.Perm())
		}
		secret = bytes.TrimRight(b, "\r\n")
	default:
		return nil, errors.New("no secret: set secret or secret_file")
	}
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("a secret of %d bytes: want at least %d (make one with: head -c 32 /dev/urandom | base64)", len(secret), MinSecretBytes)
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
	// 503 with Retry-After (docs/decision.md step 8), pacing on or off.
	HonourRetryAfter bool
	MaxBackoff       time.Duration // the longest such back-off
}

// ResponsesConfig is the [responses] table: how the proxy's own answers
// are written.
type ResponsesConfig struct {
	// BlockStyle is "plain" (every block is the plain-text 403 or 503) or
	// "browser" (a blocked sub-resource gets an empty answer of its type
	// and a blocked page an HTML explanation).
	BlockStyle string
}

// DefaultClusterOpTimeout is [cluster] op_timeout's default: the fleet
// client's own (cluster.DefaultOpTimeout; a cluster test holds the two
// equal).
const DefaultClusterOpTimeout = 250 * time.Millisecond

// Default returns the built-in configuration.
func Default() *Config {
	return &Config{
		Listen:       "127.0.0.1:8080",
		Mode:         "enforce",
		DefaultAgent: "*",
		TLS:          TLSConfig{Mode: "mitm", HTTP2: true},
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
		Politeness: PolitenessConfig{CrawlDelay: true, MaxDelay: 30 * time.Second, MaxWait: 2 * time.Minute, HonourRetryAfter: true, MaxBackoff: 10 * time.Minute},
		Cluster:    ClusterConfig{KeyPrefix: "robotsgate:", OpTimeout: DefaultClusterOpTimeout},
		Responses:  ResponsesConfig{BlockStyle: "plain"},
		Identity:   IdentityConfig{Validity: 5 * time.Minute, SignatureAgentForm: "dictionary", Card: CardConfig{Keys: "jwks"}},
		Payments:   PaymentsConfig{KeyPrefix: "robotsgate:"},
		Evidence: EvidenceConfig{
			Enabled:            true,
			Retention:          400 * 24 * time.Hour,
			MaxBytes:           1 << 30,
			CheckpointInterval: time.Minute,
		},
	}
}

// StateDir returns the directory of robotsgate's state (the CA, last
// good robots.txt copies), per [tls] state_dir.
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
