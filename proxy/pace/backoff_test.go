package pace

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

func TestBackoffs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBackoffs(time.Now)
		now := time.Now()
		steps := []struct {
			status     int
			retryAfter string
			want       time.Duration // the hold set; 0 for none
		}{
			{200, "", 0},
			{503, "", 0},                     // a 503 alone is no request to back off
			{429, "", 10 * time.Second},      // 429 without Retry-After: 10 s
			{429, "", 20 * time.Second},      // doubling while it repeats
			{429, "", 40 * time.Second},      //
			{200, "", 0},                     // a success ends the run
			{429, "", 10 * time.Second},      //
			{429, "3", 3 * time.Second},      // Retry-After in seconds
			{503, "7", 7 * time.Second},      // 503 with Retry-After
			{429, "86400", 10 * time.Minute}, // capped by max_backoff
			{429, now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second}, // an HTTP date
		}
		for i, s := range steps {
			got, ok := b.Observe("h.example", name("https://h.example:443").String, s.status, s.retryAfter, 10*time.Minute)
			if got != s.want || ok != (s.want > 0) {
				t.Errorf("step %d: Observe(%d, %q) = %v, %v; want %v", i, s.status, s.retryAfter, got, ok, s.want)
			}
		}
		if until, why := b.Hold("h.example"); !until.Equal(now.Add(10*time.Minute)) || why != "https://h.example:443 answered 429 with Retry-After: 86400" {
			t.Errorf("Hold = %v %q; want the longest hold set, and why", until, why)
		}
		if until, _ := b.Hold("other.example"); !until.IsZero() {
			t.Errorf("another host is held until %v", until)
		}
		time.Sleep(11 * time.Minute)
		if until, _ := b.Hold("h.example"); !until.IsZero() {
			t.Errorf("held until %v after the back-off ended", until)
		}
		// Another instance's hold is applied, capped by the limit.
		b.Apply("fleet.example", time.Now().Add(time.Hour), "https://fleet.example:443 answered 429", 10*time.Minute)
		if until, why := b.Hold("fleet.example"); !until.Equal(time.Now().Add(10*time.Minute)) || why != "https://fleet.example:443 answered 429 (seen by another instance)" {
			t.Errorf("applied hold = %v %q", until, why)
		}
	})
}

// TestBackoffsBounded: past backoffMaxHosts hosts held at once, the table
// makes room by ending the holds that end soonest, never a longer one.
func TestBackoffsBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	b := NewBackoffs(func() time.Time { return now })
	observe := func(host, retryAfter string) {
		b.Observe(host, name("https://"+host+":443").String, 429, retryAfter, time.Hour)
	}
	observe("long.example", "600")
	for i := range backoffMaxHosts - 1 {
		observe(fmt.Sprintf("h%d.example", i), strconv.Itoa(60+i%300))
	}
	observe("short.example", "1")
	if n := len(b.hosts); n > backoffMaxHosts {
		t.Fatalf("%d hosts remembered; want at most %d", n, backoffMaxHosts)
	}
	if until, _ := b.Hold("long.example"); !until.Equal(now.Add(10 * time.Minute)) {
		t.Errorf("the longest hold was dropped (held until %v)", until)
	}
	if until, _ := b.Hold("short.example"); until.IsZero() {
		t.Error("the newest hold was not recorded")
	}
	if until, _ := b.Hold("h0.example"); !until.IsZero() {
		t.Errorf("a hold of the shortest kind kept until %v; want those ending soonest dropped", until)
	}
}

// name is an origin's name, as Observe takes it.
type name string

func (n name) String() string { return string(n) }

// TestBackoffsReleasing: a host whose hold has ended is releasing for the
// release gap times the most requests it held at once, and not at all if
// it held none; a new hold starts counting afresh.
func TestBackoffsReleasing(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	b := NewBackoffs(func() time.Time { return now })
	origin := func() string { return "https://a.example:443" }
	const gap = time.Second
	b.Observe("a.example", origin, 429, "10", time.Minute)
	if b.Releasing("a.example", gap) {
		t.Fatal("releasing while held")
	}
	b.Holding("a.example", 1)
	b.Holding("a.example", 1)
	b.Holding("a.example", 1)
	b.Holding("a.example", -1)
	for _, tt := range []struct {
		at   time.Duration
		want bool
	}{{9 * time.Second, false}, {10 * time.Second, true}, {12*time.Second + 999*time.Millisecond, true}, {13 * time.Second, false}} {
		now = time.Unix(1_000_000, 0).Add(tt.at)
		if got := b.Releasing("a.example", gap); got != tt.want {
			t.Errorf("%v after a 10 s hold of at most 3: releasing %v; want %v", tt.at, got, tt.want)
		}
	}
	// A new hold, with nothing held: no release to keep.
	b.Observe("a.example", origin, 429, "5", time.Minute)
	now = now.Add(5 * time.Second)
	if b.Releasing("a.example", gap) || b.Releasing("other.example", gap) {
		t.Error("releasing with nothing held")
	}
}

