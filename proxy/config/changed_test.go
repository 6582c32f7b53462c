package config

import (
	"slices"
	"testing"
	"time"
)

func TestChanged(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{"nothing", func(*Config) {}, nil},
		{"one key", func(c *Config) { c.Politeness.CrawlDelay = false }, []string{"politeness.crawl_delay"}},
		{"acronyms", func(c *Config) { c.TLS.CACert, c.Upstream.CA = "a.pem", "b.pem" }, []string{"tls.ca_cert", "upstream.ca"}},
		{"top level and tables", func(c *Config) {
			c.Mode, c.DefaultAgent = "report", "Bot"
			c.Agents = []AgentRule{{UserAgent: "x", Token: "Bot"}}
			c.Auth.Users = []AuthUser{{Name: "etl", PasswordHash: "$2a$..."}}
		}, []string{"mode", "default_agent", "auth.users", "agents"}},
		{"durations and secrets", func(c *Config) {
			c.Limits.ReadHeaderTimeout, c.Cluster.Secret = time.Second, "s3cret"
		}, []string{"limits.read_header_timeout", "cluster.secret"}},
		{"the card's members, as the draft spells them", func(c *Config) {
			c.Identity.Card.ClientID, c.Identity.Card.WebBotAuth.RFC9309ProductToken = "https://bot.example/bot", "Bot"
			c.Identity.Card.WebBotAuth.IPsURI, c.Identity.Card.WebBotAuth.KnownURLs = "https://bot.example/ips.json", []string{"/"}
		}, []string{"identity.card.client_id", "identity.card.web_bot_auth.rfc9309-product-token", "identity.card.web_bot_auth.known-urls", "identity.card.web_bot_auth.ips_uri"}},
		{"the source is not a key", func(c *Config) { c.Source = "other.toml" }, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, b := Default(), Default()
			tt.change(b)
			if got := Changed(a, b); !slices.Equal(got, tt.want) {
				t.Errorf("Changed = %q; want %q", got, tt.want)
			}
		})
	}
}
