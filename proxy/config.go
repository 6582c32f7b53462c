package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"golang.org/x/crypto/bcrypt"

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

	proxyURL *url.URL // parsed Proxy
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

	line   int
	glob   *regexp.Regexp
	client []netip.Prefix
}

// SiteRule is one [[sites]] entry.
type SiteRule struct {
	Host        string // exact host or "*.example.com"
	Policy      string // "allow", "deny" or "robots"
	Agents      []string
	Reason      string
	MinInterval time.Duration

	line int
	host string // normalised: the exact host, or the suffix ".example.com"
}

// PolitenessConfig is the [politeness] table.
type PolitenessConfig struct {
	CrawlDelay  bool
	MinInterval time.Duration
	MaxDelay    time.Duration
	MaxWait     time.Duration
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
		Politeness: PolitenessConfig{MaxDelay: 30 * time.Second, MaxWait: 10 * time.Second},
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

// LoadConfig reads and validates a config file over the defaults. Every
// problem is reported at once: the error joins one *ConfigError per
// problem (see errors.Join), each naming its key and line.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig is LoadConfig on data read from path.
func ParseConfig(path string, data []byte) (*Config, error) {
	cfg := Default()
	cfg.Source = path
	var tree map[string]any
	if _, err := toml.Decode(string(data), &tree); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &ConfigError{File: path, Line: pe.Position.Line, Msg: pe.Message}
		}
		return nil, &ConfigError{File: path, Msg: err.Error()}
	}
	d := &decoder{file: path, lines: indexLines(string(data))}
	d.config(tree, cfg)
	cfg.validate(d) // keys that failed to decode keep their defaults

	if len(d.errs) > 0 {
		sort.SliceStable(d.errs, func(i, j int) bool { return d.errs[i].Line < d.errs[j].Line })
		errs := make([]error, len(d.errs))
		for i, e := range d.errs {
			errs[i] = e
		}
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// decoder turns the decoded TOML tree into a Config, collecting every
// error with its key path and line.
type decoder struct {
	file  string
	lines lineIndex
	errs  []*ConfigError
}

func (d *decoder) errorf(key string, format string, args ...any) {
	d.errs = append(d.errs, &ConfigError{File: d.file, Line: d.lines.line(key), Key: key, Msg: fmt.Sprintf(format, args...)})
}

// fields maps each known key of a table to a function that decodes it.
type fields map[string]func(key string, v any)

// table decodes m with fs, reporting unknown keys and keys that differ
// from a known key only by case.
func (d *decoder) table(prefix string, m map[string]any, fs fields) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if f, ok := fs[k]; ok {
			f(key, m[k])
			continue
		}
		for known := range fs {
			if strings.EqualFold(known, k) {
				d.errorf(key, "unknown key; keys are case-sensitive: did you mean %q?", known)
				goto next
			}
		}
		d.errorf(key, "unknown key")
	next:
	}
}

func (d *decoder) str(dst *string) func(string, any) {
	return func(key string, v any) {
		s, ok := v.(string)
		if !ok {
			d.errorf(key, "want a string, got %s", tomlType(v))
			return
		}
		*dst = s
	}
}

func (d *decoder) boolean(dst *bool) func(string, any) {
	return func(key string, v any) {
		b, ok := v.(bool)
		if !ok {
			d.errorf(key, "want true or false, got %s", tomlType(v))
			return
		}
		*dst = b
	}
}

func (d *decoder) integer(dst *int, lo, hi int) func(string, any) {
	return func(key string, v any) {
		n, ok := v.(int64)
		if !ok {
			d.errorf(key, "want an integer, got %s", tomlType(v))
			return
		}
		if n < int64(lo) || n > int64(hi) {
			d.errorf(key, "%d is out of range %d to %d", n, lo, hi)
			return
		}
		*dst = int(n)
	}
}

func (d *decoder) int64v(dst *int64, lo, hi int64) func(string, any) {
	return func(key string, v any) {
		n, ok := v.(int64)
		if !ok {
			d.errorf(key, "want an integer, got %s", tomlType(v))
			return
		}
		if n < lo || n > hi {
			d.errorf(key, "%d is out of range %d to %d", n, lo, hi)
			return
		}
		*dst = n
	}
}

