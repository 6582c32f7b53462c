package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy"
	"github.com/robotsgate/robotsgate/proxy/config"
)

var updateReport = flag.Bool("update-report", false, "rewrite report/testdata/proxy.jsonl from a run of the real proxy")

// proxyAuditFile is the audit log of a real proxy run that the report
// package's tests read (TestReportFromProxy writes it with
// -update-report), its origins' loopback addresses renamed.
const proxyAuditFile = "report/testdata/proxy.jsonl"

// reportShop is a site that states its usage preferences in every place
// robotsgate reads them, and charges for some paths (pay-per-crawl, with
// no signature check: the proxy's own tests check those).
func reportShop(t *testing.T) *httptest.Server {
	t.Helper()
	var self string
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		price := map[string]string{"/priced/a": "USD 0.01", "/priced/b": "USD 0.005", "/expensive": "USD 5"}[r.URL.Path]
		switch {
		case r.URL.Path == "/robots.txt":
			fmt.Fprintf(w, "User-agent: *\nDisallow: /private\nContent-Usage: /cu train-ai=n\n\nLicense: %s/license.xml\n", self)
		case r.URL.Path == "/license.xml":
			io.WriteString(w, license)
		case r.URL.Path == "/.well-known/tdmrep.json":
			io.WriteString(w, `[{"location": "/tdm/*", "tdm-reservation": 1}]`)
		case r.URL.Path == "/hdr":
			w.Header().Set("Content-Usage", "train-ai=n")
			io.WriteString(w, "a page whose header refuses ai-train")
		case r.URL.Path == "/meta":
			io.WriteString(w, `<!DOCTYPE html><html><head><meta name="robots" content="noai"></head><body>a page</body></html>`)
		case price != "" && r.Header.Get("Crawler-Exact-Price") == price:
			w.Header().Set("Crawler-Charged", price)
			io.WriteString(w, "paid content")
		case price != "":
			w.Header().Set("Crawler-Price", price)
			w.WriteHeader(http.StatusPaymentRequired)
			io.WriteString(w, "pay first\n")
		default:
			io.WriteString(w, "page")
		}
	}))
	self = o.URL
	t.Cleanup(o.Close)
	return o
}

