package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/admin"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// sourcesOrigin is a site that states its usage preferences in every way
// robotsgate reads besides robots.txt's own statements: a tdmrep.json, an
// RSL licence named by robots.txt, X-Robots-Tag headers, and meta elements
// in its pages' heads (one page gzip-encoded).
type sourcesOrigin struct {
	*testOrigin
	gzipped  []byte // /meta-gzip.html's body, as sent
	encoding atomic.Value
}

func newSourcesOrigin(t *testing.T) *sourcesOrigin {
	t.Helper()
	tdm, err := os.ReadFile("../usage/source/testdata/usage/tdmrep.json")
	if err != nil {
		t.Fatal(err)
	}
	license, err := os.ReadFile("../usage/source/testdata/usage/license.xml")
	if err != nil {
		t.Fatal(err)
	}
	// And all uses permitted under /open-access/, where tdmrep.json
	// reserves nothing but PDFs.
	license = bytes.Replace(license, []byte("</rsl>"),
		[]byte(`<content url="/open-access/*"><license><permits type="usage">all</permits></license></content></rsl>`), 1)
	head, err := os.ReadFile("../usage/source/testdata/usage/head.html") // tdm-reservation 1, GPTBot: noindex
	if err != nil {
		t.Fatal(err)
	}
	s := &sourcesOrigin{}
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	fmt.Fprintf(zw, "<html><head><meta name=\"robots\" content=\"noai\"></head><body>%s</body></html>", strings.Repeat("text ", 50_000))
	zw.Close()
	s.gzipped = zb.Bytes()
	s.testOrigin = newTestOrigin(t, "", func(w http.ResponseWriter, r *http.Request) {
		s.encoding.Store(r.Header.Get("Accept-Encoding"))
		switch r.URL.Path {
		case "/.well-known/tdmrep.json":
			w.Header().Set("Content-Type", "application/json")
			w.Write(tdm)
		case "/license.xml":
			w.Header().Set("Content-Type", "application/rsl+xml")
			w.Write(license)
		case "/open-access/tdm1.html": // the file reserves no TDM here; the page's head does
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write(head)
		case "/open/header0", "/open/header1":
			w.Header().Set("TDM-Reservation", r.URL.Path[len(r.URL.Path)-1:])
			w.Write([]byte("page\n"))
		case "/open/meta0.html":
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte(`<!doctype html><head><meta name="tdm-reservation" content="0"></head><body>page</body>`))
		case "/open/xrt":
			w.Header().Set("X-Robots-Tag", "GPTBot: noai")
			w.Write([]byte("page\n"))
		case "/open/meta-gzip.html":
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(s.gzipped)
		default:
			fmt.Fprintf(w, "page %s\n", r.URL.Path)
		}
	})
	// The licence names this origin's host for its absolute <content>:
	// the relative ones apply here.
	s.robots.Store("User-agent: *\nDisallow: /private\nLicense: " + s.URL + "/license.xml\n")
	return s
}

