package policy

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/cluster"
	"github.com/robotsgate/robotsgate/proxy/config"
)

// parse reads a config file as the proxy does: decoded by config.Parse,
// checked by Compile, every problem of both in the order of their lines.
func parse(name string, data []byte) (*config.Config, error) {
	cfg, err := config.Parse(name, data)
	if cfg == nil {
		return nil, err
	}
	_, cerr := Compile(cfg, cluster.CheckConfig)
	return cfg, config.Join(err, cerr)
}

// TestSampleConfigExamples uncomments the examples of config.toml and
// checks that they are valid.
func TestSampleConfigExamples(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		// Example lines are "# key = ..." or "# [table]".
		if rest, ok := strings.CutPrefix(line, "# "); ok && exampleLine.MatchString(rest) {
			line = rest
		}
		b.WriteString(line + "\n")
	}
	text := strings.Replace(b.String(), `"$2a$12$..."`, `"$2a$12$C6UzMDM.H6dfI/f/IKcEeO5j5B3RWqfkj2Gxhn6YECqNgDr8gJjBa"`, 1)
	// The [[sites]] example's signature_agent_form needs requests signed.
	text = strings.Replace(text, "\nsignature_agent = \"\"\n", "\nsignature_agent = \"https://bot.example.com/.well-known/http-message-signatures-directory\"\n", 1)
	cfg, err := parse("config.toml (examples)", []byte(text))
	if err != nil {
		t.Fatalf("examples: %v", err)
	}
	if len(cfg.Agents) != 1 || cfg.Agents[0].Token != "AcmeDataBot" || len(cfg.Sites) != 1 || cfg.Sites[0].MinInterval != 2*time.Second || len(cfg.Auth.Users) != 1 {
		t.Errorf("examples decoded to %+v", cfg)
	}
}

var exampleLine = regexp.MustCompile(`^(\[\[?[a-z.]+\]\]?|[a-z_]+ = .*)$`)

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../config/testdata/bad.toml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = parse("testdata/bad.toml", data)
	if err == nil {
		t.Fatal("bad.toml: no error")
	}
	want := []string{
		`bad.toml:1: listen: "nowhere" is not host:port`,
		`bad.toml:2: mode: "Enforce" is not one of`,
		`bad.toml:3: Default_agent: unknown key; keys are case-sensitive: did you mean "default_agent"?`,
		`bad.toml:4: bogus: unknown key`,
		`bad.toml:7: robots.cache_ttl: 30 is a bare number; write a duration with a unit, such as "30s"`,
		`bad.toml:8: robots.retry_after: "soon" is not a duration`,
		`bad.toml:9: robots.max_bytes: want an integer, got a string`,
		`bad.toml:10: robots.auth_errors: "maybe" is not one of`,
		`bad.toml:13: upstream.proxy: "ftp://user:xxxxx@example.com" is not an http:// or https:// proxy URL`,
		`bad.toml:15: agents[0]: needs at least one of user_agent, client, user`,
		`bad.toml:16: agents[0].token: "Acme Bot" is not a product token`,
		`bad.toml:20: agents[1].client[0]: "10.0.0.0/33" is not a CIDR or IP address`,
		`bad.toml:20: agents[1].client[1]: "not-an-ip" is not a CIDR or IP address`,
		`bad.toml:21: agents[1].user: no [[auth.users]] entry is named "nobody"`,
		`bad.toml:22: agents[1].also[0]: "GPTBot/1.0" is not a product token`,
		`bad.toml:23: agents[1].purpose[1]: "training" is not a purpose: known purposes are ai-train, ai-input, search`,
		`bad.toml:26: sites[0].host:`,
		`bad.toml:27: sites[0].policy: "sometimes" is not one of`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("errors lack %q; got:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, "secret") {
		t.Errorf("errors show the proxy password:\n%s", msg)
	}
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Errorf("errors.As(*config.Error) = false")
	}
	// Value errors come only once the file is otherwise well-typed, so a
	// type error must not hide the others: the count proves all were kept.
	if n := strings.Count(msg, "\n") + 1; n != len(want) {
		t.Errorf("%d errors; want %d:\n%s", n, len(want), msg)
	}
}