// runReportProxy sends requests through a real proxy to two sites, one of
// each kind of refusal and some paid, and returns its audit log and the
// sites' host:port.
func runReportProxy(t *testing.T) (auditPath string, shop, news string) {
	t.Helper()
	shopSrv := reportShop(t)
	newsSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			io.WriteString(w, "User-agent: *\nDisallow: /archive/\n")
			return
		}
		io.WriteString(w, "news")
	}))
	t.Cleanup(newsSrv.Close)
	dir := t.TempDir()
	auditPath = filepath.Join(dir, "audit.log")
	toml := fmt.Sprintf("[tls]\nmode = \"tunnel\"\nstate_dir = %q\n[upstream]\nblock_private = false\n[audit]\nfile = %q\nlog_allowed = true\n"+
		"[politeness]\ncrawl_delay = false\n[identity]\nsignature_agent = \"https://bot.example/.well-known/http-message-signatures-directory\"\n"+
		"[payments]\nmax_price = \"USD 0.02\"\nbudget = \"USD 1\"\n", dir, auditPath)
	clk := testkit.NewClock(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	client, stop := serveProxyConfig(t, filepath.Join(dir, "robotsgate.toml"), toml, clk.Now)
	for _, r := range []struct {
		site, path, purpose string
		want                int
	}{
		{shopSrv.URL, "/open", "", 200},
		{shopSrv.URL, "/private/a", "", 403},              // robots.txt: never sent
		{shopSrv.URL, "/private/a", "", 403},              // the same URL again: counted twice
		{shopSrv.URL, "/private/b", "", 403},              //
		{shopSrv.URL, "/cu/x", "ai-train", 403},           // robots.txt's Content-Usage: never sent
		{shopSrv.URL, "/rsl/x", "ai-train", 403},          // the RSL licence it names: never sent
		{shopSrv.URL, "/tdm/x", "ai-train", 403},          // tdmrep.json reserves it, the answer does not lift it: sent, body withheld
		{shopSrv.URL, "/hdr", "ai-train", 403},            // the answer's header: sent, body withheld
		{shopSrv.URL, "/hdr", "ai-train", 403},            //
		{shopSrv.URL, "/meta", "ai-train", 403},           // the answer's HTML meta: sent, body withheld
		{shopSrv.URL, "/other", "ai-train", 200},          // nothing refuses it
		{shopSrv.URL, "/priced/a", "", 200},               // paid USD 0.01
		{shopSrv.URL, "/priced/a", "", 200},               // and again
		{shopSrv.URL, "/priced/b", "", 200},               // paid USD 0.005
		{shopSrv.URL, "/expensive", "", 402},              // over max_price: price-refused, nothing paid
		{newsSrv.URL, "/archive/2019/one", "", 403},       // another site's robots.txt
		{newsSrv.URL, "/today", "ai-train", 200},          //
		{newsSrv.URL, "/archive/2019/two", "search", 403}, //
	} {
		clk.Advance(7 * time.Second)
		req, _ := http.NewRequest("GET", r.site+r.path, nil)
		req.Header.Set("User-Agent", "DataBot/1.0 (+https://data.example/bot)")
		if r.purpose != "" {
			req.Header.Set("X-Robots-Gate-Purpose", r.purpose)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != r.want {
			t.Errorf("GET %s (purpose %q): %d %s; want %d", r.path, r.purpose, resp.StatusCode, resp.Header.Get("X-Robots-Gate"), r.want)
		}
	}
	stop()
	return auditPath, strings.TrimPrefix(shopSrv.URL, "http://"), strings.TrimPrefix(newsSrv.URL, "http://")
}

// serveProxyConfig writes toml to cfgPath and serves a real proxy of that
// config on loopback, its clock now; it returns a client that goes
// through it, and stop, which shuts it down (its audit log then complete).
func serveProxyConfig(t *testing.T, cfgPath, toml string, now func() time.Time) (client *http.Client, stop func()) {
	t.Helper()
	if err := os.WriteFile(cfgPath, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen = "127.0.0.1:0"
	srv, err := proxy.NewServer(cfg, proxy.Options{Now: now, Version: "test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	pu, _ := url.Parse("http://" + ln.Addr().String())
	client = &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 30 * time.Second}
	return client, func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReportFromProxy: the report of a real proxy's audit log tells the
// refusals that never left robotsgate from those that reached the site
// (their bodies withheld) and the price refused, lists every refused URL,
// and sums what the sites charged exactly.
func TestReportFromProxy(t *testing.T) {
	t.Parallel()
	auditPath, shop, news := runReportProxy(t)
	out, errOut, code := runCmd(t, "", "report", "-json", auditPath)
	if code != 0 {
		t.Fatalf("report -json: exit %d: %s", code, errOut)
	}
	var got struct {
		Blocked        int64             `json:"blocked"`
		ByRefusalClass map[string]int64  `json:"by_refusal_class"`
		Spent          map[string]string `json:"spent"`
		Charged        map[string]int64  `json:"charged_requests"`
		SpentByOrigin  map[string]map[string]string
		RefusedURLs    []struct {
			URL, Origin, Decision, Class, Rule string
			Line                               int
			Count                              int64
			First, Last                        string
		} `json:"refused_urls"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"not-sent": 7, "body-withheld": 4, "not-paid": 1}; fmt.Sprint(got.ByRefusalClass) != fmt.Sprint(want) || got.Blocked != 11 {
		t.Errorf("by_refusal_class %v, blocked %d; want %v, 11", got.ByRefusalClass, got.Blocked, want)
	}
	if got.Spent["USD"] != "0.025" || got.Charged["USD"] != 3 || len(got.Spent) != 1 {
		t.Errorf("spent %v over %v; want USD 0.025 over 3 requests", got.Spent, got.Charged)
	}
	classOf := map[string]string{}
	for _, r := range got.RefusedURLs {
		path := r.URL[strings.Index(r.URL, "//")+2+len(shop):]
		if strings.Contains(r.URL, news) {
			path = "news" + r.URL[strings.Index(r.URL, "//")+2+len(news):]
		}
		classOf[path] = r.Class + " " + r.Decision
		if path == "/private/a" && (r.Count != 2 || r.First == r.Last || r.Rule != "disallow: /private" || r.Line != 2) {
			t.Errorf("/private/a: %+v; want twice, at two times, by disallow: /private line 2", r)
		}
	}
	for path, want := range map[string]string{
		"/private/a": "not-sent disallowed", "/private/b": "not-sent disallowed", "/cu/x": "not-sent usage-refused",
		"/rsl/x": "not-sent usage-refused", "/tdm/x": "body-withheld usage-refused", "/hdr": "body-withheld usage-refused",
		"/meta": "body-withheld usage-refused", "/expensive": "not-paid price-refused",
		"news/archive/2019/one": "not-sent disallowed", "news/archive/2019/two": "not-sent disallowed",
	} {
		if classOf[path] != want {
			t.Errorf("%s: %q; want %q", path, classOf[path], want)
		}
	}
	if len(classOf) != 10 {
		t.Errorf("refused URLs %v; want 10", classOf)
	}
	if *updateReport {
		b, err := os.ReadFile(auditPath)
		if err != nil {
			t.Fatal(err)
		}
		// The loopback addresses change from run to run: named as sites.
		b = bytes.ReplaceAll(b, []byte(shop), []byte("shop.example:8081"))
		b = bytes.ReplaceAll(b, []byte(news), []byte("news.example:8082"))
		if err := os.WriteFile(proxyAuditFile, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
