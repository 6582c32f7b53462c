package auth

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"golang.org/x/crypto/bcrypt"
)

func TestAuthenticatorRemembers(t *testing.T) {
	t.Parallel()
	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	a := New([]User{{Name: "u", PasswordHash: string(hash)}}, time.Now)
	r, _ := http.NewRequest("GET", "http://x/", nil)
	r.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("u:pw")))
	if user, ok := a.CheckRequest(r, false); !ok || user != "u" {
		t.Fatalf("check = %q %v", user, ok)
	}
	// A changed hash (a reload) invalidates what was remembered.
	hash2, _ := bcrypt.GenerateFromPassword([]byte("other"), bcrypt.MinCost)
	a.users["u"] = string(hash2)
	if _, ok := a.CheckRequest(r, false); ok {
		t.Error("old password still accepted after its hash changed")
	}
	if New(nil, time.Now) != nil {
		t.Error("no users: want no authenticator")
	}
}

// countingAuth is an authenticator for user "u" with password "pw" (a
// bcrypt.MinCost hash), a hand-set clock, and a count of the comparisons
// it runs (real bcrypt ones).
func countingAuth(t *testing.T) (*Authenticator, *testkit.Clock, *atomic.Int64) {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	clock := testkit.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a := New([]User{{Name: "u", PasswordHash: string(hash)}}, clock.Now)
	calls := new(atomic.Int64)
	a.compare = func(hash, password []byte) error {
		calls.Add(1)
		return bcrypt.CompareHashAndPassword(hash, password)
	}
	return a, clock, calls
}

// authRequest is a proxy request from remote (host:port) with Basic
// Proxy-Authorization for cred ("user:password").
func authRequest(ctx context.Context, remote, cred string) *http.Request {
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://example.com/", nil)
	r.RemoteAddr = remote
	r.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(cred)))
	return r
}

// TestAuthFailureBudget: unique wrong passwords from one address (an IPv6
// /64) run bcrypt authFailBurst times, then once per authFailRefill.
func TestAuthFailureBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		remotes []string // one budget between them
		other   string   // another budget
	}{
		{"ipv4", []string{"198.51.100.7:1000", "198.51.100.7:2000"}, "198.51.100.8:1000"},
		{"ipv4-mapped", []string{"[::ffff:198.51.100.7]:1000", "198.51.100.7:2000"}, "[::ffff:198.51.100.8]:1000"},
		{"ipv6 /64", []string{"[2001:db8:1:2::1]:1000", "[2001:db8:1:2:ffff::7]:1000"}, "[2001:db8:1:3::1]:1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, clock, calls := countingAuth(t)
			wrong := 0
			guess := func(remote string) bool {
				wrong++
				_, ok := a.CheckRequest(authRequest(t.Context(), remote, fmt.Sprintf("u:wrong%d", wrong)), false)
				return ok
			}
			for i := range 5 * authFailBurst {
				if guess(tc.remotes[i%len(tc.remotes)]) {
					t.Fatalf("wrong password %d accepted", i)
				}
			}
			if got := calls.Load(); got != authFailBurst {
				t.Errorf("%d unique wrong passwords from one address ran %d comparisons; want %d", 5*authFailBurst, got, authFailBurst)
			}
			// Past its budget, an address cannot get even the right
			// password compared: only bcrypt would tell it is right.
			if _, ok := a.CheckRequest(authRequest(t.Context(), tc.remotes[0], "u:pw"), false); ok {
				t.Errorf("new credentials from an address past its budget accepted without a comparison")
			}
			// One failure comes back per authFailRefill.
			clock.Advance(authFailRefill)
			before := calls.Load()
			guess(tc.remotes[0])
			guess(tc.remotes[0])
			if got := calls.Load() - before; got != 1 {
				t.Errorf("after one refill: %d comparisons; want 1", got)
			}
			// Another address has its own budget.
			before = calls.Load()
			guess(tc.other)
			if got := calls.Load() - before; got != 1 {
				t.Errorf("another address: %d comparisons; want 1", got)
			}
			// A right password costs nothing from the budget.
			clock.Advance(authFailBurst * authFailRefill)
			if user, ok := a.CheckRequest(authRequest(t.Context(), tc.remotes[0], "u:pw"), false); !ok || user != "u" {
				t.Fatalf("check(u:pw) = %q, %v; want u, true", user, ok)
			}
			before = calls.Load()
			for range 2 * authFailBurst {
				guess(tc.remotes[0])
			}
			if got := calls.Load() - before; got != authFailBurst {
				t.Errorf("after a full refill and a right password: %d comparisons; want %d", got, authFailBurst)
			}
		})
	}
}

