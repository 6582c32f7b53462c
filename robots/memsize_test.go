package robots

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
)

// buildAll compiles the matcher of every group, as a cached file whose
// every group has been used holds them.
func buildAll(r *Robots) {
	for i := range r.blocks {
		if b := &r.blocks[i]; b.last-b.first > scanMax {
			r.matcher(int32(i))
		}
	}
}

// heapHeld returns the growth of the live heap (HeapAlloc after a
// collection) while make's results are held.
func heapHeld(build func() []*Robots) (int64, []*Robots) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	held := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), held
}

// TestMemSizeMeasured holds MemSize, the cost a cache charges for a file,
// to the heap that the files of testdata/corpus really take once parsed as
// the proxy parses them and with every matcher built: it may not fall
// short by more than 15%, over the smaller half of the files (typical
// sites) and over the larger half (where the bytes are). With -v it lists,
// per file, the bytes held against the body's size.
func TestMemSizeMeasured(t *testing.T) {
	// Not parallel: the heap must grow only by what this test holds.
	files, err := filepath.Glob("testdata/corpus/*.txt")
	if err != nil || len(files) < 200 {
		t.Fatalf("corpus: %d files, %v", len(files), err)
	}
	bodies := make([][]byte, len(files))
	for i, name := range files {
		if bodies[i], err = os.ReadFile(name); err != nil {
			t.Fatal(err)
		}
	}
	bySize := slices.Clone(bodies)
	slices.SortStableFunc(bySize, func(a, b []byte) int { return len(a) - len(b) })
	// Copies enough to hold megabytes: the collector's noise is lost in them.
	for _, half := range []struct {
		name   string
		bodies [][]byte
		copies int
	}{
		{"smaller half", bySize[:len(bySize)/2], 20},
		{"larger half", bySize[len(bySize)/2:], 3},
	} {
		copies := half.copies
		heap, held := heapHeld(func() []*Robots {
			held := make([]*Robots, 0, copies*len(half.bodies))
			for range copies {
				for _, body := range half.bodies {
					r := Parse(body, WithNormalization())
					buildAll(r)
					held = append(held, r)
				}
			}
			return held
		})
		var est, size int64
		for _, r := range held {
			est += int64(r.MemSize())
			size += int64(r.Size())
		}
		runtime.KeepAlive(held)
		ratio := float64(heap) / float64(est)
		t.Logf("%s, %d files × %d: heap %d bytes, MemSize %d (heap/MemSize %.3f); bodies %d bytes (heap/body %.2f)",
			half.name, len(half.bodies), copies, heap, est, ratio, size, float64(heap)/float64(size))
		// The race detector keeps its shadow memory outside the Go heap: the
		// same bound holds under -race.
		if ratio > 1.15 {
			t.Errorf("%s: heap held is %.3f × MemSize; want at most 1.15: MemSize underestimates", half.name, ratio)
		}
	}
	runtime.KeepAlive(bodies) // read before the measures: their collection would skew them

	if testing.Verbose() {
		type row struct {
			name       string
			body, cost int
		}
		rows := make([]row, len(bodies))
		for i, body := range bodies {
			r := Parse(body, WithNormalization())
			rows[i] = row{filepath.Base(files[i]), r.Size(), r.MemSize()}
		}
		slices.SortFunc(rows, func(a, b row) int { return b.cost - a.cost })
		var b strings.Builder
		w := tabwriter.NewWriter(&b, 0, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "file\tbody bytes\theld bytes\theld/body\t")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%d\t%d\t%.1f\t\n", r.name, r.body, r.cost, float64(r.cost)/float64(max(r.body, 1)))
		}
		w.Flush()
		t.Log("compiled size (MemSize) against body size, largest first:\n" + b.String())
	}
}
