package robots

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/robotsgate/robotsgate/usage"
)

// want is a compact expected Usage: per purpose "state line" ("refused 3",
// "allowed 0", "" for unstated).
type wantUsage [usage.NumPurposes]string

func compact(u *usage.Usage) wantUsage {
	var w wantUsage
	for p, v := range u {
		if v.State != usage.Unstated {
			w[p] = fmt.Sprintf("%s %d", v.State, v.Line)
		}
	}
	return w
}

var usageTests = []struct {
	name   string
	robots string
	token  string
	path   string
	want   wantUsage // ai-train, ai-input, search
}{
	{"no statements", "User-agent: *\nDisallow: /x\n", "bot", "/", wantUsage{}},
	{"content-usage in the global group", "User-agent: *\nContent-Usage: train-ai=n\n", "bot", "/a", wantUsage{"refused 2", "", ""}},
	{"every category", "User-agent: *\nContent-Usage: train-ai=n, ai-use=y, search=y\n", "bot", "/", wantUsage{"refused 2", "allowed 2", "allowed 2"}},
	{"field name in any case", "User-agent: *\nCONTENT-USAGE: train-ai=n\n", "bot", "/", wantUsage{"refused 2", "", ""}},
	{"only whole field names", "User-agent: *\nContent-Usages: train-ai=n\nContent-Sig: ai-train=no\n", "bot", "/", wantUsage{}},
	{"longest path wins", "User-agent: *\nContent-Usage: train-ai=n\nContent-Usage: /blog/ train-ai=y\n", "bot", "/blog/x", wantUsage{"allowed 3", "", ""}},
	{"shorter path elsewhere", "User-agent: *\nContent-Usage: train-ai=n\nContent-Usage: /blog/ train-ai=y\n", "bot", "/news", wantUsage{"refused 2", "", ""}},
	{"a refusal wins among equals", "User-agent: *\nContent-Usage: /a train-ai=y\nContent-Usage: /a train-ai=n\n", "bot", "/a", wantUsage{"refused 3", "", ""}},
	{"a refusal wins among equals, either order", "User-agent: *\nContent-Usage: /a train-ai=n\nContent-Usage: /a train-ai=y\n", "bot", "/a", wantUsage{"refused 2", "", ""}},
	// attach-05: the longest matching line decides every purpose; what it
	// does not state is unstated (robotsgate fell through to the shorter
	// line, purpose by purpose, until November 2026).
	{"the longest line decides every purpose", "User-agent: *\nContent-Usage: train-ai=n\nContent-Usage: /blog/ search=y\n", "bot", "/blog/x", wantUsage{"", "", "allowed 3"}},
	{"a line that is not a dictionary is no rule", "User-agent: *\nContent-Usage: train-ai=n\nContent-Usage: /blog/ Train-AI=y\n", "bot", "/blog/x", wantUsage{"refused 2", "", ""}},
	{"content-signal still falls through", "User-agent: *\nContent-Signal: ai-train=no\nContent-Signal: /blog/ search=yes\n", "bot", "/blog/x", wantUsage{"refused 2", "", "allowed 3"}},
	{"wildcard and end anchor", "User-agent: *\nContent-Usage: /*.pdf$ train-ai=n\n", "bot", "/docs/a.pdf", wantUsage{"refused 2", "", ""}},
	{"end anchor not matched", "User-agent: *\nContent-Usage: /*.pdf$ train-ai=n\n", "bot", "/docs/a.pdf?x", wantUsage{}},
	{"path not matched", "User-agent: *\nContent-Usage: /private/ train-ai=n\n", "bot", "/public", wantUsage{}},
	{"path escaped like a rule", "User-agent: *\nContent-Usage: /café train-ai=n\n", "bot", "/caf%C3%A9/x", wantUsage{"refused 2", "", ""}},
	{"path with no preferences", "User-agent: *\nContent-Usage: /a\n", "bot", "/a", wantUsage{}},
	{"specific group only", "User-agent: *\nContent-Usage: train-ai=n\nDisallow:\n\nUser-agent: GoodBot\nAllow: /\n", "goodbot", "/", wantUsage{}},
	// A statement is not a rule to the reference's grouping: the next
	// user-agent line joins the same group, and the statement applies to it.
	{"statement between user-agent lines", "User-agent: *\nContent-Usage: train-ai=n\n\nUser-agent: GoodBot\nAllow: /\n", "goodbot", "/", wantUsage{"refused 2", "", ""}},
	{"specific group's own", "User-agent: *\nDisallow:\n\nUser-agent: GPTBot\nContent-Usage: train-ai=n\n", "GPTBot", "/", wantUsage{"refused 5", "", ""}},
	{"merged groups", "User-agent: a\nContent-Usage: train-ai=n\nDisallow: /x\nUser-agent: b\nAllow: /\nUser-agent: a\nContent-Usage: search=n\n", "a", "/", wantUsage{"refused 2", "", "refused 7"}},
	{"blank lines do not end a group", "User-agent: a\n\nContent-Usage: train-ai=n\n", "a", "/", wantUsage{"refused 3", "", ""}},
	{"content-usage before any group applies to all", "Content-Usage: train-ai=n\nUser-agent: *\nDisallow:\n", "bot", "/", wantUsage{"refused 1", "", ""}},
	{"bad value ignored", "User-agent: *\nContent-Usage: train-ai=no, search=y\n", "bot", "/", wantUsage{"", "", "allowed 2"}},
	{"unknown key ignored", "User-agent: *\nContent-Usage: foo=n, genai=n, search=n\n", "bot", "/", wantUsage{"", "", "refused 2"}},
	// draft-ietf-aipref-vocab-08 has three flat categories and ignores
	// unknown keys: the earlier drafts' train-genai and bots state nothing.
	{"train-genai is an unknown key", "User-agent: *\nContent-Usage: train-genai=n\n", "bot", "/", wantUsage{}},
	{"bots is an unknown key", "User-agent: *\nContent-Usage: bots=n\n", "bot", "/", wantUsage{}},
	{"bots beside a category of the vocabulary", "User-agent: *\nContent-Usage: bots=n, search=y\n", "bot", "/", wantUsage{"", "", "allowed 2"}},
	{"string value ignored", "User-agent: *\nContent-Usage: train-ai=\"n\"\n", "bot", "/", wantUsage{}},
	{"parameters ignored", "User-agent: *\nContent-Usage: train-ai=n;q=1\n", "bot", "/", wantUsage{"refused 2", "", ""}},
	{"a key given twice keeps its refusal", "User-agent: *\nContent-Usage: train-ai=n, train-ai=y\n", "bot", "/", wantUsage{"refused 2", "", ""}},
	{"a key given twice, either order", "User-agent: *\nContent-Usage: train-ai=y, train-ai=n\n", "bot", "/", wantUsage{"refused 2", "", ""}},
	{"a bad value does not erase a refusal", "User-agent: *\nContent-Usage: train-ai=n, train-ai=?1\n", "bot", "/", wantUsage{"refused 2", "", ""}},
	{"a dictionary that fails to parse states nothing", "User-agent: *\nContent-Usage: train-ai=n, Search=y\n", "bot", "/", wantUsage{}},
	{"trailing comma fails", "User-agent: *\nContent-Usage: train-ai=n,\n", "bot", "/", wantUsage{}},
	{"comment stripped", "User-agent: *\nContent-Usage: train-ai=n # no training\n", "bot", "/", wantUsage{"refused 2", "", ""}},
	{"without a colon", "User-agent: *\nContent-Usage train-ai=n\n", "bot", "/", wantUsage{"refused 2", "", ""}},
	{"content-signal in a group", "User-agent: *\nContent-Signal: search=yes, ai-train=no\n", "bot", "/", wantUsage{"refused 2", "", "allowed 2"}},
	{"content-signal before any group applies to all", "Content-Signal: ai-input=no\nUser-agent: a\nDisallow:\nUser-agent: b\nDisallow:\n", "b", "/", wantUsage{"", "refused 1", ""}},
	{"content-signal before groups, no group selected", "Content-Signal: ai-train=no\nUser-agent: a\nDisallow:\n", "other", "/", wantUsage{"refused 1", "", ""}},
	{"content-signal values in any case, spaces", "User-agent: *\nContent-Signal: AI-Train = No ,search=YES,junk,ai-input=maybe\n", "bot", "/", wantUsage{"refused 2", "", "allowed 2"}},
	{"content-signal with semicolons and quotes", "User-agent: *\nContent-Signal: search=yes; ai-train=\"no\"\n", "bot", "/", wantUsage{"refused 2", "", "allowed 2"}},
	{"content-signal use=full does not lift a refusal", "User-agent: *\nContent-Signal: ai-train=no, search=yes, use=full\n", "bot", "/", wantUsage{"refused 2", "", "allowed 2"}},
	{"content-signal use= alone states nothing", "User-agent: *\nContent-Signal: use=immediate\n", "bot", "/", wantUsage{}},
	{"content-signal key twice", "User-agent: *\nContent-Signal: ai-train=no, ai-train=yes\n", "bot", "/", wantUsage{"refused 2", "", ""}},
	{"content-signal with a path", "User-agent: *\nContent-Signal: ai-train=yes\nContent-Signal: /members/ ai-train=no\n", "bot", "/members/x", wantUsage{"refused 3", "", ""}},
	{"both syntaxes: either refusal refuses", "User-agent: *\nContent-Usage: /blog/ train-ai=y\nContent-Signal: ai-train=no\n", "bot", "/blog/post", wantUsage{"refused 3", "", ""}},
	{"both syntaxes: grants", "User-agent: *\nContent-Usage: train-ai=y\nContent-Signal: search=yes\n", "bot", "/", wantUsage{"allowed 2", "", "allowed 3"}},
	{"both syntaxes: refusal found in content-usage first", "User-agent: *\nContent-Signal: ai-train=no\nContent-Usage: train-ai=n\n", "bot", "/", wantUsage{"refused 3", "", ""}},
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range usageTests {
		for _, opts := range [][]Option{nil, {WithNormalization()}} {
			r := Parse([]byte(tt.robots), opts...)
			path := tt.path
			if len(opts) > 0 {
				path = Normalize(path)
			}
			u := r.Group(tt.token).Usage(path)
			if got := compact(&u); got != tt.want {
				t.Errorf("%s (normalised %v): Usage(%q) = %q; want %q\n%s", tt.name, len(opts) > 0, tt.path, got, tt.want, tt.robots)
			}
			for p, v := range u {
				if v.State != usage.Unstated && !strings.HasPrefix(v.Statement, "content-") {
					t.Errorf("%s: %s statement %q; want a content-usage or content-signal line", tt.name, usage.Purpose(p), v.Statement)
				}
			}
		}
	}
}