// TestAuthRepeatedFailureRemembered: a wrong password repeated costs one
// comparison per authFailTTL.
func TestAuthRepeatedFailureRemembered(t *testing.T) {
	t.Parallel()
	a, clock, calls := countingAuth(t)
	for i := range 3 {
		if _, ok := a.CheckRequest(authRequest(t.Context(), "198.51.100.7:1", "u:wrong"), false); ok {
			t.Fatalf("check %d of a wrong password passed", i)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("one wrong password three times: %d comparisons; want 1", got)
	}
	clock.Advance(authFailTTL)
	a.CheckRequest(authRequest(t.Context(), "198.51.100.7:1", "u:wrong"), false)
	if got := calls.Load(); got != 2 {
		t.Errorf("the same wrong password after authFailTTL: %d comparisons; want 2", got)
	}
}

// TestAuthVerifiedUserFastPath: a verified credential is answered from the
// memo while its address is past its budget and every slot is taken.
func TestAuthVerifiedUserFastPath(t *testing.T) {
	t.Parallel()
	// In a bubble: a check that waited for a slot would be seen at once,
	// at its context's 10 s on the fake clock.
	synctest.Test(t, func(t *testing.T) {
		const remote = "198.51.100.7:1000"
		a, _, calls := countingAuth(t)
		if user, ok := a.CheckRequest(authRequest(t.Context(), remote, "u:pw"), false); !ok || user != "u" {
			t.Fatalf("check(u:pw) = %q, %v; want u, true", user, ok)
		}
		for i := range 2 * authFailBurst {
			a.CheckRequest(authRequest(t.Context(), remote, fmt.Sprintf("u:wrong%d", i)), false)
		}
		// Every comparison slot taken, as by guesses from many addresses.
		for range cap(a.slots) {
			a.slots <- struct{}{}
		}
		before := calls.Load()
		for _, direct := range []bool{false, true} {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			r := authRequest(ctx, remote, "u:pw")
			if direct {
				r.Header.Set("Authorization", r.Header.Get("Proxy-Authorization"))
				r.Header.Del("Proxy-Authorization")
			}
			user, ok := a.CheckRequest(r, direct)
			waited := ctx.Err() != nil
			cancel()
			if !ok || user != "u" {
				t.Errorf("verified user (direct %v), address past its budget, slots full: check = %q, %v; want u, true", direct, user, ok)
			}
			if waited {
				t.Errorf("verified user (direct %v) waited for a slot until its context ended", direct)
			}
		}
		if got := calls.Load() - before; got != 0 {
			t.Errorf("verified user ran %d comparisons; want 0 (from the memo)", got)
		}
		// New guesses from that address are refused at once, slots or not.
		if _, ok := a.CheckRequest(authRequest(t.Context(), remote, "u:another"), false); ok {
			t.Error("guess from an address past its budget accepted")
		}
		if got := calls.Load() - before; got != 0 {
			t.Errorf("guess from an address past its budget ran %d comparisons; want 0", got)
		}
	})
}

// TestAuthConcurrencyBound: guesses from many addresses at once never run
// more comparisons at once than there are slots.
func TestAuthConcurrencyBound(t *testing.T) {
	t.Parallel()
	a, _, _ := countingAuth(t)
	if got, want := cap(a.slots), max(1, runtime.GOMAXPROCS(0)-1); got != want {
		t.Errorf("comparison slots = %d; want %d", got, want)
	}
	const bound, guessers = 3, 24
	a.slots = make(chan struct{}, bound)
	var running, most atomic.Int64
	full := make(chan struct{}) // closed once bound comparisons run at once
	var fullOnce sync.Once
	a.compare = func(hash, password []byte) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if n >= bound {
			fullOnce.Do(func() { close(full) })
		}
		// Hold the slot until the others could pile in.
		select {
		case <-full:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("never %d comparisons at once", bound)
		}
		return bcrypt.CompareHashAndPassword(hash, password)
	}
	var wg sync.WaitGroup
	for i := range guessers {
		wg.Go(func() {
			// Each from its own address, so no budget runs out.
			r := authRequest(t.Context(), fmt.Sprintf("198.51.100.%d:1", i+1), fmt.Sprintf("u:wrong%d", i))
			if _, ok := a.CheckRequest(r, false); ok {
				t.Errorf("guess %d accepted", i)
			}
		})
	}
	wg.Wait()
	if got := most.Load(); got != bound {
		t.Errorf("at most %d comparisons ran at once; want %d", got, bound)
	}
}

