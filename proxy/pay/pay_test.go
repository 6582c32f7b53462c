package pay

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestParseAmount(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, want string
		nanos    int64
	}{
		{"USD 0.01", "USD 0.01", 10_000_000},
		{"usd 1", "USD 1.00", Scale},
		{"EUR  2.5", "EUR 2.50", 2_500_000_000},
		{" USD 0.000000001 ", "USD 0.000000001", 1},
		{"JPY 1000000", "JPY 1000000.00", 1_000_000 * Scale},
	} {
		a, err := ParseAmount(tt.in)
		if err != nil || a.String() != tt.want || a.Nanos != tt.nanos {
			t.Errorf("ParseAmount(%q) = %v (%d), %v; want %s (%d)", tt.in, a, a.Nanos, err, tt.want, tt.nanos)
		}
	}
	for _, bad := range []string{"", "USD", "0.01 USD", "US 1", "USD1", "USD -1", "USD 1e3", "USD 0.0000000001", "USD 1,00", "USD .5", "USD 1000001", "U$D 1", "USD 0x10", "USD 1.2.3", "USD 1."} {
		if a, err := ParseAmount(bad); err == nil {
			t.Errorf("ParseAmount(%q) = %v; want an error", bad, a)
		}
	}
}

// TestLocalBudget: reservations stay within the day's limit when many
// race for it; a refund gives back; a new day starts at nothing.
func TestLocalBudget(t *testing.T) {
	t.Parallel()
	b, err := NewLocal("")
	if err != nil {
		t.Fatal(err)
	}
	price, limit := Amount{"USD", 10_000_000}, Amount{"USD", 105_000_000} // 0.01, 0.105: 10 fit
	var wg sync.WaitGroup
	var mu sync.Mutex
	paid := 0
	for range 50 {
		wg.Go(func() {
			if _, ok, _ := b.Reserve(t.Context(), "2026-11-27", price, limit); ok {
				mu.Lock()
				paid++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if paid != 10 {
		t.Errorf("%d reservations of 0.01 within 0.105; want 10", paid)
	}
	b.Refund(t.Context(), "2026-11-27", price)
	if spent, ok, _ := b.Reserve(t.Context(), "2026-11-27", price, limit); !ok || spent.Nanos != 100_000_000 {
		t.Errorf("after a refund: %v, %v; want room for one more, 0.10 spent", spent, ok)
	}
	if spent, ok, _ := b.Reserve(t.Context(), "2026-11-28", price, limit); !ok || spent.Nanos != price.Nanos {
		t.Errorf("a new day: %v, %v; want a fresh budget", spent, ok)
	}
	// A request that began the day before settles after midnight: the
	// new day's spending is kept, not replaced.
	b.Reserve(t.Context(), "2026-11-27", Amount{"USD", 1}, Unbounded("USD"))
	if spent, _ := b.Spent(t.Context(), "2026-11-28", "USD"); spent.Nanos != price.Nanos {
		t.Errorf("the new day after a late settlement of the old one: %v; want %v", spent, price)
	}
	b.Reserve(t.Context(), "2026-11-29", price, limit)
	if spent, _ := b.Spent(t.Context(), "2026-11-27", "USD"); spent.Nanos != 0 {
		t.Errorf("a third day kept: %v spent on 2026-11-27; want it forgotten", spent)
	}
	if _, _, err := b.Reserve(t.Context(), "2026-11-28", Amount{"EUR", 1}, limit); err == nil {
		t.Error("a price in another currency was reserved")
	}
}

// TestLocalBudgetKept: a Local with a file keeps the day's spending
// across a restart, and refuses a file it cannot read.
func TestLocalBudgetKept(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/spent.json"
	b, err := NewLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	price, limit := Amount{"USD", 10}, Amount{"USD", 25}
	b.Reserve(t.Context(), "2026-11-27", price, limit)
	b.Reserve(t.Context(), "2026-11-27", price, limit)
	again, err := NewLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	if spent, _ := again.Spent(t.Context(), "2026-11-27", "USD"); spent.Nanos != 20 {
		t.Errorf("after a restart: %v spent; want 20 billionths", spent)
	}
	if _, ok, _ := again.Reserve(t.Context(), "2026-11-27", price, limit); ok {
		t.Error("after a restart, the day's budget was spent again")
	}
	os.WriteFile(path, []byte("{not json"), 0o600)
	if _, err := NewLocal(path); err == nil {
		t.Error("a budget file that does not read: no error")
	}
}

func FuzzParseAmount(f *testing.F) {
	for _, s := range []string{"USD 0.01", "EUR 1", "usd 0.000000001", "JPY 1000000", "USD 1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAmount(s)
		if err != nil {
			return
		}
		if a.Nanos < 0 || a.Nanos > maxAmount {
			t.Fatalf("ParseAmount(%q) = %d billionths", s, a.Nanos)
		}
		b, err := ParseAmount(a.String())
		if err != nil || b != a {
			t.Fatalf("ParseAmount(%q) = %v; its String %q reads back as %v, %v", s, a, a.String(), b, err)
		}
	})
}

// TestFree: the paths never paid for, in any spelling robots.Normalize
// reads as them, with or without a query; letter case counts.
func TestFree(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		target string
		free   bool
	}{
		{"/robots.txt", true},
		{"/robots.txt?x=1", true},
		{"/%72obots.txt", true},
		{"/%72%6Fbots.txt", true},
		{"/sitemap.xml", true},
		{"/a/../sitemap.xml", true},
		{"/security.txt", true},
		{"/.well-known/security.txt", true},
		{"/.well-known/%73ecurity.txt?", true},
		{"/crawlers.json", true},
		{"/ROBOTS.TXT", false},
		{"/robots.txt/", false},
		{"/robots.txt.bak", false},
		{"/sitemap.xml.gz", false},
		{"/sitemap_index.xml", false},
		{"//robots.txt", false},
		{"/robots%2Etxt", true},
		{"/robots%2Ftxt", false},
		{"/article", false},
		{"", false},
		{"*", false},
	} {
		if got := Free(tt.target); got != tt.free {
			t.Errorf("Free(%q) = %v; want %v", tt.target, got, tt.free)
		}
	}
}

// TestParseError: a crawler-error value is one code of letters and
// digits, at most 64 bytes; anything else is not a code.
func TestParseError(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"PaymentFailed", "PaymentFailed"},
		{" InternalError\t", "InternalError"},
		{"SomethingNew2027", "SomethingNew2027"},
		{"", ""},
		{"Payment Failed", ""},
		{"PaymentFailed, InternalError", ""},
		{"Ünicode", ""},
		{"<script>", ""},
		{strings.Repeat("A", 64), strings.Repeat("A", 64)},
		{strings.Repeat("A", 65), ""},
		{strings.Repeat(" ", 100) + "A", ""},
	} {
		if got := ParseError(tt.in); got != tt.want {
			t.Errorf("ParseError(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
	if got := Describe("SomethingNew2027"); !strings.Contains(got, "does not document") {
		t.Errorf("Describe of an unknown code = %q", got)
	}
}

// FuzzParseError: whatever a site sends, ParseError returns a code of
// letters and digits within the bound, or nothing, and never panics.
func FuzzParseError(f *testing.F) {
	seeds, err := os.ReadFile("testdata/crawler-errors.txt")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range strings.Split(string(seeds), "\n") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		code := ParseError(v)
		if len(code) > maxErrorCode || code != "" && code != strings.Trim(v, " \t") {
			t.Fatalf("ParseError(%q) = %q", v, code)
		}
		for i := 0; i < len(code); i++ {
			if c := code[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
				t.Fatalf("ParseError(%q) = %q: byte %q", v, code, c)
			}
		}
		_ = Explain(code)
	})
}

// TestRecent: at most max places, the least recently used forgotten
// first; a new day forgets them all; a late mark of the day before is
// not kept; a place is its origin's alone, a section's kinds apart; an
// origin stopped is not offered in any of its places, that day.
func TestRecent(t *testing.T) {
	t.Parallel()
	const day, next = "2026-11-27", "2026-11-28"
	root, news, img := Place{}, Place{Section: "news"}, Place{Section: "img"}
	css := PlaceOf("/main.css", nil)
	r := NewRecent(2)
	r.Mark(day, "https://a:443", root)
	r.Mark(day, "https://b:443", root)
	if !r.Charged(day, "https://a:443", root) { // a is now the most recent
		t.Fatal("a forgotten")
	}
	r.Mark(day, "https://c:443", root)
	if r.Charged(day, "https://b:443", root) || !r.Charged(day, "https://a:443", root) || !r.Charged(day, "https://c:443", root) || r.Len() != 2 {
		t.Errorf("after a third origin: want b forgotten, a and c kept, 2 in all (%d)", r.Len())
	}
	if r.Charging(day, "https://b:443") || !r.Charging(day, "https://a:443") || r.Charging(next, "https://a:443") {
		t.Error("Charging: want b, its one place forgotten, not charging; a charging today only")
	}
	if r.Charged(day, "https://a:443", news) || r.Charged(day, "https://a:444", root) || r.Charged(day, "https://a:443", css) {
		t.Error("a section, a kind or an origin that never charged is remembered")
	}
	r.Charged(day, "https://a:443", root) // the most recent: c is forgotten next
	r.Mark(day, "https://a:443", news)
	if !r.Charging(day, "https://a:443") || r.Charging(day, "https://c:443") {
		t.Error("Charging: want a charging in two places, c in none")
	}
	r.Stop(day, "https://a:443")
	if r.Charged(day, "https://a:443", news) || r.Charged(day, "https://a:443", root) || r.Charging(day, "https://a:443") {
		t.Error("an origin stopped is still offered")
	}
	if r.Charged(next, "https://a:443", news) {
		t.Error("an origin of the day before is remembered the next day")
	}
	r.Mark(next, "https://d:443", img)
	r.Mark(day, "https://e:443", root)
	r.Stop(day, "https://d:443")
	if r.Len() != 1 || !r.Charged(next, "https://d:443", img) || r.Charged(next, "https://e:443", root) {
		t.Errorf("a new day: want d alone, not stopped by a late stop of the day before (%d)", r.Len())
	}
	r.Mark(next, "https://d:443", css)
	if !r.Charged(next, "https://d:443", PlaceOf("/theme.CSS?v=2", nil)) || r.Charged(next, "https://d:443", root) {
		t.Error("a kind charged: want the same kind offered, the section's pages not")
	}
	big := NewRecent(0)
	for i := range MaxRecent + 10 {
		big.Mark(day, strconv.Itoa(i), root)
	}
	if big.Len() != MaxRecent {
		t.Errorf("Len = %d; want the bound, %d", big.Len(), MaxRecent)
	}
}

// TestSection: the first segment of a path when more follows it, else
// the root; the query is not the path.
func TestSection(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ target, want string }{
		{"/news/2026/a", "news"},
		{"/news/b?x=1", "news"},
		{"/news/", "news"},
		{"/news", ""},
		{"/news?a/b", ""},
		{"/story-1", ""},
		{"/", ""},
		{"", ""},
		{"//x/y", ""},
		{"/img/1.png", "img"},
		{"*", ""},
		{"http://a.example/news/1", ""},
	} {
		if got := Section(tt.target); got != tt.want {
			t.Errorf("Section(%q) = %q; want %q", tt.target, got, tt.want)
		}
	}
}

