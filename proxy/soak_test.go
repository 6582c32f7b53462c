package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSoak drives thousands of requests over a few hundred connections
// through robotsgate to many loopback origins (allowed, blocked,
// unreachable and slow), for ROBOTSGATE_SOAK (a duration, e.g. "2m"). It is
// skipped unless that is set:
//
//	ROBOTSGATE_SOAK=2m go test -run TestSoak -v -timeout 10m ./proxy
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("ROBOTSGATE_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("set ROBOTSGATE_SOAK to a duration to run the soak test")
	}
	const (
		nOrigins = 24
		nConns   = 300
	)
	type origin struct {
		*testOrigin
		kind string // allowed, unreachable, slow
	}
	var origins []origin
	var blockedHits atomic.Int64
	for i := range nOrigins {
		kind := []string{"allowed", "allowed", "unreachable", "slow"}[i%4]
		var o *testOrigin
		switch kind {
		case "unreachable":
			o = newTestOrigin(t, "", nil)
			o.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/robots.txt" {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				blockedHits.Add(1) // never reached: its rules are unreachable
			})
		default:
			slow := kind == "slow"
			o = newTestOrigin(t, "User-agent: *\nDisallow: /private\nDisallow: /*?session=\n", func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.URL.Path, "/private") || strings.Contains(r.URL.RawQuery, "session=") {
					blockedHits.Add(1)
				}
				if slow {
					time.Sleep(50 * time.Millisecond) // a slow origin: the stall is the load
				}
				io.WriteString(w, "ok")
			})
		}
		origins = append(origins, origin{o, kind})
	}
	cfg := loopbackConfig()
	cfg.Limits.MaxConnections = nConns + 50
	auditPath := t.TempDir() + "/audit.log" // a file, as in production: not the test's memory
	cfg.Audit.File = auditPath
	p := startProxy(t, cfg)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutinesBefore := runtime.NumGoroutine()

	var sent, unexpected, blocked, unreachableN atomic.Int64
	statuses := sync.Map{}
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for c := range nConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := p.client()
			defer client.CloseIdleConnections()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for i := 0; time.Now().Before(deadline) && i < 1_000_000; i++ {
				o := origins[rng.IntN(len(origins))]
				path, want := "/page", 200
				switch rng.IntN(4) {
				case 0:
					path, want = "/private/x", 403
				case 1:
					path, want = "/search?session=abc", 403
				}
				if o.kind == "unreachable" {
					want = 503
				}
				resp, err := client.Get(o.URL + path)
				sent.Add(1)
				if err != nil {
					unexpected.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				n, _ := statuses.LoadOrStore(resp.StatusCode, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				switch {
				case resp.StatusCode != want:
					unexpected.Add(1)
				case want == 403:
					blocked.Add(1)
				case want == 503:
					unreachableN.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(deadline.Add(-d))

	// Every block and every unreachable answer has a valid audit line.
	data, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	data = nil
	valid := 0
	for _, l := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && len(m) == len(auditFields) {
			valid++
		}
	}

	// Memory and goroutines come back near where they started.
	nLines := len(lines)
	lines = nil
	var after runtime.MemStats
	goroutinesAfter := 0
	// Connections closed and a collection at each turn, until the
	// goroutines are back; past the bound, the check below says how many.
	for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait); time.Sleep(100 * time.Millisecond) {
		p.srv.snap.Load().out.closeIdle()
		p.srv.cache.CloseIdleConnections()
		runtime.GC()
		goroutinesAfter = runtime.NumGoroutine()
		if goroutinesAfter <= goroutinesBefore+20 {
			break
		}
	}
	runtime.ReadMemStats(&after)
	var st []string
	statuses.Range(func(k, v any) bool {
		st = append(st, fmt.Sprintf("%d: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("soak: %d requests in %v (%.0f req/s) over %d connections to %d origins; statuses %v; unexpected %d",
		sent.Load(), elapsed.Round(time.Millisecond), float64(sent.Load())/elapsed.Seconds(), nConns, nOrigins, st, unexpected.Load())
	t.Logf("soak: audit lines %d (valid %d) for %d blocked + %d unreachable; heap %d → %d KiB; goroutines %d → %d",
		nLines, valid, blocked.Load(), unreachableN.Load(), before.HeapAlloc>>10, after.HeapAlloc>>10, goroutinesBefore, goroutinesAfter)

	if unexpected.Load() != 0 {
		t.Errorf("%d unexpected answers", unexpected.Load())
	}
	if n := blockedHits.Load(); n != 0 {
		t.Errorf("%d blocked requests reached an origin", n)
	}
	if int64(valid) != blocked.Load()+unreachableN.Load() || valid != nLines {
		t.Errorf("audit: %d lines, %d valid; want %d", nLines, valid, blocked.Load()+unreachableN.Load())
	}
	if goroutinesAfter > goroutinesBefore+20 {
		t.Errorf("goroutines: %d before, %d after the load", goroutinesBefore, goroutinesAfter)
	}
	if after.HeapAlloc > before.HeapAlloc+64<<20 {
		t.Errorf("heap: %d KiB before, %d KiB after the load", before.HeapAlloc>>10, after.HeapAlloc>>10)
	}
}
