package testkit

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestBuffer: concurrent writes are all kept, whole.
func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { fmt.Fprintf(&b, "line %d\n", i) })
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 50 {
		t.Errorf("%d lines; want 50", n)
	}
}

// TestEventually: it returns once cond holds.
func TestEventually(t *testing.T) {
	var n atomic.Int64
	Eventually(t, "the third poll", func() bool { return n.Add(1) >= 3 })
	if n.Load() != 3 {
		t.Errorf("polled %d times; want 3", n.Load())
	}
}
