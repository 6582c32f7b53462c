package cluster

import (
	"bytes"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// counted is a Client whose OnError calls are counted.
type counted struct {
	*Client
	onError *atomic.Int64
}

func newCounted(t *testing.T, r *redistest.Server, log *testkit.Buffer, secret []byte) counted {
	t.Helper()
	n := new(atomic.Int64)
	return counted{newClientWith(t, r, log, Options{Secret: secret, OnError: func() { n.Add(1) }}), n}
}

// errorsNow returns both counts, which must agree.
func (c counted) errorsNow(t *testing.T) int64 {
	t.Helper()
	st := c.Status()
	if st.Errors != c.onError.Load() {
		t.Errorf("Status().Errors = %d, OnError called %d times; want them equal", st.Errors, c.onError.Load())
	}
	if !st.Up {
		t.Errorf("Status() = %+v: a foreign value opened the breaker", st)
	}
	return st.Errors
}

// plainRedis is a client of the fleet's Redis without the secret: what an
// attacker who can reach Redis has.
func plainRedis(t *testing.T, r *redistest.Server) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestForeignStoreValues: values written to Redis without the secret (in
// the JSON of earlier versions, or in today's format with a MAC made with
// another secret), a valid value moved to another origin's key, and a
// valid value whose times no instance would write, are all ignored, each
// counted once as a cluster error (Status().Errors and OnError) without
// opening the breaker. They are the attacker's: a failure mark unreachable
// since 2000 and retrying in 2099 (no restrictions, never fetched again),
// and an empty good copy expiring in 2099 (everything allowed). A value
// written by an instance with the same secret round-trips.
func TestForeignStoreValues(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	log := &testkit.Buffer{}
	c := newCounted(t, r, log, testSecret)
	rdb := plainRedis(t, r)
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Second)
	goodKey, failKey := "rgtest:robots:good:{https://example.com:443}", "rgtest:robots:fail:{https://example.com:443}"
	otherGoodKey := "rgtest:robots:good:{https://other.example:443}"
	stamp := func(t time.Time) string { return t.Format(time.RFC3339) }
	failJSON := `{"origin":"https://example.com:443","unreachable_since":"2000-01-01T00:00:00Z","retry_at":"2099-01-01T00:00:00Z","last_error":"connection refused"}`
	emptyJSON := `{"origin":"https://example.com:443","outcome":"fetched","status":200,"url":"https://example.com/robots.txt","fetched_at":"` + stamp(now) + `","expires":"2099-01-01T00:00:00Z"}`
	soundJSON := `{"origin":"https://example.com:443","outcome":"fetched","status":200,"url":"https://example.com/robots.txt","fetched_at":"` + stamp(now) + `","expires":"` + stamp(now.Add(time.Hour)) + `"}`
	wrong := newSealer([]byte("an attacker's guess at the secret, 32+ bytes"))
	right := newSealer(testSecret)
	for _, tt := range []struct {
		name, key, value string
	}{
		{"failure mark, bare JSON", failKey, failJSON},
		{"empty copy, bare JSON", goodKey, emptyJSON},
		{"failure mark, wrong MAC", failKey, string(wrong.seal(failKey, []byte(failJSON)))},
		{"empty copy, wrong MAC", goodKey, string(wrong.seal(goodKey, []byte(emptyJSON)))},
		{"empty copy, MAC of the right length made up", goodKey, "v1." + strings.Repeat("A", macChars) + "." + emptyJSON},
		{"a sound copy sealed for another origin's key", goodKey, string(right.seal(otherGoodKey, []byte(soundJSON)))},
		{"a sound copy with its JSON changed", goodKey, strings.Replace(string(right.seal(goodKey, []byte(soundJSON))), `"status":200`, `"status":404`, 1)},
		{"an empty version tag", goodKey, "v1.." + soundJSON},
		{"another version", goodKey, "v2." + string(right.seal(goodKey, []byte(soundJSON)))[3:]},
		{"failure mark sealed with the secret, times out of bounds", failKey, string(right.seal(failKey, []byte(failJSON)))},
		{"empty copy sealed with the secret, times out of bounds", goodKey, string(right.seal(goodKey, []byte(emptyJSON)))},
	} {
		if err := rdb.Del(ctx, goodKey, failKey).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, tt.key, tt.value, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		before := c.errorsNow(t)
		rec, err := c.Load(ctx, testOrigin)
		if err != nil || rec.Good != nil || rec.Failure != nil {
			t.Errorf("%s: Load = %+v %+v, %v; want nothing", tt.name, rec.Good, rec.Failure, err)
		}
		if n := c.errorsNow(t) - before; n != 1 {
			t.Errorf("%s: counted %d errors; want 1", tt.name, n)
		}
	}
	if !strings.Contains(log.String(), "malformed or foreign value") {
		t.Errorf("not logged: %q", log.String())
	}
	if st := c.Status(); !strings.Contains(st.LastError, "ignored a value under rgtest:robots:") {
		t.Errorf("Status().LastError = %q; want the ignored value's key", st.LastError)
	}

	// What an instance with the secret writes, another reads: nothing
	// counted. The stored values are sealed, not bare JSON.
	rdb.Del(ctx, goodKey, failKey)
	writer := newCounted(t, r, nil, testSecret)
	g := &fetch.GoodCopy{Outcome: fetch.Fetched, Status: 200, Body: []byte("User-agent: *\nDisallow: /\n"), URL: "https://example.com/robots.txt", FetchedAt: now, Expires: now.Add(time.Hour)}
	f := &fetch.Failure{UnreachableSince: now, RetryAt: now.Add(time.Minute), LastError: "refused"}
	if err := writer.SaveGood(ctx, testOrigin, g); err != nil {
		t.Fatal(err)
	}
	if err := writer.SaveFailure(ctx, testOrigin, f); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{goodKey, failKey} {
		if v, err := rdb.Get(ctx, key).Result(); err != nil || !strings.HasPrefix(v, "v1.") || strings.Count(v[:len("v1.")+macChars+1], ".") != 2 {
			t.Errorf("stored %s = %.60q, %v; want v1.<MAC>.<JSON>", key, v, err)
		}
	}
	before := c.errorsNow(t)
	rec, err := c.Load(ctx, testOrigin)
	if err != nil || rec.Good == nil || !bytes.Equal(rec.Good.Body, g.Body) || !rec.Good.Expires.Equal(g.Expires) || rec.Failure == nil || !rec.Failure.RetryAt.Equal(f.RetryAt) {
		t.Errorf("Load of values sealed with the secret = %+v %+v, %v", rec.Good, rec.Failure, err)
	}
	if n := c.errorsNow(t) - before; n != 0 {
		t.Errorf("counted %d errors for sound values", n)
	}
	// An instance with another secret uses none of it.
	stranger := newCounted(t, r, nil, []byte("a different secret, also 32 bytes long"))
	if rec, err := stranger.Load(ctx, testOrigin); err != nil || rec.Good != nil || rec.Failure != nil {
		t.Errorf("Load with another secret = %+v %+v, %v; want nothing", rec.Good, rec.Failure, err)
	}
	if n := stranger.errorsNow(t); n != 2 {
		t.Errorf("another secret: counted %d errors; want 2", n)
	}
}

// publishUntilCounted publishes payload on channel with a plain client
// until c counts an error (its subscription is asynchronous), bounded.
func publishUntilCounted(t *testing.T, rdb *redis.Client, c counted, channel, payload string) {
	t.Helper()
	before := c.errorsNow(t)
	for i := 0; i < 200; i++ {
		if err := rdb.Publish(t.Context(), channel, payload).Err(); err != nil {
			t.Fatal(err)
		}
		if testkit.Poll(50*time.Millisecond, func() bool { return c.errorsNow(t) > before }) {
			return
		}
	}
	t.Fatalf("a foreign message on %s (%.40q) was never counted", channel, payload)
}

// TestForeignMessages: back-off and purge messages published without the
// secret (bare JSON, a wrong MAC, or a valid message of one channel sent
// on the other) are dropped and counted; one from an instance with the
// secret is applied.
func TestForeignMessages(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	a := newCounted(t, r, nil, testSecret)
	b := newCounted(t, r, nil, testSecret)
	rdb := plainRedis(t, r)
	backoffs, purges := make(chan string, 100), make(chan fetch.Origin, 100)
	// Never blocking: a subscription that cannot deliver would hold up Close.
	b.SubscribeBackoffs(func(host string, until time.Time, why string) {
		select {
		case backoffs <- host + " " + why:
		default:
		}
	})
	b.SubscribePurges(func(o fetch.Origin) {
		select {
		case purges <- o:
		default:
		}
	})
	backoffCh, purgeCh := "rgtest:backoff", "rgtest:purge"
	until := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	backoffJSON := `{"from":"attacker","host":"site.example","until":` + until + `,"why":"answered 429"}`
	purgeJSON := `{"from":"attacker","origin":"https://example.com:443"}`
	wrong := newSealer([]byte("an attacker's guess at the secret, 32+ bytes"))
	right := newSealer(testSecret)
	for _, tt := range []struct{ name, channel, payload string }{
		{"back-off, bare JSON", backoffCh, backoffJSON},
		{"back-off, wrong MAC", backoffCh, string(wrong.seal(backoffCh, []byte(backoffJSON)))},
		{"back-off sealed for the purge channel", backoffCh, string(right.seal(purgeCh, []byte(backoffJSON)))},
		{"purge, bare JSON", purgeCh, purgeJSON},
		{"purge, wrong MAC", purgeCh, string(wrong.seal(purgeCh, []byte(purgeJSON)))},
		{"purge sealed for the back-off channel", purgeCh, string(right.seal(backoffCh, []byte(purgeJSON)))},
	} {
		t.Log(tt.name)
		publishUntilCounted(t, rdb, b, tt.channel, tt.payload)
	}
	select {
	case m := <-backoffs:
		t.Errorf("a foreign back-off was applied: %s", m)
	case o := <-purges:
		t.Errorf("a foreign purge was applied: %v", o)
	default:
	}
	// From an instance with the secret: applied, nothing counted.
	before := b.errorsNow(t)
	var got string
	for i := 0; i < 100 && got == ""; i++ {
		if err := a.PublishBackoff(t.Context(), "site.example", time.Now().Add(time.Minute), "answered 503"); err != nil {
			t.Fatal(err)
		}
		select {
		case got = <-backoffs:
		case <-time.After(50 * time.Millisecond):
		}
	}
	if got != "site.example answered 503" {
		t.Errorf("b got %q; want the back-off", got)
	}
	if err := a.PublishPurge(t.Context(), testOrigin); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-purges:
		if o != testOrigin {
			t.Errorf("purge of %v; want %v", o, testOrigin)
		}
	case <-time.After(5 * time.Second):
		t.Error("a purge from an instance with the secret was not applied")
	}
	if n := b.errorsNow(t) - before; n != 0 {
		t.Errorf("counted %d errors for sound messages", n)
	}
}

