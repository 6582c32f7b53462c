package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

func TestProxyAuth(t *testing.T) {
	t.Parallel()
	hash, _ := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	got := make(chan http.Header, 4)
	o := newTestOrigin(t, "User-agent: *\nDisallow: /private\n\nUser-agent: EtlBot\nDisallow: /etl-only\n", func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		io.WriteString(w, "ok")
	})
	cfg := loopbackConfig()
	cfg.Auth.Users = []AuthUser{{Name: "etl", PasswordHash: string(hash)}}
	cfg.Agents = []AgentRule{{User: "etl", Token: "EtlBot"}}
	p := startProxy(t, cfg)
	host := strings.TrimPrefix(o.URL, "http://")
	basic := func(cred string) string {
		return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(cred)) + "\r\n"
	}
	req := func(path, auth string) *http.Response {
		resp, _ := p.raw(t, "GET "+o.URL+path+" HTTP/1.1\r\nHost: "+host+"\r\n"+auth+"Connection: close\r\n\r\n")
		return resp
	}
	for _, auth := range []string{"", basic("etl:wrong"), basic("nobody:s3cret"), "Proxy-Authorization: Bearer x\r\n", basic("etl")} {
		resp := req("/page", auth)
		if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") != `Basic realm="robotsgate"` || resp.Header.Get("X-Robots-Gate") != "auth-required" {
			t.Errorf("auth %q: %d %v; want 407 with Proxy-Authenticate", auth, resp.StatusCode, resp.Header)
		}
	}
	if resp := req("/page", basic("etl:s3cret")); resp.StatusCode != 200 {
		t.Fatalf("right credentials: %d", resp.StatusCode)
	}
	if h := <-got; h.Get("Proxy-Authorization") != "" {
		t.Error("Proxy-Authorization reached the origin")
	}
	// [[agents]] user = "etl": EtlBot's group, not "*".
	if resp := req("/etl-only", basic("etl:s3cret")); resp.StatusCode != 403 {
		t.Errorf("etl user on /etl-only: %d; want 403 (EtlBot's rule)", resp.StatusCode)
	}
	rec := p.lastAudit(t)
	if rec["user"] != "etl" || fmt.Sprint(rec["agent"]) != "[EtlBot]" {
		t.Errorf("audit = %v; want user etl, agent EtlBot", rec)
	}
	if a := p.audit.String(); strings.Contains(a, "s3cret") || strings.Contains(a, base64.StdEncoding.EncodeToString([]byte("etl:s3cret"))) {
		t.Errorf("credentials in the audit log:\n%s", a)
	}
	refused := 0
	for _, l := range p.auditLines(t) {
		if l["decision"] == "auth-required" && l["msg"] == "refused" && l["status"] == 407.0 {
			refused++
		}
	}
	if refused != 5 {
		t.Errorf("%d auth refusals audited; want 5", refused)
	}

	// CONNECT: refused without credentials, and the inner requests of an
	// authenticated one carry its user.
	pki := newTestPKI(t)
	_, port := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n\nUser-agent: EtlBot\nDisallow: /etl-only\n", "a.example")
	mp := startMITM(t, pki, func(c *Config) {
		c.Auth.Users = []AuthUser{{Name: "etl", PasswordHash: string(hash)}}
		c.Agents = []AgentRule{{User: "etl", Token: "EtlBot"}}
	})
	connect := func(auth string) (net.Conn, *bufio.Reader, *http.Response) {
		c, err := net.DialTimeout("tcp", mp.url.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT a.example:%s HTTP/1.1\r\nHost: a.example:%s\r\n%s\r\n", port, port, auth)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		return c, br, resp
	}
	if _, _, resp := connect(""); resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") == "" {
		t.Errorf("CONNECT without credentials: %d; want 407", resp.StatusCode)
	}
	c, _, resp := connect(basic("etl:s3cret"))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT with credentials: %d", resp.StatusCode)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(mp.srv.CA().certPEM())
	tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "a.example"})
	resp, _ = roundTripRaw(t, tc, bufio.NewReader(tc), "GET /etl-only HTTP/1.1\r\nHost: a.example:"+port+"\r\n\r\n")
	if resp.StatusCode != 403 {
		t.Errorf("inner request of an authenticated CONNECT: %d; want 403 (EtlBot's rule)", resp.StatusCode)
	}
	if rec := mp.lastAudit(t); rec["user"] != "etl" {
		t.Errorf("inner audit user = %v; want etl", rec["user"])
	}
}

func TestAuthenticatorRemembers(t *testing.T) {
	t.Parallel()
	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	a := newAuthenticator([]AuthUser{{Name: "u", PasswordHash: string(hash)}}, time.Now)
	r, _ := http.NewRequest("GET", "http://x/", nil)
	r.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("u:pw")))
	if user, ok := a.check(r, false); !ok || user != "u" {
		t.Fatalf("check = %q %v", user, ok)
	}
	// A changed hash (a reload) invalidates what was remembered.
	hash2, _ := bcrypt.GenerateFromPassword([]byte("other"), bcrypt.MinCost)
	a.users["u"] = string(hash2)
	if _, ok := a.check(r, false); ok {
		t.Error("old password still accepted after its hash changed")
	}
	if newAuthenticator(nil, time.Now) != nil {
		t.Error("no users: want no authenticator")
	}
}
