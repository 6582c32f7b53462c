package proxy

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/internal/testkit"
	"github.com/robotsgate/robotsgate/proxy/config"
	"github.com/robotsgate/robotsgate/proxy/pace"
	"github.com/robotsgate/robotsgate/proxy/policy"
)

// startTopologyFleet runs n proxies sharing the Redis that topology names
// in their [cluster] (Sentinels or a Cluster's nodes).
func startTopologyFleet(t testing.TB, n int, topology func(*config.ClusterConfig)) []*testProxy {
	t.Helper()
	var fleet []*testProxy
	for range n {
		cfg := loopbackConfig()
		cfg.Cluster.KeyPrefix, cfg.Cluster.Secret = "rgtest:"+t.Name()+":", fleetSecret
		topology(&cfg.Cluster)
		fleet = append(fleet, startProxy(t, cfg))
	}
	return fleet
}

// pacedOrigin is an origin whose robots.txt disallows /private and asks
// for gap between requests; it records when each other request started,
// and its path.
type pacedOrigin struct {
	*testOrigin
	mu      sync.Mutex
	starts  []time.Time
	targets []string // the path of each of starts
}

func newPacedOrigin(t testing.TB, gap time.Duration) *pacedOrigin {
	p := &pacedOrigin{}
	p.testOrigin = newTestOrigin(t, fmt.Sprintf("User-agent: *\nDisallow: /private\nCrawl-delay: %g\n", gap.Seconds()), func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.starts, p.targets = append(p.starts, time.Now()), append(p.targets, r.URL.Path)
		p.mu.Unlock()
		w.Write([]byte("ok"))
	})
	return p
}

// loadResult is what a mixed load saw.
type loadResult struct {
	sent, answered int
	slowest        time.Duration // the longest a client waited for an answer
	byStatus       map[int]int
	privateReached int64 // disallowed requests the origin received: must be 0
}

