package pace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestPacerGaps: requests to one host start one gap apart, in arrival
// order, each held for its turn (the clock is synctest's: the gaps are
// exact and the test instant).
func TestPacerGaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pc := NewPacer(time.Now)
		var starts []time.Time
		pc.Started = func(_ string, at time.Time) { starts = append(starts, at) }
		lim := Limits{MaxWait: time.Minute, MaxDelay: time.Minute}
		var wg sync.WaitGroup
		for range 5 {
			wg.Add(1)
			go func() { defer wg.Done(); pc.Wait(context.Background(), "a.example", 1500*time.Millisecond, lim) }()
			synctest.Wait() // each joins the queue before the next: arrival order
		}
		wg.Wait()
		for i := 1; i < len(starts); i++ {
			if g := starts[i].Sub(starts[i-1]); g != 1500*time.Millisecond {
				t.Errorf("gap %d = %v; want 1.5s", i, g)
			}
		}
		if len(starts) != 5 {
			t.Errorf("%d starts; want 5", len(starts))
		}
	})
}

// TestPacerMaxWait: a request that would wait past max_wait is refused at
// once with the wait it would have had.
func TestPacerMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pc := NewPacer(time.Now)
		lim := Limits{MaxWait: 4 * time.Second, MaxDelay: 2500 * time.Millisecond}
		gap := 2500 * time.Millisecond
		pc.Wait(context.Background(), "a.example", gap, lim)
		held := make(chan struct{})
		go func() { pc.Wait(context.Background(), "a.example", gap, lim); close(held) }() // held 2.5 s
		synctest.Wait()
		_, err := pc.Wait(context.Background(), "a.example", gap, lim)
		var we *WaitError
		if !errors.As(err, &we) || we.Full || we.Wait != 5*time.Second || !errors.Is(err, ErrTooLong) {
			t.Errorf("third request: %v; want refused, a 5s wait", err)
		}
		<-held
	})
}

// TestPacerCancelledWaiter: a client that gives up frees its place, and
// the request behind it moves up.
func TestPacerCancelledWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pc := NewPacer(time.Now)
		lim := Limits{MaxWait: 10 * time.Second, MaxDelay: 10 * time.Second}
		const o, gap = "a.example", 300 * time.Millisecond
		var starts []time.Time
		pc.Started = func(_ string, at time.Time) { starts = append(starts, at) }
		pc.Wait(context.Background(), o, gap, lim) // starts at once
		ctx, cancel := context.WithCancel(context.Background())
		gaveUp := make(chan error, 1)
		go func() { _, err := pc.Wait(ctx, o, gap, lim); gaveUp <- err }() // second: would start at +300ms
		synctest.Wait()
		third := make(chan struct{})
		go func() { pc.Wait(context.Background(), o, gap, lim); close(third) }() // third: +600ms, or +300ms once the second leaves
		synctest.Wait()
		if n := pc.Waiting(o); n != 2 {
			t.Fatalf("%d waiting; want 2", n)
		}
		cancel()
		if err := <-gaveUp; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled waiter: %v", err)
		}
		<-third
		if d := starts[len(starts)-1].Sub(starts[0]); d != gap {
			t.Errorf("third request started after %v; want %v (the second left the queue)", d, gap)
		}
	})
}

