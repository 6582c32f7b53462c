package policy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// TestConfigWarnings: what a config holds that is valid but likely not
// meant is warned of, each warning naming its key and line, and nothing
// else is: a [[sites]] rule that an earlier rule leaves no request to
// (host for host, exact and "*." patterns; token for token), with what it
// sets that never applies; a signature_agent with no path. Each case is a
// config in testdata/warnings.
func TestConfigWarnings(t *testing.T) {
	t.Parallel()
	const dir = `"https://bot.example.com/.well-known/http-message-signatures-directory"`
	tests := []struct {
		file string
		want []string
	}{
		{"same-host.toml", []string{
			`same-host.toml:11: sites[1]: has no effect: sites[0] (line 6, host = "localhost") comes first and matches every request this rule matches (the first rule that matches wins), so its signature_agent_form = "string" is never used`,
		}},
		{"wildcard-then-inside.toml", []string{
			`wildcard-then-inside.toml:7: sites[1]: has no effect: sites[0] (line 1, host = "*.example.com") comes first and matches every request this rule matches (the first rule that matches wins), so its policy = "allow", reason = "written permission" and min_interval = "2s" are never used`,
			`wildcard-then-inside.toml:13: sites[2]: has no effect: sites[0] (line 1, host = "*.example.com") comes first and matches every request this rule matches (the first rule that matches wins), so this rule is never used`,
		}},
		{"exact-then-wildcard.toml", nil},
		{"agents.toml", []string{
			`agents.toml:8: sites[1]: has no effect: sites[0] (line 2, host = "a.example", agents = ["AcmeBot" "OtherBot"]) comes first and matches every request this rule matches (the first rule that matches wins), so its min_interval = "5s" is never used`,
			`agents.toml:28: sites[5]: has no effect: sites[4] (line 25, host = "b.example") comes first and matches every request this rule matches (the first rule that matches wins), so its policy = "allow" is never used`,
		}},
		{"first-of-several.toml", []string{
			`first-of-several.toml:5: sites[1]: has no effect: sites[0] (line 2, host = "*.example.com") comes first and matches every request this rule matches (the first rule that matches wins), so this rule is never used`,
			`first-of-several.toml:8: sites[2]: has no effect: sites[0] (line 2, host = "*.example.com") comes first and matches every request this rule matches (the first rule that matches wins), so its policy = "robots" is never used`,
		}},
		{"identity-no-path.toml", []string{
			`identity-no-path.toml:2: identity.signature_agent: "https://bot.example.com" has no path: sites fetch the key directory at exactly this URL and follow no redirect; unless https://bot.example.com/ itself answers the directory (check: curl -sS --max-redirs 0 https://bot.example.com), write ` + dir,
		}},
		{"identity-root.toml", []string{
			`identity-root.toml:2: identity.signature_agent: "https://Bot.Example.com:8443/" has no path: sites fetch the key directory at exactly this URL and follow no redirect; unless https://Bot.Example.com:8443/ itself answers the directory (check: curl -sS --max-redirs 0 https://Bot.Example.com:8443/), write "https://Bot.Example.com:8443/.well-known/http-message-signatures-directory"`,
		}},
		{"identity-paths.toml", nil},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(filepath.Join("testdata", "warnings", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Parse(tt.file, data)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Compile(cfg)
			if err != nil {
				t.Fatalf("a warning is no error: %v", err)
			}
			var got []string
			for _, w := range p.Warnings() {
				got = append(got, w.Error())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("warnings:\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// FuzzCovers holds the shadow warning to the rules' matching: when covers
// says rule a matches every request rule b matches, no host and token b
// matches escapes a.
func FuzzCovers(f *testing.F) {
	f.Add("*.example.com", "", "www.example.com", "AcmeBot", "x.www.example.com", "acmebot")
	f.Add("a.example", "AcmeBot", "A.Example", "acmebot", "a.example", "ACMEBOT")
	f.Add("*.example.com", "", "example.com", "", "example.com", "Bot")
	f.Add("*.b.c", "", "*.c", "", "x.c", "Bot")
	f.Fuzz(func(t *testing.T, hostA, agentA, hostB, agentB, host, token string) {
		site := func(h, agent string) Site {
			var agents []string
			if agent != "" {
				agents = []string{agent}
			}
			return compileSite(&config.SiteRule{Host: h, Policy: "robots", Agents: agents}, "sites[0]", false, config.Default().Problems())
		}
		a, b := site(hostA, agentA), site(hostB, agentB)
		if !covers(&a, &b) {
			return
		}
		h, err := siteHost(host) // a host as origins are normalised
		if err != nil || h[0] == '.' {
			return
		}
		if agents := (Agents{one: token}); b.matches(h, agents) && !a.matches(h, agents) {
			t.Fatalf("covers(%q %q, %q %q), but %q %q matches only the second", hostA, agentA, hostB, agentB, h, token)
		}
	})
}
