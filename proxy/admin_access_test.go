package proxy

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/robotsgate/robotsgate/proxy/config"
)

// TestAdminAccess: GET /robots answers anyone when [auth] has no users, and
// only loopback clients and authenticated users when it has; POST
// /robots/purge only ever answers those.
func TestAdminAccess(t *testing.T) {
	t.Parallel()
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	basic := func(cred string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(cred)) }
	const (
		remote   = "203.0.113.7:1234"
		remote6  = "[2001:db8::7]:1234"
		loopback = "127.0.0.1:1234"
	)
	type step struct {
		method, path, remote string
		header               []string // name, value pairs
		want                 int
	}
	for _, tc := range []struct {
		name  string
		users []config.AuthUser
		steps []step // in order: a purge empties the cache
	}{
		{"auth users", []config.AuthUser{{Name: "etl", PasswordHash: string(hash)}}, []step{
			{"GET", "/robots", remote, nil, 403},
			{"GET", "/robots", remote6, nil, 403},
			{"GET", "/robots", remote, []string{"Authorization", basic("etl:wrong")}, 403},
			{"GET", "/robots", remote, []string{"Authorization", basic("nobody:s3cret")}, 403},
			{"GET", "/robots", remote, []string{"Authorization", "Bearer s3cret"}, 403},
			{"GET", "/robots", remote, []string{"Authorization", basic("etl:s3cret")}, 200},
			{"GET", "/robots", remote6, []string{"Proxy-Authorization", basic("etl:s3cret")}, 200},
			{"GET", "/robots", loopback, nil, 200},
			{"GET", "/robots", "[::1]:1234", nil, 200},
			{"GET", "/robots", "[::ffff:127.0.0.1]:1234", nil, 200},
			{"GET", "/healthz", remote, nil, 200},
			{"POST", "/robots/purge", remote, nil, 403},
			{"POST", "/robots/purge", remote, []string{"Authorization", basic("etl:wrong")}, 403},
			{"POST", "/robots/purge", remote, []string{"Authorization", basic("etl:s3cret")}, 200},
			{"POST", "/robots/purge", loopback, nil, 404}, // purged already
			{"POST", "/v1/decide", remote, nil, 403},
			{"POST", "/v1/decide", remote, []string{"Authorization", basic("etl:wrong")}, 403},
			{"POST", "/v1/decide", remote, []string{"Authorization", basic("etl:s3cret")}, 415}, // no JSON body
			{"POST", "/v1/decide", loopback, nil, 415},
			{"POST", "/v1/decide", loopback, []string{"Authorization", basic("etl:wrong")}, 403}, // credentials sent are checked
			{"GET", "/status.json", remote, nil, 401},                                            // a browser asks for credentials
			{"GET", "/status", remote, []string{"Authorization", basic("etl:wrong")}, 401},
			{"GET", "/status.json", remote, []string{"Authorization", basic("etl:s3cret")}, 200},
			// An operator behind a name (or a TLS front) logs in.
			{"GET", "/status.json", remote, []string{"Host", "robotsgate.internal:8080", "Authorization", basic("etl:s3cret")}, 200},
			{"GET", "/status.json", loopback, []string{"Host", "rebound.example:8080"}, 401},
			{"GET", "/status", loopback, nil, 200},
		}},
		{"no auth users", nil, []step{
			{"GET", "/robots", remote, nil, 200},
			{"GET", "/robots", remote6, nil, 200},
			{"GET", "/robots", loopback, nil, 200},
			{"POST", "/robots/purge", remote, nil, 403},
			{"POST", "/robots/purge", remote, []string{"Authorization", basic("etl:s3cret")}, 403},
			{"POST", "/robots/purge", loopback, nil, 200},
			{"POST", "/v1/decide", remote, nil, 403},
			{"POST", "/v1/decide", loopback, nil, 415},
			{"GET", "/status.json", remote, nil, 403},
			{"GET", "/status.json", loopback, nil, 200},
			// A browser on this machine, led there by a rebound name or a
			// page of another site, cannot borrow the loopback rule.
			{"GET", "/status.json", loopback, []string{"Host", "evil.example:8080"}, 403},
			{"GET", "/status.json", loopback, []string{"Host", "localhost:8080"}, 200},
			{"GET", "/status.json", loopback, []string{"Host", "[::1]:8080"}, 200},
			{"GET", "/status.json", loopback, []string{"Origin", "http://evil.example"}, 403},
			{"GET", "/status.json", loopback, []string{"Origin", "http://127.0.0.1:8080"}, 200},
			{"POST", "/robots/purge", loopback, []string{"Host", "evil.example"}, 403},
			{"GET", "/healthz", loopback, []string{"Host", "evil.example"}, 200},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newTestOrigin(t, testRobots, nil)
			cfg := loopbackConfig()
			cfg.Auth.Users = tc.users
			p := startProxy(t, cfg)
			// Cache the origin's robots.txt with one proxy request.
			auth := ""
			if len(tc.users) > 0 {
				auth = "Proxy-Authorization: " + basic("etl:s3cret") + "\r\n"
			}
			if resp, _ := p.raw(t, "GET "+o.URL+"/page HTTP/1.1\r\nHost: "+strings.TrimPrefix(o.URL, "http://")+"\r\n"+auth+"Connection: close\r\n\r\n"); resp.StatusCode != 200 {
				t.Fatalf("proxy request: %d; want 200", resp.StatusCode)
			}
			p.srv.cache.Wait()
			// Over a real loopback socket, without credentials: served.
			if resp, body := get(t, &http.Client{Timeout: 5 * time.Second}, p.url.String()+"/robots?origin="+url.QueryEscape(o.URL)); resp.StatusCode != 200 {
				t.Errorf("GET /robots over loopback: %d %q; want 200", resp.StatusCode, body)
			}
			for _, s := range tc.steps {
				// The admin handler, reached as from a client at s.remote.
				r := httptest.NewRequestWithContext(t.Context(), s.method, s.path+"?origin="+url.QueryEscape(o.URL), nil)
				r.RemoteAddr, r.Host = s.remote, "127.0.0.1:8080"
				for i := 0; i+1 < len(s.header); i += 2 {
					if s.header[i] == "Host" {
						r.Host = s.header[i+1]
						continue
					}
					r.Header.Set(s.header[i], s.header[i+1])
				}
				w := httptest.NewRecorder()
				p.srv.ServeHTTP(w, r)
				if w.Code != s.want {
					t.Errorf("%s %s from %s with %q: %d %q; want %d", s.method, s.path, s.remote, s.header, w.Code, w.Body, s.want)
				}
				if w.Code == http.StatusUnauthorized && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Basic ") {
					t.Errorf("%s %s from %s: 401 without a Basic challenge", s.method, s.path, s.remote)
				}
				if w.Code == http.StatusForbidden {
					if ct := w.Header().Get("Content-Type"); ct != "text/plain; charset=utf-8" {
						t.Errorf("%s %s from %s: 403 Content-Type %q; want text/plain; charset=utf-8", s.method, s.path, s.remote, ct)
					}
					if strings.Contains(w.Body.String(), "Disallow") || strings.Contains(w.Body.String(), "groups") {
						t.Errorf("%s %s from %s: 403 body shows the entry: %q", s.method, s.path, s.remote, w.Body)
					}
				}
			}
		})
	}
}

// TestNotThroughItself: a request through the proxy to the proxy's own
// address, which would arrive as a loopback client and pass the operator
// endpoints' loopback rule, is refused, as plain HTTP and as a CONNECT,
// block_private or not.
func TestNotThroughItself(t *testing.T) {
	t.Parallel()
	cfg := loopbackConfig() // block_private off
	cfg.TLS.Mode = "tunnel"
	p := startProxy(t, cfg)
	for _, u := range []string{p.url.String() + "/status.json", "http://localhost:" + p.url.Port() + "/status.json"} {
		resp, body := get(t, p.client(), u)
		if resp.StatusCode != http.StatusForbidden || strings.Contains(body, "origins") {
			t.Errorf("GET %s through the proxy: %d %q; want 403", u, resp.StatusCode, body)
		}
	}
	if resp, _, _ := connect(t, p, p.url.Host); resp.StatusCode == http.StatusOK {
		t.Errorf("CONNECT to the proxy itself: %d; want it refused", resp.StatusCode)
	}
}
