package cluster

import (
	"encoding/json"
	"testing"

	"github.com/robotsgate/robotsgate/robots/fetch"
)

// FuzzStoredValue decodes any bytes as a value Redis might hold under a
// robots.txt key: nothing panics, and whatever is accepted passes the
// checks a fetched copy would, and is for the origin asked about.
func FuzzStoredValue(f *testing.F) {
	for _, s := range []string{
		`{"origin":"https://example.com:443","outcome":"fetched","status":200,"body":"VXNlci1hZ2VudDogKgo=","url":"u","fetched_at":"2026-01-01T00:00:00Z","expires":"2026-01-02T00:00:00Z"}`,
		`{"origin":"https://example.com:443","unreachable_since":"2026-01-01T00:00:00Z","retry_at":"2026-01-01T00:01:00Z","last_error":"refused"}`,
		`{"origin":"https://evil.example:443"}`, `{not json`, `null`, `[]`, `{"from":"x","host":"h","until":1,"why":"w"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var g storedGood
		if err := decode(s, &g, testOrigin, func() error { return g.GoodCopy.Check() }, &g.Origin); err == nil {
			if g.Origin != testOrigin.String() || g.GoodCopy.Check() != nil {
				t.Fatalf("accepted %q as %+v", s, g)
			}
			if g.Outcome == fetch.Unavailable && len(g.Body) > 0 {
				t.Fatalf("accepted a body for an unavailable answer: %q", s)
			}
		}
		var fl storedFailure
		if err := decode(s, &fl, testOrigin, func() error { return fl.Failure.Check() }, &fl.Origin); err == nil && fl.UnreachableSince.IsZero() {
			t.Fatalf("accepted a failure with no time: %q", s)
		}
		var m backoffMessage
		_ = json.Unmarshal([]byte(s), &m)
	})
}