func TestUsageStatementText(t *testing.T) {
	t.Parallel()
	r := Parse([]byte("User-agent: *\nContent-Usage:   /a%2fb  train-ai=n,  search=y   # c\nContent-Signal: search=yes, use=reference\n"))
	u := r.Group("x").Usage("/a%2Fb")
	if got, want := u[usage.AITrain].Statement, "content-usage: /a%2Fb train-ai=n,  search=y"; got != want {
		t.Errorf("statement = %q; want %q", got, want)
	}
	st := r.Statements()
	if len(st) != 2 {
		t.Fatalf("Statements() = %+v; want 2", st)
	}
	if st[0].Path != "/a%2Fb" || st[0].Value != "train-ai=n,  search=y" || st[0].Line != 2 || st[0].Group != 0 ||
		st[0].State != (usage.States{usage.Refused, usage.Unstated, usage.Granted}) {
		t.Errorf("Statements()[0] = %+v", st[0])
	}
	if st[1].Field != "content-signal" || st[1].Use != "reference" || st[1].State[usage.Search] != usage.Granted {
		t.Errorf("Statements()[1] = %+v", st[1])
	}
	if got := r.Group("x").Statements(); len(got) != 2 {
		t.Errorf("Group.Statements() = %+v; want both", got)
	}
	if got := (Group{}).Usage("/"); got != (usage.Usage{}) {
		t.Errorf("zero Group Usage = %+v", got)
	}
	var nilRobots *Robots
	if nilRobots.Statements() != nil || nilRobots.Group("x").Statements() != nil {
		t.Error("a nil *Robots has statements")
	}
}