// mixedLoad sends requests from workers clients spread over fleet, one in
// four for a disallowed path, until stop is closed (and at most 2,000),
// each client waiting for its answer.
func mixedLoad(t testing.TB, fleet []*testProxy, o *pacedOrigin, workers int, stop <-chan struct{}) loadResult {
	var mu sync.Mutex
	res := loadResult{byStatus: map[int]int{}}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			c := fleet[w%len(fleet)].client()
			for i := 0; i < 2000/workers; i++ {
				select {
				case <-stop:
					return
				default:
				}
				path := fmt.Sprintf("/public/%d-%d", w, i)
				if i%4 == 3 {
					path = fmt.Sprintf("/private/%d-%d", w, i)
				}
				status := 0
				start := time.Now()
				if resp, err := c.Get(o.URL + path); err == nil {
					resp.Body.Close()
					status = resp.StatusCode
				}
				took := time.Since(start)
				mu.Lock()
				res.slowest = max(res.slowest, took)
				res.sent++
				res.byStatus[status]++
				if status != 0 {
					res.answered++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, path := range o.paths() {
		if strings.HasPrefix(path, "/private") {
			res.privateReached++
		}
	}
	return res
}

// sentBy returns the instance of a fleet of n that mixedLoad sent path
// through (the one sentinelFleetUnderLoad warms the cache with, for
// /warm), and whether path is one it sent.
func sentBy(path string, n int) (int, bool) {
	if path == "/warm" {
		return 0, true
	}
	rest, ok := strings.CutPrefix(path, "/public/")
	if !ok {
		rest, ok = strings.CutPrefix(path, "/private/")
	}
	w, _, _ := strings.Cut(rest, "-")
	worker, err := strconv.Atoi(w)
	if !ok || err != nil {
		return 0, false
	}
	return worker % n, true
}

// paths returns every path the origin saw.
func (o *testOrigin) paths() []string {
	var out []string
	o.hits.Range(func(k, _ any) bool { out = append(out, k.(string)); return true })
	return out
}

// gapsBelow counts the consecutive request starts closer than min, among
// those in [from, to).
func (p *pacedOrigin) gapsBelow(min time.Duration, from, to time.Time) (n, of int) {
	p.mu.Lock()
	starts := slices.Clone(p.starts)
	p.mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(starts); i++ {
		if starts[i-1].Before(from) || !starts[i].Before(to) {
			continue
		}
		of++
		if starts[i].Sub(starts[i-1]) < min {
			n++
		}
	}
	return n, of
}

// crowded counts the times more than n requests reached the origin
// within window, among its starts in [from, to): with n instances each
// pacing alone (Redis away) at most n come within one gap, one each.
func (p *pacedOrigin) crowded(n int, window time.Duration, from, to time.Time) (crowds, of int) {
	p.mu.Lock()
	starts := slices.Clone(p.starts)
	p.mu.Unlock()
	return crowded(starts, n, window, from, to)
}

// crowded counts the times more than n of starts come within window,
// among those in [from, to).
func crowded(starts []time.Time, n int, window time.Duration, from, to time.Time) (crowds, of int) {
	starts = slices.Clone(starts)
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 0; i+n < len(starts); i++ {
		if starts[i].Before(from) || !starts[i+n].Before(to) {
			continue
		}
		of++
		if starts[i+n].Sub(starts[i]) < window {
			crowds++
		}
	}
	return crowds, of
}

// checkInstanceGaps fails t unless each instance of the fleet of n gave
// its starts (those fleetStarts merged; at least 3 each) a gap apart as
// it decided them, at any time: with Redis, without it, and as it came
// back. Of any two starts of one instance, one is at least gap after the
// earliest the other was decided for; and no start is earlier than the
// earliest it could be decided for (a start it paced alone is gap after
// the one it paced alone before). These are the instances' own start
// times, bounded below by what decided them, so no allowance is made for
// a busy machine: a start paced alone is recorded when its timer fired,
// as late as the machine made it, and a slot the fleet reserved while it
// was queued keeps its fixed time, gap after the time that start was
// decided for, not after when its timer fired.
func checkInstanceGaps(t testing.TB, starts []fleetStart, n int, gap time.Duration) {
	t.Helper()
	for i := range n {
		var st []fleetStart
		for _, s := range starts {
			if s.instance == i {
				st = append(st, s)
			}
		}
		short := 0
		for j, a := range st {
			if a.earliest.After(a.at) {
				short++
				t.Errorf("instance %d: start %d at %v, before the earliest it could be decided for, %v", i, j, a.at.Format(".000"), a.earliest.Format(".000"))
			}
			for _, b := range st[j+1:] {
				if b.at.Sub(a.earliest) >= gap || a.at.Sub(b.earliest) >= gap {
					continue
				}
				if short++; short <= 3 {
					t.Errorf("instance %d: starts %v apart (decided no sooner than %v and %v); want the %v Crawl-delay",
						i, b.at.Sub(a.at), a.earliest.Format(".000"), b.earliest.Format(".000"), gap)
				}
			}
		}
		if short > 0 || len(st) < 3 {
			t.Errorf("instance %d: %d of its %d starts too close or too early; want none, of at least 3", i, short, len(st))
		}
	}
}

// slotLog records, for an instance, each start its pacer recorded, in
// order, beside the earliest Wait for its host then in progress (a
// request paced alone starts no sooner than it asked), and the starts it
// reserved with the fleet: each as its pacer recorded it (the time its
// request waited for), beside the earliest its slot in the fleet could
// be.
type slotLog struct {
	policy.Pacer
	mu      sync.Mutex
	slots   []slot
	started []pacedStart
	waits   map[int]pacedStart // Waits in progress: host, and when each asked
	nextID  int
}

// A pacedStart is a start a pacer recorded (or, in slotLog.waits, a Wait
// in progress), with the time the earliest Wait for host then in
// progress was called: zero if none was.
type pacedStart struct {
	host      string
	at, floor time.Time
}

// A slot is one start the fleet reserved. Redis reserves each gap after
// the one before on its own clock (the machine's, here), in whole
// milliseconds: the wait it returns counts from when it read its clock,
// which it did after the call was sent (less a millisecond, truncated).
// The instance starts no sooner than that wait from when the answer came,
// so at is never before the slot, and earliest never after it.
type slot struct {
	host         string
	at, earliest time.Time
}

// logSlots records p's starts and fleet reservations, before any request
// (and after logStarts, whose hook it calls on).
func logSlots(p *testProxy) *slotLog {
	sn := *p.srv.snap.Load()
	l := &slotLog{Pacer: sn.env.Pacer, waits: map[int]pacedStart{}}
	sn.env.Pacer = l
	p.srv.snap.Store(&sn)
	pc := p.srv.pacer
	next := pc.Started
	pc.Started = func(host string, at time.Time) {
		l.mu.Lock()
		var floor time.Time
		for _, w := range l.waits {
			if w.host == host && (floor.IsZero() || w.floor.Before(floor)) {
				floor = w.floor
			}
		}
		l.started = append(l.started, pacedStart{host, at, floor})
		l.mu.Unlock()
		if next != nil {
			next(host, at)
		}
	}
	return l
}

// Wait is the pacer's, noting when it was called while it is in
// progress: a start it gives is decided no sooner.
func (l *slotLog) Wait(ctx context.Context, host string, gap time.Duration, lim pace.Limits) (time.Duration, error) {
	l.mu.Lock()
	id := l.nextID
	l.nextID++
	l.waits[id] = pacedStart{host: host, floor: time.Now()}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.waits, id)
		l.mu.Unlock()
	}()
	return l.Pacer.Wait(ctx, host, gap, lim)
}

