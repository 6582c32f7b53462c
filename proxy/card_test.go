package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// has it fetched (GET, 200, application/json, cached for half the default
// validity of 5m), to anyone, whatever Host
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
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "max-age=150" {
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

// signedAt matches a response signature's created and expires.
var signedAt = regexp.MustCompile(`;created=([0-9]+);expires=([0-9]+);`)

// TestCardCacheAge: the card and the key directory are served for caches
// to keep no longer than half their signature's validity, and 300 s at
// most: a cache that keeps them as long as Cache-Control allows never
// serves an expired signature (created + max-age is before expires), with
// the shortest validity as with the longest.
func TestCardCacheAge(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		validity time.Duration
		maxAge   int
	}{
		{10 * time.Second, 5}, // the shortest identity.validity allows
		{31 * time.Second, 15},
		{5 * time.Minute, 150},
		{24 * time.Hour, 300},
	} {
		t.Run(tt.validity.String(), func(t *testing.T) {
			t.Parallel()
			cfg := cardConfig()
			cfg.Identity.Validity = tt.validity
			p := startProxy(t, cfg)
			for _, path := range []string{"/bot", "/.well-known/http-message-signatures-directory"} {
				resp, body := get(t, http.DefaultClient, p.url.String()+path)
				cc := resp.Header.Get("Cache-Control")
				m := signedAt.FindStringSubmatch(resp.Header.Get("Signature-Input"))
				if resp.StatusCode != 200 || m == nil {
					t.Fatalf("%s: %d %v\n%s", path, resp.StatusCode, resp.Header, body)
				}
				created, _ := strconv.ParseInt(m[1], 10, 64)
				expires, _ := strconv.ParseInt(m[2], 10, 64)
				if want := "max-age=" + strconv.Itoa(tt.maxAge); cc != want || created+int64(tt.maxAge) >= expires {
					t.Errorf("%s with validity %v: Cache-Control %q, signature created %d, expires %d; want %q, kept until before it expires",
						path, tt.validity, cc, created, expires, want)
				}
			}
		})
	}
}

// TestCardReloadConsistent: the card, its keys and its signature come from
// one config, whatever reloads happen while it is served: two configs, each
// with its own key and card name, applied in turn while the card is asked
// for, and every card served lists the keys of the config that named it
// and verifies against them.
func TestCardReloadConsistent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	configs := map[string]*config.Config{}
	keys := map[string][]any{} // by the card's client_name
	for _, name := range []string{"Bot X", "Bot Y"} {
		k, err := identity.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		pemKey, _ := k.MarshalPEM()
		path := filepath.Join(dir, name+".pem")
		if err := os.WriteFile(path, pemKey, 0o600); err != nil {
			t.Fatal(err)
		}
		c := cardConfig()
		c.TLS.StateDir = filepath.Join(dir, "state")
		c.Identity.KeyFile = path
		c.Identity.Card.ClientName = name
		configs[name] = c
		keys[name] = jwks(t, string(identity.Directory([]*identity.Key{k})), false)
	}
	p := startProxy(t, configs["Bot X"])

	// Cards are asked for by a few clients at once while the configs are
	// applied in turn, each client until the reloads end (at most
	// maxRequests each).
	const reloads, clients, maxRequests = 200, 4, 2000
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var served atomic.Int64
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for range maxRequests {
				select {
				case <-stop:
					return
				default:
				}
				if err := checkCard(client, p.url.String()+"/bot", keys); err != nil {
					t.Error(err)
					return
				}
				served.Add(1)
			}
		}()
	}
	for i := range reloads {
		next := *configs[[]string{"Bot Y", "Bot X"}[i%2]]
		if err := p.srv.Reload(&next); err != nil {
			t.Error(err)
			break
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d cards served during %d reloads", served.Load(), reloads)
}

// checkCard gets the card at url and checks that it lists the keys of the
// config that named it (keys, by the card's client_name), and verifies
// against them.
func checkCard(client *http.Client, url string, keys map[string][]any) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	var c struct {
		ClientName string `json:"client_name"`
		JWKS       struct {
			Keys []any `json:"keys"`
		} `json:"jwks"`
	}
	if err == nil {
		err = json.Unmarshal(body, &c)
	}
	if resp.StatusCode != 200 || err != nil {
		return fmt.Errorf("card: %d %v\n%s", resp.StatusCode, err, body)
	}
	if want := keys[c.ClientName]; !reflect.DeepEqual(c.JWKS.Keys, want) {
		return fmt.Errorf("card of %q lists keys %v; want that config's %v", c.ClientName, c.JWKS.Keys, want)
	}
	if err := identitytest.VerifyCard(resp.Header, body, "bot.example", time.Now()); err != nil {
		return fmt.Errorf("card of %q: %w", c.ClientName, err)
	}
	return nil
}
