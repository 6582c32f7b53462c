package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/crypto/bcrypt"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/policy"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// requestsTotal sums robotsgate_requests_total over every label.
func requestsTotal(t *testing.T, p *testProxy) float64 {
	t.Helper()
	n := 0.0
	for _, c := range p.srv.metrics.byDecision {
		n += testutil.ToFloat64(c[0]) + testutil.ToFloat64(c[1])
	}
	return n
}

// countedOnce runs send and checks that it was counted exactly once in
// robotsgate_requests_total, as decision with scheme, and audited once
// with that decision (when it is not a plain allow).
func countedOnce(t *testing.T, p *testProxy, decision, scheme string, send func()) {
	t.Helper()
	i := 0
	if scheme == "https" {
		i = 1
	}
	a, ok := policy.ParseAction(decision)
	if !ok {
		t.Fatalf("%q is not a decision", decision)
	}
	c := p.srv.metrics.byDecision[a][i]
	before, total, lines := testutil.ToFloat64(c), requestsTotal(t, p), len(p.auditLines(t))
	send()
	// The count and the audit line are written as the answer is made, one
	// after the other: give a connection that is closing a moment to get
	// to both (a plain allow is counted, not audited). The bound is for a
	// count that never comes; a busy machine's are seen well within it.
	// A wait that times out is caught by the checks below, which say
	// what was seen.
	testkit.Poll(10*time.Second, func() bool {
		return testutil.ToFloat64(c) != before && (decision == policy.ActionAllowed.String() || len(p.auditLines(t)) > lines)
	})
	if got := testutil.ToFloat64(c) - before; got != 1 {
		t.Errorf("%s/%s counted %v times; want 1", decision, scheme, got)
	}
	if got := requestsTotal(t, p) - total; got != 1 {
		t.Errorf("%s/%s: robotsgate_requests_total grew by %v; want 1", decision, scheme, got)
	}
	if decision == policy.ActionAllowed.String() {
		return
	}
	recs := p.auditLines(t)
	if len(recs) != lines+1 || recs[len(recs)-1]["decision"] != decision {
		t.Errorf("%s/%s: %d audit lines written; want 1 with decision %s: %v", decision, scheme, len(recs)-lines, decision, recs[lines:])
	}
}

// connect sends a CONNECT on a new connection and returns the answer and
// the connection.
func connect(t *testing.T, p *testProxy, authority string, header ...string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.url.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", authority, authority, strings.Join(header, ""))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", authority, err)
	}
	return resp, c, br
}

// TestEveryAnswerCountedOnce: each answer the proxy makes, at each entry
// point (plain request, CONNECT, request inside a tunnel, the connection
// limit), is counted once in robotsgate_requests_total and audited once.
// 407, 421 and CONNECT-time answers were not counted before.
func TestEveryAnswerCountedOnce(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, port := tlsOrigin(t, pki, testRobots, "a.example")
	plain := newTestOrigin(t, testRobots, nil)
	host := strings.TrimPrefix(plain.URL, "http://")
	down := closedAddr(t)
	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	cred := "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("etl:pw")) + "\r\n"
	p := startMITM(t, pki, func(c *config.Config) {
		c.Auth.Users = []config.AuthUser{{Name: "etl", PasswordHash: string(hash)}}
		c.Sites = []config.SiteRule{{Host: "denied.example", Policy: "deny", Reason: "legal"}, {Host: "gone.example", Policy: "allow", Reason: "test"}}
		c.Limits.MaxConnections = 8
	})
	get := func(target string, header ...string) func() {
		return func() {
			p.raw(t, "GET "+target+" HTTP/1.1\r\nHost: x\r\n"+strings.Join(header, "")+"Connection: close\r\n\r\n")
		}
	}
	countedOnce(t, p, policy.ActionAuth.String(), "http", get("http://"+host+"/x"))
	countedOnce(t, p, policy.ActionAuth.String(), "https", func() { connect(t, p, "a.example:"+port) })
	countedOnce(t, p, policy.ActionDisallowed.String(), "http", get("http://"+host+"/private", cred))
	countedOnce(t, p, policy.ActionAllowed.String(), "http", get("http://"+host+"/ok", cred))
	countedOnce(t, p, policy.ActionBadRequest.String(), "http", get("http://"+host+"/x#y", cred))
	countedOnce(t, p, policy.ActionDenied.String(), "http", get("http://denied.example/x", cred))
	_, cport, _ := net.SplitHostPort(down)
	countedOnce(t, p, policy.ActionUpstream.String(), "http", get("http://gone.example:"+cport+"/x", cred))
	countedOnce(t, p, policy.ActionUnreachable.String(), "http", get("http://"+down+"/x", cred))
	countedOnce(t, p, policy.ActionBadRequest.String(), "https", func() { connect(t, p, "a.example:99999", cred) })

	// Inside a MITM tunnel: the CONNECT itself is not a decision; each
	// request inside is.
	resp, c, _ := connect(t, p, "a.example:"+port, cred)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT with credentials: %d", resp.StatusCode)
	}
	pool := p.srv.CA().PEM()
	tc := tlsClient(t, c, pool, "a.example")
	tbr := bufio.NewReader(tc)
	countedOnce(t, p, policy.ActionMisdirected.String(), "https", func() { roundTripRaw(t, tc, tbr, "GET /x HTTP/1.1\r\nHost: b.example:"+port+"\r\n\r\n") })
	countedOnce(t, p, policy.ActionDisallowed.String(), "https", func() { roundTripRaw(t, tc, tbr, "GET /private HTTP/1.1\r\nHost: a.example:"+port+"\r\n\r\n") })
	countedOnce(t, p, policy.ActionAllowed.String(), "https", func() { roundTripRaw(t, tc, tbr, "GET /ok HTTP/1.1\r\nHost: a.example:"+port+"\r\n\r\n") })

	// Past max_connections.
	var held []net.Conn
	for range 8 - int(p.srv.conns.count.Load()) {
		h, err := net.Dial("tcp", p.url.Host)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, h)
	}
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	testkit.Eventually(t, "8 connections held", func() bool { return p.srv.conns.count.Load() >= 8 })
	countedOnce(t, p, policy.ActionOverloaded.String(), "http", func() {
		o, err := net.Dial("tcp", p.url.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		o.SetDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, o)
	})

	// block_private, at CONNECT time and for a plain request.
	q := startProxy(t, func() *config.Config { c := config.Default(); c.Listen = "127.0.0.1:0"; return c }())
	countedOnce(t, q, policy.ActionPrivate.String(), "https", func() { connect(t, q, "127.0.0.1:443") })
	countedOnce(t, q, policy.ActionPrivate.String(), "http", func() {
		q.raw(t, "GET http://127.0.0.1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	})
}

// tlsClient speaks TLS over c to serverName, trusting the CA in caPEM.
func tlsClient(t *testing.T, c net.Conn, caPEM []byte, serverName string) *tls.Conn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: serverName})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS to %s: %v", serverName, err)
	}
	return tc
}