// TestUsageEverySource: a request that declares a purpose is refused by
// each source that refuses it, with that source as evidence (header,
// audit): the RSL licence before the request leaves; tdmrep.json's
// reservation, X-Robots-Tag and a page's meta elements on the response,
// whose body is then withheld (a gzip-encoded page's head is read through
// its coding, and an allowed one reaches the client byte for byte). A
// response's own tdm-reservation, in a header or a meta element,
// overrides the file's. A request with no purpose fetches no usage file.
func TestUsageEverySource(t *testing.T) {
	t.Parallel()
	o := newSourcesOrigin(t)
	p := startProxy(t, loopbackConfig())
	c := p.client()
	licence := "rsl " + o.URL + "/license.xml: "
	tests := []struct {
		path, agent, purpose string
		status               int
		rule                 string // X-Robots-Gate-Rule
		forwarded            bool   // the request reached the origin
	}{
		// RSL: "/" prohibits ai-train; "/news/*" permits search and ai-input only.
		{"/about", "FooBot", "ai-train", 403, licence + "prohibits usage ai-train", false},
		{"/news/today", "FooBot", "ai-train", 403, licence + "permits usage search ai-input", false},
		{"/news/today", "FooBot", "search", 200, "", true},
		// The licence server's terms need a token first.
		{"/premium/report", "FooBot", "ai-input", 403, licence + "license server https://license.publisher.example/api", false},
		// /open/* permits all (RSL); tdmrep.json reserves "/" (so /open/*
		// too), unless the response says otherwise.
		{"/open/page", "FooBot", "ai-input", 403, "tdmrep.json: / tdm-reservation=1", true},
		{"/open/header0", "FooBot", "ai-train", 200, "", true},
		{"/open/header1", "FooBot", "ai-train", 403, "response header tdm-reservation: 1", true},
		{"/open/meta0.html", "FooBot", "ai-train", 200, "", true},
		{"/open/xrt", "GPTBot", "ai-input", 403, "response header x-robots-tag: gptbot: noai", true},
		{"/open/meta-gzip.html", "FooBot", "ai-train", 403, "meta robots: noai", true},
		{"/open/meta-gzip.html", "FooBot", "search", 200, "", true},
		// The file reserves nothing under /open-access/ (but *.pdf); the
		// page's head does.
		{"/open-access/tdm1.html", "FooBot", "ai-train", 403, "meta tdm-reservation: 1", true},
		{"/open-access/tdm1.html", "GPTBot", "search", 403, "meta gptbot: noindex, nofollow", true},
	}
	for _, tt := range tests {
		before := o.count(tt.path)
		countedOnce(t, p, map[int]string{200: "allowed", 403: policy.ActionUsageRefused.String()}[tt.status], "http", func() {
			resp, body := get(t, c, o.URL+tt.path, "User-Agent", tt.agent+"/1.0", policy.PurposeHeader, tt.purpose, "Accept-Encoding", "gzip, br")
			if resp.StatusCode != tt.status || resp.Header.Get("X-Robots-Gate-Rule") != tt.rule {
				t.Errorf("%s for %s (%s): %d %q; want %d %q", tt.path, tt.purpose, tt.agent, resp.StatusCode, resp.Header.Get("X-Robots-Gate-Rule"), tt.status, tt.rule)
			}
			if tt.status == 403 && strings.Contains(body, "text text") {
				t.Errorf("%s: a withheld body reached the client", tt.path)
			}
			if tt.path == "/open/meta-gzip.html" && tt.status == 200 && (body != string(o.gzipped) || resp.Header.Get("Content-Encoding") != "gzip") {
				t.Errorf("%s: %d bytes, %q; want the %d gzip bytes the origin sent", tt.path, len(body), resp.Header.Get("Content-Encoding"), len(o.gzipped))
			}
		})
		if got := o.count(tt.path) - before; got != map[bool]int64{true: 1, false: 0}[tt.forwarded] {
			t.Errorf("%s for %s: the origin got it %d times; want forwarded %v", tt.path, tt.purpose, got, tt.forwarded)
		}
		if tt.status == 403 {
			if rec := p.lastAudit(t); rec["rule"] != tt.rule || rec["decision"] != "usage-refused" {
				t.Errorf("%s: audit %v", tt.path, rec)
			}
		}
	}
	// A request that declares purposes asks only for codings robotsgate can read.
	if enc := o.encoding.Load(); enc != "gzip" {
		t.Errorf("Accept-Encoding sent upstream: %q; want gzip (br dropped)", enc)
	}
	// Each file was fetched once.
	for _, f := range []string{"/.well-known/tdmrep.json", "/license.xml", "/robots.txt"} {
		if n := o.count(f); n != 1 {
			t.Errorf("%s fetched %d times; want 1", f, n)
		}
	}

	// /robots?origin= shows what is held of them.
	_, body := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/robots?origin="+url.QueryEscape(o.URL))
	var entry admin.RobotsEntry
	if err := json.Unmarshal([]byte(body), &entry); err != nil {
		t.Fatal(err)
	}
	if len(entry.Licenses) != 1 || entry.Licenses[0].URL != o.URL+"/license.xml" || entry.Licenses[0].Outcome != "fetched" || entry.Licenses[0].Entries != 6 ||
		entry.TDMRep == nil || entry.TDMRep.Outcome != "fetched" || entry.TDMRep.Entries != 3 {
		t.Errorf("/robots: licenses %+v, tdmrep %+v; want the licence (6 contents) and tdmrep.json (3 entries), fetched", entry.Licenses, entry.TDMRep)
	}

	// No purpose: no file besides robots.txt is fetched.
	q := newSourcesOrigin(t)
	get(t, c, q.URL+"/about")
	get(t, c, q.URL+"/open/meta-gzip.html")
	if n := q.count("/.well-known/tdmrep.json") + q.count("/license.xml"); n != 0 {
		t.Errorf("a crawl with no purpose fetched %d usage files; want none", n)
	}
}