func TestConfigEvidence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		toml      string
		retention time.Duration // decoded; 0 when an error is wanted
		wantErr   string        // "" when none
	}{
		{"", 400 * 24 * time.Hour, ""},
		{"[evidence]\nretention = \"30d\"\n", 30 * 24 * time.Hour, ""},
		{"[evidence]\nretention = \"720h\"\n", 720 * time.Hour, ""},
		{"[evidence]\nretention = \"0d\"\n", 0, `x.toml:2: evidence.retention: "0d" is not a number of days such as "400d" or a duration such as "720h"`},
		{"[evidence]\nretention = \"1.5d\"\n", 0, `x.toml:2: evidence.retention: "1.5d" is not a number of days such as "400d" or a duration such as "720h"`},
		{"[evidence]\nretention = 400\n", 0, `x.toml:2: evidence.retention: 400 is a bare number; write a number of days such as "400d" or a duration such as "720h" ("400d")`},
		{"[evidence]\nretention = \"soon\"\n", 0, `x.toml:2: evidence.retention: "soon" is not a number of days such as "400d" or a duration such as "720h"`},
		{"[evidence]\nretention = \"36500d\"\n", 36500 * 24 * time.Hour, ""},
		{"[evidence]\nretention = \"106751d\"\n", 0, `x.toml:2: evidence.retention: "106751d" is more than 36500d (a hundred years)`},
		{"[evidence]\nretention = true\n", 0, `x.toml:2: evidence.retention: want a number of days such as "400d" or a duration such as "720h", got a boolean`},
		{"[evidence]\nretention = \"1h\"\n", 0, "x.toml:2: evidence.retention: 1h0m0s is less than 24h0m0s"},
		{"[evidence]\nmax_bytes = 1000\n", 0, "x.toml:2: evidence.max_bytes: 1000 is less than 1 MiB (1048576): too small to hold one origin's files"},
		{"[evidence]\ncheckpoint_interval = \"48h\"\n", 0, "x.toml:2: evidence.checkpoint_interval: 48h0m0s is more than 24h: lines would wait that long for a signature"},
		{"[evidence]\nenabled = \"yes\"\n", 0, "x.toml:2: evidence.enabled: want true or false, got a string"},
	}
	for _, tt := range tests {
		cfg, err := parse("x.toml", []byte(tt.toml))
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("parse(%q) = %v; want no error", tt.toml, err)
		case tt.wantErr == "" && cfg.Evidence.Retention != tt.retention:
			t.Errorf("parse(%q): retention %v; want %v", tt.toml, cfg.Evidence.Retention, tt.retention)
		case tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)):
			t.Errorf("parse(%q) = %v; want %s", tt.toml, err, tt.wantErr)
		}
	}
}

func TestConfigMaxFetches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		toml    string
		want    int    // robots.max_fetches decoded; 0 when an error is wanted
		wantErr string // "" when none
	}{
		{"", 256, ""},
		{"[robots]\nmax_fetches = 1\n", 1, ""},
		{"[robots]\nmax_fetches = 1024\n", 1024, ""},
		{"[robots]\nmax_fetches = 0\n", 0, "x.toml:2: robots.max_fetches: 0 is out of range 1 to 65536"},
		{"[robots]\nmax_fetches = -3\n", 0, "x.toml:2: robots.max_fetches: -3 is out of range 1 to 65536"},
		{"[robots]\ncache_ttl = \"1h\"\nmax_fetches = \"many\"\n", 0, "x.toml:3: robots.max_fetches: want an integer, got a string"},
		{"[robots]\nmax_Fetches = 8\n", 0, `x.toml:2: robots.max_Fetches: unknown key; keys are case-sensitive: did you mean "max_fetches"?`},
	}
	for _, tt := range tests {
		cfg, err := parse("x.toml", []byte(tt.toml))
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("parse(%q) = %v; want no error", tt.toml, err)
		case tt.wantErr == "" && cfg.Robots.MaxFetches != tt.want:
			t.Errorf("parse(%q): max_fetches %d; want %d", tt.toml, cfg.Robots.MaxFetches, tt.want)
		case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
			t.Errorf("parse(%q) = %v; want %s", tt.toml, err, tt.wantErr)
		}
	}
}