// duration decodes a duration string such as "30s". A bare number is an
// error: it would be nanoseconds, which nobody means.
func (d *decoder) duration(dst *time.Duration, min time.Duration) func(string, any) {
	return func(key string, v any) {
		s, ok := v.(string)
		if !ok {
			if _, isNum := v.(int64); isNum {
				d.errorf(key, "%v is a bare number; write a duration with a unit, such as \"%vs\"", v, v)
				return
			}
			d.errorf(key, "want a duration such as \"30s\", got %s", tomlType(v))
			return
		}
		t, err := time.ParseDuration(s)
		if err != nil {
			d.errorf(key, "%q is not a duration such as \"30s\" or \"1h30m\"", s)
			return
		}
		if t < min {
			d.errorf(key, "%q is less than %v", s, min)
			return
		}
		*dst = t
	}
}

func (d *decoder) strs(dst *[]string) func(string, any) {
	return func(key string, v any) {
		list, ok := v.([]any)
		if !ok {
			d.errorf(key, "want an array of strings, got %s", tomlType(v))
			return
		}
		out := make([]string, 0, len(list))
		for i, x := range list {
			s, ok := x.(string)
			if !ok {
				d.errorf(fmt.Sprintf("%s[%d]", key, i), "want a string, got %s", tomlType(x))
				continue
			}
			out = append(out, s)
		}
		*dst = out
	}
}

func (d *decoder) sub(prefix string, v any, fs fields) {
	m, ok := v.(map[string]any)
	if !ok {
		d.errorf(prefix, "want a table, got %s", tomlType(v))
		return
	}
	d.table(prefix, m, fs)
}

// tables decodes an array of tables, calling each with its index.
func (d *decoder) tables(key string, v any, each func(i int, m map[string]any)) {
	list, ok := v.([]map[string]any)
	if !ok {
		d.errorf(key, "want an array of tables ([[%s]]), got %s", key, tomlType(v))
		return
	}
	for i, m := range list {
		each(i, m)
	}
}