// TestUsageFilesFailing: a tdmrep.json unreachable with no copy held
// answers the requests that declare ai-train or ai-input 503, with a
// Retry-After, and none other; an RSL licence that cannot be read (404,
// or not an RSL document) refuses ai-train and ai-input, not search.
func TestUsageFilesFailing(t *testing.T) {
	t.Parallel()
	var licence atomic.Value
	licence.Store("404")
	// Both origins fail to serve their files: o its tdmrep.json, q (below)
	// its licence, whose robots.txt names it.
	handler := func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/tdmrep.json":
			w.WriteHeader(http.StatusInternalServerError)
		case "/license.xml":
			if licence.Load() == "404" {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.Write([]byte("<html>not a licence</html>"))
		default:
			w.Write([]byte("page\n"))
		}
	}
	o := newTestOrigin(t, "", handler)
	p := startProxy(t, loopbackConfig())
	c := p.client()
	// No License line yet: only tdmrep.json counts.
	o.robots.Store("User-agent: *\nDisallow: /private\n")
	resp, body := get(t, c, o.URL+"/a", policy.PurposeHeader, "ai-input")
	if first, _, _ := strings.Cut(body, "\n"); !strings.HasSuffix(first, "tdmrep.json could not be fetched and no copy is held") {
		t.Errorf("tdmrep.json unreachable: the answer begins %q; want it to name tdmrep.json, not robots.txt", first)
	}
	if resp.StatusCode != 503 || resp.Header.Get("X-Robots-Gate") != "unreachable" || resp.Header.Get("Retry-After") == "" || o.count("/a") != 0 {
		t.Errorf("tdmrep.json unreachable: %d %q Retry-After %q, forwarded %d; want 503 unreachable with a Retry-After, not forwarded",
			resp.StatusCode, resp.Header.Get("X-Robots-Gate"), resp.Header.Get("Retry-After"), o.count("/a"))
	}
	if resp, _ := get(t, c, o.URL+"/a", policy.PurposeHeader, "search"); resp.StatusCode != 200 {
		t.Errorf("search, which tdmrep.json cannot refuse: %d; want 200", resp.StatusCode)
	}

	q := newTestOrigin(t, "", handler)
	q.robots.Store("User-agent: *\nLicense: " + q.URL + "/license.xml\n")
	for _, kind := range []string{"404", "garbage"} {
		licence.Store(kind)
		p.srv.files.Forget(mustOrigin(t, q.URL), q.URL+"/license.xml")
		resp, _ := get(t, c, q.URL+"/b-"+kind, policy.PurposeHeader, "ai-train")
		rule := resp.Header.Get("X-Robots-Gate-Rule")
		if resp.StatusCode != 403 || !strings.HasPrefix(rule, "rsl "+q.URL+"/license.xml: unreadable (") {
			t.Errorf("licence %s: %d %q; want 403, the licence unreadable", kind, resp.StatusCode, rule)
		}
		if resp, _ := get(t, c, q.URL+"/b-"+kind, policy.PurposeHeader, "search"); resp.StatusCode != 200 {
			t.Errorf("licence %s, search: %d; want 200", kind, resp.StatusCode)
		}
	}
}