// kindCase is a line of testdata/kinds.txt: a request and its kind.
type kindCase struct{ target, dest, accept, want string }

// header is the request's header: its Sec-Fetch-Dest, and its Accept
// fields ("; " apart).
func (c kindCase) header() http.Header {
	h := http.Header{}
	if c.dest != "" {
		h.Set("Sec-Fetch-Dest", c.dest)
	}
	for v := range strings.SplitSeq(c.accept, "; ") {
		if v != "" {
			h.Add("Accept", v)
		}
	}
	return h
}

// readKinds reads testdata/kinds.txt.
func readKinds(t testing.TB) []kindCase {
	t.Helper()
	data, err := os.ReadFile("testdata/kinds.txt")
	if err != nil {
		t.Fatal(err)
	}
	var cases []kindCase
	for i, line := range strings.Split(string(data), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 4 {
			t.Fatalf("testdata/kinds.txt:%d: want 4 fields apart by |, got %d", i+1, len(f))
		}
		for j := range f {
			f[j] = strings.TrimSpace(f[j])
		}
		cases = append(cases, kindCase{f[0], f[1], f[2], f[3]})
	}
	return cases
}

// TestKindOf: a request's extension (its last segment's, read as sent),
// and whether it says it is a sub-resource (testdata/kinds.txt).
func TestKindOf(t *testing.T) {
	t.Parallel()
	for _, c := range readKinds(t) {
		if got := KindOf(c.target, c.header()).String(); got != c.want {
			t.Errorf("KindOf(%q, Sec-Fetch-Dest %q, Accept %q) = %s; want %s", c.target, c.dest, c.accept, got, c.want)
		}
	}
}

