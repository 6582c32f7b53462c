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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/robotsgate/robotsgate/proxy/config"
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
	cfg.Auth.Users = []config.AuthUser{{Name: "etl", PasswordHash: string(hash)}}
	cfg.Agents = []config.AgentRule{{User: "etl", Token: "EtlBot"}}
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
	mp := startMITM(t, pki, func(c *config.Config) {
		c.Auth.Users = []config.AuthUser{{Name: "etl", PasswordHash: string(hash)}}
		c.Agents = []config.AgentRule{{User: "etl", Token: "EtlBot"}}
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
	pool.AppendCertsFromPEM(mp.srv.CA().PEM())
	tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "a.example"})
	resp, _ = roundTripRaw(t, tc, bufio.NewReader(tc), "GET /etl-only HTTP/1.1\r\nHost: a.example:"+port+"\r\n\r\n")
	if resp.StatusCode != 403 {
		t.Errorf("inner request of an authenticated CONNECT: %d; want 403 (EtlBot's rule)", resp.StatusCode)
	}
	if rec := mp.lastAudit(t); rec["user"] != "etl" {
		t.Errorf("inner audit user = %v; want etl", rec["user"])
	}
}

// TestProxyAuthUnderPasswordGuessing: while clients guess passwords through
// the proxy, a verified user's requests keep being served.
func TestProxyAuthUnderPasswordGuessing(t *testing.T) {
	t.Parallel()
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	o := newTestOrigin(t, "User-agent: *\nAllow: /\n", nil)
	cfg := loopbackConfig()
	cfg.Auth.Users = []config.AuthUser{{Name: "etl", PasswordHash: string(hash)}}
	p := startProxy(t, cfg)
	host := strings.TrimPrefix(o.URL, "http://")
	status := func(cred string) (int, error) {
		c, err := net.DialTimeout("tcp", p.url.Host, 5*time.Second)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET %s/page HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\nConnection: close\r\n\r\n",
			o.URL, host, base64.StdEncoding.EncodeToString([]byte(cred)))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := status("etl:s3cret"); code != 200 {
		t.Fatalf("right credentials: %d %v; want 200", code, err)
	}
	const guessers, maxGuesses = 16, 300 // each, for about a second
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	var guesses atomic.Int64
	for g := range guessers {
		wg.Go(func() {
			for i := 0; i < maxGuesses && time.Now().Before(stop); i++ {
				code, err := status(fmt.Sprintf("etl:guess-%d-%d", g, i))
				if err != nil || code != http.StatusProxyAuthRequired {
					t.Errorf("guess %d-%d: %d %v; want 407", g, i, code, err)
					return
				}
				guesses.Add(1)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// The verified user's requests, until the guessers stop and once after.
	verified := 0
	for guessing := true; guessing && verified < 1000; {
		select {
		case <-done:
			guessing = false
		default:
		}
		code, err := status("etl:s3cret")
		if code != 200 {
			t.Errorf("verified user's request %d during guessing: %d %v; want 200", verified, code, err)
			break
		}
		verified++
	}
	<-done
	t.Logf("%d guesses refused, %d verified requests served", guesses.Load(), verified)
}
