// Package testkit holds what the tests of several packages share: a log
// sink safe for concurrent writers, a bounded wait that fails loudly, the
// headless browser on PATH, a sample read from a /metrics page, and
// robotsgate itself built and served for the integrations' tests. Only
// tests import it.
package testkit

import (
	"bufio"
	"bytes"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is an io.Writer safe for concurrent writers (a logger's, a
// server's goroutines), read whole with String.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// EventuallyLimit is how long Eventually waits: far longer than anything
// it waits for takes on a busy machine, so that only a wait that would
// never end fails.
const EventuallyLimit = 10 * time.Second

// Eventually polls cond until it holds, and fails t, naming what it
// waited for, if it still does not after EventuallyLimit. It must be
// called from the test's goroutine (it calls t.Fatalf).
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, EventuallyLimit, what, cond)
}

// EventuallyWithin is Eventually bounded by limit: for a wait whose
// bound is part of what is tested, or longer than EventuallyLimit by
// design (a Redis failover, a breaker's watcher).
func EventuallyWithin(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(limit, cond) {
		t.Fatalf("timed out after %v waiting for %s", limit, what)
	}
}

// Poll polls cond until it holds and reports whether it did within
// limit: for a test that fails in its own words, with what it saw (a
// log, counts), or that goes on to clean up before it fails.
func Poll(limit time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// Browser returns a headless-capable Chromium on PATH, or "": the tests
// that drive a real browser skip without one.
func Browser() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Clock is a clock a test moves: Now returns the time it was set to,
// whatever the time is. It is safe for concurrent use; its zero value
// reads the zero time.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock set to t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Metric returns the value of the sample name (a metric's name, with its
// labels as the page writes them: "robotsgate_paced_wait_seconds_sum") in
// the Prometheus text page at url, a robotsgate's /metrics; it fails t
// if the page cannot be read or has no such sample.
func Metric(t testing.TB, url, name string) float64 {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("metric %s: %v", name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s at %s: %v", name, url, err)
			}
			return f
		}
	}
	t.Fatalf("metric %s: not on %s (%d, %v)", name, url, resp.StatusCode, sc.Err())
	return 0
}
