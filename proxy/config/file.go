package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Load reads a config file over the defaults (see Parse).
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes data, the TOML of the config file at path, over the
// defaults. Unknown keys, keys that differ from a known key only by case,
// values of the wrong type and durations written as bare numbers are
// errors, all reported at once: the error joins one *Error per problem,
// each naming its key and line. With such errors the Config is still
// returned, decoded as far as it could be (a key that failed keeps its
// default), so that its values can be checked too (policy.Compile); with
// a TOML syntax error it is nil.
func Parse(path string, data []byte) (*Config, error) {
	cfg := Default()
	cfg.Source = path
	var tree map[string]any
	if _, err := toml.Decode(string(data), &tree); err != nil {
		return nil, syntaxError(path, data, err)
	}
	cfg.lines = indexLines(string(data))
	d := &decoder{p: cfg.Problems()}
	d.config(tree, cfg)
	return cfg, d.p.Err()
}

// syntaxError is err, TOML's error for data (the file at path), as an
// *Error that names the line and the key being read: the one written on
// that line, else the last key the parser read, else none. An error at
// the newline that ends a line (a table header left open: "[tls") is that
// line's, not the next one's, where the parser may stand when it sees it.
func syntaxError(path string, data []byte, err error) *Error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return &Error{File: path, Msg: err.Error()}
	}
	start := min(max(pe.Position.Start, 0), len(data))
	line := pe.Position.Line
	if line < 1 || start < len(data) && data[start] == '\n' {
		// At the end of the input TOML gives only the offset; at a
		// newline, the line after it for some errors (an open header).
		line = 1 + bytes.Count(data[:start], []byte("\n"))
	}
	msg := strings.NewReplacer(`but got '\n' instead`, "but the line ends", `but found '\n' instead`, "but the line ends",
		`but got '\x00' instead`, "but the file ends").Replace(pe.Message)
	key := indexLines(string(data)).keyOn(line)
	if key == "" {
		key = pe.LastKey
	}
	return &Error{File: path, Line: line, Key: key, Msg: "TOML syntax: " + msg}
}

// decoder turns the decoded TOML tree into a Config, collecting every
// error with its key path and line.
type decoder struct {
	p *Problems
}

// errorf records a problem of reading key, which keeps its default.
func (d *decoder) errorf(key string, format string, args ...any) {
	d.p.add(key, fmt.Sprintf(format, args...))
	d.p.c.unread = append(d.p.c.unread, key)
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
		d.unknown(key, k, m[k], fs)
	}
}

// unknown reports key, whose last part k is none of fs's keys: with the
// key it differs from only by case, or else the nearest by spelling
// (suggest). An unknown key is not unread: it was never a value that kept
// its default, and the checks of its table still speak.
func (d *decoder) unknown(key, k string, v any, fs fields) {
	what := "key"
	switch v.(type) {
	case map[string]any, []map[string]any:
		what = "table"
	}
	for known := range fs {
		if strings.EqualFold(known, k) {
			d.p.add(key, fmt.Sprintf("unknown %s; keys are case-sensitive: did you mean %q?", what, known))
			return
		}
	}
	if near := suggest(k, fs); near != "" {
		d.p.add(key, fmt.Sprintf("unknown %s; did you mean %s?", what, near))
		return
	}
	d.p.add(key, fmt.Sprintf("unknown %s", what))
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

func (d *decoder) integer(dst *int) func(string, any) {
	return func(key string, v any) {
		n, ok := v.(int64)
		if !ok {
			d.errorf(key, "want an integer, got %s", tomlType(v))
			return
		}
		if n < math.MinInt32 || n > math.MaxInt32 {
			d.errorf(key, "%d is out of range", n)
			return
		}
		*dst = int(n)
	}
}

func (d *decoder) int64v(dst *int64) func(string, any) {
	return func(key string, v any) {
		n, ok := v.(int64)
		if !ok {
			d.errorf(key, "want an integer, got %s", tomlType(v))
			return
		}
		*dst = n
	}
}

// duration decodes a duration string such as "30s". A bare number is an
// error: it would be nanoseconds, which nobody means.
func (d *decoder) duration(dst *time.Duration) func(string, any) {
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
		*dst = t
	}
}

// days decodes a duration that may be written in days ("400d") as well
// as any duration() takes, up to maxDays.
func (d *decoder) days(dst *time.Duration) func(string, any) {
	const want = `a number of days such as "400d" or a duration such as "720h"`
	return func(key string, v any) {
		s, ok := v.(string)
		if !ok {
			if n, isNum := v.(int64); isNum {
				d.errorf(key, "%d is a bare number; write %s (\"%dd\")", n, want, n)
				return
			}
			d.errorf(key, "want %s, got %s", want, tomlType(v))
			return
		}
		if n, found := strings.CutSuffix(s, "d"); found {
			days, err := strconv.ParseUint(n, 10, 32)
			switch {
			case err != nil || days == 0:
				d.errorf(key, "%q is not %s", s, want)
			case days > maxDays:
				d.errorf(key, "%q is more than %dd (a hundred years)", s, maxDays)
			default:
				*dst = time.Duration(days) * 24 * time.Hour
			}
			return
		}
		t, err := time.ParseDuration(s)
		if err != nil {
			d.errorf(key, "%q is not %s", s, want)
			return
		}
		*dst = t
	}
}