// TestConfigMaxWaitAtLeastMaxDelay: a max_wait below max_delay would turn
// every request paced max_delay apart into a 429: refused, naming the key.
func TestConfigMaxWaitAtLeastMaxDelay(t *testing.T) {
	t.Parallel()
	_, err := parse("c.toml", []byte("[politeness]\nmax_delay = \"30s\"\nmax_wait = \"10s\"\n"))
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Key != "politeness.max_wait" || ce.Line != 3 {
		t.Errorf("max_wait 10s < max_delay 30s: %v; want an error for politeness.max_wait at line 3", err)
	}
	if config.Default().Politeness.MaxWait != 2*time.Minute {
		t.Errorf("default max_wait = %v; want 2m", config.Default().Politeness.MaxWait)
	}
}

// TestConfigListen: listen is host:port with a port serve can listen on,
// checked by validate as by serve (which would otherwise fail naming no
// key or line).
func TestConfigListen(t *testing.T) {
	t.Parallel()
	checkConfigs(t, []struct{ toml, wantErr string }{
		{"listen = \"127.0.0.1:8080\"\n", ""},
		{"listen = \"127.0.0.1:0\"\n", ""},
		{"listen = \"[::1]:65535\"\n", ""},
		{"listen = \"127.0.0.1:http\"\n", ""},
		{"listen = \"127.0.0.1:99999\"\n", `x.toml:1: listen: "127.0.0.1:99999": "99999" is not a port (0 to 65535, or a service name)`},
		{"\nlisten = \"127.0.0.1:-1\"\n", `x.toml:2: listen: "127.0.0.1:-1": "-1" is not a port`},
		{"listen = \"127.0.0.1:nosuchservice\"\n", `x.toml:1: listen: "127.0.0.1:nosuchservice": "nosuchservice" is not a port`},
		{"listen = \"nowhere\"\n", `x.toml:1: listen: "nowhere" is not host:port`},
	})
}

// TestConfigRetryAfterAtMostADay: a failure mark further ahead than 24h is
// one the cache takes for foreign, so retry_after is at most that.
func TestConfigRetryAfterAtMostADay(t *testing.T) {
	t.Parallel()
	_, err := parse("c.toml", []byte("[robots]\nretry_after = \"25h\"\n"))
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Key != "robots.retry_after" || ce.Line != 2 {
		t.Errorf("retry_after 25h: %v; want an error for robots.retry_after at line 2", err)
	}
	if _, err := parse("c.toml", []byte("[robots]\nretry_after = \"24h\"\n")); err != nil {
		t.Errorf("retry_after 24h: %v; want it accepted", err)
	}
}

