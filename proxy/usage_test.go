package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/admin"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// usageRobots refuses training under /train/ in robots.txt.
const usageRobots = "User-agent: *\nContent-Usage: /train/ train-ai=n\nDisallow: /private\n"

// secretBody is what an origin serves under a usage header: big enough
// that a withheld response is cut mid-body, and recognisable if it leaks.
var secretBody = strings.Repeat("SECRET-BODY ", 100_000)

// usageOrigin serves pages whose responses carry usage headers, records
// whether any request carried X-Robots-Gate-Purpose, and counts the
// connections it accepts.
type usageOrigin struct {
	*testOrigin
	conns      atomic.Int64 // client connections seen (by remote address)
	seen       sync.Map     // remote address → true
	sawPurpose atomic.Bool
}

func newUsageOrigin(t *testing.T) *usageOrigin {
	u := &usageOrigin{}
	u.testOrigin = newTestOrigin(t, usageRobots, func(w http.ResponseWriter, r *http.Request) {
		if vals, other := policy.PurposeValues(r.Header); len(vals) > 0 || other {
			u.sawPurpose.Store(true)
		}
		if _, loaded := u.seen.LoadOrStore(r.RemoteAddr, true); !loaded {
			u.conns.Add(1)
		}
		switch r.URL.Path {
		case "/tdm":
			w.Header().Set("TDM-Reservation", "1")
		case "/cu":
			w.Header().Set("Content-Usage", "train-ai=n, search=y")
		case "/cs":
			w.Header().Set("Content-Signal", "search=yes, ai-train=no")
		case "/tdm2": // two lines, which a joined reading would not see
			w.Header()["Tdm-Reservation"] = []string{"1", "1"}
		case "/cu2": // a refusal, then a grant: the refusal stands
			w.Header()["Content-Usage"] = []string{"train-ai=n", "train-ai=y"}
		default:
			w.Write([]byte("page " + r.URL.Path + "\n"))
			return
		}
		w.Write([]byte(secretBody))
	})
	return u
}

// TestUsageRobotsStatements: a robots.txt statement refuses a declared
// purpose before anything leaves; with no purpose, or another, the request
// goes through, and the purpose header never reaches the origin.
func TestUsageRobotsStatements(t *testing.T) {
	t.Parallel()
	o := newUsageOrigin(t)
	p := startProxy(t, loopbackConfig())
	c := p.client()
	countedOnce(t, p, policy.ActionUsageRefused.String(), "http", func() {
		resp, body := get(t, c, o.URL+"/train/set.json", "User-Agent", "DataBot/1.0", policy.PurposeHeader, "search, ai-train")
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Robots-Gate") != policy.ActionUsageRefused.String() ||
			resp.Header.Get("X-Robots-Gate-Rule") != "content-usage: /train/ train-ai=n (line 2)" {
			t.Errorf("refused: %d %v", resp.StatusCode, resp.Header)
		}
		for _, want := range []string{o.URL + "/train/set.json", "ai-train", "content-usage: /train/ train-ai=n", "line 2 of " + o.URL + "/robots.txt"} {
			if !strings.Contains(body, want) {
				t.Errorf("body lacks %q:\n%s", want, body)
			}
		}
	})
	if n := o.count("/train/set.json"); n != 0 {
		t.Errorf("origin saw the refused request %d times", n)
	}
	rec := p.lastAudit(t)
	if rec["msg"] != "blocked" || rec["decision"] != policy.ActionUsageRefused.String() || rec["rule"] != "content-usage: /train/ train-ai=n" ||
		rec["line"] != 2.0 || rec["status"] != 403.0 || rec["token"] != "DataBot" {
		t.Errorf("audit = %v", rec)
	}
	if pur, _ := rec["purpose"].([]any); len(pur) != 2 || pur[0] != "ai-train" || pur[1] != "search" {
		t.Errorf("audit purpose = %v; want [ai-train search]", rec["purpose"])
	}
	for _, purpose := range []string{"", "search"} {
		resp, body := get(t, c, o.URL+"/train/set.json", "User-Agent", "DataBot/1.0", policy.PurposeHeader, purpose)
		if resp.StatusCode != 200 || body != "page /train/set.json\n" {
			t.Errorf("purpose %q: %d %q; want the page", purpose, resp.StatusCode, body)
		}
	}
	// Any spelling a CGI-style server reads as the header declares, and
	// none reaches the origin.
	if resp, _ := get(t, c, o.URL+"/train/x", "X_Robots_Gate_Purpose", "ai-train"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("X_Robots_Gate_Purpose: %d; want 403", resp.StatusCode)
	}
	if resp, _ := get(t, c, o.URL+"/ok", "x-robots_gate-PURPOSE", "search"); resp.StatusCode != 200 {
		t.Errorf("x-robots_gate-PURPOSE: search: %d; want 200", resp.StatusCode)
	}
	if o.sawPurpose.Load() {
		t.Errorf("the origin received %s", policy.PurposeHeader)
	}
	resp, body := get(t, c, o.URL+"/x", policy.PurposeHeader, "ai-training")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "known purposes are ai-train, ai-input, search") {
		t.Errorf("unknown purpose: %d %q; want 400 naming the known purposes", resp.StatusCode, body)
	}

	// /robots shows the statements each group carries.
	p.srv.cache.Wait()
	resp, body = get(t, &http.Client{}, p.url.String()+"/robots?origin="+url.QueryEscape(o.URL))
	var e admin.RobotsEntry
	if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != 200 || len(e.Groups) != 1 {
		t.Fatalf("/robots: %d %q: %v", resp.StatusCode, body, err)
	}
	if u := e.Groups[0].Usage; len(u) != 1 || u[0].Field != "content-usage" || u[0].Path != "/train/" || u[0].Line != 2 || u[0].Prefs["ai-train"] != "refused" {
		t.Errorf("/robots usage = %+v", u)
	}
}

