package robots

import (
	"strings"
	"testing"
)

// userAgentTests are User-Agent headers and the token their sender obeys; ""
// means the header names none and the caller falls back to default_agent.
var userAgentTests = []struct {
	ua, want string
}{
	// The examples of docs/decision.md, "How a path is decided" (step 3's token).
	{"FooBot/1.2 (+url)", "FooBot"},
	{"MJ12bot/v1.4", "MJ"},
	{"Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.0; +url)", "GPTBot"},
	{"Mozilla/5.0 (X11; Linux) Chrome/120", ""},
	{"360Spider", ""},
	{"Mozilla/5.0 (compatible; FooBot/2.1; +url)", "FooBot"},
	{"", ""},

	// Common libraries and crawlers.
	{"python-requests/2.31.0", "python-requests"},
	{"curl/8.5.0", "curl"},
	{"Scrapy/2.11 (+https://scrapy.org)", "Scrapy"},
	{"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "Googlebot"},
	{"Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "Googlebot"},
	{"Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm) Chrome/116.0.1938.76 Safari/537.36", "bingbot"},
	{"Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)", "AhrefsBot"},
	{"CCBot/2.0 (https://commoncrawl.org/faq/)", "CCBot"},
	{"Go-http-client/1.1", "Go-http-client"},
	{"Wget/1.21.4", "Wget"},
	{"facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)", "facebookexternalhit"},
	{"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36", ""},

	// Product names and how they are cut.
	{"FooBot", "FooBot"},
	{"FooBot(+url)", "FooBot"},
	{"FooBot\t/1.0", "FooBot"},
	{"  FooBot/1.0", "FooBot"},
	{"\tFooBot/1.0", "FooBot"},
	{"Foo_Bar-Baz/1", "Foo_Bar-Baz"},
	{"Foo.Bot/1", "Foo"},
	{"Foo+Bot/1", "Foo"},
	{"Fooé/1", "Foo"},
	{"/1.0", ""},
	{" ", ""},
	{"(compatible)", ""},

	// Mozilla names a browser, in any case, unless a compatible item follows.
	{"Mozilla", ""},
	{"mozilla/5.0", ""},
	{"MOZILLA/5.0 (X11)", ""},
	{"Mozilla/5.0 (compatible)", ""},
	{"Mozilla/5.0 (compatible;)", ""},
	{"Mozilla/5.0 (compatible; ; FooBot/1)", "FooBot"},
	{"Mozilla/5.0 (Compatible; FooBot/1)", "FooBot"},
	{"Mozilla/5.0 ( compatible ;FooBot/1)", "FooBot"},
	{"Mozilla/5.0 (compatible; 360Spider)", ""},
	{"Mozilla/5.0 (compatible; FooBot/1", "FooBot"},
	{"Mozillabot/1.0", "Mozillabot"},

	// The compatible item wins over the first product.
	{"BarBot/1.0 (compatible; FooBot/2.0)", "FooBot"},
	{"BarBot/1.0 (+url) (compatible; FooBot/2.0)", "FooBot"},
	{"BarBot/1.0 (compatible FooBot/2.0)", "BarBot"},
	{"BarBot/1.0 compatible; FooBot/2.0", "BarBot"},
	{"BarBot/1.0 (x; compatible) FooBot/2.0", "BarBot"},
}

func TestTokenFromUserAgent(t *testing.T) {
	t.Parallel()
	for _, tt := range userAgentTests {
		if got := TokenFromUserAgent(tt.ua); got != tt.want {
			t.Errorf("TokenFromUserAgent(%q) = %q; want %q", tt.ua, got, tt.want)
		}
	}
}

func TestExtractToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"Googlebot/2.1", "Googlebot"},
		{"Googlebot", "Googlebot"},
		{"MJ12bot", "MJ"},
		{"360Spider", ""},
		{"", ""},
		{"*", ""},
		{"Foo Bot", "Foo"},
		{"Foo_Bar-baz", "Foo_Bar-baz"},
		{"foo-bot/1.0", "foo-bot"},
		{"FooBot\t", "FooBot"},
		{"Fooé", "Foo"},
		{"ツ", ""},
		{"Foo\x00Bot", "Foo"},
	}
	for _, tt := range tests {
		if got := ExtractToken(tt.in); got != tt.want {
			t.Errorf("ExtractToken(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func TestValidToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{"FooBot", true},
		{"foobot", true},
		{"Foo_Bar-Baz", true},
		{"-", true},
		{"_", true},
		{"MJ", true},
		{"", false},
		{"*", false},
		{"MJ12bot", false},
		{"360Spider", false},
		{"FooBot/1.0", false},
		{"Foo Bot", false},
		{" FooBot", false},
		{"FooBot ", false},
		{"Fooé", false},
		{"Foo.Bot", false},
		{"Foo\x00", false},
	}
	for _, tt := range tests {
		if got := ValidToken(tt.in); got != tt.want {
			t.Errorf("ValidToken(%q) = %v; want %v", tt.in, got, tt.want)
		}
	}
}

// FuzzTokenFromUserAgent checks that any header gives either no token or a
// valid one taken from the header itself.
func FuzzTokenFromUserAgent(f *testing.F) {
	for _, tt := range userAgentTests {
		f.Add(tt.ua)
	}
	f.Fuzz(func(t *testing.T, ua string) {
		got := TokenFromUserAgent(ua)
		if got != "" && !ValidToken(got) {
			t.Fatalf("TokenFromUserAgent(%q) = %q; want \"\" or a valid token", ua, got)
		}
		if !strings.Contains(ua, got) {
			t.Fatalf("TokenFromUserAgent(%q) = %q; want a substring of the header", ua, got)
		}
		if ExtractToken(got) != got {
			t.Fatalf("ExtractToken(TokenFromUserAgent(%q)) = %q; want %q", ua, ExtractToken(got), got)
		}
	})
}
