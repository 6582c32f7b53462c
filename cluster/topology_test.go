package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/robotsgate/robotsgate/cluster/redistest"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// topologyClient is a Client of a Redis named by o's Sentinels or Nodes.
func topologyClient(t *testing.T, o Options) *Client {
	t.Helper()
	o.Prefix, o.Secret, o.Logger = "rgtest:", testSecret, slog.New(slog.DiscardHandler)
	if o.RetryAfter == 0 {
		o.RetryAfter = 200 * time.Millisecond
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// exercise runs every kind of call the fleet makes against c for
// origin o: a good copy stored and read back, a failure mark, the fetch
// lock, a pacing slot, a budget reservation and a purge message. It
// returns the first error.
func exercise(ctx context.Context, c *Client, o fetch.Origin) error {
	at := time.Now().UTC().Truncate(time.Millisecond)
	g := &fetch.GoodCopy{Outcome: fetch.Fetched, Status: 200, Body: []byte("User-agent: *\nDisallow: /x\n"), URL: o.RobotsURL(), FetchedAt: at, Expires: at.Add(time.Hour)}
	if err := c.SaveGood(ctx, o, g); err != nil {
		return fmt.Errorf("SaveGood: %w", err)
	}
	if err := c.SaveFailure(ctx, o, &fetch.Failure{UnreachableSince: at, RetryAt: at.Add(time.Minute), LastError: "refused"}); err != nil {
		return fmt.Errorf("SaveFailure: %w", err)
	}
	rec, err := c.Load(ctx, o)
	if err != nil || rec.Good == nil || rec.Failure == nil {
		return fmt.Errorf("Load = %+v, %v", rec, err)
	}
	if err := c.SaveGood(ctx, o, g); err != nil { // clears the failure: a transaction over both keys
		return fmt.Errorf("SaveGood again: %w", err)
	}
	unlock, ok, err := c.LockFetch(ctx, o, time.Second)
	if err != nil || !ok {
		return fmt.Errorf("LockFetch = %v, %v", ok, err)
	}
	unlock()
	if _, ok, err := c.Reserve(ctx, o.Host, 0, time.Second, 0); err != nil || !ok {
		return fmt.Errorf("Reserve = %v, %v", ok, err)
	}
	if err := c.Delete(ctx, o); err != nil {
		return fmt.Errorf("Delete: %w", err)
	}
	return nil
}

// TestRedisCluster: a Redis Cluster of three primaries serves every call
// of the fleet for origins spread over its slots (an origin's keys share
// one, so that no call is CROSSSLOT), the budget script, and messages
// between two instances, whichever nodes they are connected to.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	rc := redistest.StartCluster(t, 3)
	a := topologyClient(t, Options{Nodes: rc.Addrs()[:1], OpTimeout: testOpTimeout}) // finds the others
	b := topologyClient(t, Options{Nodes: rc.Addrs()[2:], OpTimeout: testOpTimeout})
	ctx := t.Context()
	for i := range 60 {
		o := fetch.Origin{Scheme: "https", Host: fmt.Sprintf("site%d.example", i), Port: 443}
		if err := exercise(ctx, a, o); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
	}
	// The origins' keys landed on every node.
	for _, n := range rc.Nodes {
		if keys, err := n.Do("DBSIZE"); err != nil || keys == ":0" {
			t.Errorf("node %s holds %s keys (%v); want some: the origins spread over the slots", n.Addr, keys, err)
		}
	}
	budget := a.Counter("rgtest:")
	paid := 0
	for range 5 {
		if _, ok, err := budget.Reserve(ctx, "2026-11-27", "USD", 1, 3); err != nil {
			t.Fatal(err)
		} else if ok {
			paid++
		}
	}
	if paid != 3 {
		t.Errorf("%d reservations of 1 within 3; want 3", paid)
	}
	var got atomic.Int64
	b.SubscribePurges(func(fetch.Origin) { got.Add(1) })
	// Published again until heard (the subscription is asynchronous), at
	// a pace Redis does not mind.
	for deadline := time.Now().Add(10 * time.Second); got.Load() == 0; time.Sleep(50 * time.Millisecond) {
		if err := a.PublishPurge(ctx, testOrigin); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("a purge published through one node never reached the instance on another")
		}
	}
}