// TestConfigClusterSecret: with [cluster] redis exactly one of secret and
// secret_file is required, neither goes without redis, the secret is at
// least 32 bytes, and its file is a regular file (links followed) that
// only its owner may read. No error shows the secret.
func TestConfigClusterSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const secret = "s3cret-s3cret-s3cret-s3cret-s3cret"
	file := func(name, content string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	owner := file("owner", secret+"\n", 0o400)
	crlf := file("crlf", secret+"\r\n\r\n", 0o600)
	open := file("open", secret+"\n", 0o644)
	group := file("group", secret+"\n", 0o440)
	groupWrite := file("group-write", secret+"\n", 0o460)
	short := file("short", "tiny\n\n\n", 0o400)
	big := file("big", strings.Repeat("x", 5000), 0o400)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(owner, link); err != nil {
		t.Fatal(err)
	}
	const redis = "[cluster]\nredis = \"redis://127.0.0.1:6379/0\"\n"
	tests := []struct {
		name    string
		toml    string
		want    string // the secret ReadSecret returns; "" when an error is wanted
		wantErr string // a part of the error
	}{
		{"secret", redis + "secret = \"" + secret + "\"\n", secret, ""},
		{"secret_file 0400", redis + "secret_file = \"" + owner + "\"\n", secret, ""},
		{"secret_file 0600 with CRLFs", redis + "secret_file = \"" + crlf + "\"\n", secret, ""},
		{"secret_file through a link", redis + "secret_file = \"" + link + "\"\n", secret, ""},
		{"no secret", redis, "", "x.toml:1: cluster.secret: required with a [cluster] Redis"},
		{"too short", redis + "secret = \"tiny\"\n", "", "x.toml:3: cluster.secret: a secret of 4 bytes: want at least 32"},
		{"both", redis + "secret = \"" + secret + "\"\nsecret_file = \"" + owner + "\"\n", "", "x.toml:3: cluster.secret: secret and secret_file are both set"},
		{"secret without redis", "[cluster]\nsecret = \"" + secret + "\"\n", "", "x.toml:2: cluster.secret: set without a [cluster] Redis"},
		{"secret_file without redis", "[cluster]\nsecret_file = \"" + owner + "\"\n", "", "x.toml:2: cluster.secret_file: set without a [cluster] Redis"},
		{"secret_file 0644", redis + "secret_file = \"" + open + "\"\n", "", "x.toml:3: cluster.secret_file: " + open + " is mode 0644: a secret file must grant nothing to others, nor write to its group"},
		{"secret_file 0460", redis + "secret_file = \"" + groupWrite + "\"\n", "", "is mode 0460"},
		{"secret_file 0440 (a Kubernetes Secret for a pod with an fsGroup)", redis + "secret_file = \"" + group + "\"\n", secret, ""},
		{"secret_file too short", redis + "secret_file = \"" + short + "\"\n", "", "cluster.secret_file: a secret of 4 bytes"},
		{"secret_file too big", redis + "secret_file = \"" + big + "\"\n", "", "larger than its bound"},
		{"secret_file missing", redis + "secret_file = \"" + filepath.Join(dir, "missing") + "\"\n", "", "no such file"},
		{"secret_file a directory", redis + "secret_file = \"" + dir + "\"\n", "", "not a regular file"},
	}
	for _, tt := range tests {
		cfg, err := parse("x.toml", []byte(tt.toml))
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: ParseConfig = %v; want no error", tt.name, err)
		case tt.wantErr == "":
			if got, err := cfg.Cluster.ReadSecret(); err != nil || string(got) != tt.want {
				t.Errorf("%s: ReadSecret = %q, %v; want %q", tt.name, got, err, tt.want)
			}
		case err == nil || !strings.Contains(err.Error(), tt.wantErr):
			t.Errorf("%s: ParseConfig = %v; want an error with %q", tt.name, err, tt.wantErr)
		case strings.Contains(err.Error(), "s3cret"):
			t.Errorf("%s: the error shows the secret: %v", tt.name, err)
		}
	}
}