// Reserve is the pacer's, noting the slot it reserved, if one: the
// fleet's answer is a start (now plus the wait); less the time since the
// call was sent, and a millisecond, it is the earliest the slot can be.
func (l *slotLog) Reserve(ctx context.Context, host string, gap, maxDelay time.Duration, reserve func(local time.Duration) (time.Time, bool, error)) (time.Time, bool, error) {
	var earliest time.Time
	at, ok, err := l.Pacer.Reserve(ctx, host, gap, maxDelay, func(local time.Duration) (time.Time, bool, error) {
		sent := time.Now()
		start, ok, err := reserve(local)
		earliest = sent.Add(time.Until(start) - time.Millisecond)
		return start, ok, err
	})
	if err == nil && ok {
		l.mu.Lock()
		l.slots = append(l.slots, slot{host, at, earliest})
		l.mu.Unlock()
	}
	return at, ok, err
}

// fleetStart is one start an instance gave a request, and the earliest
// what decided it could be: the fleet's slot; or, for a start the
// instance paced alone (Redis away), the later of when the earliest Wait
// for the host then in progress asked and gap after the start it paced
// alone before. The pacer gives such a start when its timer fires, as
// late as a busy machine makes it, so the time it was decided for lies
// between its earliest and its at; its next start keeps gap after that
// time, not after at.
type fleetStart struct {
	instance     int
	at, earliest time.Time
	alone        bool // paced by the instance alone, not a slot of the fleet's
}

// fleetStarts merges the starts the instances gave requests to host
// with gap (their pacers' own times, on this process's clock), sorted.
func fleetStarts(slots []*slotLog, host string, gap time.Duration) []fleetStart {
	var out []fleetStart
	for i, l := range slots {
		l.mu.Lock()
		started, reserved := slices.Clone(l.started), slices.Clone(l.slots)
		l.mu.Unlock()
		var alone time.Time // the last start paced alone
		for _, s := range started {
			if s.host != host {
				continue
			}
			if j := slices.IndexFunc(reserved, func(r slot) bool { return r.host == host && r.at.Equal(s.at) }); j >= 0 {
				out = append(out, fleetStart{i, s.at, reserved[j].earliest, false})
				reserved = slices.Delete(reserved, j, j+1)
				continue
			}
			earliest := s.floor
			if next := alone.Add(gap); !alone.IsZero() && next.After(earliest) {
				earliest = next
			}
			out = append(out, fleetStart{i, s.at, earliest, true})
			alone = s.at
		}
	}
	slices.SortFunc(out, func(a, b fleetStart) int { return a.at.Compare(b.at) })
	return out
}

// checkFleetGaps fails t unless, of the starts the fleet gave requests
// in [from, to) (at least 4 of them), any two slots of the fleet's on
// different instances (at least one such pair) were decided gap apart:
// one is at least gap after the earliest what decided the other could
// be. It holds however late an instance learns of its slot (a busy
// machine only delays answers, and the start with them), and fails when
// the fleet gives two slots within gap. A start an instance paced alone
// is left out beside another instance's: it paced alone because its call
// to Redis failed, which on a busy machine one does past its OpTimeout
// whether or not Redis is up, and then it keeps only its own gaps
// (checkInstanceGaps). These are the starts the fleet decided, not the
// times requests reached the origin, which carry the jitter of
// forwarding them.
func checkFleetGaps(t testing.TB, starts []fleetStart, gap time.Duration, from, to time.Time) {
	t.Helper()
	var in []fleetStart
	for _, s := range starts {
		if !s.at.Before(from) && s.at.Before(to) {
			in = append(in, s)
		}
	}
	near, shared, alone := 0, 0, 0
	closest, decided := time.Duration(1<<62), time.Duration(1<<62)
	for i, a := range in {
		for _, b := range in[i+1:] {
			switch {
			case a.instance == b.instance: // checkInstanceGaps
				continue
			case a.alone || b.alone:
				alone++
				continue
			}
			shared++
			closest = min(closest, b.at.Sub(a.at))
			decided = min(decided, max(b.at.Sub(a.earliest), a.at.Sub(b.earliest)))
			if b.at.Sub(a.earliest) >= gap || a.at.Sub(b.earliest) >= gap {
				continue
			}
			if near++; near <= 3 {
				t.Errorf("a start on instance %d at +%v and one on instance %d at +%v (decided no sooner than +%v and +%v): neither %v after the other's",
					a.instance, a.at.Sub(from).Round(time.Millisecond), b.instance, b.at.Sub(from).Round(time.Millisecond),
					a.earliest.Sub(from).Round(time.Millisecond), b.earliest.Sub(from).Round(time.Millisecond), gap)
			}
		}
	}
	t.Logf("the fleet's %d starts: of their %d pairs across instances both slots of the fleet's, the closest two %v apart, decided at least %v apart; %d pairs with a start paced alone left out",
		len(in), shared, closest.Round(time.Millisecond), decided.Round(time.Millisecond), alone)
	if near > 0 || len(in) < 4 || shared == 0 {
		t.Errorf("%d pairs of the fleet's %d starts decided closer than the Crawl-delay; want none, of at least 4 starts and one pair of slots across instances", near, len(in))
	}
}