// TestSentinelFailover: a Client of a Sentinel-managed primary follows a
// failover without a restart: the primary killed, the replica promoted,
// calls succeed again through the new primary within seconds; the
// breaker keeps every call in between short. The Sentinel and the data
// nodes require a password, as the Bitnami chart sets them up.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinelWith(t, "the-redis-password")
	// Without sending the password to the Sentinel, nothing works.
	noAuth := topologyClient(t, Options{Sentinels: []string{st.Sentinel.Addr}, Master: st.Master, Password: "the-redis-password"})
	if err := exercise(t.Context(), noAuth, testOrigin); err == nil {
		t.Error("a Sentinel that requires a password answered a client that sent it none")
	}
	c := topologyClient(t, Options{Sentinels: []string{st.Sentinel.Addr}, Master: st.Master, Password: "the-redis-password", SentinelAuth: true})
	ctx := t.Context()
	if err := exercise(ctx, c, testOrigin); err != nil {
		t.Fatal(err)
	}
	before, err := st.PrimaryAddr()
	if err != nil || before != st.Primary.Addr {
		t.Fatalf("primary %q, %v; want %s", before, err, st.Primary.Addr)
	}
	if s := c.Status(); s.Server != st.Primary.Addr || s.ServerSince.IsZero() || s.Topology != "sentinel" || s.Master != st.Master {
		t.Errorf("Status() = %+v before the failover; want the primary %s, since a time, via sentinel %s", s, st.Primary.Addr, st.Master)
	}
	st.Primary.Stop()
	start := time.Now()
	var slowest time.Duration
	for {
		t0 := time.Now()
		err := exercise(ctx, c, testOrigin)
		slowest = max(slowest, time.Since(t0))
		if err == nil {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("no call succeeded within 30 s of the primary's death: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // a call at each turn, timed: the retries are paced, not a wait for state
	}
	after, _ := st.PrimaryAddr()
	t.Logf("failover followed in %v (the primary is now %s); the slowest call took %v", time.Since(start).Round(time.Millisecond), after, slowest.Round(time.Millisecond))
	if after != st.Replica.Addr {
		t.Errorf("primary after the failover %q; want the replica %s", after, st.Replica.Addr)
	}
	if s := c.Status(); s.Server != st.Replica.Addr || s.ServerSince.Before(start) {
		t.Errorf("Status() = %+v after the failover; want the server %s, since the failover (after %v)", s, st.Replica.Addr, start.Format(time.RFC3339Nano))
	}
	// Each call is bounded by OpTimeout: a context deadline, which a busy
	// machine's calls overrun by as long as it takes to run them (5 ×
	// OpTimeout was seen overrun), so no bound on how long they took is
	// asserted (slowest is logged). A call nothing bounds hangs, and the
	// loop above with it, until the test's timeout.
}

// TestStatusServer: a client of one Redis named by its URL says which
// server it uses, and since when; one of a Redis Cluster names none (its
// nodes are many).
func TestStatusServer(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	start := time.Now()
	c := topologyClient(t, Options{URL: r.URL()})
	if err := exercise(t.Context(), c, testOrigin); err != nil {
		t.Fatal(err)
	}
	if s := c.Status(); s.Server != r.Addr || s.ServerSince.Before(start) || s.Topology != "redis" || s.Master != "" {
		t.Errorf("Status() = %+v; want the server %s since a time after %v, topology redis", s, r.Addr, start.Format(time.RFC3339Nano))
	}
	rc := redistest.StartCluster(t, 3)
	cc := topologyClient(t, Options{Nodes: rc.Addrs()[:1], OpTimeout: testOpTimeout})
	if err := exercise(t.Context(), cc, testOrigin); err != nil {
		t.Fatal(err)
	}
	if s := cc.Status(); s.Server != "" || s.Topology != "cluster" {
		t.Errorf("Status() of a Redis Cluster's client = %+v; want no server, topology cluster", s)
	}
}
