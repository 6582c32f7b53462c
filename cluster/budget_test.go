package cluster

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/internal/testkit"
)

// TestPayCounter: the fleet's spending counter only grows in each
// of its fields, so that refunds are never mistaken for a reset; a plain
// integer (as an instance before the hash wrote it) is read as what was
// reserved; and once an instance saw it, a counter that vanishes or goes
// lower stops that instance's payments for the day (ErrCounterRewound),
// while an instance that never saw it cannot tell.
func TestPayCounter(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	ctx := t.Context()
	const day = "2026-11-27"
	const limit = 100
	var log testkit.Buffer
	a := newClient(t, r, &log, time.Second).Counter("rgtest:budget:")
	b := newClient(t, r, nil, time.Second).Counter("rgtest:budget:")
	key := "rgtest:budget:spent:{USD:" + day + "}"

	if _, err := r.Do("SET", key, "5"); err != nil { // an older instance's
		t.Fatal(err)
	}
	if spent, ok, err := a.Reserve(ctx, day, "USD", 3, limit); err != nil || !ok || spent != 8 {
		t.Fatalf("a.Reserve(3) = %v, %v, %v; want 8 spent", spent, ok, err)
	}
	if spent, ok, err := b.Reserve(ctx, day, "USD", 2, limit); err != nil || !ok || spent != 10 {
		t.Fatalf("b.Reserve(2) = %v, %v, %v; want 10 spent", spent, ok, err)
	}
	for range 2 { // refunds lower what is spent, never a field
		if err := a.Refund(ctx, day, "USD", 4); err != nil {
			t.Fatalf("a.Refund(4): %v", err)
		}
	}
	if err := b.Refund(ctx, day, "USD", 50); err != nil { // never below nothing
		t.Fatalf("b.Refund(50): %v", err)
	}
	if spent, err := b.Spent(ctx, day, "USD"); err != nil || spent != 0 {
		t.Fatalf("b.Spent = %v, %v; want 0", spent, err)
	}
	if spent, ok, err := b.Reserve(ctx, day, "USD", 7, limit); err != nil || !ok || spent != 7 {
		t.Fatalf("b.Reserve(7) = %v, %v, %v; want 7 spent", spent, ok, err)
	}

	if _, err := r.Do("DEL", key); err != nil {
		t.Fatal(err)
	}
	for name, x := range map[string]*Counter{"a": a, "b": b} {
		if _, _, err := x.Reserve(ctx, day, "USD", 1, limit); !errors.Is(err, ErrCounterRewound) {
			t.Errorf("%s.Reserve after the counter vanished: %v; want ErrCounterRewound", name, err)
		}
	}
	// Stopped for the day, in that currency: another day is another counter.
	if _, _, err := a.Reserve(ctx, day, "USD", 1, limit); !errors.Is(err, ErrCounterRewound) {
		t.Errorf("a.Reserve later that day: %v; want ErrCounterRewound", err)
	}
	if _, ok, err := a.Reserve(ctx, "2026-11-28", "USD", 1, limit); err != nil || !ok {
		t.Errorf("a.Reserve the next day: %v, %v; want reserved", ok, err)
	}
	fresh := newClient(t, r, nil, time.Second).Counter("rgtest:budget:")
	if _, ok, err := fresh.Reserve(ctx, day, "USD", 1, limit); err != nil || !ok {
		t.Errorf("a new instance's Reserve: %v, %v; want reserved (it saw nothing before)", ok, err)
	}
	if _, err := r.Do("SET", key, "-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fresh.Reserve(ctx, day, "USD", 1, limit); err == nil || errors.Is(err, ErrCounterRewound) {
		t.Errorf("Reserve on a negative counter: %v; want refused as foreign", err)
	}
}

// TestPayCounterRefundedRaised: a writer that raises "refunded" (both
// fields only grow, yet the spending falls to nothing) is caught by an
// instance that spent more than the counter then says; an instance's own
// concurrent reservations and refunds never look like that.
func TestPayCounterRefundedRaised(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	ctx := t.Context()
	const day = "2026-11-27"
	const limit = 100
	a := newClient(t, r, nil, time.Second).Counter("rgtest:raised:")
	var wg sync.WaitGroup
	for range 20 { // reservations and refunds at once: no false alarm
		wg.Go(func() {
			if _, ok, err := a.Reserve(ctx, day, "USD", 1, limit); err != nil || !ok {
				t.Errorf("Reserve(1): %v, %v", ok, err)
				return
			}
			if err := a.Refund(ctx, day, "USD", 1); err != nil {
				t.Errorf("Refund(1): %v", err)
			}
		})
	}
	wg.Wait()
	if _, ok, err := a.Reserve(ctx, day, "USD", 100, limit); err != nil || !ok {
		t.Fatalf("Reserve(100) = %v, %v; want the whole budget", ok, err)
	}
	key := "rgtest:raised:spent:{USD:" + day + "}"
	if _, err := r.Do("HSET", key, "refunded", "120"); err != nil { // reserved is 120
		t.Fatal(err)
	}
	if _, _, err := a.Reserve(ctx, day, "USD", 100, limit); !errors.Is(err, ErrCounterRewound) {
		t.Errorf("Reserve after refunded was raised to reserved: %v; want ErrCounterRewound", err)
	}
}