func (d *decoder) config(tree map[string]any, c *Config) {
	d.table("", tree, fields{
		"listen":        d.str(&c.Listen),
		"mode":          d.str(&c.Mode),
		"default_agent": d.str(&c.DefaultAgent),
		"tls": func(k string, v any) {
			d.sub(k, v, fields{
				"mode":      d.str(&c.TLS.Mode),
				"ca_cert":   d.str(&c.TLS.CACert),
				"ca_key":    d.str(&c.TLS.CAKey),
				"state_dir": d.str(&c.TLS.StateDir),
			})
		},
		"upstream": func(k string, v any) {
			d.sub(k, v, fields{
				"proxy":         d.str(&c.Upstream.Proxy),
				"ca":            d.str(&c.Upstream.CA),
				"block_private": d.boolean(&c.Upstream.BlockPrivate),
				"timeout":       d.duration(&c.Upstream.Timeout, time.Millisecond),
			})
		},
		"robots": func(k string, v any) {
			r := &c.Robots
			d.sub(k, v, fields{
				"cache_ttl":         d.duration(&r.CacheTTL, time.Minute),
				"unreachable_limit": d.duration(&r.UnreachableLimit, time.Second),
				"retry_after":       d.duration(&r.RetryAfter, time.Second),
				"fetch_timeout":     d.duration(&r.FetchTimeout, 100*time.Millisecond),
				"max_bytes":         d.integer(&r.MaxBytes, 1024, 64<<20),
				"max_redirects":     d.integer(&r.MaxRedirects, 0, 20),
				"auth_errors":       d.str(&r.AuthErrors),
				"fetch_user_agent":  d.str(&r.FetchUserAgent),
				"cache_max_bytes":   d.int64v(&r.CacheMaxBytes, 1<<20, 1<<40),
				"max_fetches":       d.integer(&r.MaxFetches, 1, 1<<16),
			})
		},
		"audit": func(k string, v any) {
			d.sub(k, v, fields{
				"file":        d.str(&c.Audit.File),
				"log_allowed": d.boolean(&c.Audit.LogAllowed),
			})
		},
		"limits": func(k string, v any) {
			l := &c.Limits
			d.sub(k, v, fields{
				"read_header_timeout": d.duration(&l.ReadHeaderTimeout, time.Millisecond),
				"max_header_bytes":    d.integer(&l.MaxHeaderBytes, 1024, 16<<20),
				"idle_timeout":        d.duration(&l.IdleTimeout, time.Millisecond),
				"tunnel_idle_timeout": d.duration(&l.TunnelIdleTimeout, time.Millisecond),
				"max_connections":     d.integer(&l.MaxConnections, 1, 1<<20),
			})
		},
		"auth": func(k string, v any) {
			d.sub(k, v, fields{
				"users": func(k string, v any) {
					d.tables(k, v, func(i int, m map[string]any) {
						var u AuthUser
						d.table(fmt.Sprintf("%s[%d]", k, i), m, fields{
							"name":          d.str(&u.Name),
							"password_hash": d.str(&u.PasswordHash),
						})
						c.Auth.Users = append(c.Auth.Users, u)
					})
				},
			})
		},
		"agents": func(k string, v any) {
			d.tables(k, v, func(i int, m map[string]any) {
				a := AgentRule{line: d.lines.line(fmt.Sprintf("%s[%d]", k, i))}
				d.table(fmt.Sprintf("%s[%d]", k, i), m, fields{
					"user_agent": d.str(&a.UserAgent),
					"client":     d.strs(&a.Client),
					"user":       d.str(&a.User),
					"token":      d.str(&a.Token),
					"also":       d.strs(&a.Also),
				})
				c.Agents = append(c.Agents, a)
			})
		},
		"sites": func(k string, v any) {
			d.tables(k, v, func(i int, m map[string]any) {
				s := SiteRule{Policy: "robots", line: d.lines.line(fmt.Sprintf("%s[%d]", k, i))}
				d.table(fmt.Sprintf("%s[%d]", k, i), m, fields{
					"host":         d.str(&s.Host),
					"policy":       d.str(&s.Policy),
					"agents":       d.strs(&s.Agents),
					"reason":       d.str(&s.Reason),
					"min_interval": d.duration(&s.MinInterval, 0),
				})
				c.Sites = append(c.Sites, s)
			})
		},
		"politeness": func(k string, v any) {
			p := &c.Politeness
			d.sub(k, v, fields{
				"crawl_delay":  d.boolean(&p.CrawlDelay),
				"min_interval": d.duration(&p.MinInterval, 0),
				"max_delay":    d.duration(&p.MaxDelay, 0),
				"max_wait":     d.duration(&p.MaxWait, 0),
			})
		},
	})
}

func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case time.Time:
		return "a date"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case []map[string]any:
		return "an array of tables"
	}
	return fmt.Sprintf("%T", v)
}

