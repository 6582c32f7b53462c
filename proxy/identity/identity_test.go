package identity_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/proxy/identity"
	"github.com/robotsgate/robotsgate/proxy/identity/identitytest"
)

// testKey is RFC 9421's test-key-ed25519 (Appendix B.1.4).
func testKey(t testing.TB) *identity.Key {
	t.Helper()
	b, err := os.ReadFile("testdata/test-key-ed25519.pem")
	if err != nil {
		t.Fatal(err)
	}
	k, err := identity.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestRFC9421Ed25519: the signature base of RFC 9421's Appendix B.2.6
// request, signed with its test key, is the RFC's signature, byte for
// byte (Ed25519 is deterministic).
func TestRFC9421Ed25519(t *testing.T) {
	t.Parallel()
	k := testKey(t)
	covered := [][2]string{
		{`"date"`, "Tue, 20 Apr 2021 02:07:55 GMT"},
		{`"@method"`, "POST"},
		{`"@path"`, "/foo"},
		{`"@authority"`, "example.com"},
		{`"content-type"`, "application/json"},
		{`"content-length"`, "18"},
	}
	params := `("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"`
	base := identity.Base(covered, params)
	const wantBase = `"date": Tue, 20 Apr 2021 02:07:55 GMT
"@method": POST
"@path": /foo
"@authority": example.com
"content-type": application/json
"content-length": 18
"@signature-params": ("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"`
	if string(base) != wantBase {
		t.Errorf("Base =\n%s\nwant\n%s", base, wantBase)
	}
	const want = "wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw=="
	if got := base64.StdEncoding.EncodeToString(ed25519.Sign(k.Private, base)); got != want {
		t.Errorf("signature = %s; want RFC 9421's %s", got, want)
	}
}

// TestThumbprint: JWK thumbprints as RFC 8037 (Appendix A.3) and the Web
// Bot Auth draft (of RFC 9421's test key) print them.
func TestThumbprint(t *testing.T) {
	t.Parallel()
	x, _ := base64.RawURLEncoding.DecodeString("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
	for _, tt := range []struct {
		pub  ed25519.PublicKey
		want string
	}{
		{x, "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"},
		{testKey(t).Public, "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U"},
	} {
		if got := identity.Thumbprint(tt.pub); got != tt.want {
			t.Errorf("Thumbprint = %s; want %s", got, tt.want)
		}
	}
}

// TestSignVerifies: what Sign puts on a request verifies with the
// independent verifier against the directory; a client's own signature
// fields, in any spelling, are replaced; a signature is reused for an
// authority while it has most of its validity ahead, then made anew.
func TestSignVerifies(t *testing.T) {
	t.Parallel()
	k := testKey(t)
	var now atomic.Int64
	now.Store(1_700_000_000)
	clock := func() time.Time { return time.Unix(now.Load(), 0) }
	s, err := identity.NewSigner(k, "https://bot.example/.well-known/http-message-signatures-directory", 0, 5*time.Minute, clock)
	if err != nil {
		t.Fatal(err)
	}
	dir := identity.Directory([]*identity.Key{k})
	sign := func(authority string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "https://"+authority+"/page", nil)
		r.Header[strings.ToLower(identity.FieldSignature)] = []string{"sig1=:AAAA:"} // a client's, lower-case
		r.Header.Set("Signature-Input", `sig1=("@method");created=1`)
		s.Sign(r.Header, r.URL.Host)
		r.Host = r.URL.Host
		return r
	}
	r := sign("Shop.Example:8443")
	if n := len(r.Header.Values("Signature")) + len(r.Header[strings.ToLower(identity.FieldSignature)]); n != 1 {
		t.Errorf("%d Signature fields; want 1, robotsgate's", n)
	}
	got, err := identitytest.Verify(r, dir, clock())
	if err != nil {
		t.Fatalf("Verify: %v\n%v", err, r.Header)
	}
	if got.KeyID != k.ID || got.Agent != "https://bot.example/.well-known/http-message-signatures-directory" || got.Expires.Sub(got.Created) != 5*time.Minute {
		t.Errorf("verified %+v", got)
	}
	want := `sig1=("@authority" "signature-agent";key="sig1");created=1700000000;expires=1700000300;keyid="` + k.ID + `";alg="ed25519";tag="web-bot-auth"`
	if in := r.Header.Get("Signature-Input"); in != want {
		t.Errorf("Signature-Input = %s; want %s", in, want)
	}
	if a := r.Header.Get("Signature-Agent"); a != `sig1="https://bot.example/.well-known/http-message-signatures-directory"` {
		t.Errorf("Signature-Agent = %s", a)
	}

	// Reused within a tenth of the validity, made anew after.
	now.Add(29)
	if again := sign("shop.example:8443"); again.Header.Get("Signature") != r.Header.Get("Signature") {
		t.Error("a signature 29 s old was not reused")
	}
	now.Add(1)
	later := sign("shop.example:8443")
	if later.Header.Get("Signature") == r.Header.Get("Signature") {
		t.Error("a signature 30 s old was reused")
	}
	if _, err := identitytest.Verify(later, dir, clock()); err != nil {
		t.Error(err)
	}
	// Another authority, another signature: a site cannot replay one
	// made for another.
	other := sign("other.example")
	other.Host = "shop.example:8443"
	if _, err := identitytest.Verify(other, dir, clock()); err == nil {
		t.Error("a signature made for other.example verified for shop.example")
	}
	// Expired.
	if _, err := identitytest.Verify(later, dir, clock().Add(5*time.Minute)); err == nil {
		t.Error("an expired signature verified")
	}
	if _, err := identity.NewSigner(k, "https://bot.example/\x01", 0, time.Minute, nil); err == nil {
		t.Error("an agent URL with a control byte was taken")
	}
}

// TestKeyRing: a key is made on first use with mode 0600, read back the
// same, refused when others may read it; a rotation retires the key into
// the directory, a removal takes it out.
func TestKeyRing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state", "identity-key.pem")
	if _, _, err := identity.LoadKeyRing(path, false); err == nil {
		t.Fatal("a missing key was not an error without make")
	}
	ring, made, err := identity.LoadKeyRing(path, true)
	if err != nil || !made {
		t.Fatalf("LoadKeyRing(make) = %v, made %v", err, made)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode())
	}
	again, made, err := identity.LoadKeyRing(path, true)
	if err != nil || made || again.Current.ID != ring.Current.ID {
		t.Fatalf("read back: %v, made %v, id %s; want %s", err, made, again.Current.ID, ring.Current.ID)
	}
	first := ring.Current.ID
	if err := ring.Rotate(); err != nil {
		t.Fatal(err)
	}
	ring, _, err = identity.LoadKeyRing(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if ring.Current.ID == first || len(ring.Retired) != 1 || ring.Retired[0].ID != first {
		t.Fatalf("after a rotation: current %s, retired %v; want a new key, %s retired", ring.Current.ID, ring.Retired, first)
	}
	if dir := string(identity.Directory(ring.Keys())); strings.Count(dir, `"kty":"OKP"`) != 2 {
		t.Errorf("directory after a rotation = %s; want both keys", dir)
	}
	if err := ring.Remove(ring.Current.ID); err == nil {
		t.Error("the signing key was removed")
	}
	if err := ring.Remove(first); err != nil {
		t.Fatal(err)
	}
	if ring, _, _ = identity.LoadKeyRing(path, false); len(ring.Retired) != 0 {
		t.Errorf("after a removal: %d retired; want 0", len(ring.Retired))
	}
	for _, mode := range []os.FileMode{0o644, 0o604, 0o660} {
		os.Chmod(path, mode)
		if _, _, err := identity.LoadKeyRing(path, false); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("a key of mode %#o: %v; want refused", mode, err)
		}
	}
	os.Chmod(path, 0o440) // a Kubernetes Secret for a pod with an fsGroup
	if _, _, err := identity.LoadKeyRing(path, false); err != nil {
		t.Errorf("a key of mode 0440: %v; want read", err)
	}
}

