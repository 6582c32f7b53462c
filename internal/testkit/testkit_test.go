package testkit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// TestEventuallyWithinFails: a condition that never holds fails the test
// once the limit is past, naming what was awaited.
func TestEventuallyWithinFails(t *testing.T) {
	ft := &fatalT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		EventuallyWithin(ft, 20*time.Millisecond, "nothing", func() bool { return false })
	}()
	<-done
	if !strings.Contains(ft.msg, "timed out after 20ms waiting for nothing") {
		t.Errorf("EventuallyWithin never holding: %q; want it to fail naming what it waited for", ft.msg)
	}
}

// fatalT records Fatalf's message and ends its goroutine, as testing's
// does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestPoll: Poll reports whether cond held within its limit.
func TestPoll(t *testing.T) {
	var n atomic.Int64
	if !Poll(time.Second, func() bool { return n.Add(1) >= 3 }) || n.Load() != 3 {
		t.Errorf("Poll of a condition true at the third call: polled %d times; want true at 3", n.Load())
	}
	start := time.Now()
	if Poll(20*time.Millisecond, func() bool { return false }) {
		t.Error("Poll of a condition never true = true")
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Errorf("Poll gave up after %v; want its limit, 20ms", waited)
	}
}

// TestMetric: a sample is read by its whole name, labels included, and
// one that is not on the page fails the test naming it.
func TestMetric(t *testing.T) {
	page := "# HELP x_seconds Held.\n# TYPE x_seconds histogram\n" +
		"x_seconds_bucket{le=\"0.01\"} 1\nx_seconds_sum 1.25\nx_seconds_count 2\n" +
		"y_total{decision=\"allowed\"} 7\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, page) }))
	defer srv.Close()
	for _, tt := range []struct {
		name string
		want float64
	}{
		{"x_seconds_sum", 1.25},
		{"x_seconds_count", 2},
		{`y_total{decision="allowed"}`, 7},
	} {
		if got := Metric(t, srv.URL, tt.name); got != tt.want {
			t.Errorf("Metric(%s) = %v; want %v", tt.name, got, tt.want)
		}
	}
	ft := &fatalT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Metric(ft, srv.URL, "x_seconds")
	}()
	<-done
	if !strings.Contains(ft.msg, "metric x_seconds: not on "+srv.URL) {
		t.Errorf("a sample not on the page: %q; want it named", ft.msg)
	}
}