// TestBackoffsLongest: Longest is how long the oldest run of holds that
// can still continue has lasted, to now in a hold and to the last hold's
// end in a gap between holds. Hosts that take turns, each held once (a
// broad crawl's occasional 429), keep it at one hold's length however
// long some host or other is held; a host held again within its last
// hold's length of that one's end makes it grow, whether its own answers
// or another instance's (Apply) hold it, and it does not drop in the
// gaps; one hold never followed by another reads its length, not more;
// a host held again only after a pause longer than its last hold begins
// a new run; none whose run can continue reads 0.
func TestBackoffsLongest(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	now := t0
	b := NewBackoffs(func() time.Time { return now })
	at := func(d time.Duration) { now = t0.Add(d) }
	observe := func(host string, retryAfter string) {
		t.Helper()
		if _, ok := b.Observe(host, name("https://"+host+":443").String, 429, retryAfter, time.Hour); !ok {
			t.Fatalf("Observe(%s, 429, %q) held nothing", host, retryAfter)
		}
	}
	check := func(want time.Duration) {
		t.Helper()
		if got := b.Longest(); got != want {
			t.Errorf("at %v: Longest() = %v; want %v", now.Sub(t0), got, want)
		}
	}
	check(0)
	// Twenty hosts take turns, 10 s each, one after the other: some host
	// is held for 200 s on end, none for more than 10 s; the one before
	// still counts, as its 10 s, for 10 s after its hold (it could have
	// continued).
	for i := range 20 {
		at(time.Duration(i) * 10 * time.Second)
		observe(fmt.Sprintf("h%d.example", i), "10")
		at(time.Duration(i)*10*time.Second + 9*time.Second)
		want := 10 * time.Second // h(i-1)'s run, in its gap
		if i == 0 {
			want = 9 * time.Second
		}
		check(want)
	}
	at(205 * time.Second)
	check(10 * time.Second)
	at(211 * time.Second)
	check(0)
	// One host asks again each time its 10 s hold ends, 2 s later (its
	// next request's answer); the fleet's hold of 10 s more counts as its
	// own. In each gap the run reads its length to the hold's end.
	for i := range 10 {
		at(1000*time.Second + time.Duration(i)*12*time.Second)
		if i == 5 {
			b.Apply("a.example", now.Add(10*time.Second), "https://a.example:443 answered 429", time.Hour)
		} else {
			observe("a.example", "10")
		}
		at(1000*time.Second + time.Duration(i)*12*time.Second + 11*time.Second)
		check(time.Duration(i)*12*time.Second + 10*time.Second)
	}
	at(1000*time.Second + 9*12*time.Second + 5*time.Second)
	check(9*12*time.Second + 5*time.Second)
	// A 429 while held extends the hold, not the run's start: the last
	// hold lasts from 1108 s to 1143 s, and the run can continue until
	// 1178 s.
	observe("a.example", "30")
	check(9*12*time.Second + 5*time.Second)
	at(1178 * time.Second)
	check(143 * time.Second)
	// Held again only after a pause longer than that hold (35 s): a new
	// run, and none before it reads from 1179 s.
	at(1179 * time.Second)
	check(0)
	observe("a.example", "10")
	at(now.Sub(t0) + 4*time.Second)
	check(4 * time.Second)
	// A host held for 60 s whose next request comes 60 s after the hold
	// ends (the client's own retry delay) is one run, read throughout:
	// in the hold, in the gap (60 s, to the hold's end) up to its last
	// instant, in the next hold; after that hold, which no other follows,
	// it reads 180 s until the allowance passes, then 0.
	at(2000 * time.Second)
	observe("b.example", "60")
	for _, c := range []struct{ at, want time.Duration }{{59, 59}, {60, 60}, {90, 60}, {120, 60}} {
		at(2000*time.Second + c.at*time.Second)
		check(c.want * time.Second)
	}
	observe("b.example", "60")
	for _, c := range []struct{ at, want time.Duration }{{150, 150}, {180, 180}, {240, 180}} {
		at(2000*time.Second + c.at*time.Second)
		check(c.want * time.Second)
	}
	at(2241 * time.Second)
	check(0)
}
