package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
)

// serving is "robotsgate serve" run in this process, as TestServe runs it.
type serving struct {
	addr   string
	stderr *testkit.Buffer
	stdout *testkit.Buffer
}

// serveConfig starts "robotsgate serve -config cfgPath" on a loopback
// port and waits for its last startup line; the test's end stops it (as
// SIGTERM does) and wants exit 0.
func serveConfig(t *testing.T, cfgPath string) *serving {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	s := &serving{stderr: &testkit.Buffer{}, stdout: &testkit.Buffer{}}
	done := make(chan int, 1)
	go func() {
		done <- runMain(ctx, []string{"serve", "-config", cfgPath, "-listen", "127.0.0.1:0"}, strings.NewReader(""), s.stdout, s.stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d; want 0", code)
			}
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop")
		}
		if t.Failed() {
			t.Logf("serve's stderr:\n%s", s.stderr.String())
		}
	})
	testkit.Eventually(t, "the listen address in the startup lines", func() bool {
		if m := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(s.stderr.String()); m != nil {
			s.addr = m[1]
		}
		return s.addr != "" && strings.Contains(s.stderr.String(), "pacing on")
	})
	return s
}

// reload sends SIGHUP and waits for the n-th reload line, which it returns.
func (s *serving) reload(t *testing.T, n int) string {
	t.Helper()
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	var line string
	testkit.Eventually(t, fmt.Sprintf("reload %d", n), func() bool {
		lines := regexp.MustCompile(`msg="config reloaded".*`).FindAllString(s.stderr.String(), -1)
		if len(lines) >= n {
			line = lines[n-1]
		}
		return line != ""
	})
	return line
}

