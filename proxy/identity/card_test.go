package identity_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/admin"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/identity/identitytest"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// compileCard compiles the config file at path as the proxy does and
// returns its card.
func compileCard(t *testing.T, path string) *identity.Card {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Compile(cfg, admin.CheckConfig)
	if err != nil {
		t.Fatal(err)
	}
	if pol.Card() == nil {
		t.Fatalf("%s: no card", path)
	}
	return pol.Card()
}

// decode decodes JSON into a generic value, for comparing structure.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	return v
}

// TestCardDraftExamples: [identity.card] written as the draft's examples
// gives their cards, member for member, with the same JSON types: the
// full card of section 3 exactly; the CIMD example of section 4.1 with
// the two members robotsgate always states besides (the product token it
// obeys, and whether it complies with RFC 9309).
func TestCardDraftExamples(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		extra map[string]any // web_bot_auth members robotsgate adds
	}{
		{"draft-04-example", nil},
		{"draft-04-cimd-example", map[string]any{"rfc9309-product-token": "ExampleBot", "rfc9309-compliance": true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			card := compileCard(t, filepath.Join("testdata", "card", tt.name+".toml"))
			want, err := os.ReadFile(filepath.Join("testdata", "card", tt.name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			got := decode(t, card.JSON([]*identity.Key{testKey(t)}))
			w := decode(t, want)
			for k, v := range tt.extra {
				w["web_bot_auth"].(map[string]any)[k] = v
			}
			if !reflect.DeepEqual(got, w) {
				g, _ := json.MarshalIndent(got, "", "  ")
				t.Errorf("card:\n%s\nwant (the draft's):\n%s", g, want)
			}
			if card.Path() != "/bot" || card.Authority() != "example.com" || card.Signed() {
				t.Errorf("served at %q for %q, signed %v; want /bot, example.com, unsigned (jwks_uri)", card.Path(), card.Authority(), card.Signed())
			}
		})
	}
}

// TestCardKeys: with keys = "jwks" the card's jwks is the key directory's
// JWK Set, rotation included (the new key first, the retired one still
// listed, then gone after Remove), and the card's signature, over its
// Content-Digest, verifies with an independent verifier for the
// client_id's authority only.
func TestCardKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "c.toml")
	os.WriteFile(cfgPath, []byte(`[tls]
state_dir = "`+dir+`"
[identity]
signature_agent = "https://keys.example/.well-known/http-message-signatures-directory"
[identity.card]
client_id = "https://Bot.Example/about/bot.json"
[identity.card.web_bot_auth]
expected-user-agent = "ExampleBot/1.0"
`), 0o644)
	card := compileCard(t, cfgPath)
	cfg, _ := config.Load(cfgPath)
	ring, _, err := identity.OpenRing(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	check := func(n int) {
		t.Helper()
		body := card.JSON(ring.Keys())
		jwks, _ := json.Marshal(decode(t, body)["jwks"])
		if d := identity.Directory(ring.Keys()); !reflect.DeepEqual(decode(t, jwks), decode(t, d)) || len(ring.Keys()) != n {
			t.Errorf("card's jwks %s; want the directory's %s (%d keys)", jwks, d, n)
		}
		sg, err := identity.NewSigner(ring.Current, cfg.Identity.SignatureAgent, 0, time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		sg.SignCard(h, card, body)
		if err := identitytest.VerifyCard(h, body, "bot.example", time.Now()); err != nil {
			t.Errorf("card's signature: %v\n%v", err, h)
		}
		if err := identitytest.VerifyCard(h, body, "keys.example", time.Now()); err == nil {
			t.Error("card's signature verifies for the signature agent's authority; want the client_id's only")
		}
		if err := identitytest.VerifyCard(h, append(body, ' '), "bot.example", time.Now()); err == nil {
			t.Error("a changed card verifies")
		}
	}
	check(1)
	old := ring.Current.ID
	if err := ring.Rotate(); err != nil {
		t.Fatal(err)
	}
	check(2)
	if err := ring.Remove(old); err != nil {
		t.Fatal(err)
	}
	check(1)
	if card.Path() != "/about/bot.json" || !card.Signed() || card.ProductToken() != "ExampleBot" {
		t.Errorf("path %q, signed %v, token %q", card.Path(), card.Signed(), card.ProductToken())
	}
}

// TestCardProductToken: the token the card names is the one robotsgate
// obeys for the bot's requests (those with its expected-user-agent): the
// header's token, an [[agents]] rule's, default_agent's; one configured
// must be among them.
func TestCardProductToken(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, config, want string
	}{
		{"the header's token", `expected-user-agent = "AcmeBot/2.1 (+https://acme.example/bot)"`, "AcmeBot"},
		{"a compatible item", `expected-user-agent = "Mozilla/5.0 (compatible; AcmeBot/2.1)"`, "AcmeBot"},
		{"default_agent, no User-Agent given", ``, "AcmeDataBot"},
		{"default_agent, a browser's User-Agent", `expected-user-agent = "Mozilla/5.0 (X11; Linux x86_64)"`, "AcmeDataBot"},
		{"an [[agents]] rule", `expected-user-agent = "python-requests/2.31"`, "PyBot"},
		{"configured, one of a rule's", "expected-user-agent = \"python-requests/2.31\"\nrfc9309-product-token = \"CCBot\"", "CCBot"},
		{"configured, any case", "expected-user-agent = \"AcmeBot/1\"\nrfc9309-product-token = \"acmebot\"", "acmebot"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "c.toml")
			os.WriteFile(path, []byte(`default_agent = "AcmeDataBot"
[[agents]]
user_agent = "python-requests/*"
token = "PyBot"
also = ["CCBot"]
[identity]
signature_agent = "https://bot.example/k"
[identity.card]
client_id = "https://bot.example/bot"
[identity.card.web_bot_auth]
`+tt.config+"\n"), 0o644)
			if got := compileCard(t, path).ProductToken(); got != tt.want {
				t.Errorf("rfc9309-product-token %q; want %q", got, tt.want)
			}
		})
	}
}