// An arrival is one request reaching the origin, on the origin's clock,
// and the start its instance gave it: the instance's k-th start for its
// k-th arrival, and the earliest that start could be decided for (both
// zero when the instance gave fewer starts).
type arrival struct {
	instance            int
	at, start, earliest time.Time
	alone               bool // its start was paced by its instance alone
}

// matchArrivals ties each request that reached the origin to the start
// its instance gave it: of each instance's requests (sentBy), the k-th to
// arrive to its k-th start. It returns the arrivals sorted on the
// origin's clock, and, per instance, how many arrived and how many starts
// it gave; a path the load did not send fails t.
func matchArrivals(t testing.TB, o *pacedOrigin, starts []fleetStart, n int) (all []arrival, arrived, given []int) {
	t.Helper()
	o.mu.Lock()
	times, paths := slices.Clone(o.starts), slices.Clone(o.targets)
	o.mu.Unlock()
	byInstance, starts0 := make([][]time.Time, n), make([][]fleetStart, n)
	for k, at := range times {
		i, ok := sentBy(paths[k], n)
		if !ok {
			t.Errorf("the origin saw %s, which the load did not send", paths[k])
			continue
		}
		byInstance[i] = append(byInstance[i], at)
	}
	for _, s := range starts {
		starts0[s.instance] = append(starts0[s.instance], s)
	}
	arrived, given = make([]int, n), make([]int, n)
	for i := range n {
		slices.SortFunc(byInstance[i], func(a, b time.Time) int { return a.Compare(b) })
		arrived[i], given[i] = len(byInstance[i]), len(starts0[i])
		for k, at := range byInstance[i] {
			a := arrival{instance: i, at: at}
			if k < len(starts0[i]) {
				a.start, a.earliest, a.alone = starts0[i][k].at, starts0[i][k].earliest, starts0[i][k].alone
			}
			all = append(all, a)
		}
	}
	slices.SortFunc(all, func(a, b arrival) int { return a.at.Compare(b.at) })
	return all, arrived, given
}

// checkArrivals fails t if a request reached the origin before the
// instance that sent it gave it a start: of each instance's requests
// (sentBy), the k-th to arrive is never earlier than the instance's k-th
// start (each arrives after its own), and no more arrive than it gave
// starts. It is how the origin's clock is checked against the fleet's
// decisions: forwarding only delays a request, by as much as a busy
// machine makes it, which is reported. It returns the arrivals so tied
// (matchArrivals).
func checkArrivals(t testing.TB, o *pacedOrigin, starts []fleetStart, n int) []arrival {
	t.Helper()
	all, arrived, given := matchArrivals(t, o, starts, n)
	var late time.Duration
	early := make([]int, n)
	for _, a := range all {
		if arrived[a.instance] > given[a.instance] {
			continue
		}
		d := a.at.Sub(a.start)
		late = max(late, d)
		if d < 0 {
			if early[a.instance]++; early[a.instance] <= 3 {
				t.Errorf("instance %d: a request reached the origin %v before its start", a.instance, -d)
			}
		}
	}
	for i := range n {
		if arrived[i] > given[i] {
			t.Errorf("instance %d: %d of its requests reached the origin for %d starts it gave; want no more", i, arrived[i], given[i])
		}
		if early[i] > 0 {
			t.Errorf("instance %d: %d of %d requests reached the origin before their starts; want none", i, early[i], arrived[i])
		}
	}
	t.Logf("an instance's k-th arrival at the origin at most %v after its k-th start (forwarding)", late.Round(time.Millisecond))
	return all
}