// TestReloadRotatedKeys: after robotsgate keys -rotate, a SIGHUP reload
// says the identity keys changed (the config did not), the proxy signs
// with the new key, and the key directory lists both until -remove takes
// the old one out, which the next reload says too.
func TestReloadRotatedKeys(t *testing.T) { // not parallel: it signals this process
	var mu sync.Mutex
	var keyids []string // of each request the origin received
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := regexp.MustCompile(`keyid="([^"]+)"`).FindStringSubmatch(r.Header.Get("Signature-Input"))
		mu.Lock()
		if m != nil {
			keyids = append(keyids, m[1])
		} else {
			keyids = append(keyids, "unsigned")
		}
		mu.Unlock()
		fmt.Fprint(w, "page")
	}))
	t.Cleanup(origin.Close)
	dir := t.TempDir()
	cfgPath := dir + "/c.toml"
	os.WriteFile(cfgPath, []byte("[tls]\nstate_dir = \""+dir+"/state\"\n[upstream]\nblock_private = false\n"+
		"[identity]\nsignature_agent = \"https://bot.example/.well-known/http-message-signatures-directory\"\n"), 0o644)
	if _, errOut, code := runCmd(t, "", "keys", "-config", cfgPath); code != 0 {
		t.Fatalf("keys: exit %d\n%s", code, errOut)
	}
	srv := serveConfig(t, cfgPath)
	proxyURL, _ := url.Parse("http://" + srv.addr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 10 * time.Second}
	signedWith := func() string {
		t.Helper()
		resp, err := client.Get(origin.URL + "/page")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		mu.Lock()
		defer mu.Unlock()
		return keyids[len(keyids)-1]
	}
	listed := func() []string {
		t.Helper()
		resp, err := http.Get("http://" + srv.addr + "/.well-known/http-message-signatures-directory")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d struct {
			Keys []struct{ X string } `json:"keys"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
			t.Fatal(err)
		}
		var xs []string
		for _, k := range d.Keys {
			xs = append(xs, k.X)
		}
		return xs
	}
	first := signedWith()
	before := listed()
	if len(before) != 1 {
		t.Fatalf("directory before the rotation lists %d keys; want 1", len(before))
	}

	if line := srv.reload(t, 1); !strings.HasSuffix(line, "changed=nothing") {
		t.Errorf("a reload with nothing changed: %s", line)
	}
	_, errOut, code := runCmd(t, "", "keys", "-config", cfgPath, "-rotate")
	if code != 0 {
		t.Fatalf("keys -rotate: exit %d\n%s", code, errOut)
	}
	if line := srv.reload(t, 2); !strings.HasSuffix(line, "changed=identity.keys") {
		t.Errorf("the reload after keys -rotate: %s; want changed=identity.keys", line)
	}
	second := signedWith()
	if second == first || second == "unsigned" {
		t.Errorf("after the rotation and reload the proxy signs with %s; want a new key (was %s)", second, first)
	}
	if !strings.Contains(errOut, second+"  signing") || !strings.Contains(errOut, first+"  retired") {
		t.Errorf("keys -rotate names other keys than the proxy signs with (%s, was %s):\n%s", second, first, errOut)
	}
	if after := listed(); len(after) != 2 || !slices.Contains(after, before[0]) {
		t.Errorf("directory after the rotation lists %q; want the new key and %q", after, before[0])
	}

	if _, errOut, code := runCmd(t, "", "keys", "-config", cfgPath, "-remove", first); code != 0 {
		t.Fatalf("keys -remove: exit %d\n%s", code, errOut)
	}
	if line := srv.reload(t, 3); !strings.HasSuffix(line, "changed=identity.keys") {
		t.Errorf("the reload after keys -remove: %s; want changed=identity.keys", line)
	}
	if after := listed(); len(after) != 1 || after[0] == before[0] {
		t.Errorf("directory after -remove lists %q; want the new key alone", after)
	}
	if got := signedWith(); got != second {
		t.Errorf("after -remove the proxy signs with %s; want %s", got, second)
	}
	// A config change and a key change in one reload: both are named.
	if _, _, code := runCmd(t, "", "keys", "-config", cfgPath, "-rotate"); code != 0 {
		t.Fatal("keys -rotate again failed")
	}
	os.WriteFile(cfgPath, []byte("[tls]\nstate_dir = \""+dir+"/state\"\n[upstream]\nblock_private = false\n"+
		"[identity]\nsignature_agent = \"https://bot.example/.well-known/http-message-signatures-directory\"\nvalidity = \"10m\"\n"), 0o644)
	if line := srv.reload(t, 4); !strings.HasSuffix(line, "changed=\"identity.validity identity.keys\"") {
		t.Errorf("the reload after a new validity and keys -rotate: %s", line)
	}
}

// TestKeysCard: keys -card prints the Signature Agent Card, its jwks the
// directory keys prints, after a rotation too; without [identity.card]
// it says what to set.
func TestKeysCard(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := dir + "/c.toml"
	os.WriteFile(cfg, []byte("[tls]\nstate_dir = \""+dir+"/state\"\n[identity]\nsignature_agent = \"https://bot.example/k\"\n"+
		"[identity.card]\nclient_id = \"https://bot.example/bot\"\n[identity.card.web_bot_auth]\nexpected-user-agent = \"ExampleBot/1.0\"\n"), 0o644)
	for i, args := range [][]string{nil, {"-rotate"}} {
		out, errOut, code := runCmd(t, "", append([]string{"keys", "-config", cfg, "-card"}, args...)...)
		directory, _, _ := runCmd(t, "", "keys", "-config", cfg)
		var card struct {
			ClientID string          `json:"client_id"`
			JWKS     json.RawMessage `json:"jwks"`
		}
		if err := json.Unmarshal([]byte(out), &card); code != 0 || err != nil || card.ClientID != "https://bot.example/bot" {
			t.Fatalf("keys -card %v: exit %d, %v\n%s\n%s", args, code, err, out, errOut)
		}
		if !jsonEqual(t, card.JWKS, []byte(directory)) || strings.Count(string(card.JWKS), `"kty"`) != i+1 {
			t.Errorf("keys -card %v: jwks %s; want the directory %s", args, card.JWKS, directory)
		}
		if !strings.Contains(errOut, "publish the card below at https://bot.example/bot (Content-Type: application/json); the proxy's listener serves it at /bot, signed") {
			t.Errorf("keys -card %v: stderr\n%s", args, errOut)
		}
	}
	os.WriteFile(cfg, []byte("[tls]\nstate_dir = \""+dir+"/state\"\n[identity]\nsignature_agent = \"https://bot.example/k\"\n"), 0o644)
	if _, errOut, code := runCmd(t, "", "keys", "-config", cfg, "-card"); code != 2 || !strings.Contains(errOut, "set [identity.card] client_id") {
		t.Errorf("keys -card without a card: exit %d\n%s", code, errOut)
	}
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}