// TestUsageResponseHeaders: a response whose headers refuse a declared
// purpose is withheld, over plain HTTP and inside a MITM tunnel; its
// origin connection is closed, never reused half-read; report mode lets it
// through, marked.
func TestUsageResponseHeaders(t *testing.T) {
	t.Parallel()
	o := newUsageOrigin(t)
	p := startProxy(t, loopbackConfig())
	c := p.client()
	tests := []struct {
		path, purpose, rule string
	}{
		{"/tdm", "ai-train", "response header tdm-reservation: 1"},
		{"/tdm", "ai-input", "response header tdm-reservation: 1"},
		{"/cu", "ai-train", "response header content-usage: train-ai=n, search=y"},
		{"/cs", "ai-train", "response header content-signal: search=yes, ai-train=no"},
		{"/tdm2", "ai-train", "response header tdm-reservation: 1, 1"},
		{"/cu2", "ai-train", "response header content-usage: train-ai=n, train-ai=y"},
	}
	for _, tt := range tests {
		before := o.conns.Load()
		countedOnce(t, p, policy.ActionUsageRefused.String(), "http", func() {
			resp, body := get(t, c, o.URL+tt.path, policy.PurposeHeader, tt.purpose)
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Robots-Gate-Rule") != tt.rule ||
				strings.Contains(body, "SECRET") || resp.Header.Get("Content-Usage") != "" {
				t.Errorf("%s for %s: %d %v\n%.200s", tt.path, tt.purpose, resp.StatusCode, resp.Header, body)
			}
			if !strings.Contains(body, "withheld") || !strings.Contains(body, tt.purpose) {
				t.Errorf("%s: body does not say the response was withheld:\n%s", tt.path, body)
			}
		})
		rec := p.lastAudit(t)
		if rec["rule"] != tt.rule || rec["line"] != 0.0 || rec["status"] != 403.0 {
			t.Errorf("%s: audit = %v", tt.path, rec)
		}
		// The next request is served whole, on a new origin connection:
		// the withheld one was closed mid-body, not pooled.
		if resp, body := get(t, c, o.URL+"/ok"); resp.StatusCode != 200 || body != "page /ok\n" {
			t.Errorf("after %s: %d %q", tt.path, resp.StatusCode, body)
		}
		if got := o.conns.Load() - before; got < 1 {
			t.Errorf("after %s: the origin saw %d new connections; want the withheld one replaced", tt.path, got)
		}
	}
	for _, purpose := range []string{"", "search"} {
		if resp, body := get(t, c, o.URL+"/cu", policy.PurposeHeader, purpose); resp.StatusCode != 200 || body != secretBody {
			t.Errorf("/cu for %q: %d, %d bytes; want the page", purpose, resp.StatusCode, len(body))
		}
	}
	// The origin answered every request, those whose answers were
	// withheld included: 2 x len(tests) + 2, all 200s.
	_, metrics := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/metrics")
	if want := fmt.Sprintf(`robotsgate_upstream_responses_total{class="2xx"} %d`, 2*len(tests)+2); !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}

	cfg := loopbackConfig()
	cfg.Mode = "report"
	r := startProxy(t, cfg)
	countedOnce(t, r, policy.ActionWouldBlock.String(), "http", func() {
		resp, body := get(t, r.client(), o.URL+"/tdm", policy.PurposeHeader, "ai-train")
		if resp.StatusCode != 200 || body != secretBody || resp.Header.Get("X-Robots-Gate") != policy.ActionWouldBlock.String() ||
			resp.Header.Get("X-Robots-Gate-Rule") != "response header tdm-reservation: 1" {
			t.Errorf("report mode: %d %v", resp.StatusCode, resp.Header)
		}
	})
}