// checkOriginGaps fails t unless what the site saw in [from, to) (at
// least 3 consecutive pairs of arrivals) keeps minGap between requests,
// but for forwarding's lag: of two consecutive arrivals closer than
// minGap (but for one whose start was paced alone beside another
// instance's: see checkFleetGaps), one must have reached the origin more
// than minGap after the
// earliest the other's start could be decided for (its lag, behind that
// start, exceeds the shortfall), as checkArrivals tied arrivals to
// starts. Starts decided gap apart always pass, however late a busy
// machine made a timer or a forwarding; a pair that lag does not explain
// is two requests the fleet let go too close together, and fails. How
// many pairs were excused, and the largest lag that excused one, are
// logged.
func checkOriginGaps(t testing.TB, all []arrival, minGap time.Duration, from, to time.Time) {
	t.Helper()
	of, excused, unexplained, alone := 0, 0, 0, 0
	var lag time.Duration
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if a.at.Before(from) || !b.at.Before(to) {
			continue
		}
		of++
		d := b.at.Sub(a.at)
		if d >= minGap {
			continue
		}
		if a.instance != b.instance && (a.alone || b.alone) { // as in checkFleetGaps
			alone++
			continue
		}
		// Either may have been decided first (a timer late by more than
		// a gap swaps them): the shortfall of the one's arrival behind
		// the other's, against the other's lag behind its earliest.
		explains := func(first, second arrival) (time.Duration, bool) {
			l := first.at.Sub(first.earliest)
			return l, !first.earliest.IsZero() && !second.earliest.IsZero() && l > minGap-second.at.Sub(first.at)
		}
		la, okA := explains(a, b)
		lb, okB := explains(b, a)
		if okA || okB {
			excused++
			if okA {
				lag = max(lag, la)
			}
			if okB {
				lag = max(lag, lb)
			}
			continue
		}
		if unexplained++; unexplained <= 3 {
			t.Errorf("arrivals at the origin at +%v (instance %d) and +%v (instance %d): %v apart, short of %v, and neither's lag behind its earliest start (%v, %v) explains it",
				a.at.Sub(from).Round(time.Millisecond), a.instance, b.at.Sub(from).Round(time.Millisecond), b.instance,
				d.Round(time.Millisecond), minGap, la.Round(time.Millisecond), lb.Round(time.Millisecond))
		}
	}
	t.Logf("the origin's %d gaps between arrivals: %d closer than %v excused by forwarding lag (the largest %v), %d beside another instance's start paced alone", of, excused, minGap, lag.Round(time.Millisecond), alone)
	if unexplained > 0 || of < 3 {
		t.Errorf("%d of the origin's %d gaps between arrivals closer than %v, not explained by forwarding lag; want none, of at least 3", unexplained, of, minGap)
	}
}

// since returns each of ts after t0, sorted, to the millisecond.
func since(t0 time.Time, ts []time.Time) []time.Duration {
	out := make([]time.Duration, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.Sub(t0).Round(time.Millisecond))
	}
	slices.Sort(out)
	return out
}

// waitShared waits until every instance shares through Redis again (a
// pacing reservation through its own client succeeds, past the breaker
// that opened when the fault was seen) and returns when; it fails the
// test past limit.
func waitShared(t testing.TB, fleet []*testProxy, limit time.Duration) time.Time {
	t.Helper()
	shared := make([]bool, len(fleet))
	for deadline := time.Now().Add(limit); ; time.Sleep(20 * time.Millisecond) { // a probe through Redis at each turn: paced
		all := true
		for i, p := range fleet {
			if !shared[i] {
				_, ok, err := p.srv.cluster.Reserve(t.Context(), "probe.invalid", 0, time.Second, 0)
				shared[i] = err == nil && ok
			}
			all = all && shared[i]
		}
		if all {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet did not share through Redis again within %v", limit)
		}
	}
}

// sentinelFleetUnderLoad runs n instances on a Sentinel-managed Redis
// and a paced origin asking for gap, and starts a mixed load of workers
// clients through them, logging each instance's starts and the slots it
// reserved with the fleet; loaded stops the load and returns what it saw.
func sentinelFleetUnderLoad(t testing.TB, n int, gap time.Duration, workers int) (st *redistest.Sentinel, o *pacedOrigin, fleet []*testProxy, logs []*startLog, slots []*slotLog, loaded func() loadResult) {
	st = redistest.StartSentinel(t)
	o = newPacedOrigin(t, gap)
	fleet = startTopologyFleet(t, n, func(cc *config.ClusterConfig) {
		cc.Sentinels, cc.Master = []string{st.Sentinel.Addr}, st.Master
	})
	for _, p := range fleet {
		logs, slots = append(logs, logStarts(p)), append(slots, logSlots(p))
	}
	get(t, fleet[0].client(), o.URL+"/warm")
	stop := make(chan struct{})
	var res loadResult
	done := make(chan struct{})
	go func() { res = mixedLoad(t, fleet, o, workers, stop); close(done) }()
	return st, o, fleet, logs, slots, func() loadResult {
		close(stop)
		<-done
		return res
	}
}