// TestPacerUnderLoad: thousands of concurrent requests to one host and to
// many; the starts are never closer than the gap, and every request starts.
func TestPacerUnderLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pc := NewPacer(time.Now)
		lim := Limits{MaxWait: 30 * time.Second, MaxDelay: 30 * time.Second}
		var mu sync.Mutex
		starts := map[string][]time.Time{}
		pc.Started = func(o string, at time.Time) {
			mu.Lock()
			starts[o] = append(starts[o], at)
			mu.Unlock()
		}
		run := func(hosts, perHost int, gap time.Duration) {
			var wg sync.WaitGroup
			for i := range hosts {
				o := "load" + strings.Repeat("x", i) + ".example"
				for range perHost {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if _, err := pc.Wait(context.Background(), o, gap, lim); err != nil {
							t.Error(err)
						}
					}()
				}
			}
			wg.Wait()
		}
		check := func(gap time.Duration, hosts, perHost int) {
			mu.Lock()
			defer mu.Unlock()
			if len(starts) != hosts {
				t.Fatalf("%d hosts started; want %d", len(starts), hosts)
			}
			for o, st := range starts {
				if len(st) != perHost {
					t.Errorf("%s: %d starts; want %d", o, len(st), perHost)
				}
				for i := 1; i < len(st); i++ {
					if g := st[i].Sub(st[i-1]); g < gap {
						t.Fatalf("%s: start %d came %v after the one before; gap is %v", o, i, g, gap)
					}
				}
			}
			clear(starts)
		}
		run(1, 2000, time.Millisecond)
		check(time.Millisecond, 1, 2000)
		run(200, 10, 20*time.Millisecond)
		check(20*time.Millisecond, 200, 10)
	})
}

// TestPacerForgetsIdleHosts: a host idle for max_delay is forgotten at the
// next sweep.
func TestPacerForgetsIdleHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pc := NewPacer(time.Now)
		lim := Limits{MaxWait: time.Second, MaxDelay: time.Second}
		for i := range paceSweepEvery - 1 {
			pc.Wait(context.Background(), fmt.Sprintf("h%d", i), 0, lim)
		}
		if n := pc.Hosts(); n != paceSweepEvery-1 {
			t.Fatalf("%d hosts remembered; want %d", n, paceSweepEvery-1)
		}
		time.Sleep(2 * time.Second)                   // past max_delay
		pc.Wait(context.Background(), "last", 0, lim) // triggers a sweep
		if n := pc.Hosts(); n > 1 {
			t.Errorf("%d hosts remembered after they went idle; want at most 1", n)
		}
	})
}

// TestPacerBoundsHosts: with as many hosts as it remembers, all started
// within max_delay, the pacer refuses a request to a new host (with the
// time until a place frees) rather than forget a host whose next request
// must still wait; known hosts are paced as before, and once a host has
// been idle for max_delay the new one gets its place.
func TestPacerBoundsHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pc := NewPacer(time.Now)
		lim := Limits{MaxWait: time.Minute, MaxDelay: 10 * time.Second}
		pc.MaxHosts = 8
		for i := range pc.MaxHosts {
			if _, err := pc.Wait(t.Context(), fmt.Sprintf("h%d", i), time.Second, lim); err != nil {
				t.Fatalf("host %d: %v", i, err)
			}
			time.Sleep(time.Second)
		}
		// h0 started 8 s ago: it is forgotten 10 s after, 2 s from now.
		_, err := pc.Wait(t.Context(), "new", time.Second, lim)
		var we *WaitError
		if !errors.As(err, &we) || !we.Full || we.Wait <= time.Second || we.Wait > 2*time.Second+time.Millisecond {
			t.Fatalf("new host with the table full: %v; want refused, room in about 2s", err)
		}
		if n := pc.Hosts(); n != pc.MaxHosts {
			t.Errorf("%d hosts remembered; want %d", n, pc.MaxHosts)
		}
		if w, err := pc.Wait(t.Context(), "h7", time.Second, lim); err != nil || w != 0 {
			t.Errorf("known host: waited %v, %v; want its turn at once", w, err)
		}
		time.Sleep(time.Second)
		if _, err := pc.Wait(t.Context(), "new", time.Second, lim); err == nil {
			t.Error("new host before a place frees: let through")
		}
		time.Sleep(time.Second + time.Millisecond)
		if _, err := pc.Wait(t.Context(), "new", time.Second, lim); err != nil {
			t.Errorf("new host once h0 went idle: %v; want it paced", err)
		}
		if n := pc.Hosts(); n > pc.MaxHosts {
			t.Errorf("%d hosts remembered; want at most %d", n, pc.MaxHosts)
		}
	})
}