// TestForeignPacingStart: a host's stored start far ahead of Redis's clock
// (which would hold or refuse every request to it for ever), or not a
// number, was not written by an instance: Reserve reserves over it as if
// there were none, at once, and counts it. A start an instance did
// reserve is not counted.
func TestForeignPacingStart(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	c := newCounted(t, r, nil, testSecret)
	rdb := plainRedis(t, r)
	ctx := t.Context()
	gap, maxWait := 300*time.Millisecond, 700*time.Millisecond
	key := "rgtest:pace:site.example"
	far := strconv.FormatInt(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), 10)
	for _, v := range []string{far, "just past", "not a number", "nan", "inf", "-5", "0"} {
		if v == "just past" { // taken now: past by 4 s when Redis reads it
			v = strconv.FormatInt(time.Now().Add(gap+maxWait+5*time.Second).UnixMilli(), 10)
		}
		if err := rdb.Set(ctx, key, v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		before, asked := c.errorsNow(t), time.Now().UnixMilli()
		w, ok, err := c.Reserve(ctx, "site.example", gap, maxWait, 0)
		if err != nil || !ok || w != 0 {
			t.Errorf("Reserve over a stored %q = %v, %v, %v; want at once", v, w, ok, err)
		}
		if n := c.errorsNow(t) - before; n != 1 {
			t.Errorf("stored %q: counted %d errors; want 1", v, n)
		}
		stored, err := rdb.Get(ctx, key).Int64()
		// Between the call and now, on the clock Redis shares with this
		// test (whole milliseconds): not "about now", which a busy
		// machine's slow calls stretch.
		if now := time.Now().UnixMilli(); err != nil || stored > now || stored < asked-1 {
			t.Errorf("stored %q: after Reserve the key holds %d, %v; want a start about now", v, stored, err)
		}
		if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > gap+maxWait+time.Second {
			t.Errorf("stored %q: TTL after Reserve %v, %v; want the pacing TTL", v, ttl, err)
		}
	}
	// Starts the fleet reserved itself: held, not counted. The second
	// waits gap less the time since the first was asked for (measured:
	// a busy machine's calls take what they take).
	before := c.errorsNow(t)
	first := time.Now()
	if w, ok, err := c.Reserve(ctx, "own.example", gap, maxWait, 0); err != nil || !ok || w != 0 {
		t.Errorf("first Reserve = %v, %v, %v; want at once", w, ok, err)
	}
	if w, ok, err := c.Reserve(ctx, "own.example", gap, maxWait, 0); err != nil || !ok || w > gap || w < gap-time.Since(first)-time.Millisecond {
		t.Errorf("second Reserve = %v, %v, %v; want %v less at most %v", w, ok, err, gap, time.Since(first))
	}
	if n := c.errorsNow(t) - before; n != 0 {
		t.Errorf("counted %d errors for the fleet's own starts", n)
	}
}