// TestFleetSentinelFailover: two instances on a Sentinel-managed Redis,
// under a mixed load, while the primary is killed: no disallowed request
// reaches the origin, every client gets an answer, the instances follow
// the failover without a restart, and once they have, Crawl-delay holds
// across them again. Throughout, no instance decides two starts less
// than the Crawl-delay apart (each paces with what it knows while Redis
// is away, and merges that with Redis's last start as it comes back), so
// the fleet as a whole sends at most one request per interval per
// instance during the outage. Every check is on the starts as decided,
// bounded below from the pacers' and Redis's own times: a busy machine
// makes a start late, never a decision early, and fails none of them.
func TestFleetSentinelFailover(t *testing.T) {
	t.Parallel()
	const n, gap = 2, 300 * time.Millisecond
	st, o, fleet, logs, slots, loaded := sentinelFleetUnderLoad(t, n, gap, 6)
	time.Sleep(1500 * time.Millisecond) // load before the fault
	killed := time.Now()
	st.Primary.Stop()
	time.Sleep(100 * time.Millisecond) // the primary is gone: no probe can succeed before the failover
	rejoined := waitShared(t, fleet, 30*time.Second)
	time.Sleep(4 * time.Second) // load after it
	res := loaded()
	t.Logf("primary killed; the fleet shares again %v later; %d requests, answers %v", rejoined.Sub(killed).Round(time.Millisecond), res.sent, res.byStatus)
	if res.privateReached != 0 {
		t.Errorf("%d disallowed requests reached the origin", res.privateReached)
	}
	if res.answered != res.sent || res.byStatus[403] == 0 || res.byStatus[200] == 0 {
		t.Errorf("answers %v for %d requests; want every one answered, 200s and 403s", res.byStatus, res.sent)
	}
	// Requests an instance paced alone while Redis was away keep the
	// slots it gave them: they leave within workers x gap of the rejoin.
	// After that, the fleet's starts, merged across the instances, are
	// the Crawl-delay apart as the fleet decided them; the origin saw
	// no request before its start, and, on its own clock, none closer
	// than 0.8 x the Crawl-delay to the one before but by as much as
	// forwarding measurably delayed that one.
	starts := fleetStarts(slots, "127.0.0.1", gap)
	end := time.Now()
	checkFleetGaps(t, starts, gap, rejoined.Add(6*gap), end)
	checkOriginGaps(t, checkArrivals(t, o, starts, n), gap*8/10, rejoined.Add(6*gap), end)
	checkInstanceGaps(t, starts, n, gap)
	defer func() {
		if t.Failed() { // what each instance and the origin saw, from the kill
			for i, l := range logs {
				l.mu.Lock()
				t.Logf("instance %d starts: %v", i, since(killed, l.starts["127.0.0.1"]))
				l.mu.Unlock()
				for line := range strings.Lines(fleet[i].log.String()) {
					if strings.Contains(line, "redis") {
						t.Logf("instance %d: %s", i, strings.TrimSpace(line))
					}
				}
			}
			for _, s := range starts {
				if !s.at.Before(killed) {
					t.Logf("instance %d start +%v, decided no sooner than +%v", s.instance, s.at.Sub(killed).Round(time.Millisecond), s.earliest.Sub(killed).Round(time.Millisecond))
				}
			}
			o.mu.Lock()
			t.Logf("origin arrivals: %v; rejoined %v", since(killed, o.starts), rejoined.Sub(killed).Round(time.Millisecond))
			o.mu.Unlock()
		}
	}()
	// Never more than one start per instance within a gap: each instance's
	// starts are decided gap apart (checkInstanceGaps), so no window of
	// one gap holds more than n. On the times the starts came, which a
	// busy machine makes late, the pacer promises nothing of the kind.
}

// TestFleetRedisCluster: two instances on a three-node Redis Cluster
// share one robots.txt fetch per origin for origins whose keys spread over
// every node, and enforce each.
func TestFleetRedisCluster(t *testing.T) {
	t.Parallel()
	rc := redistest.StartCluster(t, 3)
	// A call that a busy machine runs past the default OpTimeout (250
	// ms) fails, and its instance fetches robots.txt itself: the calls
	// are given the most op_timeout allows (10 s), so that a second fetch
	// means the fleet did not share, not that the machine was slow.
	fleet := startTopologyFleet(t, 2, func(cc *config.ClusterConfig) { cc.Nodes, cc.OpTimeout = rc.Addrs(), 10*time.Second })
	var origins []*testOrigin
	for range 12 {
		origins = append(origins, newTestOrigin(t, testRobots, nil))
	}
	var wg sync.WaitGroup
	for _, o := range origins {
		for i, p := range fleet {
			wg.Go(func() {
				path := "/public"
				if i == 1 {
					path = "/private/x"
				}
				resp, _ := get(t, p.client(), o.URL+path)
				if want := map[int]int{0: 200, 1: 403}[i]; resp.StatusCode != want {
					t.Errorf("%s%s through instance %d: %d; want %d", o.URL, path, i, resp.StatusCode, want)
				}
			})
		}
	}
	wg.Wait()
	for _, o := range origins {
		if n := o.count("/robots.txt"); n != 1 {
			t.Errorf("%s: robots.txt fetched %d times by the fleet; want 1", o.URL, n)
		}
	}
	for _, n := range rc.Nodes {
		if keys, err := n.Do("DBSIZE"); err != nil || keys == ":0" {
			t.Errorf("node %s holds %s keys; want some", n.Addr, keys)
		}
	}
}

