package cluster

import (
	"bytes"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/robots/fetch"
)

// FuzzStoredValue reads any bytes as a value Redis might hold under a
// robots.txt key or send on a channel, twice: as read (the fuzzer can
// hardly forge a MAC, so whatever opens must be exactly what sealing its
// payload gives), and sealed with the secret (to reach the JSON decoding
// and the checks behind the seal). Nothing panics, and whatever is
// accepted passes the checks a fetched copy would, with times an instance
// could have written, and is for the origin asked about.
func FuzzStoredValue(f *testing.F) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	goodKey, failKey := "rgtest:robots:good:{"+testOrigin.String()+"}", "rgtest:robots:fail:{"+testOrigin.String()+"}"
	c := &Client{opts: Options{MaxTTL: 24 * time.Hour, Prefix: "rgtest:"}, seal: newSealer(testSecret)}
	for _, s := range []string{
		`{"origin":"https://example.com:443","outcome":"fetched","status":200,"body":"VXNlci1hZ2VudDogKgo=","url":"u","fetched_at":"2026-01-01T00:00:00Z","expires":"2026-01-02T00:00:00Z"}`,
		`{"origin":"https://example.com:443","unreachable_since":"2026-01-01T00:00:00Z","retry_at":"2026-01-01T00:01:00Z","last_error":"refused"}`,
		`{"origin":"https://example.com:443","unreachable_since":"2000-01-01T00:00:00Z","retry_at":"2099-01-01T00:00:00Z"}`,
		`{"origin":"https://example.com:443","outcome":"fetched","status":200,"url":"u","fetched_at":"2026-01-01T00:00:00Z","expires":"2099-01-01T00:00:00Z"}`,
		`{"origin":"https://evil.example:443"}`, `{not json`, `null`, `[]`, `{"from":"x","host":"h","until":1,"why":"w"}`,
		`{"from":"x","origin":"https://example.com:443"}`, "v1.", "v1." + string(bytes.Repeat([]byte("A"), macChars)) + ".{}",
	} {
		f.Add(s)
		f.Add(string(c.seal.seal(goodKey, []byte(s))))
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, key := range []string{goodKey, failKey, "rgtest:backoff", "rgtest:purge"} {
			if p, err := c.seal.open(key, []byte(s)); err == nil && !bytes.Equal(c.seal.seal(key, p), []byte(s)) {
				t.Fatalf("opened %q under %s, which sealing its payload does not give", s, key)
			}
		}
		check := func(s string) {
			if g, err := c.decodeGood(goodKey, s, testOrigin, now); err == nil {
				if g.Check() != nil || g.CheckTimes(now, c.opts.MaxTTL) != nil {
					t.Fatalf("accepted %q as %+v", s, g)
				}
				if g.Outcome == fetch.Unavailable && len(g.Body) > 0 {
					t.Fatalf("accepted a body for an unavailable answer: %q", s)
				}
			}
			if fl, err := c.decodeFailure(failKey, s, testOrigin, now); err == nil && (fl.UnreachableSince.IsZero() || fl.CheckTimes(now) != nil) {
				t.Fatalf("accepted failure marks with no time, or out of bounds: %q", s)
			}
			if m, err := c.decodeBackoff("rgtest:backoff", s); err == nil && (m.Host == "" || m.Until <= 0) {
				t.Fatalf("accepted a back-off without a host or an end: %q", s)
			}
			if _, o, err := c.decodePurge("rgtest:purge", s); err == nil && o.IsZero() {
				t.Fatalf("accepted a purge of no origin: %q", s)
			}
		}
		check(s)
		for _, key := range []string{goodKey, failKey, "rgtest:backoff", "rgtest:purge"} {
			check(string(c.seal.seal(key, []byte(s))))
		}
	})
}
