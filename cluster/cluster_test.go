package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// testSecret is the fleet's secret in tests.
var testSecret = []byte("0123456789abcdef0123456789abcdef")

func newClient(t *testing.T, r *redistest.Server, log *testkit.Buffer, retry time.Duration) *Client {
	t.Helper()
	return newClientWith(t, r, log, Options{RetryAfter: retry})
}

// testOpTimeout is the tests' bound on a call to Redis, unless they set
// one: a busy machine's Redis answers late, not never, and a call cut at
// DefaultOpTimeout would open the breaker (and count an error) in a test
// that is about something else.
const testOpTimeout = 10 * time.Second

// newClientWith is newClient with more options: URL, Prefix and Logger are
// set, Secret unless o has one, and OpTimeout testOpTimeout unless o has
// one.
func newClientWith(t *testing.T, r *redistest.Server, log *testkit.Buffer, o Options) *Client {
	t.Helper()
	if o.OpTimeout == 0 {
		o.OpTimeout = testOpTimeout
	}
	var h slog.Handler = slog.DiscardHandler
	if log != nil {
		h = slog.NewTextHandler(log, nil)
	}
	o.URL, o.Prefix, o.Logger = r.URL(), "rgtest:", slog.New(h)
	if o.Secret == nil {
		o.Secret = testSecret
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var testOrigin = fetch.Origin{Scheme: "https", Host: "example.com", Port: 443}

func TestStore(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	log := &testkit.Buffer{}
	c := newClient(t, r, log, 0)
	ctx := t.Context()
	if rec, err := c.Load(ctx, testOrigin); err != nil || rec.Good != nil || rec.Failure != nil {
		t.Fatalf("Load of nothing = %+v, %v", rec, err)
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	g := &fetch.GoodCopy{Outcome: fetch.Fetched, Status: 200, Body: []byte("User-agent: *\nDisallow: /x\n"), URL: "https://example.com/robots.txt", FetchedAt: at, Expires: at.Add(time.Hour)}
	if err := c.SaveGood(ctx, testOrigin, g); err != nil {
		t.Fatal(err)
	}
	f := &fetch.Failure{UnreachableSince: at, RetryAt: at.Add(time.Minute), LastError: "refused"}
	if err := c.SaveFailure(ctx, testOrigin, f); err != nil {
		t.Fatal(err)
	}
	rec, err := c.Load(ctx, testOrigin)
	if err != nil || rec.Good == nil || !bytes.Equal(rec.Good.Body, g.Body) || rec.Failure == nil || rec.Failure.LastError != "refused" {
		t.Fatalf("Load = %+v %+v, %v", rec.Good, rec.Failure, err)
	}
	for _, key := range []string{"rgtest:robots:good:{https://example.com:443}", "rgtest:robots:fail:{https://example.com:443}"} {
		if ttl, err := r.Do("PTTL", key); err != nil || !strings.HasPrefix(ttl, ":") || ttl == ":-1" || ttl == ":-2" {
			t.Errorf("PTTL %s = %q, %v; want a TTL", key, ttl, err)
		}
	}
	// A success clears the failure.
	c.SaveGood(ctx, testOrigin, g)
	if rec, _ := c.Load(ctx, testOrigin); rec.Failure != nil {
		t.Errorf("failure kept after a success")
	}
	// Malformed and foreign values are ignored, and logged, even sealed
	// with the secret.
	seal := newSealer(testSecret)
	goodKey, failKey := "rgtest:robots:good:{https://example.com:443}", "rgtest:robots:fail:{https://example.com:443}"
	r.Do("SET", goodKey, string(seal.seal(goodKey, []byte("{not json"))))
	r.Do("SET", failKey, string(seal.seal(failKey, []byte(`{"origin":"https://evil.example:443","unreachable_since":"2026-01-01T00:00:00Z"}`))))
	if rec, err := c.Load(ctx, testOrigin); err != nil || rec.Good != nil || rec.Failure != nil {
		t.Errorf("Load of malformed values = %+v, %v; want nothing", rec, err)
	}
	if !strings.Contains(log.String(), "malformed or foreign value") {
		t.Errorf("malformed value not logged: %q", log.String())
	}
	r.Do("SET", goodKey, string(seal.seal(goodKey, []byte(`{"origin":"https://example.com:443","outcome":"fetched","status":200,"url":"u","fetched_at":"2026-01-01T00:00:00Z"}`))))
	if rec, _ := c.Load(ctx, testOrigin); rec.Good != nil {
		t.Error("a good copy without an expiry time was used")
	}
}

func TestNewRefusesAShortSecret(t *testing.T) {
	t.Parallel()
	for _, secret := range [][]byte{nil, []byte("short"), testSecret[:MinSecretBytes-1]} {
		if c, err := New(Options{URL: "redis://127.0.0.1:1/0", Secret: secret}); err == nil {
			c.Close()
			t.Errorf("New with a secret of %d bytes succeeded", len(secret))
		} else if strings.Contains(err.Error(), string(secret)) && len(secret) > 0 {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
}

func TestLockFetch(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	a, b := newClient(t, r, nil, 0), newClient(t, r, nil, 0)
	unlock, ok, err := a.LockFetch(t.Context(), testOrigin, 10*time.Second)
	if err != nil || !ok {
		t.Fatalf("first lock: %v %v", ok, err)
	}
	if _, ok, err := b.LockFetch(t.Context(), testOrigin, 10*time.Second); err != nil || ok {
		t.Fatalf("second lock while held: %v %v; want refused", ok, err)
	}
	unlock()
	unlockB, ok, err := b.LockFetch(t.Context(), testOrigin, 10*time.Second)
	if err != nil || !ok {
		t.Fatalf("lock after unlock: %v %v", ok, err)
	}
	unlock() // a's again: must not release b's lock
	if _, ok, _ := a.LockFetch(t.Context(), testOrigin, 10*time.Second); ok {
		t.Error("a stale unlock released another instance's lock")
	}
	unlockB()
}

func TestReserve(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	a, b := newClient(t, r, nil, 0), newClient(t, r, nil, 0)
	// Nothing waits here: Reserve only answers how long to. A gap of an
	// hour keeps the fourth start (3 gaps) past maxWait (2.5 gaps)
	// however long the calls before it took: up to half an hour, where a
	// gap of seconds left a busy machine a few.
	gap, maxWait := time.Hour, 150*time.Minute
	var waits, since []time.Duration
	first := time.Now()
	for i, c := range []*Client{a, b, a} {
		w, ok, err := c.Reserve(t.Context(), "site.example", gap, maxWait, 0)
		if err != nil || !ok {
			t.Fatalf("reserve %d: %v %v %v", i, w, ok, err)
		}
		waits, since = append(waits, w), append(since, time.Since(first))
	}
	// Each start gap after the one before, whichever instance asked: the
	// waits are 0, gap and 2 gaps, less the time between the calls (at
	// most what this test measured around them, however slow the machine).
	for i, w := range waits {
		if want := time.Duration(i) * gap; w > want || w < want-since[i]-time.Millisecond {
			t.Errorf("wait %d = %v; want %v less at most %v", i, w, want, since[i])
		}
	}
	w, ok, err := b.Reserve(t.Context(), "site.example", gap, maxWait, 0)
	if err != nil || ok || w <= maxWait {
		t.Errorf("past max_wait (%v after the first): %v %v %v; want refused with the wait", time.Since(first), w, ok, err)
	}
	if w, ok, _ := b.Reserve(t.Context(), "other.example", gap, maxWait, 0); !ok || w != 0 {
		t.Errorf("another host: %v %v; want at once", w, ok)
	}
}

// TestReserveLocalWait: a reservation starts no sooner than the
// instance's own pacing would (what it started while Redis was away),
// nor sooner than gap after the fleet's last start: the later wins.
func TestReserveLocalWait(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	c := newClient(t, r, nil, 0)
	gap, maxWait := 200*time.Millisecond, 5*time.Second
	// A host Redis knows nothing of (a primary that lost its writes):
	// the instance's own last start holds the request.
	start := time.Now()
	if w, ok, err := c.Reserve(t.Context(), "a.example", gap, maxWait, 1500*time.Microsecond+time.Second); err != nil || !ok || w != 1002*time.Millisecond {
		t.Errorf("local wait 1.0015 s, nothing in Redis: %v %v %v; want 1.002 s (whole milliseconds, rounded up)", w, ok, err)
	}
	// The next start is gap after that one, which a smaller local wait
	// cannot bring forward.
	w, ok, err := c.Reserve(t.Context(), "a.example", gap, maxWait, 10*time.Millisecond)
	if want := 1202 * time.Millisecond; err != nil || !ok || w > want || w < want-time.Since(start)-time.Millisecond {
		t.Errorf("after a reserved start 1.002 s ahead: %v %v %v; want about %v", w, ok, err, want)
	}
	// A local wait past max_wait is refused, and nothing reserved.
	if w, ok, err := c.Reserve(t.Context(), "b.example", gap, maxWait, 6*time.Second); err != nil || ok || w != 6*time.Second {
		t.Errorf("local wait past max_wait: %v %v %v; want refused, 6 s", w, ok, err)
	}
	if w, ok, err := c.Reserve(t.Context(), "b.example", gap, maxWait, 0); err != nil || !ok || w != 0 {
		t.Errorf("after a refusal: %v %v %v; want at once", w, ok, err)
	}
}

// TestBreaker: with Redis gone a call fails, later calls fail at once,
// the loss and the return are logged once each, and the client works
// again once Redis is back.
func TestBreaker(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	log := &testkit.Buffer{}
	// The breaker's clock stands still while the test looks at it open:
	// on a busy machine the calls below may take longer than RetryAfter,
	// after which one would be let through (as it should). Once it runs
	// again, the watcher finds Redis back every RetryAfter.
	var frozen atomic.Pointer[time.Time]
	clock := func() time.Time {
		if at := frozen.Load(); at != nil {
			return *at
		}
		return time.Now()
	}
	retry := 300 * time.Millisecond
	c := newClientWith(t, r, log, Options{RetryAfter: retry, OpTimeout: DefaultOpTimeout, Now: clock})
	if _, err := c.Load(t.Context(), testOrigin); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	now := time.Now()
	frozen.Store(&now)
	// Refused, it fails at once; what is bounded is a call Redis does not
	// answer (TestBreakerNoAnswer). A call nothing bounds would hang here
	// until the test's timeout. How long it took is not asserted: that
	// says how busy the machine was.
	if _, err := c.Load(t.Context(), testOrigin); err == nil {
		t.Fatal("Load with Redis down succeeded")
	}
	for range 5 {
		if _, err := c.Load(t.Context(), testOrigin); !errors.Is(err, ErrDown) {
			t.Fatalf("call with the breaker open: %v; want ErrDown", err)
		}
	}
	// What happened, not "context deadline exceeded": the connection
	// was refused (the watcher's probe may be the last call, or a load).
	if st := c.Status(); st.Up || st.Errors < 1 || st.Since.IsZero() ||
		!strings.Contains(st.LastError, "connection refused") && !strings.Contains(st.LastError, "connection reset") && !strings.Contains(st.LastError, "EOF") {
		t.Errorf("Status = %+v; want down since a time, saying what happened", st)
	}
	frozen.Store(nil)
	r.Restart()
	// No calls: the client watches by itself.
	testkit.EventuallyWithin(t, 30*time.Second, "the client to rejoin after Redis came back", func() bool { return c.Status().Up })
	out := log.String()
	if strings.Count(out, "redis lost") != 1 || strings.Count(out, "redis regained") != 1 {
		t.Errorf("log: want one loss and one return:\n%s", out)
	}
}

// TestBreakerStaleFailure: a call that fails after a call begun later
// has succeeded (one begun as Redis came back, that timed out after
// another found it) is counted, but does not open the breaker again: it
// is older news than the success.
func TestBreakerStaleFailure(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	log := &testkit.Buffer{}
	c := newClientWith(t, r, log, Options{RetryAfter: time.Minute})
	if _, err := c.Load(t.Context(), testOrigin); err != nil {
		t.Fatal(err)
	}
	began, release, failed := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		failed <- c.do(t.Context(), func(context.Context) error {
			close(began)
			<-release
			return errors.New("read tcp: i/o timeout")
		})
	}()
	<-began
	if _, err := c.Load(t.Context(), testOrigin); err != nil { // begun after, and answered
		t.Fatal(err)
	}
	close(release)
	if err := <-failed; err == nil {
		t.Fatal("the stale call succeeded")
	}
	if st := c.Status(); !st.Up || st.Errors != 1 {
		t.Errorf("Status after a stale failure = %+v; want up, the error counted", st)
	}
	if _, err := c.Load(t.Context(), testOrigin); err != nil {
		t.Errorf("the next call: %v; want it sent to Redis", err)
	}
	if strings.Contains(log.String(), "redis lost") {
		t.Errorf("log: a stale failure opened the breaker:\n%s", log)
	}
}

// TestBreakerNoAnswer: a call that Redis does not answer (a server that
// hangs) ends at OpTimeout, and says so; the breaker opens.
func TestBreakerNoAnswer(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	c := newClientWith(t, r, nil, Options{OpTimeout: DefaultOpTimeout, RetryAfter: time.Minute})
	if _, err := c.Load(t.Context(), testOrigin); err != nil {
		t.Fatal(err)
	}
	r.Pause()
	defer r.Resume()
	start := time.Now()
	_, err := c.Load(t.Context(), testOrigin)
	d := time.Since(start)
	// The error is the bound's: OpTimeout cut the call (the read deadline
	// it sets, or the call's context), whatever time a busy machine took
	// to run it, which is not asserted. A call nothing bounds would hang
	// until the test's timeout.
	var timeout net.Error
	if !errors.As(err, &timeout) || !timeout.Timeout() {
		t.Errorf("Load from a Redis that does not answer: %v after %v; want a timeout", err, d)
	}
	if _, err := c.Load(t.Context(), testOrigin); !errors.Is(err, ErrDown) {
		t.Errorf("the next call: %v; want ErrDown", err)
	}
}

func TestBackoffsPublished(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	a, b := newClient(t, r, nil, 0), newClient(t, r, nil, 0)
	got := make(chan string, 4)
	gotUntil := make(chan time.Time, 4)
	apply := func(host string, until time.Time, why string) { gotUntil <- until; got <- host + " " + why }
	a.SubscribeBackoffs(func(host string, until time.Time, why string) { got <- "a saw its own: " + host })
	b.SubscribeBackoffs(apply)
	// Between two milliseconds: the message carries whole ones.
	until := time.Now().Add(time.Minute).Truncate(time.Millisecond).Add(400 * time.Microsecond)
	// The subscription is asynchronous: publish until b has it (bounded).
	var msg string
	for i := 0; i < 100 && msg == ""; i++ {
		if err := a.PublishBackoff(t.Context(), "site.example", until, "answered 429"); err != nil {
			t.Fatal(err)
		}
		select {
		case msg = <-got:
		case <-time.After(50 * time.Millisecond):
		}
	}
	if msg != "site.example answered 429" {
		t.Errorf("b got %q; want the back-off", msg)
	}
	// No shorter than the publisher's hold, and not a millisecond longer.
	if u := <-gotUntil; u.Before(until) || !u.Before(until.Add(time.Millisecond)) {
		t.Errorf("b holds until %v; want from %v, within a millisecond", u.Format(time.StampMicro), until.Format(time.StampMicro))
	}
}

// TestDownAtStart: a client whose Redis is not there says so by itself,
// before any call, and logs it once.
func TestDownAtStart(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	r.Stop()
	log := &testkit.Buffer{}
	c := newClient(t, r, log, 300*time.Millisecond)
	// A bound on the poll, not a claim on its time.
	testkit.EventuallyWithin(t, 30*time.Second, "a client with no Redis to report it down", func() bool { return !c.Status().Up })
	if !strings.Contains(log.String(), "redis lost") {
		t.Errorf("not logged: %q", log.String())
	}
}

func TestPurgesPublished(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	a, b := newClient(t, r, nil, 0), newClient(t, r, nil, 0)
	got := make(chan fetch.Origin, 4)
	b.SubscribePurges(func(o fetch.Origin) { got <- o })
	var o fetch.Origin
	for i := 0; i < 100 && o.IsZero(); i++ {
		if err := a.PublishPurge(t.Context(), testOrigin); err != nil {
			t.Fatal(err)
		}
		select {
		case o = <-got:
		case <-time.After(50 * time.Millisecond):
		}
	}
	if o != testOrigin {
		t.Errorf("b got %v; want %v", o, testOrigin)
	}
}

// TestStatusJSON: a Redis that is up has no "since" (it was
// "0001-01-01T00:00:00Z"); one that is down says since when.
func TestStatusJSON(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		st   Status
		want string
	}{
		{Status{Up: true, Errors: 2}, `{"up":true,"errors":2,"last_error":""}`},
		{Status{Since: time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC), Errors: 1, LastError: "refused"},
			`{"up":false,"since":"2026-11-25T06:00:00Z","errors":1,"last_error":"refused"}`},
	} {
		if b, err := json.Marshal(tt.st); err != nil || string(b) != tt.want {
			t.Errorf("json.Marshal(%+v) = %s, %v; want %s", tt.st, b, err, tt.want)
		}
	}
}

// TestReserveLessWaitLeft: a request with little of its max_wait left (a
// back-off held it) is refused a start the fleet reserved far ahead, as
// the fleet's own: not reserved over as foreign, not counted.
func TestReserveLessWaitLeft(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	n := new(atomic.Int64)
	c := counted{newClientWith(t, r, nil, Options{Secret: testSecret, MaxWait: 30 * time.Second, OnError: func() { n.Add(1) }}), n}
	const gap = time.Second
	first := time.Now()
	if w, ok, err := c.Reserve(t.Context(), "a.example", gap, 30*time.Second, 20*time.Second); err != nil || !ok || w != 20*time.Second {
		t.Fatalf("a start 20 s ahead: %v %v %v", w, ok, err)
	}
	before := c.errorsNow(t)
	// 21 s from the first call, less the time since (measured: a busy
	// machine's calls take what they take).
	w, ok, err := c.Reserve(t.Context(), "a.example", gap, 2*time.Second, 0)
	if want := 21*time.Second - time.Since(first) - time.Millisecond; err != nil || ok || w < want {
		t.Errorf("with 2 s of max_wait left: %v %v %v; want refused, 21 s less at most %v", w, ok, err, time.Since(first))
	}
	if n := c.errorsNow(t) - before; n != 0 {
		t.Errorf("counted %d foreign starts; want none", n)
	}
}
