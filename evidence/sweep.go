package evidence

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// object is one object file found by a sweep.
type object struct {
	path  string
	named time.Time // its mtime: when a record last named it
	size  int64
}

// SweepResult says what a sweep found and removed.
type SweepResult struct {
	Objects      int   // objects found
	Bytes        int64 // their bytes, before removals
	Expired      int   // removed as not named within retention
	ExpiredBytes int64
	Evicted      int // removed to bring the store under max_bytes
	EvictedBytes int64
}

// Sweep removes the copies no record has named within retention, then, if
// the store is still over max_bytes, the copies named longest ago until it
// is under; each kind of removal is logged with its count and bytes. The
// writer sweeps at Open, hourly, and when a copy it writes takes the store
// past max_bytes; Sweep is for tests and tools, and must not run beside
// the writer's own sweep (call it with NoSweeper, and with no copy being
// written past max_bytes).
func (s *Store) Sweep() (SweepResult, error) { return s.sweep(false, s.o.MaxBytes) }

// sweep removes what retention expires, then the copies named longest
// ago until the store holds at most bound bytes (max_bytes, or less when
// a write took it past: room is made for more than the next copy).
func (s *Store) sweep(atStart bool, bound int64) (SweepResult, error) {
	var r SweepResult
	objs, err := s.objects()
	if err != nil {
		return r, err
	}
	r.Objects = len(objs)
	for _, o := range objs {
		r.Bytes += o.size
	}
	total := r.Bytes
	if atStart && s.o.MaxBytes > 0 && total > s.o.MaxBytes {
		s.log.Warn("evidence store: over its bound at start; removing the copies named longest ago",
			"dir", s.o.Dir, "bytes", total, "max_bytes", s.o.MaxBytes)
	}
	now := s.o.Now()
	slices.SortFunc(objs, func(a, b object) int { return a.named.Compare(b.named) })
	var errs []error
	// Oldest named first: those past retention are the first ones, then
	// the copies named longest ago go while the store is over bound.
	left := objs[:0] // what is still on disk after the removals
	for _, o := range objs {
		expired := s.o.Retention > 0 && now.Sub(o.named) > s.o.Retention
		if !expired && (s.o.MaxBytes <= 0 || total <= bound) {
			left = append(left, o)
			continue
		}
		if err := os.Remove(o.path); err != nil {
			errs = append(errs, err)
			left = append(left, o)
			continue
		}
		if expired {
			r.Expired++
			r.ExpiredBytes += o.size
		} else {
			r.Evicted++
			r.EvictedBytes += o.size
		}
		total -= o.size
	}
	s.bytes.Store(total)
	s.setKnown(left)
	if r.Expired > 0 {
		s.log.Info("evidence store: removed copies not named within retention",
			"dir", s.o.Dir, "count", r.Expired, "bytes", r.ExpiredBytes, "retention", s.o.Retention)
	}
	if r.Evicted > 0 {
		s.log.Warn("evidence store: over max_bytes; removed the copies named longest ago",
			"dir", s.o.Dir, "count", r.Evicted, "bytes", r.EvictedBytes, "max_bytes", s.o.MaxBytes, "now_bytes", total)
	}
	return r, errors.Join(errs...)
}

// setKnown makes the store's set of objects those of objs, the ones a
// sweep left on disk. (It took the objects after the first evicted ones,
// which a removal that failed among them shifted: a copy removed stayed
// known, and Keep never wrote it again.)
func (s *Store) setKnown(objs []object) {
	known := make(map[[32]byte]struct{}, len(objs))
	for _, o := range objs {
		if sum, ok := sumOfName(filepath.Base(o.path)); ok {
			known[sum] = struct{}{}
		}
	}
	s.mu.Lock()
	s.known = known
	s.mu.Unlock()
}

// sumOfName reads an object's file name, <hex>.gz.
func sumOfName(name string) (sum [32]byte, ok bool) {
	h, found := strings.CutSuffix(name, ".gz")
	if !found || !isHexSum(h) {
		return sum, false
	}
	_, err := hex.Decode(sum[:], []byte(h))
	return sum, err == nil
}

// objects lists the store's object files, skipping (with a warning) links
// and anything else that is not where the store writes, and removing
// temporary files left by a crash more than an hour ago.
func (s *Store) objects() ([]object, error) {
	root := filepath.Join(s.o.Dir, "objects")
	dirs, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	var objs []object
	for _, d := range dirs {
		sub := filepath.Join(root, d.Name())
		if d.Type() != fs.ModeDir {
			s.log.Warn("evidence store: not a directory of objects, skipped", "file", sub)
			continue
		}
		files, err := os.ReadDir(sub)
		if err != nil {
			return nil, fmt.Errorf("sweep: %w", err)
		}
		for _, f := range files {
			p := filepath.Join(sub, f.Name())
			info, err := f.Info()
			if err != nil || !f.Type().IsRegular() {
				s.log.Warn("evidence store: not an object, skipped", "file", p)
				continue
			}
			if strings.HasPrefix(f.Name(), ".tmp-") {
				if s.o.Now().Sub(info.ModTime()) > time.Hour {
					os.Remove(p)
				}
				continue
			}
			objs = append(objs, object{path: p, named: info.ModTime(), size: info.Size()})
		}
	}
	return objs, nil
}
