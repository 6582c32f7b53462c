package proxy

import (
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/header"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// heldValue is X-Robots-Gate-Held's form: seconds, three decimals.
var heldValue = regexp.MustCompile(`^[0-9]+\.[0-9]{3}$`)

// heldSeconds returns resp's X-Robots-Gate-Held in seconds, failing the
// test unless it is there exactly once, in its form, and the only
// X-Robots-Gate* field.
func heldSeconds(t *testing.T, what string, resp *http.Response) float64 {
	t.Helper()
	if gate := gateFields(resp.Header); len(gate) != 1 || len(resp.Header[heldHeader]) != 1 {
		t.Fatalf("%s: X-Robots-Gate fields %v; want %s once", what, gate, heldHeader)
	}
	v := resp.Header.Get(heldHeader)
	s, err := strconv.ParseFloat(v, 64)
	if !heldValue.MatchString(v) || err != nil || s <= 0 {
		t.Fatalf("%s: %s: %q; want seconds held, three decimals", what, heldHeader, v)
	}
	return s
}

// notHeld fails the test if resp carries any X-Robots-Gate* field.
func notHeld(t *testing.T, what string, resp *http.Response) {
	t.Helper()
	if gate := gateFields(resp.Header); len(gate) != 0 {
		t.Errorf("%s: X-Robots-Gate fields %v; want none on a request not held", what, gate)
	}
}

// gateFields returns h's X-Robots-Gate* fields in any spelling.
func gateFields(h http.Header) http.Header {
	g := http.Header{}
	for k, v := range h {
		if header.IsGateField(k) {
			g[k] = v
		}
	}
	return g
}

// checkHeldIsWaited: the header's value is what the pacer or the
// back-off held the request on its clock, want exactly, and what the
// metric counted (robotsgate_paced_wait_seconds_sum, to the header's
// millisecond).
func checkHeldIsWaited(t *testing.T, what string, held float64, p *testProxy, want time.Duration) {
	t.Helper()
	if held != want.Seconds() {
		t.Errorf("%s: held %.3f s; want %.3f", what, held, want.Seconds())
	}
	if sum := testkit.Metric(t, p.url.String()+"/metrics", "robotsgate_paced_wait_seconds_sum"); held < sum-0.0006 || held > sum+0.0006 {
		t.Errorf("%s: held %.3f s; robotsgate_paced_wait_seconds_sum is %v", what, held, sum)
	}
}

// startHeldProxy starts a proxy (trusting pki's origins, when not nil;
// its config changed by mutate) on a clock that stands still but for the
// pacer's starts, each of which moves it on by step: as if each request
// took step to go out. A request sent after another, however long the
// machine took between them, then reaches the pacer within its gap (step
// is less than it) or within the back-off the other's answer began, and
// is held: never a race with the wall clock. A held request's wait,
// measured on that clock, is step for the pacer (its turn came at the
// next start) and exact for a back-off (its end less the clock; with step
// the back-off's length, the start that follows ends it).
func startHeldProxy(t *testing.T, pki *testPKI, mutate func(*config.Config), step time.Duration) *testProxy {
	t.Helper()
	clock := testkit.NewClock(time.Now())
	p := startMITM(t, pki, mutate, func(o *Options) { o.Now = clock.Now })
	p.srv.pacer.Started = func(string, time.Time) { clock.Advance(step) }
	return p
}

// TestHeldHeaderPaced: with a pacing interval, the first request to a
// host is not held and carries no X-Robots-Gate-Held; the second, sent
// after it (within the gap on the proxy's clock), is held for its turn
// and says how long: plain HTTP, and inside a MITM tunnel over HTTP/1.1
// and over h2 (one hook, serveInner).
func TestHeldHeaderPaced(t *testing.T) {
	t.Parallel()
	const gap, step = time.Second, 400 * time.Millisecond
	pki := newTestPKI(t)
	tests := []struct {
		name  string
		proto int // the protocol major version the answer must come over
		base  func(p *testProxy, port string) string
		c     func(t *testing.T, p *testProxy) *http.Client
	}{
		{"plain", 1, nil, func(_ *testing.T, p *testProxy) *http.Client { return p.client() }},
		{"mitm-h1", 1, func(_ *testProxy, port string) string { return "https://h1.example:" + port },
			func(t *testing.T, p *testProxy) *http.Client { return p.mitmClient(t, nil, false) }},
		{"mitm-h2", 2, func(_ *testProxy, port string) string { return "https://h2.example:" + port },
			func(t *testing.T, p *testProxy) *http.Client { return p.mitmClient(t, nil, true) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := startHeldProxy(t, pki, func(c *config.Config) { c.Politeness.MinInterval = gap }, step)
			var base string
			if tt.base == nil {
				base = newTestOrigin(t, "User-agent: *\nAllow: /\n", nil).URL
			} else {
				_, port := tlsOrigin(t, pki, "User-agent: *\nAllow: /\n", "h1.example", "h2.example")
				base = tt.base(p, port)
			}
			c := tt.c(t, p)
			first, _ := get(t, c, base+"/first", "X-Robots-Gate-Held", "9.999") // a client's own is no answer's
			if first.StatusCode != 200 || first.ProtoMajor != tt.proto {
				t.Fatalf("first: %d over %s", first.StatusCode, first.Proto)
			}
			notHeld(t, "first", first)
			second, _ := get(t, c, base+"/second")
			if second.StatusCode != 200 || second.ProtoMajor != tt.proto {
				t.Fatalf("second: %d over %s", second.StatusCode, second.Proto)
			}
			checkHeldIsWaited(t, "second", heldSeconds(t, "second", second), p, step)
		})
	}
}

// TestHeldHeaderBackoff: a request an origin's back-off held (its 429
// with Retry-After: 1; pacing otherwise off) says how long; the 429 that
// began it, the origin's own answer, was not held and says nothing.
func TestHeldHeaderBackoff(t *testing.T) {
	t.Parallel()
	const retryAfter = time.Second
	o := newBackoffOrigin(t, "User-agent: *\nAllow: /\n", retryAfter)
	p := startHeldProxy(t, nil, func(c *config.Config) { c.Politeness.CrawlDelay = false }, retryAfter)
	busy, _ := get(t, p.client(), o.URL+"/busy")
	if busy.StatusCode != 429 {
		t.Fatalf("/busy: %d; want the origin's 429", busy.StatusCode)
	}
	notHeld(t, "/busy", busy)
	next, _ := get(t, p.client(), o.URL+"/next")
	if next.StatusCode != 200 {
		t.Fatalf("/next: %d; want 200 once the back-off is over", next.StatusCode)
	}
	checkHeldIsWaited(t, "/next", heldSeconds(t, "/next", next), p, retryAfter)
}

// TestHeldHeaderForged: an origin's X-Robots-Gate-Held, in any spelling,
// even named in its Connection header, never reaches the client: an
// answer not held carries none, a held one robotsgate's alone. The same
// Connection trick leaves report mode's would-block in place.
func TestHeldHeaderForged(t *testing.T) {
	t.Parallel()
	o := newTestOrigin(t, "User-agent: *\nDisallow: /private\n", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["X-Robots-Gate-Held"] = []string{"42.000"}
		h["x_robots_gate_held"] = []string{"43.000"}
		h["X-Robots-Gate"] = []string{"allowed"}
		h.Set("Connection", "X-Robots-Gate-Held, X-Robots-Gate, X-Robots-Gate-Rule")
		w.Write([]byte("page\n"))
	})
	p := startHeldProxy(t, nil, func(c *config.Config) {
		c.Politeness.MinInterval, c.Mode = time.Second, "report"
	}, 400*time.Millisecond)
	first, _ := get(t, p.client(), o.URL+"/first")
	notHeld(t, "first", first)
	second, _ := get(t, p.client(), o.URL+"/second")
	if held := heldSeconds(t, "second", second); held != 0.4 {
		t.Errorf("second: held %.3f; want robotsgate's 0.400, not the origin's", held)
	}
	would, _ := get(t, p.client(), o.URL+"/private/x")
	if got := would.Header.Get("X-Robots-Gate"); got != "would-block" || would.Header.Get("X-Robots-Gate-Rule") != "disallow: /private (line 2)" {
		t.Errorf("report mode: X-Robots-Gate %q, rule %q; want would-block and its rule, whatever the origin's Connection names", got, would.Header.Get("X-Robots-Gate-Rule"))
	}
	if got := would.Header.Values(heldHeader); len(got) != 1 || got[0] != "0.400" {
		t.Errorf("report mode, held: %s %q; want robotsgate's 0.400 alone", heldHeader, got)
	}
}

// BenchmarkMarkHeld is the response step's cost: nothing (no allocation)
// for a request not held, the one header for a held one.
func BenchmarkMarkHeld(b *testing.B) {
	for _, tt := range []struct {
		name   string
		paced  bool
		waited time.Duration
	}{
		{"not-paced", false, 0},
		{"paced-not-held", true, 0},
		{"held", true, 1250 * time.Millisecond},
	} {
		b.Run(tt.name, func(b *testing.B) {
			d := policy.Decision{Paced: tt.paced, Waited: tt.waited}
			f := forwarding{d: &d}
			resp := &http.Response{Header: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				f.markHeld(resp)
			}
			if got := resp.Header.Get(heldHeader); (tt.waited > 0) != (got == "1.250") {
				b.Fatalf("%s: %q", heldHeader, got)
			}
		})
	}
}