// TestAuthSlotWaitEndsWithContext: a check waiting for a slot fails, without
// a comparison or a budget spent, when its context ends or slotWait passes
// (in a bubble: the 20 ms and the 10 s bound are the fake clock's).
func TestAuthSlotWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	cancelled := func(ctx context.Context) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		return ctx, cancel
	}
	shortDeadline := func(ctx context.Context) (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, 20*time.Millisecond)
	}
	for _, tc := range []struct {
		name     string
		ctx      func(context.Context) (context.Context, context.CancelFunc)
		cancel   bool          // cancel once the check has started
		slotWait time.Duration // a.slotWait
	}{
		{"cancelled before", cancelled, false, time.Hour},
		{"cancelled while waiting", context.WithCancel, true, time.Hour},
		{"deadline while waiting", shortDeadline, false, time.Hour},
		{"slotWait over", context.WithCancel, false, 20 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				a, _, calls := countingAuth(t)
				a.slotWait = tc.slotWait
				for range cap(a.slots) {
					a.slots <- struct{}{}
				}
				ctx, cancel := tc.ctx(t.Context())
				defer cancel()
				done := make(chan bool, 1)
				go func() {
					_, ok := a.CheckRequest(authRequest(ctx, "198.51.100.7:1", "u:pw"), false)
					done <- ok
				}()
				if tc.cancel {
					cancel()
				}
				select {
				case ok := <-done:
					if ok {
						t.Error("check with no slot passed")
					}
				case <-time.After(10 * time.Second):
					t.Fatal("check still waiting for a slot after 10s")
				}
				if got := calls.Load(); got != 0 {
					t.Errorf("%d comparisons ran; want 0", got)
				}
				a.mu.Lock()
				spent := len(a.fails)
				a.mu.Unlock()
				if spent != 0 {
					t.Errorf("%d failure budgets spent by checks that never compared; want 0", spent)
				}
			})
		})
	}
}

// TestAuthTablesBounded: guesses from ever more addresses keep the failure
// budgets and the memo within their bounds, and the memo keeps verified
// credentials.
func TestAuthTablesBounded(t *testing.T) {
	t.Parallel()
	a, clock, bcrypts := countingAuth(t)
	var guesses atomic.Int64 // wrong passwords compared
	bcryptCompare := a.compare
	a.compare = func(hash, password []byte) error {
		if string(password) == "pw" {
			return bcryptCompare(hash, password)
		}
		guesses.Add(1)
		return bcrypt.ErrMismatchedHashAndPassword // no bcrypt: many guesses
	}
	if _, ok := a.CheckRequest(authRequest(t.Context(), "192.0.2.1:1", "u:pw"), false); !ok {
		t.Fatal("right password refused")
	}
	addr := func(i int) string { return fmt.Sprintf("10.%d.%d.%d:1", i>>16&0xff, i>>8&0xff, i&0xff) }
	n := 2*max(a.maxFails, a.maxSeen) + 1
	for i := range n {
		a.CheckRequest(authRequest(t.Context(), addr(i), fmt.Sprintf("u:wrong%d", i)), false)
		if len(a.fails) > a.maxFails || len(a.seen) > a.maxSeen {
			t.Fatalf("after %d addresses: %d failure budgets (max %d), %d remembered (max %d)", i+1, len(a.fails), a.maxFails, len(a.seen), a.maxSeen)
		}
	}
	if got := guesses.Load(); got != int64(n) {
		t.Errorf("%d guesses from distinct addresses: %d comparisons; want %d", n, got, n)
	}
	// The verified credential outlived the failures that filled the memo.
	before := bcrypts.Load()
	if _, ok := a.CheckRequest(authRequest(t.Context(), "192.0.2.1:1", "u:pw"), false); !ok || bcrypts.Load() != before {
		t.Errorf("verified credential after %d failures: ok %v, %d comparisons; want ok from the memo", n, ok, bcrypts.Load()-before)
	}
	// Budgets that are full again are the first to go.
	clock.Advance(authFailRefill)
	a.mu.Lock()
	for i := 0; len(a.fails) < a.maxFails; i++ {
		a.fails[netip.AddrFrom4([4]byte{172, 16, byte(i >> 8), byte(i)})] = clock.Now()
	}
	a.mu.Unlock()
	a.CheckRequest(authRequest(t.Context(), "192.0.2.2:1", "u:wrong-again"), false)
	if got := len(a.fails); got != 1 {
		t.Errorf("a full table of refilled budgets, then one failure: %d budgets; want 1", got)
	}
}

// FuzzProxyAuthorization: hostile Proxy-Authorization values never pass
// and never panic.
func FuzzProxyAuthorization(f *testing.F) {
	hash, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	a := New([]User{{Name: "u", PasswordHash: string(hash)}}, time.Now)
	for _, s := range []string{"Basic " + base64.StdEncoding.EncodeToString([]byte("u:wrong")), "Basic", "basic !!", "Bearer x", "Basic " + base64.StdEncoding.EncodeToString([]byte("u"))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := &http.Request{Header: http.Header{"Proxy-Authorization": {h}}}
		raw, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(h, "Basic"), "basic")))
		if user, ok := a.CheckRequest(r, false); ok && string(raw) != "u:right" {
			t.Fatalf("%q authenticated as %q", h, user)
		}
	})
}
