package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// authenticator checks Basic Proxy-Authorization against [[auth.users]].
// bcrypt at cost 12 takes a quarter of a second of CPU, far too much for
// every request, so verified credentials are remembered (as a SHA-256 of
// user and password, bound to the hash they matched) for a while, and so
// are failures, so that a client repeating a wrong password costs one
// bcrypt per minute, not one per request.
type authenticator struct {
	users map[string]string // name → bcrypt hash
	dummy []byte            // compared for unknown names, so they take as long

	mu      sync.Mutex
	seen    map[[32]byte]authMemo
	now     func() time.Time
	maxSeen int
}

type authMemo struct {
	user    string
	hash    string // the hash it was checked against; "" for a failure
	ok      bool
	expires time.Time
}

const (
	authOKTTL   = 10 * time.Minute
	authFailTTL = time.Minute
	authMaxSeen = 10000
)

// newAuthenticator returns nil when no users are configured: no auth.
func newAuthenticator(users []AuthUser, now func() time.Time) *authenticator {
	if len(users) == 0 {
		return nil
	}
	a := &authenticator{users: map[string]string{}, seen: map[[32]byte]authMemo{}, now: now, maxSeen: authMaxSeen}
	for _, u := range users {
		a.users[u.Name] = u.PasswordHash
		if a.dummy == nil {
			a.dummy = []byte(u.PasswordHash)
		}
	}
	return a
}

// check returns the authenticated user of r's Proxy-Authorization header
// (or, with direct, of Authorization too: a request to the proxy itself).
func (a *authenticator) check(r *http.Request, direct bool) (string, bool) {
	h := r.Header.Get("Proxy-Authorization")
	if h == "" && direct {
		h = r.Header.Get("Authorization")
	}
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
	key := sha256.Sum256(raw)
	now := a.now()
	hash, known := a.users[user]
	a.mu.Lock()
	m, hit := a.seen[key]
	a.mu.Unlock()
	if hit && now.Before(m.expires) && subtle.ConstantTimeCompare([]byte(m.hash), []byte(hash)) == 1 {
		return m.user, m.ok
	}
	var okPass bool
	if known {
		okPass = bcrypt.CompareHashAndPassword([]byte(hash), []byte(pass)) == nil
	} else {
		bcrypt.CompareHashAndPassword(a.dummy, []byte(pass)) // the same time as a known name
	}
	ttl := authFailTTL
	if okPass {
		ttl = authOKTTL
	}
	a.mu.Lock()
	if len(a.seen) >= a.maxSeen {
		clear(a.seen)
	}
	a.seen[key] = authMemo{user: user, hash: hash, ok: okPass, expires: now.Add(ttl)}
	a.mu.Unlock()
	if !okPass {
		return "", false
	}
	return user, true
}

// authRequired is the 407 answer.
func (s *Server) authRequired(r *http.Request) *http.Response {
	resp := s.answer(r, http.StatusProxyAuthRequired, ActionAuth, "robotsgate: proxy authentication required\n")
	resp.Header.Set("Proxy-Authenticate", `Basic realm="robotsgate"`)
	return resp
}