// TestReloadAuditFileUnderLoad: reloading with a new audit.file while
// blocked requests keep coming raced with the handlers (Reload replaced
// the audit log they were writing to) and could lose lines. Every blocked
// request's line is in exactly one of the files now.
func TestReloadAuditFileUnderLoad(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, testRobots, nil)
	dir := t.TempDir()
	cfg := loopbackConfig()
	cfg.Audit.File = filepath.Join(dir, "audit-0.log")
	p := startProxy(t, cfg)
	const clients, each = 4, 40
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := p.client()
			for i := range each {
				resp, err := client.Get(fmt.Sprintf("%s/private/%d-%d", o.URL, c, i))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 403 {
					t.Errorf("/private/%d-%d: %d; want 403", c, i, resp.StatusCode)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for n := 1; ; n++ {
		select {
		case <-done:
		case <-time.After(5 * time.Millisecond):
			next := *cfg
			next.Audit.File = filepath.Join(dir, fmt.Sprintf("audit-%d.log", n%3))
			if err := p.srv.Reload(&next); err != nil {
				t.Fatal(err)
			}
			if n < 1000 {
				continue
			}
		}
		break
	}
	seen := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "audit-*.log"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("%s: a torn line %q: %v", f, line, err)
			}
			u, _ := rec["url"].(string)
			seen[u[strings.LastIndexByte(u, '/')+1:]]++
		}
	}
	for c := range clients {
		for i := range each {
			if n := seen[fmt.Sprintf("%d-%d", c, i)]; n != 1 {
				t.Errorf("/private/%d-%d audited %d times over %d files; want once", c, i, n, len(files))
			}
		}
	}
}

// TestAuditCanonical: audit records carry the canonical URL (no default
// port, https:// inside a MITM tunnel, the decided host), the normalised
// path and the deciding token, UTC times with milliseconds, and for a
// failed login the user name tried, never the password.
func TestAuditCanonical(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	_, port := tlsOrigin(t, pki, testRobots, "a.example")
	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	p := startMITM(t, pki, func(c *config.Config) { c.Auth.Users = []config.AuthUser{{Name: "etl", PasswordHash: string(hash)}} })
	wrong := "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("etl:hunter2")) + "\r\n"
	p.raw(t, "GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\n"+wrong+"Connection: close\r\n\r\n")
	rec := p.lastAudit(t)
	if rec["user"] != "etl" || rec["decision"] != policy.ActionAuth.String() || strings.Contains(p.audit.String(), "hunter2") {
		t.Errorf("failed login: %v; want user etl, auth-required, and no password anywhere", rec)
	}
	if ts, _ := rec["time"].(string); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(ts) {
		t.Errorf("time %q; want RFC 3339 UTC with milliseconds", ts)
	}
	cred := "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("etl:pw")) + "\r\n"
	resp, c, _ := connect(t, p, "A.Example:"+port, cred)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	tc := tlsClient(t, c, p.srv.CA().PEM(), "a.example")
	resp, _ = roundTripRaw(t, tc, bufio.NewReader(tc), "GET /%66oo-only?q=1 HTTP/1.1\r\nHost: a.example:"+port+"\r\nUser-Agent: FooBot/1.0\r\n\r\n")
	if resp.StatusCode != 403 {
		t.Fatalf("GET /%%66oo-only in the tunnel: %s", resp.Status)
	}
	rec = p.lastAudit(t)
	if rec["url"] != "https://a.example:"+port+"/%66oo-only?q=1" || rec["path"] != "/foo-only?q=1" || rec["token"] != "FooBot" || rec["user"] != "etl" {
		t.Errorf("inside a MITM tunnel: url %v, path %v, token %v, user %v; want https://a.example:%s/%%66oo-only?q=1, /foo-only?q=1, FooBot, etl\n%s",
			rec["url"], rec["path"], rec["token"], rec["user"], port, p.audit.String())
	}
	for _, tt := range []struct{ origin, target, want string }{
		{"https://a.example:443", "/x?y", "https://a.example/x?y"},
		{"http://a.example:80", "/", "http://a.example/"},
		{"http://[::1]:8080", "/x", "http://[::1]:8080/x"},
	} {
		o, err := fetch.ParseOrigin(tt.origin)
		if err != nil {
			t.Fatal(err)
		}
		if got := o.URL(tt.target); got != tt.want {
			t.Errorf("%s.URL(%q) = %q; want %q", tt.origin, tt.target, got, tt.want)
		}
	}
}