// BenchmarkFleetFaults measures a 3-instance fleet on a Sentinel-managed
// Redis under a mixed load while the primary is made to fail three ways,
// one after the other: paused (DEBUG SLEEP 3), failed over on purpose
// (SENTINEL FAILOVER), killed. It reports the requests, those that got no
// answer (must be 0), the disallowed ones that reached the origin (must
// be 0), the Crawl-delay violations outside the faults and within them,
// and the time each fault took the fleet to share again. A bounded run:
//
//	go test -run '^$' -bench FleetFaults -benchtime 1x ./proxy
func BenchmarkFleetFaults(b *testing.B) {
	for b.Loop() {
		const gap = 250 * time.Millisecond
		st, o, fleet, _, slots, loaded := sentinelFleetUnderLoad(b, 3, gap, 9)
		type window struct{ from, to time.Time }
		var faults []window
		var converge []time.Duration
		settle := func(from time.Time) {
			time.Sleep(100 * time.Millisecond) // the fault seen first, as in TestFleetSentinelFailover
			to := waitShared(b, fleet, 30*time.Second)
			faults = append(faults, window{from, to.Add(9 * gap)}) // and the slots paced alone leave
			converge = append(converge, to.Sub(from))
			time.Sleep(3 * time.Second) // load after it: what is measured
		}
		time.Sleep(3 * time.Second) // load before the first fault
		primary := func() *redistest.Server {
			addr, _ := st.PrimaryAddr()
			if addr == st.Replica.Addr {
				return st.Replica
			}
			return st.Primary
		}
		from := time.Now()
		go primary().DoAll("DEBUG", "SLEEP", "3") // its answer comes after the pause
		time.Sleep(500 * time.Millisecond)        // calls time out and the breakers open
		settle(from)
		from = time.Now()
		was, _ := st.PrimaryAddr()
		if _, err := st.Sentinel.DoAll("SENTINEL", "FAILOVER", st.Master); err != nil {
			b.Fatal(err)
		}
		// Once the Sentinel has switched, writes to the old primary fail.
		testkit.EventuallyWithin(b, 30*time.Second, "the Sentinel to fail over", func() bool { now, _ := st.PrimaryAddr(); return now != was })
		settle(from)
		from = time.Now()
		primary().Stop()
		settle(from)
		res := loaded()
		var in, inOf, out, outOf int
		last := time.Unix(0, 0)
		for _, f := range faults {
			n, of := o.gapsBelow(gap*8/10, last, f.from)
			out, outOf = out+n, outOf+of
			n, of = o.gapsBelow(gap*8/10, f.from, f.to)
			in, inOf = in+n, inOf+of
			last = f.to
		}
		n, of := o.gapsBelow(gap*8/10, last, time.Now())
		out, outOf = out+n, outOf+of
		crowds, _ := o.crowded(len(fleet), gap*9/10, time.Unix(0, 0), time.Now())
		checkInstanceGaps(b, fleetStarts(slots, "127.0.0.1", gap), len(fleet), gap)
		b.ReportMetric(float64(res.sent), "requests")
		b.ReportMetric(float64(res.sent-res.answered), "unanswered")
		b.ReportMetric(float64(res.privateReached), "disallowed-reached")
		b.ReportMetric(res.slowest.Seconds(), "slowest-answer-s")
		b.ReportMetric(float64(out), "delay-violations-outside")
		b.ReportMetric(float64(in), "delay-violations-in-faults")
		b.ReportMetric(float64(crowds), "more-than-one-per-instance-per-gap")
		for i, name := range []string{"pause", "failover", "kill"} {
			b.ReportMetric(converge[i].Seconds(), name+"-converge-s")
		}
		b.Logf("answers %v; starts checked outside faults %d, within %d", res.byStatus, outOf, inOf)
	}
}

// errorCount is a testing.TB that counts the errors a check reports.
type errorCount struct {
	testing.TB
	errors int
}

// Errorf counts the error instead of failing the test.
func (e *errorCount) Errorf(string, ...any) { e.errors++ }