// TestUsageKeepsVerdicts checks that usage lines change no allow/disallow
// verdict on any conformance case, wherever they stand: the reference
// ignores them, grouping included.
func TestUsageKeepsVerdicts(t *testing.T) {
	t.Parallel()
	inserts := []string{"Content-Usage: train-ai=n", "Content-Signal: ai-train=no, search=yes", "content-usage /x train-ai=y"}
	for _, c := range conformanceCases(t) {
		body := string(c.body(t))
		want := Parse([]byte(body)).TestURL(c.Agent, c.URL)
		lines := strings.SplitAfter(body, "\n")
		for at := range min(len(lines), 6) {
			if at == 0 && strings.HasPrefix(body, "\xef") {
				continue // a byte order mark counts only at the start
			}
			for _, ins := range inserts {
				mod := strings.Join(lines[:at], "") + ins + "\n" + strings.Join(lines[at:], "")
				got := Parse([]byte(mod)).TestURL(c.Agent, c.URL)
				if got.Allowed != want.Allowed || got.Rule() != want.Rule() {
					t.Fatalf("%s: %q inserted at line %d: %v %q; want %v %q", c.Name, ins, at+1, got.Allowed, got.Rule(), want.Allowed, want.Rule())
				}
				if ref, _ := refAllowed(mod, c.Agent, c.URL); ref != c.Allowed {
					t.Fatalf("%s: the transliterated reference changed its answer with %q at line %d", c.Name, ins, at+1)
				}
			}
		}
	}
}

