package config

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMessages holds the config's error messages to what a reader needs:
// each names its file, line and key, an unknown key or table the nearest
// known one, and a TOML syntax error the key it was reading. Each case is
// a config in testdata/messages.
func TestMessages(t *testing.T) {
	t.Parallel()
	tests := []struct{ file, want string }{
		{"misspelled-key.toml", "misspelled-key.toml:2: politeness.crawl_dealy: unknown key; did you mean crawl_delay?"},
		{"misspelled-table.toml", "misspelled-table.toml:3: politenes: unknown table; did you mean politeness?"},
		{"unknown-table.toml", "unknown-table.toml:2: proxy: unknown table"},
		{"unknown-array.toml", "unknown-array.toml:3: agent: unknown table; did you mean agents?"},
		{"dotted-key.toml", "dotted-key.toml:1: politeness.crawl_dealy: unknown key; did you mean crawl_delay?"},
		{"second-entry.toml", "second-entry.toml:7: agents[1].tokn: unknown key; did you mean token?"},
		{"entry-subtable.toml", "entry-subtable.toml:4: sites[0].limits: unknown table"},
		{"multiline-string.toml", "multiline-string.toml:7: upstream.block_privat: unknown key; did you mean block_private?"},
		{"multiline-array.toml", "multiline-array.toml:6: cluster.secrte: unknown key; did you mean secret?"},
		{"far-from-any.toml", "far-from-any.toml:1: bogus: unknown key"},
		{"syntax-value.toml", "syntax-value.toml:2: robots.cache_ttl: TOML syntax: expected a top-level item to end with a newline, comment, or EOF, but got 'h' instead"},
		{"syntax-string.toml", "syntax-string.toml:4: politeness.max_wait: TOML syntax: strings cannot contain newlines"},
		{"syntax-header.toml", "syntax-header.toml:4: tls: TOML syntax: expected '.' or ']' to end table name, but the line ends"},
		{"syntax-array-header.toml", "syntax-array-header.toml:3: agents[0]: TOML syntax: expected '.' or ']' to end table name, but the line ends"},
		{"syntax-header-eof.toml", "syntax-header-eof.toml:3: tls: TOML syntax: expected '.' or ']' to end table name, but the file ends"},
		{"syntax-no-value.toml", "syntax-no-value.toml:2: politeness.max_wait: TOML syntax: expected value but the line ends"},
		{"syntax-no-equals.toml", "syntax-no-equals.toml:2: politeness: TOML syntax: expected '.' or '=', but the line ends"},
		{"table-not-array.toml", "table-not-array.toml:1: agents: want an array of tables ([[agents]]), got a table"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(filepath.Join("testdata", "messages", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(tt.file, data)
			if err == nil || err.Error() != tt.want {
				t.Errorf("Parse(%s) = %v\nwant %s", tt.file, err, tt.want)
			}
		})
	}
}

// TestSuggest holds suggest to near misspellings only.
func TestSuggest(t *testing.T) {
	t.Parallel()
	fs := fields{"crawl_delay": nil, "min_interval": nil, "max_delay": nil, "max_wait": nil, "max_backoff": nil}
	tests := []struct{ k, want string }{
		{"crawl_dealy", "crawl_delay"}, // a swap is one edit
		{"crawldelay", "crawl_delay"},
		{"Crawl_Delay", "crawl_delay"},
		{"max_wiat", "max_wait"},
		{"max_dealy", "max_delay"},
		{"maxwait", "max_wait"},
		{"delay", ""},
		{"bogus", ""},
		{"x", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := suggest(tt.k, fs); got != tt.want {
			t.Errorf("suggest(%q) = %q; want %q", tt.k, got, tt.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"abc", "abc", 0},
		{"crawl_dealy", "crawl_delay", 1}, {"kitten", "sitting", 3}, {"ca", "abc", 3},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d; want %d", tt.a, tt.b, got, tt.want)
		}
		if got := editDistance(tt.b, tt.a); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d; want %d", tt.b, tt.a, got, tt.want)
		}
	}
}