// TestConfigIdentityPayments: [identity] and [payments] are checked, each
// problem naming its key and line.
func TestConfigIdentityPayments(t *testing.T) {
	t.Parallel()
	const id = "[identity]\nsignature_agent = \"https://bot.example\"\n"
	tests := []struct{ toml, wantErr string }{
		{id, ""},
		{id + "validity = \"1h\"\n[payments]\nmax_price = \"USD 0.01\"\nbudget = \"USD 25\"\n", ""},
		{"[identity]\nsignature_agent = \"http://bot.example\"\n", `x.toml:2: identity.signature_agent: "http://bot.example" is not an https URL`},
		{"[identity]\nsignature_agent = \"https://bot.example./d\"\n", `x.toml:2: identity.signature_agent: "https://bot.example./d": host "bot.example." ends in a dot`},
		{"[identity]\nsignature_agent = \"https://999.1.1.1/d\"\n", `x.toml:2: identity.signature_agent: "https://999.1.1.1/d": bad origin: host "999.1.1.1": IPv4 part out of range`},
		{"[identity]\nsignature_agent = \"https://bot.example/a b\"\n", "x.toml:2: identity.signature_agent: " + `"https://bot.example/a b"` + ": only printable ASCII"},
		{id + "validity = \"1s\"\n", "x.toml:3: identity.validity: 1s: want from 10s to 24h"},
		{"[identity]\nkey_file = \"/k.pem\"\n", "x.toml:2: identity.key_file: set without identity.signature_agent"},
		{"[identity]\nsignature_agent_form = \"string\"\n", "x.toml:2: identity.signature_agent_form: set without identity.signature_agent: nothing is signed"},
		{id + "signature_agent_form = \"string\"\n", ""},
		{id + "signature_agent_form = \"dictionary\"\n[[sites]]\nhost = \"old.example\"\nsignature_agent_form = \"string\"\n", ""},
		{id + "signature_agent_form = \"list\"\n", `x.toml:3: identity.signature_agent_form: "list": want "dictionary" or "string"`},
		{id + "\n[[sites]]\nhost = \"old.example\"\nsignature_agent_form = \"String\"\n", `x.toml:6: sites[0].signature_agent_form: "String": want "dictionary" or "string"`},
		// A rule's form without [identity] signs nothing, as [identity]'s own.
		{"[[sites]]\nhost = \"a.example\"\nsignature_agent_form = \"string\"\n", "x.toml:3: sites[0].signature_agent_form: set without identity.signature_agent: nothing is signed"},
		{"[[sites]]\nhost = \"a.example\"\n[[sites]]\nhost = \"b.example\"\nsignature_agent_form = \"dictionary\"\n", "x.toml:5: sites[1].signature_agent_form: set without identity.signature_agent: nothing is signed"},
		{"[identity]\nkey_file = \"/k.pem\"\n[[sites]]\nhost = \"a.example\"\nsignature_agent_form = \"strings\"\n", `x.toml:5: sites[0].signature_agent_form: "strings": want "dictionary" or "string"`},
		{"[payments]\nmax_price = \"USD 0.01\"\nbudget = \"USD 1\"\n", "x.toml:2: payments.max_price: needs [identity] signature_agent"},
		{id + "[payments]\nmax_price = \"USD 0.01\"\n", "payments.budget: required with max_price"},
		{id + "[payments]\nmax_price = \"0.01 USD\"\nbudget = \"USD 1\"\n", `x.toml:4: payments.max_price: "0.01 USD": want "<currency> <amount>"`},
		{id + "[payments]\nmax_price = \"USD 0.01\"\nbudget = \"EUR 1\"\n", "x.toml:5: payments.budget: EUR is not max_price's currency (USD)"},
		{id + "[payments]\nmax_price = \"USD 0.05\"\nbudget = \"USD 0.03\"\n", ""}, // the budget caps each price too
		{id + "[payments]\nmax_price = \"USD 2\"\nbudget = \"USD 0\"\n", "x.toml:5: payments.budget: USD 0.00: nothing could be paid"},
		{id + "[payments]\nmax_price = \"USD 0.0000000001\"\nbudget = \"USD 1\"\n", "at most 9 digits after the point"},
		{"[payments]\nbudget = \"USD 1\"\n", "x.toml:2: payments.budget: set without payments.max_price"},
		{id + "[payments]\nmax_price = \"USD 0.01\"\nbudget = \"USD 1\"\nkey_prefix = \"rg{x}:\"\n", "payments.key_prefix: \"rg{x}:\": must not be empty, and holds no { or }"},
	}
	checkConfigs(t, tests)
}