// BenchmarkSign: what signing costs a request: reusing an authority's
// signature (the common case), and making one (an origin's first request,
// or every 30 s), beside Ed25519 alone.
func BenchmarkSign(b *testing.B) {
	k := testKey(b)
	s, err := identity.NewSigner(k, "https://bot.example", 0, 5*time.Minute, nil)
	if err != nil {
		b.Fatal(err)
	}
	h := http.Header{}
	b.Run("reused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Sign(h, "shop.example")
		}
	})
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		var tick int64 // a minute a call: nothing is reused
		fresh, _ := identity.NewSigner(k, "https://bot.example", 0, 5*time.Minute, func() time.Time { tick += 60; return time.Unix(tick, 0) })
		for b.Loop() {
			fresh.Sign(h, "shop.example")
		}
	})
	b.Run("ed25519", func(b *testing.B) {
		b.ReportAllocs()
		msg := []byte(`"@authority": shop.example` + "\n")
		for b.Loop() {
			ed25519.Sign(k.Private, msg)
		}
	})
}

// TestSignDirectoryAuthority: the directory is signed for the signature
// agent URL's authority as RFC 9421 writes "@authority" and robotsgate
// writes an origin's: lower case, IDNA's ASCII form, an IP address in its
// normal form, without the scheme's default port; a host written with a
// trailing dot, which verifiers read two ways, is refused.
func TestSignDirectoryAuthority(t *testing.T) {
	t.Parallel()
	k, err := identity.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	for agent, want := range map[string]string{
		"https://Bot.Example/.well-known/http-message-signatures-directory": "bot.example",
		"https://bot.example:443/d":                                         "bot.example",
		"https://bot.example:8443/d":                                        "bot.example:8443",
		"https://[::1]:443/d":                                               "[::1]",
		"https://[::1]:8443":                                                "[::1]:8443",
		"https://XN--Bcher-KVA.Example/d":                                   "xn--bcher-kva.example",
		"https://bot.example:/d":                                            "bot.example",
		"https://127.1:8443/d":                                              "127.0.0.1:8443",
		"https://[0:0::1]/d":                                                "[::1]",
		"https://user@Bot.Example/d":                                        "bot.example",
	} {
		s, err := identity.NewSigner(k, agent, 0, time.Minute, nil)
		if err != nil {
			t.Fatalf("NewSigner(%q): %v", agent, err)
		}
		if got := s.DirectoryAuthority(); got != want {
			t.Errorf("DirectoryAuthority() for %q = %q; want %q", agent, got, want)
		}
	}
	for _, agent := range []string{"bot.example", "https://bot.example./d", "https://bot.example.:8443/d", "ftp://bot.example/d", "https://999.1.1.1/d"} {
		if s, err := identity.NewSigner(k, agent, 0, time.Minute, nil); err == nil {
			t.Errorf("NewSigner(%q): signs the directory for %q; want an error", agent, s.DirectoryAuthority())
		}
	}
}