// Validate checks the values of a config built in code; LoadConfig has
// already done so for a file.
func (c *Config) Validate() error {
	d := &decoder{file: "config"}
	c.validate(d)
	errs := make([]error, len(d.errs))
	for i, e := range d.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// validate checks values and fills the parsed forms (globs, prefixes,
// hosts).
func (c *Config) validate(d *decoder) {
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
	if p := c.Upstream.Proxy; p != "" {
		u, err := url.Parse(p)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			d.errorf("upstream.proxy", "%q is not an http:// or https:// proxy URL", redactURL(p))
		} else {
			c.Upstream.proxyURL = u
		}
	}
	if c.Upstream.CA != "" {
		if _, err := readPool(c.Upstream.CA); err != nil {
			d.errorf("upstream.ca", "%v", err)
		}
	}
	oneOf(d, "robots.auth_errors", c.Robots.AuthErrors, "allow", "disallow")
	if strings.TrimSpace(c.Robots.FetchUserAgent) == "" {
		d.errorf("robots.fetch_user_agent", "must not be empty")
	}
	if c.Politeness.MaxDelay <= 0 {
		d.errorf("politeness.max_delay", "must be more than 0s")
	}

	users := map[string]bool{}
	for i, u := range c.Auth.Users {
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

	for i := range c.Agents {
		a := &c.Agents[i]
		key := fmt.Sprintf("agents[%d]", i)
		if a.UserAgent == "" && len(a.Client) == 0 && a.User == "" {
			d.errorf(key, "needs at least one of user_agent, client, user to match on")
		}
		if a.Token == "" && len(a.Also) == 0 {
			d.errorf(key, "needs token or also: the tokens to obey")
		}
		if a.UserAgent != "" {
			g, err := compileGlob(a.UserAgent)
			if err != nil {
				d.errorf(key+".user_agent", "%v", err)
			}
			a.glob = g
		}
		a.client = a.client[:0]
		for j, s := range a.Client {
			p, err := parsePrefix(s)
			if err != nil {
				d.errorf(fmt.Sprintf("%s.client[%d]", key, j), "%q is not a CIDR or IP address", s)
				continue
			}
			a.client = append(a.client, p)
		}
		if a.User != "" && !users[a.User] {
			d.errorf(key+".user", "no [[auth.users]] entry is named %q", a.User)
		}
		if a.Token != "" && !robots.ValidToken(a.Token) {
			d.errorf(key+".token", "%q is not a product token (letters, \"_\" and \"-\")", a.Token)
		}
		for j, t := range a.Also {
			if !robots.ValidToken(t) {
				d.errorf(fmt.Sprintf("%s.also[%d]", key, j), "%q is not a product token (letters, \"_\" and \"-\")", t)
			}
		}
	}

	for i := range c.Sites {
		s := &c.Sites[i]
		key := fmt.Sprintf("sites[%d]", i)
		oneOf(d, key+".policy", s.Policy, "allow", "deny", "robots")
		h, err := siteHost(s.Host)
		if err != nil {
			d.errorf(key+".host", "%v", err)
		}
		s.host = h
		for j, t := range s.Agents {
			if !robots.ValidToken(t) {
				d.errorf(fmt.Sprintf("%s.agents[%d]", key, j), "%q is not a product token (letters, \"_\" and \"-\")", t)
			}
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

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// siteHost normalises a [[sites]] host as origins are normalised: an exact
// host, or "*.example.com", kept as ".example.com".
func siteHost(h string) (string, error) {
	if h == "" {
		return "", errors.New("must not be empty")
	}
	orig := h
	wild := strings.HasPrefix(h, "*.")
	if wild {
		h = h[2:]
	}
	if strings.ContainsAny(h, "*/:") && !strings.HasPrefix(h, "[") {
		return "", fmt.Errorf("%q is not a host or \"*.\" and a domain", orig)
	}
	o, err := fetch.OriginOf("http", h)
	if err != nil {
		return "", fmt.Errorf("%q is not a host: %v", orig, err)
	}
	if wild {
		return "." + o.Host, nil
	}
	return o.Host, nil
}

// compileGlob compiles a User-Agent glob: "*" any run of characters
// (spaces and "/" too), "?" one character, matched against the whole
// header, case-insensitively.
func compileGlob(g string) (*regexp.Regexp, error) {
	if strings.ContainsAny(g, "\r\n\x00") {
		return nil, fmt.Errorf("%q has a control character", g)
	}
	var b strings.Builder
	b.WriteString(`(?is)\A`)
	for _, r := range g {
		switch r {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`\z`)
	return regexp.Compile(b.String())
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

// lineIndex finds the line of a key in a TOML file: it tracks table
// headers ("[a]", "[[a]]", counting array entries) and "key =" lines.
type lineIndex map[string]int

func indexLines(data string) lineIndex {
	idx := lineIndex{}
	table := ""
	counts := map[string]int{}
	for n, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "[["):
			name := strings.TrimSpace(strings.Trim(strings.SplitN(line, "#", 2)[0], "[] \t"))
			table = fmt.Sprintf("%s[%d]", name, counts[name])
			counts[name]++
			idx[table] = n + 1
		case strings.HasPrefix(line, "["):
			table = strings.TrimSpace(strings.Trim(strings.SplitN(line, "#", 2)[0], "[] \t"))
			idx[table] = n + 1
		default:
			k, _, ok := strings.Cut(line, "=")
			if !ok || strings.HasPrefix(line, "#") {
				continue
			}
			k = strings.Trim(strings.TrimSpace(k), `"'`)
			key := k
			if table != "" {
				key = table + "." + k
			}
			if _, seen := idx[key]; !seen {
				idx[key] = n + 1
			}
		}
	}
	return idx
}

// line returns the line of key, or of the nearest enclosing table that has
// one, or 0.
func (idx lineIndex) line(key string) int {
	for key != "" {
		if n, ok := idx[key]; ok {
			return n
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}