// TestUsageInTunnel: inside a MITM tunnel the same statements and headers
// refuse, and the tunnel goes on serving.
func TestUsageInTunnel(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	o, port := tlsOrigin(t, pki, usageRobots, "data.example")
	o.handler = func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/tdm":
			w.Header().Set("TDM-Reservation", "1")
			w.Write([]byte(secretBody))
			return
		case "/.well-known/tdmrep.json": // inside the tunnel's origin, fetched as robots.txt is
			w.Write([]byte(`[{"location": "/reserved/*", "tdm-reservation": 1}]`))
			return
		case "/meta.html":
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte(`<head><meta name="robots" content="noai"></head><body>` + secretBody))
			return
		}
		w.Write([]byte("page " + r.URL.Path + "\n"))
	}
	p := startMITM(t, pki, func(c *config.Config) {
		c.Agents = []config.AgentRule{{UserAgent: "TrainBot/*", Purpose: []string{"ai-train"}}}
	})
	var dials atomic.Int64
	c := p.mitmClient(t, &dials, false)
	base := "https://data.example:" + port
	for _, tt := range []struct {
		path, rule string
	}{
		{"/train/x", "content-usage: /train/ train-ai=n (line 2)"},
		{"/tdm", "response header tdm-reservation: 1"},
		{"/reserved/x", "tdmrep.json: /reserved/* tdm-reservation=1"},
		{"/meta.html", "meta robots: noai"},
	} {
		resp, body := get(t, c, base+tt.path, "User-Agent", "TrainBot/2")
		if resp.StatusCode != 403 || resp.Header.Get("X-Robots-Gate-Rule") != tt.rule || strings.Contains(body, "SECRET") {
			t.Errorf("%s: %d %v", tt.path, resp.StatusCode, resp.Header)
		}
	}
	if resp, body := get(t, c, base+"/tdm", "User-Agent", "SearchBot/2"); resp.StatusCode != 200 || body != secretBody {
		t.Errorf("/tdm with no purpose: %d, %d bytes", resp.StatusCode, len(body))
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("client opened %d connections to the proxy; want 1 kept-alive tunnel", n)
	}
	if o.count("/train/x") != 0 {
		t.Error("the origin saw a request robots.txt's statement refused")
	}

	// A purpose declared on the CONNECT holds for every request inside;
	// a bad one is refused at once.
	resp, conn, _ := connect(t, p, "data.example:"+port, policy.PurposeHeader+": ai-train\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT with a purpose: %d", resp.StatusCode)
	}
	tc := tlsClient(t, conn, p.srv.CA().PEM(), "data.example")
	resp, body := roundTripRaw(t, tc, bufio.NewReader(tc), "GET /tdm HTTP/1.1\r\nHost: data.example:"+port+"\r\nUser-Agent: SearchBot/2\r\n\r\n")
	if resp.StatusCode != 403 || strings.Contains(body, "SECRET") {
		t.Errorf("/tdm in a tunnel whose CONNECT declared ai-train: %d", resp.StatusCode)
	}
	if resp, _, _ := connect(t, p, "data.example:"+port, policy.PurposeHeader+": bogus\r\n"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("CONNECT with an unknown purpose: %d; want 400", resp.StatusCode)
	}
}