// TestSealBindsKey: a value opens only under the key it was sealed for,
// with the secret it was sealed with.
func TestSealBindsKey(t *testing.T) {
	t.Parallel()
	s := newSealer(testSecret)
	v := s.seal("k1", []byte(`{"a":1}`))
	if p, err := s.open("k1", v); err != nil || string(p) != `{"a":1}` {
		t.Errorf("open(k1) = %q, %v", p, err)
	}
	for _, tt := range []struct {
		name  string
		s     *sealer
		where string
		v     []byte
	}{
		{"another key", s, "k2", v},
		{"a key that only adds to the payload's start", s, "k1{", v},
		{"another secret", newSealer([]byte(strings.Repeat("x", 32))), "k1", v},
		{"truncated", s, "k1", v[:len(v)-1]},
		{"empty", s, "k1", nil},
		{"bare JSON", s, "k1", []byte(`{"a":1}`)},
	} {
		if p, err := tt.s.open(tt.where, tt.v); err == nil {
			t.Errorf("%s: opened as %q", tt.name, p)
		}
	}
}

// TestSealAllocs: opening a value allocates nothing, sealing one only the
// sealed value.
func TestSealAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	s := newSealer(testSecret)
	where, payload := "rgtest:robots:good:{https://example.com:443}", []byte(`{"origin":"https://example.com:443"}`)
	v := s.seal(where, payload)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := s.open(where, v); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("open allocates %v times; want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { s.seal(where, payload) }); n != 1 {
		t.Errorf("seal allocates %v times; want 1", n)
	}
}
