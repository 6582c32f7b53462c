// Package auth checks Basic proxy credentials against bcrypt hashes, at a
// bounded cost: a lever for anyone who can reach the port otherwise (see
// Authenticator).
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Authenticator checks Basic Proxy-Authorization against [[auth.users]].
//
// bcrypt at cost 12 takes a quarter of a second of CPU: far too much for
// every request, and a lever for anyone who can reach the port, since each
// new wrong password would cost that much. So:
//
//   - verified credentials are remembered (as a SHA-256 of user and
//     password, bound to the hash they matched) for authOKTTL and answered
//     from that memo before any limit below: while it lasts, a verified
//     user is never slowed or refused by them;
//   - failures are remembered for authFailTTL, so a client repeating a wrong
//     password costs one bcrypt per authFailTTL, not one per request;
//   - each client address (an IPv6 client by its /64, which one host
//     usually owns whole) may cause at most authFailBurst failed
//     comparisons, refilled at one per authFailRefill; past that, its new
//     credentials are refused at once, without running bcrypt;
//   - at most max(1, GOMAXPROCS-1) comparisons run at once, so that with two
//     CPUs or more one is left for everyone else; a check waits for its turn only as long as its
//     request's context allows, and never longer than authSlotWait.
//
// An authenticator belongs to one policy: a reload starts afresh, with
// empty memos and budgets.
type Authenticator struct {
	users map[string]string // name → bcrypt hash
	dummy []byte            // compared for unknown names, so they take as long
	now   func() time.Time

	// compare checks a password against a bcrypt hash:
	// bcrypt.CompareHashAndPassword (a test may count the calls).
	compare func(hash, password []byte) error
	// slots holds one value per comparison running; its capacity is the
	// most that may run at once.
	slots chan struct{}
	// slotWait is the longest a check waits for a slot: authSlotWait.
	slotWait time.Duration

	mu       sync.Mutex
	seen     map[[32]byte]authMemo
	maxSeen  int
	fails    map[netip.Addr]time.Time // client address → when its failure budget is full again
	maxFails int                      // most addresses in fails
}

type authMemo struct {
	user    string
	hash    string // the hash it was checked against ("" for an unknown name)
	ok      bool
	expires time.Time
}

const (
	authOKTTL   = 10 * time.Minute
	authFailTTL = time.Minute
	authMaxSeen = 10000

	// authFailBurst failed comparisons from one client address may come at
	// once: enough for a person or a script to get a password wrong a few
	// times (a repeated wrong password is remembered and costs one), few
	// enough that a burst costs a couple of CPU-seconds at cost 12.
	authFailBurst = 10
	// authFailRefill is how often one more failure is allowed after the
	// burst: at cost 12, an address can keep bcrypt busy 4% of one CPU.
	authFailRefill = 6 * time.Second
	// authMaxFailAddrs bounds the failure budgets kept; an address whose
	// budget is full again needs no entry.
	authMaxFailAddrs = 10000
	// authSlotWait is the longest a check waits for a comparison slot:
	// the time for some twenty cost-12 comparisons on one CPU. A check that
	// cannot start by then fails (407); the client may try again.
	authSlotWait = 5 * time.Second
)

// User is one [[auth.users]] entry: a name and the bcrypt hash of its
// password.
type User struct {
	Name         string
	PasswordHash string
}

// New returns an Authenticator for users on the clock now; nil when there
// are none (no authentication).
func New(users []User, now func() time.Time) *Authenticator {
	if len(users) == 0 {
		return nil
	}
	a := &Authenticator{
		users:    map[string]string{},
		now:      now,
		compare:  bcrypt.CompareHashAndPassword,
		slots:    make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1)),
		slotWait: authSlotWait,
		seen:     map[[32]byte]authMemo{},
		maxSeen:  authMaxSeen,
		fails:    map[netip.Addr]time.Time{},
		maxFails: authMaxFailAddrs,
	}
	for _, u := range users {
		a.users[u.Name] = u.PasswordHash
		if a.dummy == nil {
			a.dummy = []byte(u.PasswordHash)
		}
	}
	return a
}

// CheckRequest returns the authenticated user of r's Proxy-Authorization
// header (or, with direct, of Authorization too: a request to the proxy
// itself). A check that must run bcrypt waits for its turn no longer than
// r's context allows; its failure budget is that of r's client address.
func (a *Authenticator) CheckRequest(r *http.Request, direct bool) (string, bool) {
	h := r.Header.Get("Proxy-Authorization")
	if h == "" && direct {
		h = r.Header.Get("Authorization")
	}
	var client netip.Addr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		client = ap.Addr().Unmap()
	}
	return a.Check(r.Context(), h, client)
}

// BasicUser returns the user name of Basic credentials h, unchecked; ""
// when h holds none. The password is never looked at.
func BasicUser(h string) string {
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return ""
	}
	user, _, _ := strings.Cut(string(raw), ":")
	return user
}