// TestPacerRecordsFleetStarts: starts the fleet reserved (Record) keep
// their time, and this Pacer's own requests (paced alone while Redis is
// away) keep their gap around them: those queued before a fleet start
// keep their slots, those that would start within gap of it move behind
// it, and Next accounts for all of them (virtual clock: exact).
func TestPacerRecordsFleetStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pc := NewPacer(time.Now)
		const o, gap = "a.example", time.Second
		lim := Limits{MaxWait: time.Minute, MaxDelay: time.Minute}
		var starts []time.Duration
		t0 := time.Now()
		pc.Started = func(_ string, at time.Time) { starts = append(starts, at.Sub(t0)) }
		if w := pc.Next(o, gap); w != 0 {
			t.Errorf("Next for an unknown host = %v; want 0", w)
		}
		// The fleet reserved a start 3 s ahead: a request paced here
		// alone waits for gap after it, and Next says so.
		pc.Record(o, t0.Add(3*time.Second), gap, lim.MaxDelay)
		if w := pc.Next(o, gap); w != 4*time.Second {
			t.Errorf("Next after a fleet start 3 s ahead = %v; want 4s", w)
		}
		if n := pc.Waiting(o); n != 0 {
			t.Errorf("Waiting counts the fleet's start: %d; want 0", n)
		}
		done := make(chan time.Duration, 3)
		wait := func() { w, _ := pc.Wait(context.Background(), o, gap, lim); done <- w }
		go wait() // +4 s
		synctest.Wait()
		go wait() // +5 s
		synctest.Wait()
		// A fleet start recorded at +5.5 s is within gap of the second
		// request's slot: that request moves behind it, to +6.5 s; the
		// first keeps +4 s.
		pc.Record(o, t0.Add(5500*time.Millisecond), gap, lim.MaxDelay)
		if w := pc.Next(o, gap); w != 7500*time.Millisecond {
			t.Errorf("Next = %v; want 7.5s", w)
		}
		// A fleet start already past moves the last start forward.
		time.Sleep(8 * time.Second)
		for range 2 {
			<-done
		}
		pc.Record(o, time.Now().Add(-100*time.Millisecond), gap, lim.MaxDelay)
		if w := pc.Next(o, gap); w != 900*time.Millisecond {
			t.Errorf("Next after a fleet start 100 ms ago = %v; want 900ms", w)
		}
		slices.Sort(starts) // a fleet start is told when it is recorded
		want := []time.Duration{3 * time.Second, 4 * time.Second, 5500 * time.Millisecond, 6500 * time.Millisecond, 7900 * time.Millisecond}
		if fmt.Sprint(starts) != fmt.Sprint(want) {
			t.Errorf("starts %v; want %v", starts, want)
		}
	})
}

// TestPacerWaitTakesTurnWithFleet: a request paced here alone (its
// Redis call failed) while the fleet reserves a start for another takes
// its place after that reservation is recorded, gap after it, never
// beside a start Redis is giving (virtual clock: exact).
func TestPacerWaitTakesTurnWithFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pc := NewPacer(time.Now)
		const o, gap = "a.example", time.Second
		lim := Limits{MaxWait: time.Minute, MaxDelay: time.Minute}
		t0 := time.Now()
		answer := make(chan struct{})
		reserved := make(chan time.Time)
		go func() {
			at, _, _ := pc.Reserve(context.Background(), o, gap, lim.MaxDelay, func(local time.Duration) (time.Time, bool, error) {
				<-answer // Redis answers late
				return t0.Add(local), true, nil
			})
			reserved <- at
		}()
		synctest.Wait()
		waited := make(chan time.Duration)
		go func() { w, _ := pc.Wait(context.Background(), o, gap, lim); waited <- w }()
		synctest.Wait()
		if n := pc.Waiting(o); n != 0 {
			t.Fatalf("%d waiting while the fleet reserves; want the local request to wait for its turn to queue", n)
		}
		close(answer)
		if at := <-reserved; !at.Equal(t0) {
			t.Errorf("the fleet's start at %v; want at once", at.Sub(t0))
		}
		if w := <-waited; w != gap {
			t.Errorf("the local request waited %v; want the gap after the fleet's start, %v", w, gap)
		}
	})
}