// TestUsageFilesUnread: statements robotsgate cannot read never open the
// gate: a tdmrep.json cut at robots.max_bytes (valid, but longer than
// robotsgate reads) reserves every path, its answer withheld; a License
// line that is no http(s) URL refuses AI purposes; one that is a path is
// read, resolved against the site.
func TestUsageFilesUnread(t *testing.T) {
	t.Parallel()
	long := `[{"location": "/", "tdm-reservation": 1}` + strings.Repeat(`, {"location": "/x", "tdm-reservation": 1}`, 100) + `]`
	big := newTestOrigin(t, "User-agent: *\nAllow: /\n", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/tdmrep.json" {
			io.WriteString(w, long)
			return
		}
		io.WriteString(w, "SECRET page\n")
	})
	ftp := newTestOrigin(t, "User-agent: *\nLicense: ftp://files.example/license.xml\n", nil)
	rel := newTestOrigin(t, "User-agent: *\nLicense: /license.xml\n", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/license.xml" {
			io.WriteString(w, `<rsl><content url="/"><license><prohibits type="usage">ai-train</prohibits></license></content></rsl>`)
			return
		}
		io.WriteString(w, "page\n")
	})
	cfg := loopbackConfig()
	cfg.Robots.MaxBytes = 1024
	p := startProxy(t, cfg)
	// The body says whether the request reached the site (its answer
	// withheld) or not, and names the statement without a robots.txt
	// line it does not have.
	for _, tt := range []struct{ url, rule, says string }{
		{big.URL + "/a", "tdmrep.json: unreadable (longer than robots.max_bytes)", "is withheld for ai-train"},
		{ftp.URL + "/a", "rsl ftp://files.example/license.xml: unread (not an http or https URL)", "is not fetched for ai-train"},
		{rel.URL + "/a", "rsl " + rel.URL + "/license.xml: prohibits usage ai-train", "is not fetched for ai-train"},
	} {
		resp, body := get(t, p.client(), tt.url, policy.PurposeHeader, "ai-train")
		if resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate-Rule") != tt.rule || strings.Contains(body, "SECRET") ||
			!strings.Contains(body, tt.says) || strings.Contains(body, "line 0") {
			t.Errorf("%s: %d %q; want 403 %q\n%s", tt.url, resp.StatusCode, resp.Header.Get("X-Robots-Gate-Rule"), tt.rule, body)
		}
	}
	if resp, body := get(t, p.client(), big.URL+"/a"); resp.StatusCode != 200 || !strings.Contains(body, "SECRET") {
		t.Errorf("no purpose: %d; want the page", resp.StatusCode)
	}
}

// TestUsageFilesOverloaded: the usage files' fetches in flight are
// bounded (a quarter of robots.max_fetches for each kind): past the
// bound, a request that needs one more is answered 503 overloaded at
// once, and is not forwarded; once a fetch ends, it goes through.
func TestUsageFilesOverloaded(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	stuck := newTestOrigin(t, "User-agent: *\nAllow: /\n", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/tdmrep.json" {
			<-release
			w.Write([]byte(`[]`))
			return
		}
		w.Write([]byte("page\n"))
	})
	other := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	cfg := loopbackConfig()
	cfg.Robots.MaxFetches = 4 // one fetch of each kind of usage file at once
	p := startProxy(t, cfg)
	c := p.client()
	done := make(chan int, 1)
	go func() {
		resp, _ := get(t, c, stuck.URL+"/a", policy.PurposeHeader, "ai-train")
		done <- resp.StatusCode
	}()
	testkit.Eventually(t, "the first tdmrep.json fetch", func() bool { return stuck.count("/.well-known/tdmrep.json") > 0 })
	resp, _ := get(t, c, other.URL+"/b", policy.PurposeHeader, "ai-train")
	if resp.StatusCode != 503 || resp.Header.Get("X-Robots-Gate") != "overloaded" || other.count("/b") != 0 {
		t.Errorf("a second tdmrep.json with the one slot taken: %d %q, forwarded %d; want 503 overloaded, not forwarded",
			resp.StatusCode, resp.Header.Get("X-Robots-Gate"), other.count("/b"))
	}
	if resp, _ := get(t, c, other.URL+"/b", policy.PurposeHeader, "search"); resp.StatusCode != 200 {
		t.Errorf("search, which needs no tdmrep.json: %d; want 200", resp.StatusCode)
	}
	free()
	if code := <-done; code != 200 {
		t.Errorf("the request that waited for its tdmrep.json: %d; want 200", code)
	}
	if resp, _ := get(t, c, other.URL+"/b", policy.PurposeHeader, "ai-train"); resp.StatusCode != 200 {
		t.Errorf("once the slot is free: %d; want 200", resp.StatusCode)
	}
}

