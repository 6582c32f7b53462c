package proxy

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/identity/identitytest"
)

// cardConfig is a loopback config with [identity] and a Signature Agent
// Card published at https://bot.example/bot.
func cardConfig() *config.Config {
	c := loopbackConfig()
	c.Identity.SignatureAgent = testAgent
	c.Identity.Card = config.CardConfig{ClientID: "https://Bot.Example/bot", ClientName: "Example Bot", Keys: identity.CardKeysInline}
	c.Identity.Card.WebBotAuth.ExpectedUserAgent = "ExampleBot/1.0 (+https://bot.example/bot)"
	return c
}

// jwks returns the keys member of a JWK Set, or of a card's jwks.
func jwks(t *testing.T, body string, card bool) []any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if card {
		v, _ = v["jwks"].(map[string]any)
	}
	keys, _ := v["keys"].([]any)
	return keys
}

// TestCardServed: the proxy's own listener serves the Signature Agent
// Card at its client_id's path, as draft-meunier-webbotauth-registry-04
// has it fetched (GET, 200, application/json), to anyone, whatever Host
// the request names: its jwks the key directory's keys, its signature over
// its Content-Digest verifying for the client_id's authority only. HEAD
// has its headers, other methods 405. A reload after a rotation lists the
// new key and the retired one, in the card as in the directory, and the
// new key signs it; a reload without [identity.card] takes it away.
func TestCardServed(t *testing.T) {
	t.Parallel()
	cfg := cardConfig()
	p := startProxy(t, cfg)
	card := func(host string) (*http.Response, string) {
		return p.raw(t, "GET /bot HTTP/1.1\r\nHost: "+host+"\r\nOrigin: https://elsewhere.example\r\nConnection: close\r\n\r\n")
	}
	check := func(nkeys int) {
		t.Helper()
		_, dir := get(t, http.DefaultClient, p.url.String()+"/.well-known/http-message-signatures-directory")
		for _, host := range []string{p.url.Host, "evil.example"} {
			resp, body := card(host)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "max-age=300" {
				t.Fatalf("card asked as %s: %d %v\n%s", host, resp.StatusCode, resp.Header, body)
			}
			if got, want := jwks(t, body, true), jwks(t, dir, false); len(got) != nkeys || !reflect.DeepEqual(got, want) {
				t.Errorf("card's keys %v; want the directory's %v (%d)", got, want, nkeys)
			}
			if err := identitytest.VerifyCard(resp.Header, []byte(body), "bot.example", time.Now()); err != nil {
				t.Errorf("card asked as %s: %v\n%v", host, err, resp.Header)
			}
			if err := identitytest.VerifyCard(resp.Header, []byte(body), host, time.Now()); err == nil {
				t.Errorf("card asked as %s verifies for it; want for bot.example only", host)
			}
			if !strings.Contains(resp.Header.Get("Signature-Input"), `keyid="`+p.srv.SigningKey()+`"`) {
				t.Errorf("card signed with %s; want the signing key %s", resp.Header.Get("Signature-Input"), p.srv.SigningKey())
			}
			if !strings.Contains(body, `"rfc9309-product-token": "ExampleBot"`) {
				t.Errorf("card does not name the token obeyed for its User-Agent:\n%s", body)
			}
		}
	}
	check(1)
	if resp, body := p.raw(t, "HEAD /bot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); resp.StatusCode != 200 || body != "" || resp.Header.Get("Content-Digest") == "" {
		t.Errorf("HEAD: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if resp, _ := p.raw(t, "POST /bot HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"); resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d %v", resp.StatusCode, resp.Header)
	}

	ring, _, err := identity.OpenRing(cfg, false)
	if err != nil {
		t.Fatal(err)
	}
	old := ring.Current.ID
	if err := ring.Rotate(); err != nil {
		t.Fatal(err)
	}
	next := *cfg
	if err := p.srv.Reload(&next); err != nil {
		t.Fatal(err)
	}
	if p.srv.SigningKey() == old {
		t.Fatal("the reload kept the old signing key")
	}
	check(2)

	off := *cfg
	off.Identity.Card = config.CardConfig{Keys: identity.CardKeysInline}
	if err := p.srv.Reload(&off); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, http.DefaultClient, p.url.String()+"/bot"); resp.StatusCode != 404 {
		t.Errorf("card after a reload without it: %d; want 404", resp.StatusCode)
	}
}

// TestCardJWKSURI: with keys = "jwks_uri" the card names signature_agent,
// where the key directory is, carries no keys and no signature (the draft
// recommends one for inline keys).
func TestCardJWKSURI(t *testing.T) {
	t.Parallel()
	cfg := cardConfig()
	cfg.Identity.Card.Keys = identity.CardKeysURI
	p := startProxy(t, cfg)
	resp, body := get(t, http.DefaultClient, p.url.String()+"/bot")
	var c map[string]any
	if err := json.Unmarshal([]byte(body), &c); resp.StatusCode != 200 || err != nil {
		t.Fatalf("card: %d %v %s", resp.StatusCode, err, body)
	}
	if c["jwks_uri"] != testAgent || c["jwks"] != nil || resp.Header.Get("Signature") != "" || resp.Header.Get("Content-Digest") != "" {
		t.Errorf("card with keys = jwks_uri: %v\n%s", resp.Header, body)
	}
}