// TestConfigClusterTopology: [cluster] names its Redis one way (a URL,
// Sentinels with a master name, or a Cluster's nodes), each checked.
func TestConfigClusterTopology(t *testing.T) {
	t.Parallel()
	const secret = "secret = \"0123456789abcdef0123456789abcdef\"\n"
	dir := t.TempDir()
	pw, open := filepath.Join(dir, "pw"), filepath.Join(dir, "open")
	os.WriteFile(pw, []byte("s3cret\n"), 0o440)
	os.WriteFile(open, []byte("s3cret\n"), 0o604)
	os.Chmod(open, 0o604)
	tests := []struct{ toml, wantErr string }{
		{"[cluster]\nsentinels = [\"10.0.0.1:26379\", \"10.0.0.2:26379\"]\nmaster = \"mymaster\"\npassword = \"p\"\n" + secret, ""},
		{"[cluster]\nnodes = [\"10.0.0.1:7000\"]\n" + secret, ""},
		{"[cluster]\nsentinels = [\"10.0.0.1:26379\"]\n" + secret, "cluster.master: required with cluster.sentinels"},
		{"[cluster]\nmaster = \"mymaster\"\n", "x.toml:2: cluster.master: set without cluster.sentinels"},
		{"[cluster]\nredis = \"redis://10.0.0.1:6379/0\"\nnodes = [\"10.0.0.1:7000\"]\n" + secret, "x.toml:3: cluster.nodes: redis, sentinels and nodes are exclusive"},
		{"[cluster]\nnodes = [\"10.0.0.1:7000\"]\nsentinel_auth = true\n" + secret, "cluster.sentinel_auth: set without cluster.sentinels"},
		{"[cluster]\nnodes = [\"10.0.0.1:7000\"]\nkey_prefix = \"{rg}:\"\n" + secret, "cluster.key_prefix: \"{rg}:\" holds { or }"},
		{"[cluster]\nnodes = [\"10.0.0.1:7000\"]\nop_timeout = \"1ms\"\n" + secret, "cluster.op_timeout: 1ms: want from 10ms to 10s"},
		{"[cluster]\nsentinels = [\"10.0.0.1:26379\"]\nmaster = \"m\"\nsentinel_auth = true\nop_timeout = \"1s\"\npassword = \"p\"\n" + secret, ""},
		{"[cluster]\nnodes = [\"10.0.0.1\"]\n" + secret, `x.toml:2: cluster.nodes[0]: "10.0.0.1" is not host:port`},
		{"[cluster]\nredis = \"redis://10.0.0.1:6379/0\"\npassword = \"p\"\n" + secret, "cluster.password: set with cluster.redis"},
		{"[cluster]\nnodes = [\"10.0.0.1:7000\"]\n", "cluster.secret: required with a [cluster] Redis"},
		{"[cluster]\npassword = \"p\"\n", "cluster.password: set without cluster.sentinels or cluster.nodes"},
		{"[cluster]\nnodes = [\"10.0.0.1:7000\"]\npassword_file = \"" + pw + "\"\n" + secret, ""},
		{"[cluster]\nnodes = [\"10.0.0.1:7000\"]\npassword_file = \"" + open + "\"\n" + secret, "cluster.password_file: " + open + " is mode 0604: a password file must grant nothing to others"},
		{"[cluster]\nnodes = [\"10.0.0.1:7000\"]\npassword = \"p\"\npassword_file = \"" + pw + "\"\n" + secret, "password and password_file are both set"},
	}
	checkConfigs(t, tests)
}

// checkConfigs parses each config as x.toml: wantErr "" is no error, else
// a part of the error.
func checkConfigs(t *testing.T, tests []struct{ toml, wantErr string }) {
	t.Helper()
	for _, tt := range tests {
		_, err := parse("x.toml", []byte(tt.toml))
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%q: %v; want no error", tt.toml, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%q: %v; want an error with %q", tt.toml, err, tt.wantErr)
		}
	}
}

func TestConfigBlockStyle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		toml    string
		want    string // responses.block_style decoded, when no error is wanted
		wantErr string
	}{
		{"", "plain", ""},
		{"[responses]\nblock_style = \"plain\"\n", "plain", ""},
		{"[responses]\nblock_style = \"browser\"\n", "browser", ""},
		{"[responses]\n\nblock_style = \"Browser\"\n", "", `x.toml:3: responses.block_style: "Browser" is not one of "plain" or "browser"; values are case-sensitive: did you mean "browser"?`},
		{"[responses]\nblock_style = \"browsr\"\n", "", `x.toml:2: responses.block_style: "browsr" is not one of "plain" or "browser"; did you mean "browser"?`},
		{"[responses]\nblock_style = \"fancy\"\n", "", `x.toml:2: responses.block_style: "fancy" is not one of "plain" or "browser"`},
		{"[responses]\nblock_style = \"\"\n", "", `x.toml:2: responses.block_style: "" is not one of "plain" or "browser"`},
		{"[responses]\nblock_style = true\n", "", `x.toml:2: responses.block_style: want a string, got a boolean`},
		{"[responses]\nblockstyle = \"browser\"\n", "", `x.toml:2: responses.blockstyle: unknown key; did you mean block_style?`},
		{"[responses]\nBlock_style = \"browser\"\n", "", `x.toml:2: responses.Block_style: unknown key; keys are case-sensitive: did you mean "block_style"?`},
	}
	for _, tt := range tests {
		cfg, err := parse("x.toml", []byte(tt.toml))
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("parse(%q) = %v; want no error", tt.toml, err)
		case tt.wantErr == "" && cfg.Responses.BlockStyle != tt.want:
			t.Errorf("parse(%q): block_style %q; want %q", tt.toml, cfg.Responses.BlockStyle, tt.want)
		case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
			t.Errorf("parse(%q) = %v; want %s", tt.toml, err, tt.wantErr)
		}
	}
}