// TestCheckOriginGaps holds checkOriginGaps to failing on two arrivals
// closer than the gap that forwarding's lag does not explain, and to no
// more: a request that waited on its way to the origin may arrive close
// behind the one before, by as much as it waited.
func TestCheckOriginGaps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name   string
		all    []arrival
		errors int
	}{
		{"apart", []arrival{{0, ms(0), ms(0), ms(0), false}, {1, ms(300), ms(300), ms(300), false}, {0, ms(600), ms(600), ms(600), false}, {1, ms(900), ms(900), ms(900), false}}, 0},
		{"lag explains", []arrival{{0, ms(0), ms(0), ms(0), false}, {1, ms(400), ms(259), ms(259), false}, {0, ms(500), ms(500), ms(500), false}, {1, ms(800), ms(800), ms(800), false}}, 0},
		{"lag only equals the shortfall", []arrival{{0, ms(0), ms(0), ms(0), false}, {1, ms(400), ms(260), ms(260), false}, {0, ms(500), ms(500), ms(500), false}, {1, ms(800), ms(800), ms(800), false}}, 2},
		{"the later started lags", []arrival{{0, ms(0), ms(0), ms(0), false}, {1, ms(300), ms(300), ms(300), false}, {0, ms(400), ms(200), ms(200), false}, {1, ms(900), ms(900), ms(900), false}}, 2},
		{"started too close", []arrival{{0, ms(0), ms(0), ms(0), false}, {1, ms(300), ms(300), ms(300), false}, {0, ms(400), ms(400), ms(400), false}, {1, ms(900), ms(900), ms(900), false}}, 2},
		{"too few", []arrival{{0, ms(0), ms(0), ms(0), false}, {1, ms(300), ms(300), ms(300), false}}, 1},
		{"a late timer: decided before it started", []arrival{{1, ms(0), ms(0), ms(0), false}, {0, ms(340), ms(340), ms(280), false}, {1, ms(540), ms(540), ms(540), false}, {0, ms(900), ms(900), ms(900), false}}, 0},
		{"paced alone beside another instance", []arrival{{0, ms(0), ms(0), ms(0), false}, {1, ms(300), ms(300), ms(300), true}, {0, ms(400), ms(400), ms(400), false}, {1, ms(900), ms(900), ms(900), true}}, 0},
		{"paced alone, too close to its own", []arrival{{1, ms(0), ms(0), ms(0), true}, {0, ms(300), ms(300), ms(300), false}, {0, ms(400), ms(400), ms(400), false}, {1, ms(900), ms(900), ms(900), true}}, 2},
	} {
		e := &errorCount{TB: t}
		checkOriginGaps(e, tc.all, 240*time.Millisecond, t0, ms(10000))
		if e.errors != tc.errors {
			t.Errorf("%s: %d errors; want %d", tc.name, e.errors, tc.errors)
		}
	}
}

// TestCheckInstanceGaps holds fleetStarts and checkInstanceGaps to what
// an instance's pacer promises: a start it paced alone is decided gap
// after the one it paced alone before, however late its timer fired, and
// a slot the fleet reserved is gap after that decision, not after the
// late start; a slot closer than that, or a start paced alone earlier
// than gap after the one before, fails.
func TestCheckInstanceGaps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	const gap = 300 * time.Millisecond
	alone := func(at, asked int) pacedStart { return pacedStart{"h", ms(at), ms(asked)} }
	fleet := func(at int) pacedStart { return pacedStart{"h", ms(at), time.Time{}} }
	for _, tc := range []struct {
		name    string
		started []pacedStart // in the order the pacer recorded them
		slots   []int        // the fleet's, each its own earliest
		errors  int
	}{
		{"apart", []pacedStart{fleet(0), alone(300, 10), alone(600, 10), fleet(900)}, []int{0, 900}, 0},
		// The slot at 900 was reserved (recorded) while the start decided
		// for 600 waited; its timer fired at 650.
		{"a late timer", []pacedStart{fleet(0), alone(300, 10), fleet(900), alone(650, 10)}, []int{0, 900}, 0},
		{"a slot too close", []pacedStart{fleet(0), alone(300, 10), fleet(850), alone(650, 10)}, []int{0, 850}, 2},
		{"paced alone too soon", []pacedStart{fleet(0), alone(300, 10), alone(550, 10), fleet(900)}, []int{0, 900}, 2},
		{"too few", []pacedStart{fleet(0), fleet(300)}, []int{0, 300}, 1},
	} {
		l := &slotLog{started: tc.started}
		for _, at := range tc.slots {
			l.slots = append(l.slots, slot{"h", ms(at), ms(at)})
		}
		e := &errorCount{TB: t}
		checkInstanceGaps(e, fleetStarts([]*slotLog{l}, "h", gap), 1, gap)
		if e.errors != tc.errors {
			t.Errorf("%s: %d errors; want %d", tc.name, e.errors, tc.errors)
		}
	}
}