// TestUsageTunnelMode: in tunnel mode a CONNECT that declares a purpose
// is refused when a licence robots.txt names, or the site's tdmrep.json,
// refuses it on every path (the paths and responses inside are never
// seen); statements of some paths only, or no purpose, open the tunnel.
func TestUsageTunnelMode(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	origin := func(name, file, body string) string {
		o, port := tlsOrigin(t, pki, "", name)
		robots := "User-agent: *\nAllow: /\n"
		if file == "/license.xml" {
			robots += "License: https://" + name + ":" + port + "/license.xml\n"
		}
		o.robots.Store(robots)
		o.handler = func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/license.xml", "/.well-known/tdmrep.json":
				if r.URL.Path == file {
					io.WriteString(w, body)
					return
				}
			}
			http.NotFound(w, r)
		}
		return name + ":" + port
	}
	rslWhole := origin("whole.example", "/license.xml", `<rsl><content url="/"><license><prohibits type="usage">ai-train</prohibits></license></content></rsl>`)
	rslSome := origin("some.example", "/license.xml", `<rsl><content url="/news/*"><license><prohibits type="usage">all</prohibits></license></content></rsl>`)
	tdmWhole := origin("tdm.example", "/.well-known/tdmrep.json", `[{"location": "/", "tdm-reservation": 1}]`)
	p := startMITM(t, pki, func(c *config.Config) { c.TLS.Mode = "tunnel" })
	const declare = policy.PurposeHeader + ": ai-train\r\n"
	for _, tt := range []struct {
		authority, header string
		status            int
		rule              string
	}{
		{rslWhole, declare, 403, "rsl https://" + rslWhole + "/license.xml: prohibits usage ai-train"},
		{tdmWhole, declare, 403, "tdmrep.json: / tdm-reservation=1"},
		{rslSome, declare, 200, ""},
		{rslWhole, "", 200, ""},
		{tdmWhole, policy.PurposeHeader + ": search\r\n", 200, ""},
	} {
		resp, _, _ := connect(t, p, tt.authority, tt.header)
		if resp.StatusCode != tt.status || resp.Header.Get("X-Robots-Gate-Rule") != tt.rule {
			t.Errorf("CONNECT %s with %q: %d %q; want %d %q", tt.authority, tt.header, resp.StatusCode, resp.Header.Get("X-Robots-Gate-Rule"), tt.status, tt.rule)
		}
		if tt.status != 403 {
			continue
		}
		if resp.Header.Get("X-Robots-Gate") != "usage-refused" {
			t.Errorf("CONNECT %s: X-Robots-Gate %q; want usage-refused", tt.authority, resp.Header.Get("X-Robots-Gate"))
		}
		if rec := p.lastAudit(t); rec["decision"] != "usage-refused" || rec["rule"] != tt.rule {
			t.Errorf("CONNECT %s: audit = %v", tt.authority, rec)
		}
	}
}

// TestUsageRobotsTxtExempt: /robots.txt itself is always allowed (step 4),
// even from a server that sends tdm-reservation on every response: a
// client declaring ai-train must still be able to read the rules.
func TestUsageRobotsTxtExempt(t *testing.T) {
	t.Parallel()
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("TDM-Reservation", "1")
		io.WriteString(w, "User-agent: *\nDisallow: /private\n")
	}))
	t.Cleanup(o.Close)
	p := startProxy(t, loopbackConfig())
	resp, body := get(t, p.client(), o.URL+"/robots.txt", policy.PurposeHeader, "ai-train")
	if resp.StatusCode != 200 || !strings.Contains(body, "Disallow: /private") {
		t.Errorf("/robots.txt with ai-train declared: %d %q; want the file", resp.StatusCode, body)
	}
	if resp, _ := get(t, p.client(), o.URL+"/page", policy.PurposeHeader, "ai-train"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("/page: %d; want 403, the header refusing ai-train", resp.StatusCode)
	}
}