// maxDays bounds a duration written in days: far past any retention, and
// far from time.Duration's 292 years.
const maxDays = 36500

func (d *decoder) strs(dst *[]string) func(string, any) {
	return func(key string, v any) {
		list, ok := v.([]any)
		if !ok {
			d.errorf(key, "want an array of strings, got %s", tomlType(v))
			return
		}
		var out []string // an empty array is none, as the defaults have it
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
	section := func(fs func() fields) func(string, any) {
		return func(k string, v any) { d.sub(k, v, fs()) }
	}
	d.table("", tree, fields{
		"listen":        d.str(&c.Listen),
		"mode":          d.str(&c.Mode),
		"default_agent": d.str(&c.DefaultAgent),
		"tls":           section(func() fields { return d.tlsFields(&c.TLS) }),
		"upstream":      section(func() fields { return d.upstreamFields(&c.Upstream) }),
		"robots":        section(func() fields { return d.robotsFields(&c.Robots) }),
		"audit":         section(func() fields { return d.auditFields(&c.Audit) }),
		"limits":        section(func() fields { return d.limitsFields(&c.Limits) }),
		"politeness":    section(func() fields { return d.politenessFields(&c.Politeness) }),
		"cluster": section(func() fields {
			return fields{
				"redis":         d.str(&c.Cluster.Redis),
				"sentinels":     d.strs(&c.Cluster.Sentinels),
				"master":        d.str(&c.Cluster.Master),
				"nodes":         d.strs(&c.Cluster.Nodes),
				"password":      d.str(&c.Cluster.Password),
				"password_file": d.str(&c.Cluster.PasswordFile),
				"sentinel_auth": d.boolean(&c.Cluster.SentinelAuth),
				"op_timeout":    d.duration(&c.Cluster.OpTimeout),
				"key_prefix":    d.str(&c.Cluster.KeyPrefix),
				"secret":        d.str(&c.Cluster.Secret),
				"secret_file":   d.str(&c.Cluster.SecretFile),
			}
		}),
		"responses": section(func() fields { return fields{"block_style": d.str(&c.Responses.BlockStyle)} }),
		"identity":  section(func() fields { return d.identityFields(&c.Identity) }),
		"payments": section(func() fields {
			return fields{
				"max_price":  d.str(&c.Payments.MaxPrice),
				"budget":     d.str(&c.Payments.Budget),
				"key_prefix": d.str(&c.Payments.KeyPrefix),
			}
		}),
		"evidence": section(func() fields {
			return fields{
				"enabled":             d.boolean(&c.Evidence.Enabled),
				"dir":                 d.str(&c.Evidence.Dir),
				"retention":           d.days(&c.Evidence.Retention),
				"max_bytes":           d.int64v(&c.Evidence.MaxBytes),
				"checkpoint_interval": d.duration(&c.Evidence.CheckpointInterval),
			}
		}),
		"auth":   section(func() fields { return fields{"users": d.users(&c.Auth.Users)} }),
		"agents": d.agentTables(&c.Agents),
		"sites":  d.siteTables(&c.Sites),
	})
}

func (d *decoder) identityFields(ic *IdentityConfig) fields {
	return fields{
		"signature_agent":      d.str(&ic.SignatureAgent),
		"key_file":             d.str(&ic.KeyFile),
		"validity":             d.duration(&ic.Validity),
		"signature_agent_form": d.str(&ic.SignatureAgentForm),
		"card":                 func(k string, v any) { d.sub(k, v, d.cardFields(&ic.Card)) },
	}
}

// cardFields decodes [identity.card], whose keys are the members of the
// Signature Agent Card as draft-meunier-webbotauth-registry-04 names them.
func (d *decoder) cardFields(cc *CardConfig) fields {
	w := &cc.WebBotAuth
	return fields{
		"client_id":   d.str(&cc.ClientID),
		"client_name": d.str(&cc.ClientName),
		"client_uri":  d.str(&cc.ClientURI),
		"logo_uri":    d.str(&cc.LogoURI),
		"contacts":    d.strs(&cc.Contacts),
		"keys":        d.str(&cc.Keys),
		"web_bot_auth": func(k string, v any) {
			d.sub(k, v, fields{
				"expected-user-agent":   d.str(&w.ExpectedUserAgent),
				"rfc9309-product-token": d.str(&w.RFC9309ProductToken),
				"rfc9309-compliance":    d.optBoolean(&w.RFC9309Compliance),
				"trigger":               d.str(&w.Trigger),
				"purpose":               d.str(&w.Purpose),
				"targeted-content":      d.str(&w.TargetedContent),
				"rate-control":          d.str(&w.RateControl),
				"rate-expectation":      d.str(&w.RateExpectation),
				"known-urls":            d.strs(&w.KnownURLs),
				"ips_uri":               d.str(&w.IPsURI),
			})
		},
	}
}

// optBoolean decodes a boolean whose absence means something else than
// false (nil).
func (d *decoder) optBoolean(dst **bool) func(string, any) {
	return func(key string, v any) {
		var b bool
		d.boolean(&b)(key, v)
		if _, ok := v.(bool); ok {
			*dst = &b
		}
	}
}

func (d *decoder) tlsFields(t *TLSConfig) fields {
	return fields{
		"mode":      d.str(&t.Mode),
		"ca_cert":   d.str(&t.CACert),
		"ca_key":    d.str(&t.CAKey),
		"state_dir": d.str(&t.StateDir),
		"http2":     d.boolean(&t.HTTP2),
	}
}

func (d *decoder) upstreamFields(u *UpstreamConfig) fields {
	return fields{
		"proxy":         d.str(&u.Proxy),
		"ca":            d.str(&u.CA),
		"block_private": d.boolean(&u.BlockPrivate),
		"timeout":       d.duration(&u.Timeout),
	}
}

func (d *decoder) robotsFields(r *RobotsConfig) fields {
	return fields{
		"cache_ttl":         d.duration(&r.CacheTTL),
		"unreachable_limit": d.duration(&r.UnreachableLimit),
		"retry_after":       d.duration(&r.RetryAfter),
		"fetch_timeout":     d.duration(&r.FetchTimeout),
		"max_bytes":         d.integer(&r.MaxBytes),
		"max_redirects":     d.integer(&r.MaxRedirects),
		"auth_errors":       d.str(&r.AuthErrors),
		"fetch_user_agent":  d.str(&r.FetchUserAgent),
		"cache_max_bytes":   d.int64v(&r.CacheMaxBytes),
		"max_fetches":       d.integer(&r.MaxFetches),
	}
}

func (d *decoder) auditFields(a *AuditConfig) fields {
	return fields{
		"file":        d.str(&a.File),
		"log_allowed": d.boolean(&a.LogAllowed),
	}
}

func (d *decoder) limitsFields(l *LimitsConfig) fields {
	return fields{
		"read_header_timeout": d.duration(&l.ReadHeaderTimeout),
		"max_header_bytes":    d.integer(&l.MaxHeaderBytes),
		"idle_timeout":        d.duration(&l.IdleTimeout),
		"tunnel_idle_timeout": d.duration(&l.TunnelIdleTimeout),
		"max_connections":     d.integer(&l.MaxConnections),
	}
}

func (d *decoder) politenessFields(p *PolitenessConfig) fields {
	return fields{
		"crawl_delay":        d.boolean(&p.CrawlDelay),
		"min_interval":       d.duration(&p.MinInterval),
		"max_delay":          d.duration(&p.MaxDelay),
		"max_wait":           d.duration(&p.MaxWait),
		"honour_retry_after": d.boolean(&p.HonourRetryAfter),
		"max_backoff":        d.duration(&p.MaxBackoff),
	}
}

// users decodes [[auth.users]].
func (d *decoder) users(dst *[]AuthUser) func(string, any) {
	return func(k string, v any) {
		d.tables(k, v, func(i int, m map[string]any) {
			var u AuthUser
			d.table(fmt.Sprintf("%s[%d]", k, i), m, fields{
				"name":          d.str(&u.Name),
				"password_hash": d.str(&u.PasswordHash),
			})
			*dst = append(*dst, u)
		})
	}
}

// agentTables decodes [[agents]].
func (d *decoder) agentTables(dst *[]AgentRule) func(string, any) {
	return func(k string, v any) {
		d.tables(k, v, func(i int, m map[string]any) {
			var a AgentRule
			d.table(fmt.Sprintf("%s[%d]", k, i), m, fields{
				"user_agent":  d.str(&a.UserAgent),
				"client":      d.strs(&a.Client),
				"user":        d.str(&a.User),
				"token":       d.str(&a.Token),
				"also":        d.strs(&a.Also),
				"purpose":     d.strs(&a.Purpose),
				"block_style": d.str(&a.BlockStyle),
			})
			*dst = append(*dst, a)
		})
	}
}

// siteTables decodes [[sites]].
func (d *decoder) siteTables(dst *[]SiteRule) func(string, any) {
	return func(k string, v any) {
		d.tables(k, v, func(i int, m map[string]any) {
			s := SiteRule{Policy: "robots"}
			d.table(fmt.Sprintf("%s[%d]", k, i), m, fields{
				"host":                 d.str(&s.Host),
				"policy":               d.str(&s.Policy),
				"agents":               d.strs(&s.Agents),
				"reason":               d.str(&s.Reason),
				"min_interval":         d.duration(&s.MinInterval),
				"signature_agent_form": d.str(&s.SignatureAgentForm),
			})
			*dst = append(*dst, s)
		})
	}
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
