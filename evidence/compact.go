package evidence

import (
	"bufio"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
)

// compactIndex rewrites the index without the entries fetched longer than
// retention ago that are not their URL's last: the copies they name are
// past retention too, unless renewed, and the last entry of each URL
// stays, so that the copy in force now is always found. It runs at Open,
// before the writer starts, and hourly on the writer's goroutine; a
// failure leaves the index as it was. Each URL's last entry is found in
// the file itself (a first pass keeps 16 bytes a URL: its hash and
// latest time), not from what the index remembers, which is bounded.
func (s *Store) compactIndex() error {
	if s.o.Retention <= 0 {
		return nil
	}
	x := s.index
	cutoff := s.o.Now().Add(-s.o.Retention)
	seed := maphash.MakeSeed()
	latest := map[uint64]int64{} // URL's hash → its last entry's fetch time
	if err := x.scan(func(e Entry) {
		h, t := maphash.String(seed, e.URL), e.Fetched.UnixNano()
		if l, ok := latest[h]; !ok || t > l {
			latest[h] = t
		}
	}); err != nil {
		return err
	}
	drop := func(e Entry) bool {
		return e.Fetched.Before(cutoff) && e.Fetched.UnixNano() != latest[maphash.String(seed, e.URL)]
	}
	var dropped int
	if err := x.scan(func(e Entry) {
		if drop(e) {
			dropped++
		}
	}); err != nil || dropped == 0 {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(x.name), ".index-*")
	if err != nil {
		return fmt.Errorf("compact %s: %w", x.name, err)
	}
	defer os.Remove(tmp.Name()) // after the rename, there is none
	if err := s.writeKept(tmp, drop); err != nil {
		tmp.Close()
		return fmt.Errorf("compact %s: %w", x.name, err)
	}
	if err := os.Rename(tmp.Name(), x.name); err != nil {
		return fmt.Errorf("compact %s: %w", x.name, err)
	}
	f, err := os.OpenFile(x.name, os.O_RDWR|os.O_APPEND|noFollow, 0)
	if err != nil {
		return fmt.Errorf("reopen %s: %w", x.name, err)
	}
	x.f.Close()
	x.f = f
	s.log.Info("evidence store: index compacted", "file", x.name, "entries_removed", dropped, "older_than", cutoff)
	return nil
}

// scan reads every good entry of the index from its start (the writer
// appends at its end whatever the offset).
func (x *index) scan(fn func(Entry)) error {
	if _, err := x.f.Seek(0, 0); err != nil {
		return fmt.Errorf("read %s: %w", x.name, err)
	}
	return ScanIndex(x.f, x.name, func(e Entry) error {
		fn(e)
		return nil
	}, func(int, error) {})
}

// writeKept writes the index's good entries that drop does not drop to
// tmp (0640), synced and closed.
func (s *Store) writeKept(tmp *os.File, drop func(Entry) bool) error {
	x := s.index
	if err := tmp.Chmod(0o640); err != nil {
		return err
	}
	if _, err := x.f.Seek(0, 0); err != nil {
		return err
	}
	w := bufio.NewWriter(tmp)
	err := ScanIndex(x.f, x.name, func(e Entry) error {
		if drop(e) {
			return nil
		}
		b, err := marshalEntry(e)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}, func(int, error) {})
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	return err
}