// FuzzCompile: whatever a config file holds, decoding and checking it
// never panics, every problem names its key, and a config Compile accepts
// compiles again, from the Policy's own copy, to the same answer.
func FuzzCompile(f *testing.F) {
	for _, name := range []string{"../../config.toml", "../config/testdata/bad.toml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("[[agents]]\nuser_agent = \"*\"\ntoken = \"X\"\n[[sites]]\nhost = \"*.a.b\"\npolicy = \"deny\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse("fuzz.toml", data)
		if cfg == nil {
			return
		}
		p, cerr := Compile(cfg)
		if cerr != nil {
			for _, e := range cerr.(interface{ Unwrap() []error }).Unwrap() {
				var ce *config.Error
				if !errors.As(e, &ce) || ce.Key == "" {
					t.Fatalf("Compile: %v; want a *config.Error naming its key", e)
				}
			}
			return
		}
		if err == nil {
			if _, err := Compile(p.Config()); err != nil {
				t.Fatalf("Compile accepted a config, then refused its own copy: %v", err)
			}
		}
	})
}

// TestCompileChecksValues: Compile is the only validator, for a config
// built in code as for one read from a file: values a file could not
// even spell are refused, each naming its key.
func TestCompileChecksValues(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Limits.MaxConnections = 0
	cfg.Robots.CacheMaxBytes = 0
	cfg.Robots.CacheTTL = -1
	cfg.Mode = "Enforce"
	cfg.Sites = []config.SiteRule{{Host: "a.example", Policy: "maybe"}}
	_, err := Compile(cfg)
	for _, key := range []string{"limits.max_connections", "robots.cache_max_bytes", "robots.cache_ttl", "mode", "sites[0].policy"} {
		if err == nil || !strings.Contains(err.Error(), "config: "+key+": ") {
			t.Errorf("Compile: %v; want an error for %s", err, key)
		}
	}
	if _, err := Compile(config.Default()); err != nil {
		t.Errorf("Compile(Default()) = %v", err)
	}
}

// TestConfigErrorsNotCascaded: a value the file could not be read for is
// its one error; no check of the default it kept adds a second that
// misleads ("agents[0]: needs token, ..." when the token was there, of
// the wrong type or misspelled).
func TestConfigErrorsNotCascaded(t *testing.T) {
	t.Parallel()
	tests := []struct{ toml, want string }{
		{"[[agents]]\nuser_agent = \"x*\"\npurpose = \"ai-train\"\n", "c.toml:3: agents[0].purpose: want an array of strings, got a string"},
		{"[[agents]]\nuser_agent = \"x*\"\ntoken = 5\n", "c.toml:3: agents[0].token: want a string, got an integer"},
		// A problem elsewhere is still found beside it.
		{"listen = \"nowhere\"\n[[agents]]\nuser_agent = \"x*\"\ntoken = 5\n", "c.toml:1: listen: \"nowhere\" is not host:port\nc.toml:4: agents[0].token: want a string, got an integer"},
		// An unread member the check does not read, or an unknown key, hides nothing.
		{"[[agents]]\nuser_agent = \"x*\"\nclient = \"not-an-ip\"\n", "c.toml:1: agents[0]: needs token, also, purpose or block_style: the tokens to obey, the purposes to declare, or how to answer a block\nc.toml:3: agents[0].client: want an array of strings, got a string"},
		{"[[agents]]\nuser_agent = \"x*\"\nclinet = [\"10.0.0.1\"]\n", "c.toml:1: agents[0]: needs token, also, purpose or block_style: the tokens to obey, the purposes to declare, or how to answer a block\nc.toml:3: agents[0].clinet: unknown key; did you mean client?"},
		// A value's own check is left out when the value was unread.
		{"[[agents]]\nclient = \"x\"\ntoken = \"A\"\n", "c.toml:2: agents[0].client: want an array of strings, got a string"},
		// Nothing unread: the check speaks.
		{"[[agents]]\nuser_agent = \"x*\"\n", "c.toml:1: agents[0]: needs token, also, purpose or block_style: the tokens to obey, the purposes to declare, or how to answer a block"},
	}
	for _, tt := range tests {
		_, err := parse("c.toml", []byte(tt.toml))
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q:\n%v\nwant\n%s", tt.toml, err, tt.want)
		}
	}
}