// TestUsageCorpus reads the statements of the real files that carry them.
func TestUsageCorpus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file  string
		token string
		want  wantUsage
		use   string
	}{
		{"www.ebsco.com.txt", "bot", wantUsage{"allowed 6", "allowed 6", "allowed 6"}, ""},
		// lobsters states its signals in the group of named search bots
		// only, after their rules: other bots are told nothing.
		{"lobsters.txt", "Kagibot", wantUsage{"refused 14", "refused 14", "allowed 14"}, ""},
		{"lobsters.txt", "bot", wantUsage{}, ""},
		{"www.researchsquare.com.txt", "bot", wantUsage{"refused 30", "", "allowed 30"}, "reference"},
	}
	for _, tt := range tests {
		body, err := os.ReadFile(filepath.Join("testdata", "corpus", tt.file))
		if err != nil {
			t.Fatal(err)
		}
		r := Parse(body, WithNormalization())
		if got := r.Group(tt.token).Usage("/"); compact(&got) != tt.want {
			t.Errorf("%s: Group(%q).Usage(\"/\") = %q; want %q", tt.file, tt.token, compact(&got), tt.want)
		}
		if st := r.Statements(); len(st) != 1 || st[0].Use != tt.use {
			t.Errorf("%s: Statements() = %+v; want one, use %q", tt.file, st, tt.use)
		}
	}
}

// TestUsageEverywhere: a purpose refused on every path, kind by kind: a
// grant of one kind on a longer path does not lift the other kind's
// refusal.
func TestUsageEverywhere(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, robots string
		want         wantUsage
	}{
		{"refused everywhere", "User-agent: *\nContent-Usage: train-ai=n\n", wantUsage{"refused 2", "", ""}},
		{"a longer grant lifts it", "User-agent: *\nContent-Usage: train-ai=n\nContent-Usage: /public/ train-ai=y\n", wantUsage{}},
		{"a path refusal is not everywhere", "User-agent: *\nContent-Usage: /private/ train-ai=n\n", wantUsage{}},
		{"the other kind still refuses", "User-agent: *\nContent-Usage: train-ai=n\nContent-Usage: /public/ train-ai=y\nContent-Signal: ai-train=no\n", wantUsage{"refused 4", "", ""}},
		{"an equal grant does not lift it", "User-agent: *\nContent-Usage: / train-ai=n\nContent-Usage: / train-ai=y\n", wantUsage{"refused 2", "", ""}},
		{"a signal before any group", "Content-Signal: ai-input=no\nUser-agent: *\nDisallow:\n", wantUsage{"", "refused 1", ""}},
	}
	for _, tt := range tests {
		u := Parse([]byte(tt.robots), WithNormalization()).Group("bot").UsageEverywhere()
		if got := compact(&u); got != tt.want {
			t.Errorf("%s: UsageEverywhere = %q; want %q", tt.name, got, tt.want)
		}
	}
}

// attachCase is one line of testdata/aipref-attach-05.jsonl: robots.txt's
// Content-Usage lines as draft-ietf-aipref-attach-05 reads them, extended
// from its own example: what the group of agent says of path ("state
// line" by purpose name; absent for unstated), whether path may be
// crawled, and, when everywhere is given, what UsageEverywhere says.
type attachCase struct {
	Name       string            `json:"name"`
	Robots     string            `json:"robots"`
	Agent      string            `json:"agent"`
	Path       string            `json:"path"`
	Crawl      bool              `json:"crawl"`
	Want       map[string]string `json:"want"`
	Everywhere map[string]string `json:"everywhere"`
}

func named(u *usage.Usage) map[string]string {
	out := map[string]string{}
	for p, v := range u {
		if v.State != usage.Unstated {
			out[usage.Purpose(p).String()] = fmt.Sprintf("%s %d", v.State, v.Line)
		}
	}
	return out
}

func TestAttach05(t *testing.T) {
	t.Parallel()
	cases := readJSONL[attachCase](t, "aipref-attach-05.jsonl")
	if len(cases) < 20 {
		t.Fatalf("%d cases; want the file's", len(cases))
	}
	for _, c := range cases {
		for _, opts := range [][]Option{nil, {WithNormalization()}} {
			g := Parse([]byte(c.Robots), opts...).Group(c.Agent)
			path := c.Path
			if len(opts) > 0 {
				path = Normalize(path)
			}
			u := g.Usage(path)
			if got := named(&u); fmt.Sprint(got) != fmt.Sprint(c.Want) {
				t.Errorf("%s (normalised %v): Usage(%q) = %v; want %v", c.Name, len(opts) > 0, c.Path, got, c.Want)
			}
			if got := g.Test(path).Allowed; got != c.Crawl {
				t.Errorf("%s: Test(%q) allowed %v; want %v", c.Name, c.Path, got, c.Crawl)
			}
			if c.Everywhere == nil {
				continue
			}
			e := g.UsageEverywhere()
			if got := named(&e); fmt.Sprint(got) != fmt.Sprint(c.Everywhere) {
				t.Errorf("%s: UsageEverywhere() = %v; want %v", c.Name, got, c.Everywhere)
			}
		}
	}
}
