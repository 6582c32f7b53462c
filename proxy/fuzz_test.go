package proxy

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// FuzzRequestTarget: any request-line URI in origin-form or absolute-form
// gives a target that starts with "/" and is the URI's own tail (after one
// added "/" at most): nothing in it is decoded, cut or rewritten; any
// other URI is given back whole, for the decision to refuse.
func FuzzRequestTarget(f *testing.F) {
	for _, s := range []string{"http://h/p?q#f", "/a", "https://h", "h?x", "", "*", "http://h:1#x/y", "http://h?q/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		got := requestTarget(uri)
		if !strings.HasPrefix(uri, "/") && !strings.Contains(uri, "://") {
			if got != uri {
				t.Fatalf("requestTarget(%q) = %q; want it whole", uri, got)
			}
			return
		}
		if !strings.HasPrefix(got, "/") || !strings.HasSuffix(uri, got) && !strings.HasSuffix(uri, got[1:]) {
			t.Fatalf("requestTarget(%q) = %q", uri, got)
		}
	})
}

// FuzzProxyAuthorization: hostile Proxy-Authorization values never pass
// and never panic.
func FuzzProxyAuthorization(f *testing.F) {
	hash, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	a := newAuthenticator([]AuthUser{{Name: "u", PasswordHash: string(hash)}}, time.Now)
	for _, s := range []string{"Basic " + base64.StdEncoding.EncodeToString([]byte("u:wrong")), "Basic", "basic !!", "Bearer x", "Basic " + base64.StdEncoding.EncodeToString([]byte("u"))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := &http.Request{Header: http.Header{"Proxy-Authorization": {h}}}
		raw, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(h, "Basic"), "basic")))
		if user, ok := a.check(r, false); ok && string(raw) != "u:right" {
			t.Fatalf("%q authenticated as %q", h, user)
		}
	})
}

// FuzzProxyTarget sends request-targets through the real proxy to a
// lenient origin (see lenientOrigin) and fails if the origin serves a file
// that robots.txt disallows, or receives a target other than the one the
// client sent.
func FuzzProxyTarget(f *testing.F) {
	for _, tt := range redTeamTargets {
		f.Add(tt.target)
	}
	for _, s := range []string{"/", "/private/open", "/p/./../private", "/%2e%2e/private", "/private%2F", "/x/%2E%2E%5Cprivate", "/;/private", "/.secret"} {
		f.Add(s)
	}
	o := newLenientOrigin(f, nil, nil)
	p := startProxy(f, loopbackConfig())
	host := strings.TrimPrefix(o.URL, "http://")
	f.Fuzz(func(t *testing.T, target string) {
		if !strings.HasPrefix(target, "/") || strings.ContainsFunc(target, func(r rune) bool { return r <= ' ' || r == 0x7F }) {
			return // not something a request line can carry
		}
		_, _, before := o.last()
		resp, _ := p.raw(t, "GET http://"+host+target+" HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		l := o.leakedSince(before)
		if strings.Contains(target, "?") {
			// The documented limit (README, "Limits"): a "$" rule ends at
			// the end of the URL, query included, as Google matches it, so
			// "Disallow: /*.secret$" does not match "/x.secret?".
			l = slices.DeleteFunc(l, func(leak string) bool { return strings.HasSuffix(leak, ".secret\"") })
		}
		if len(l) > 0 {
			t.Fatalf("proxy answered %d, and the origin served disallowed files:\n%s", resp.StatusCode, strings.Join(l, "\n"))
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, got := range o.targets[before:] {
			if got != target && got != "/robots.txt" {
				t.Fatalf("sent %q; the origin received %q", target, got)
			}
		}
	})
}

// FuzzPurposeHeader: any X-Robots-Gate-Purpose value is read or refused
// with an error naming the known purposes, never half-read; what is read
// reads back the same from its names.
func FuzzPurposeHeader(f *testing.F) {
	for _, s := range []string{"ai-train", "ai-train, search", " AI-Input ,, ", "training", "", ",", "search\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ps, err := parsePurposes([]string{v})
		if err != nil {
			if ps != 0 || !strings.Contains(err.Error(), "known purposes are ai-train, ai-input, search") {
				t.Fatalf("parsePurposes(%q) = %v, %v", v, ps, err)
			}
			return
		}
		again, err := parsePurposes([]string{strings.Join(ps.Names(), ",")})
		if err != nil || again != ps {
			t.Fatalf("parsePurposes(%q) = %v; its names read back as %v, %v", v, ps, again, err)
		}
	})
}