// FuzzKindOf: whatever a client sends, KindOf returns without a panic,
// and the same kind for the same request; its extension is at most 8
// lower-case letters or digits, and one the target ends with.
func FuzzKindOf(f *testing.F) {
	for _, c := range readKinds(f) {
		f.Add(c.target, c.dest, c.accept)
	}
	f.Fuzz(func(t *testing.T, target, dest, accept string) {
		c := kindCase{target: target, dest: dest, accept: accept}
		k := KindOf(target, c.header())
		if k != KindOf(target, c.header()) {
			t.Fatal("two kinds for one request")
		}
		s, _ := strings.CutSuffix(k.String(), " sub-resource")
		if s == "page" {
			return
		}
		ext := strings.TrimPrefix(s, ".")
		path, _, _ := strings.Cut(target, "?")
		if len(ext) > maxExt || strings.ToLower(ext) != ext || !strings.Contains(strings.ToLower(path), "."+ext) {
			t.Fatalf("KindOf(%q) = %s: not an extension of its path", target, s)
		}
	})
}

// TestReserveOffer: an offer is the lower of max_price and the budget
// left, reserved; nothing is offered once the budget is spent.
func TestReserveOffer(t *testing.T) {
	t.Parallel()
	b, _ := NewLocal("")
	n := Negotiator{Budget: b}
	usd := func(s string) Amount { a, _ := ParseAmount("USD " + s); return a }
	terms := Terms{MaxPrice: usd("0.02"), Budget: usd("0.05")}
	for i, want := range []string{"USD 0.02", "USD 0.02", "USD 0.01", ""} {
		got, ok := n.ReserveOffer("2026-11-27", terms)
		if ok != (want != "") || ok && got.String() != want {
			t.Errorf("offer %d = %v, %v; want %q", i+1, got, ok, want)
		}
	}
	if spent, _ := b.Spent(t.Context(), "2026-11-27", "USD"); spent.String() != "USD 0.05" {
		t.Errorf("spent = %v; want the offers reserved, USD 0.05", spent)
	}
}

// BenchmarkOfferCheck: what a request pays for asking whether to offer a
// price, with pay-per-crawl on, as offerPrice asks it: to an origin that
// charged in the request's place ("charged": Charging, then PlaceOf with
// a browser's header, Charged and Free), and to one that never charged
// ("never": Charging alone).
func BenchmarkOfferCheck(b *testing.B) {
	r := NewRecent(0)
	for i := range MaxRecent {
		r.Mark("2026-11-27", "https://site"+strconv.Itoa(i)+".example:443", Place{Section: "articles"})
	}
	h := http.Header{
		"Accept":         {"text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"},
		"Sec-Fetch-Dest": {"document"},
	}
	const target = "/articles/2026/robots-and-proxies?page=2"
	for _, origin := range []string{"https://site17.example:443", "https://never.example:443"} {
		name := "charged"
		if strings.Contains(origin, "never") {
			name = "never"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r.Charging("2026-11-27", origin) && r.Charged("2026-11-27", origin, PlaceOf(target, h)) {
					Free(target)
				}
			}
		})
	}
}