// TestCardBadConfig: every bad [identity.card] value is an error naming
// its key and its line (the line of its table when it is not written),
// all reported at once.
func TestCardBadConfig(t *testing.T) {
	t.Parallel()
	const head0 = "[identity]\nsignature_agent = \"https://bot.example/k\"\n[identity.card]\n" // lines 1-3
	const head = "default_agent = \"AcmeBot\"\n" + head0                                       // lines 1-4
	for _, tt := range []struct {
		name, config string
		want         []string
	}{
		{"no client_id", "[identity.card]\nclient_name = \"Bot\"\n", []string{
			"c.toml:1: identity.card.client_id: required with any other [identity.card] key"}},
		{"no signature_agent", "[identity.card]\nclient_id = \"https://bot.example/bot\"\n[identity.card.web_bot_auth]\nexpected-user-agent = \"Bot/1\"\nrfc9309-product-token = \"Bot\"\n", []string{
			"c.toml:2: identity.card.client_id: set without identity.signature_agent"}},
		{"client_id", head + "client_id = \"http://bot.example/bot\"\n", []string{
			`c.toml:5: identity.card.client_id: "http://bot.example/bot" is not an https URL`}},
		{"client_id's query", head + "client_id = \"https://bot.example/bot?v=1\"\n", []string{
			`c.toml:5: identity.card.client_id: "https://bot.example/bot?v=1" is not an https URL without a query`}},
		{"client_id's path", head + "client_id = \"https://bot.example/a/../bot\"\n", []string{
			`c.toml:5: identity.card.client_id: "https://bot.example/a/../bot": its path has`}},
		{"an operator endpoint's path", head + "client_id = \"https://bot.example/status\"\n", []string{
			`c.toml:5: identity.card.client_id: "https://bot.example/status": the proxy's listener serves /status itself (GET /status)`}},
		{"the key directory's path", head + "client_id = \"https://bot.example/.well-known/http-message-signatures-directory\"\n", []string{
			`c.toml:5: identity.card.client_id: "https://bot.example/.well-known/http-message-signatures-directory": the proxy's listener serves`}},
		{"every member at once", head + `client_id = "https://bot.example/bot"
client_uri = "bot.example/about"
logo_uri = "ftp://bot.example/logo.png"
contacts = ["bots@example.com", "mailto:ok@example.com"]
keys = "inline"
[identity.card.web_bot_auth]
expected-user-agent = "Bot/1.0` + "\\t" + `"
rfc9309-product-token = "Example Bot"
trigger = "robot"
purpose = "a` + "\\u0007" + `"
known-urls = ["/", "/a b"]
ips_uri = "http://bot.example/ips.json"
rfc9309-compliance = "yes"
`, []string{
			`c.toml:6: identity.card.client_uri: "bot.example/about" is not an http or https URL`,
			`c.toml:7: identity.card.logo_uri: "ftp://bot.example/logo.png" is not an http or https URL`,
			`c.toml:8: identity.card.contacts[0]: "bots@example.com" is not a URI with a scheme`,
			`c.toml:9: identity.card.keys: "inline": want "jwks"`,
			`c.toml:11: identity.card.web_bot_auth.expected-user-agent: "Bot/1.0\t": a User-Agent is printable ASCII`,
			`c.toml:12: identity.card.web_bot_auth.rfc9309-product-token: "Example Bot" is not a product token`,
			`c.toml:13: identity.card.web_bot_auth.trigger: "robot": want "fetcher"`,
			`c.toml:14: identity.card.web_bot_auth.purpose: "a\a": want text without control characters`,
			`c.toml:15: identity.card.web_bot_auth.known-urls[1]: "/a b": want a URL, a path`,
			`c.toml:16: identity.card.web_bot_auth.ips_uri: "http://bot.example/ips.json" is not an https URL`,
			`c.toml:17: identity.card.web_bot_auth.rfc9309-compliance: want true or false, got a string`,
		}},
		{"a token robotsgate does not obey", head + "client_id = \"https://bot.example/bot\"\n[identity.card.web_bot_auth]\nexpected-user-agent = \"AcmeBot/1.0\"\nrfc9309-product-token = \"OtherBot\"\n", []string{
			`c.toml:8: identity.card.web_bot_auth.rfc9309-product-token: "OtherBot" is not a token robotsgate obeys for requests with User-Agent "AcmeBot/1.0" (expected-user-agent): it obeys "AcmeBot"`}},
		{"no token obeyed", head0 + "client_id = \"https://bot.example/bot\"\n[identity.card.web_bot_auth]\nexpected-user-agent = \"Mozilla/5.0 ExampleBot\"\n", []string{
			`c.toml:5: identity.card.web_bot_auth.rfc9309-product-token: robotsgate obeys no product token for requests with User-Agent "Mozilla/5.0 ExampleBot" (expected-user-agent), only "*"`}},
		{"no token, no User-Agent", head0 + "client_id = \"https://bot.example/bot\"\n", []string{
			`c.toml:3: identity.card.web_bot_auth.rfc9309-product-token: robotsgate obeys no product token for requests with no User-Agent (set expected-user-agent to the bot's), only "*"`}},
		{"compliance in report mode", "mode = \"report\"\n" + head + "client_id = \"https://bot.example/bot\"\n[identity.card.web_bot_auth]\nexpected-user-agent = \"AcmeBot/1.0\"\nrfc9309-compliance = true\n", []string{
			`c.toml:9: identity.card.web_bot_auth.rfc9309-compliance: true in report mode, which forwards what robots.txt refuses`}},
		{"a misspelt member", head + "client_id = \"https://bot.example/bot\"\n[identity.card.web_bot_auth]\nrfc9309_product_token = \"AcmeBot\"\n", []string{
			`c.toml:7: identity.card.web_bot_auth.rfc9309_product_token: unknown key`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "c.toml")
			os.WriteFile(path, []byte(tt.config), 0o644)
			cfg, err := config.Load(path)
			if cfg != nil {
				_, cerr := policy.Compile(cfg, admin.CheckConfig)
				err = config.Join(err, cerr)
			}
			if err == nil {
				t.Fatalf("no error; want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), filepath.Dir(path)+"/"+w) {
					t.Errorf("errors lack %q:\n%v", w, err)
				}
			}
			if n, want := strings.Count(err.Error(), "\n")+1, len(tt.want); n != want {
				t.Errorf("%d errors; want %d:\n%v", n, want, err)
			}
		})
	}
}