// Check returns the authenticated user of h, a Basic credentials header
// value sent by client; waiting for a bcrypt slot ends with ctx.
func (a *Authenticator) Check(ctx context.Context, h string, client netip.Addr) (string, bool) {
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "", false
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	if !ok {
		return "", false
	}
	return a.verify(ctx, client, sha256.Sum256(raw), user, pass)
}

// verify checks one user and password sent by client (key is the SHA-256
// of "user:password"): from the memo when it can, else with bcrypt within
// the limits described on authenticator.
func (a *Authenticator) verify(ctx context.Context, client netip.Addr, key [32]byte, user, pass string) (string, bool) {
	hash, known := a.users[user]
	if u, ok, hit := a.remembered(key, hash); hit {
		return u, ok
	}
	client = failKey(client)
	if !a.spend(client) {
		return "", false // this address has failed too often: no bcrypt
	}
	if !a.acquire(ctx) {
		a.refund(client)
		return "", false
	}
	// Another check may have settled the same credential while this one
	// waited (a client opening several connections at once).
	if u, ok, hit := a.remembered(key, hash); hit {
		<-a.slots
		a.refund(client)
		return u, ok
	}
	var ok bool
	if known {
		ok = a.compare([]byte(hash), []byte(pass)) == nil
	} else {
		a.compare(a.dummy, []byte(pass)) // the same time as a known name
	}
	<-a.slots
	if ok {
		a.refund(client) // only failures are limited
	}
	a.remember(key, authMemo{user: user, hash: hash, ok: ok})
	if !ok {
		return "", false
	}
	return user, true
}

// remembered looks key up in the memo; hit is false when it is not there,
// has expired, or was checked against another hash than hash (a reload
// changed the password).
func (a *Authenticator) remembered(key [32]byte, hash string) (user string, ok, hit bool) {
	a.mu.Lock()
	m, found := a.seen[key]
	now := a.now()
	a.mu.Unlock()
	if !found || !now.Before(m.expires) || subtle.ConstantTimeCompare([]byte(m.hash), []byte(hash)) != 1 {
		return "", false, false
	}
	return m.user, m.ok, true
}

// remember stores m under key, with its expiry set from m.ok. When the memo
// is full it drops expired entries and failures first: failures are what a
// client can make many of, and verified users must stay on the fast path.
func (a *Authenticator) remember(key [32]byte, m authMemo) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	m.expires = now.Add(authFailTTL)
	if m.ok {
		m.expires = now.Add(authOKTTL)
	}
	if _, ok := a.seen[key]; !ok && len(a.seen) >= a.maxSeen {
		for k, e := range a.seen {
			if !e.ok || !now.Before(e.expires) {
				delete(a.seen, k)
			}
		}
		if len(a.seen) >= a.maxSeen {
			clear(a.seen)
		}
	}
	a.seen[key] = m
}

// failKey is the address whose failure budget a client spends: its own for
// IPv4, its /64 for IPv6.
func failKey(client netip.Addr) netip.Addr {
	if client.Is6() {
		if p, err := client.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return client
}

// spend takes one failure from client's budget before a comparison, and
// reports whether there was one to take. A budget is kept as the time at
// which it is full again (a token bucket of authFailBurst, one token back
// every authFailRefill); an address with a full budget has no entry.
func (a *Authenticator) spend(client netip.Addr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	full, tracked := a.fails[client]
	if full.Before(now) {
		full = now
	}
	if full.Sub(now) > (authFailBurst-1)*authFailRefill {
		return false
	}
	if !tracked && len(a.fails) >= a.maxFails {
		a.evictFails(now)
	}
	a.fails[client] = full.Add(authFailRefill)
	return true
}

// refund gives back what spend took, for a comparison that did not run or
// did not fail.
func (a *Authenticator) refund(client netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	full, ok := a.fails[client]
	if !ok {
		return // evicted meanwhile: its budget is full anyway
	}
	full = full.Add(-authFailRefill)
	if full.After(a.now()) {
		a.fails[client] = full
	} else {
		delete(a.fails, client)
	}
}

// evictFails makes room in the full table of failure budgets: first by
// dropping the budgets that are full again (no loss), then, if nine tenths
// of the table are still spending, arbitrary ones down to nine tenths. An
// address dropped that way gets a fresh budget, which costs at most
// authFailBurst more comparisons, still bounded by the slots; keeping a
// tenth free makes the scan rare. a.mu is held.
func (a *Authenticator) evictFails(now time.Time) {
	for k, full := range a.fails {
		if !full.After(now) {
			delete(a.fails, k)
		}
	}
	keep := a.maxFails - a.maxFails/10
	for k := range a.fails {
		if len(a.fails) < keep {
			break
		}
		delete(a.fails, k)
	}
}

// acquire takes a comparison slot, waiting while ctx allows and at most
// a.slotWait; it reports whether it got one. The caller gives it back
// with <-a.slots.
func (a *Authenticator) acquire(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false // the client has gone: nobody to answer
	}
	select {
	case a.slots <- struct{}{}:
		return true
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, a.slotWait)
	defer cancel()
	select {
	case a.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}