// TestUsageBypasses: the ways an attacker (or a careless site) could have
// a declared purpose slip past a site's statements do not open the gate:
// a Range that skips the head, a lenient spelling of a reserved path, a
// site with no robots.txt, a byte order mark, a head that says "<body>"
// in a script, a page with no Content-Type, a coding robotsgate cannot
// read (refusing search too), a grant in another header on a reserved
// path; and a HEAD request, which has no head to read, is not refused.
func TestUsageBypasses(t *testing.T) {
	t.Parallel()
	const noai = `<meta name="robots" content="noai, noindex">`
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte("<html><head><title>t</title></head><body>page</body></html>"))
	zw.Close()
	o := newTestOrigin(t, "", func(w http.ResponseWriter, r *http.Request) {
		page := func(ct, body string) {
			if ct != "" {
				w.Header().Set("Content-Type", ct)
			}
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body)) // honours Range
		}
		switch r.URL.Path {
		case "/.well-known/tdmrep.json":
			w.Write([]byte(`[{"location": "/news/*", "tdm-reservation": 1}]`))
		case "/meta.html":
			page("text/html", "<!DOCTYPE html><html><head>"+noai+"</head><body>secret</body></html>")
		case "/bom.html":
			page("text/html", "\xEF\xBB\xBF<html><head>"+noai+"</head><body>secret</body></html>")
		case "/script.html":
			page("text/html", `<html><head><script>var s = "<body>";</script>`+noai+`</head><body>secret</body></html>`)
		case "/untyped":
			w.Header()["Content-Type"] = nil // no type: sniffed, as browsers do
			w.Write([]byte("<html><head>" + noai + "</head><body>secret</body></html>"))
		case "/br.html":
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Encoding", "br")
			w.Write([]byte("\x0b\x02\x80secret\x03"))
		case "/gz.html":
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(zb.Bytes())
		case "/news/signal":
			w.Header().Set("Content-Signal", "ai-train=yes")
			w.Write([]byte("secret"))
		default:
			w.Write([]byte("secret " + r.URL.Path))
		}
	})
	o.robotsStatus.Store(http.StatusNotFound) // no robots.txt: no restrictions, but the other files count
	p := startProxy(t, loopbackConfig())
	c := p.client()
	tests := []struct {
		method, path, purpose, rangeHdr string
		status                          int
		rule                            string
	}{
		{"GET", "/meta.html", "ai-train", "bytes=1-", 403, "meta robots: noai, noindex"},
		{"GET", "/meta.html", "ai-train", "bytes=0-0,1-", 403, "meta robots: noai, noindex"},
		{"GET", "/news/1", "ai-train", "", 403, "tdmrep.json: /news/* tdm-reservation=1"},
		{"GET", "//news/1", "ai-train", "", 403, "tdmrep.json: /news/* tdm-reservation=1"},
		{"GET", "/news%2F1", "ai-input", "", 403, "tdmrep.json: /news/* tdm-reservation=1"},
		{"GET", "/news/signal", "ai-train", "", 403, "tdmrep.json: /news/* tdm-reservation=1"},
		{"GET", "/bom.html", "ai-train", "", 403, "meta robots: noai, noindex"},
		{"GET", "/script.html", "search", "", 403, "meta robots: noai, noindex"},
		{"GET", "/untyped", "ai-input", "", 403, "meta robots: noai, noindex"},
		{"GET", "/br.html", "search", "", 403, "html head: unreadable (content-encoding br)"},
		{"HEAD", "/gz.html", "ai-train", "", 200, ""},
		{"GET", "/gz.html", "ai-train", "", 200, ""},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, o.URL+tt.path, nil)
		req.Header.Set(policy.PurposeHeader, tt.purpose)
		if tt.rangeHdr != "" {
			req.Header.Set("Range", tt.rangeHdr)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || resp.Header.Get("X-Robots-Gate-Rule") != tt.rule || tt.status == 403 && strings.Contains(string(body), "secret") {
			t.Errorf("%s %s for %s (Range %q): %d %q; want %d %q", tt.method, tt.path, tt.purpose, tt.rangeHdr, resp.StatusCode, resp.Header.Get("X-Robots-Gate-Rule"), tt.status, tt.rule)
		}
	}
}
