package evidence

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options' zero values.
const (
	// DefaultQueueLen is how many copies may wait to be written.
	DefaultQueueLen = 1024
	// DefaultQueueBytes is how many bytes of bodies may wait to be written.
	DefaultQueueBytes = 64 << 20
	// DefaultMaxBody bounds a body the store keeps or reads back: above
	// any robots.txt size cap (500 KiB by default) with room to spare.
	DefaultMaxBody = 16 << 20
	// renewEvery: a copy named again is renewed on disk at most this often.
	renewEvery = time.Hour
	// sweepEvery: retention and the size bound are applied this often.
	sweepEvery = time.Hour
)

// Options configure a Store. Every zero value has a meaning, given below.
type Options struct {
	// Dir is the store's directory, created (0750) if missing; required.
	Dir string
	// Retention: a copy no record has named for this long is removed;
	// 0 keeps copies for ever.
	Retention time.Duration
	// MaxBytes bounds the objects' bytes on disk; past it the copies named
	// longest ago are removed first. 0: no bound.
	MaxBytes int64
	// MaxBody bounds a body kept or read back (a decompressed object past
	// it is refused); 0: DefaultMaxBody.
	MaxBody int64
	// QueueLen and QueueBytes bound the copies waiting to be written;
	// 0: DefaultQueueLen, DefaultQueueBytes.
	QueueLen   int
	QueueBytes int64
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Logger gets removals, drops (at most one line a minute) and write
	// failures; nil: discarded.
	Logger *slog.Logger
	// NoSweeper: no hourly sweep (the one at Open, and those of a write
	// past MaxBytes, still run); for tests that call Sweep themselves.
	NoSweeper bool
}

// Store keeps copies of sites' files: Keep queues a body and returns at
// once; one goroutine writes it. Open starts it, Close drains and stops
// it. Its methods are safe for concurrent use.
type Store struct {
	o     Options
	log   *slog.Logger
	queue chan kept
	// queued is the bytes of bodies waiting in queue.
	queued  atomic.Int64
	dropped atomic.Uint64
	bytes   atomic.Int64 // objects' bytes on disk, as last counted and since

	mu       sync.Mutex
	renewed  map[[32]byte]time.Time // when each copy was last renewed
	known    map[[32]byte]struct{}  // the objects stored, as of the last sweep and since
	lastDrop time.Time              // when a drop was last logged
	closed   bool

	done      chan struct{} // closed when the writer has stopped
	stop      chan struct{} // closed by Close
	renew     chan [32]byte
	index     *index
	closeOnce sync.Once
	wait      time.Duration // Close's bound on draining the queue
	zw        *gzip.Writer  // the writer's compressor, reused
}

type kept struct {
	c    Copy
	body []byte
}

// ErrClosed is returned by Close when called twice.
var ErrClosed = errors.New("evidence store closed")

// Open opens (creating if needed) the store at o.Dir, reads its index,
// sweeps it once (saying so when it is over its bound) and starts its
// writer. A directory or objects directory that is a symbolic link is
// refused: nothing in the store is reached through a link.
func Open(o Options) (*Store, error) {
	if o.Dir == "" {
		return nil, errors.New("open evidence store: no directory")
	}
	if o.QueueLen <= 0 {
		o.QueueLen = DefaultQueueLen
	}
	if o.QueueBytes <= 0 {
		o.QueueBytes = DefaultQueueBytes
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, d := range []string{o.Dir, filepath.Join(o.Dir, "objects")} {
		if err := makeDir(d); err != nil {
			return nil, fmt.Errorf("open evidence store: %w", err)
		}
	}
	idx, err := openIndex(filepath.Join(o.Dir, indexName), log)
	if err != nil {
		return nil, fmt.Errorf("open evidence store: %w", err)
	}
	s := &Store{
		o: o, log: log, index: idx,
		queue:   make(chan kept, o.QueueLen),
		renew:   make(chan [32]byte, o.QueueLen),
		renewed: map[[32]byte]time.Time{},
		known:   map[[32]byte]struct{}{},
		done:    make(chan struct{}),
		stop:    make(chan struct{}),
	}
	if _, err := s.sweep(true, o.MaxBytes); err != nil {
		log.Warn("evidence store: sweep at start", "dir", o.Dir, "err", err)
	}
	if err := s.compactIndex(); err != nil {
		log.Warn("evidence store: index not compacted", "dir", o.Dir, "err", err)
	}
	go s.run()
	return s, nil
}

// makeDir makes dir (0750) if missing and refuses it if it is a symbolic
// link or not a directory.
func makeDir(dir string) error {
	if err := os.Mkdir(dir, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	info, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s: a symbolic link, not followed", dir)
	}
	if !info.IsDir() {
		return fmt.Errorf("%s: not a directory", dir)
	}
	return nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.o.Dir }

// Keep queues a copy of body to be kept, and returns at once: when the
// queue is full (in entries or bytes) the copy is dropped, counted
// (Dropped) and logged. A body over MaxBody is dropped too. An answer with
// no body (c.HasBody false), or one stored already, is indexed only.
func (s *Store) Keep(c Copy, body []byte) {
	n := int64(len(body))
	if !c.HasBody() {
		body = nil
		n = 0
	}
	if n > s.o.MaxBody {
		s.drop(c, "body over the store's bound")
		return
	}
	if s.queued.Add(n) > s.o.QueueBytes {
		s.queued.Add(-n)
		s.drop(c, "queue full (bytes)")
		return
	}
	k := kept{c: c}
	s.mu.Lock()
	_, stored := s.known[c.Sum]
	s.mu.Unlock()
	if stored { // indexed only: the body is not copied again
		s.queued.Add(-n)
		n = 0
	} else if body != nil {
		// Copied outside the lock, which every audited request's Named
		// takes: a robots.txt may be 500 KiB.
		k.body = append([]byte(nil), body...)
	}
	s.mu.Lock()
	sent := false
	if !s.closed {
		select {
		case s.queue <- k:
			sent = true
		default:
		}
	}
	closed := s.closed
	s.mu.Unlock()
	switch {
	case sent:
	case closed:
		s.queued.Add(-n)
		s.drop(c, "store closed")
	default:
		s.queued.Add(-n)
		s.drop(c, "queue full")
	}
}

// drop counts a copy not kept and logs it, at most once a minute (a full
// disk would otherwise log every fetch).
func (s *Store) drop(c Copy, why string) {
	total := s.dropped.Add(1)
	now := s.o.Now()
	s.mu.Lock()
	logIt := now.Sub(s.lastDrop) >= time.Minute
	if logIt {
		s.lastDrop = now
	}
	s.mu.Unlock()
	if logIt {
		s.log.Warn("evidence store: copy not kept", "url", c.URL, "sha256", c.Hex(), "why", why, "dropped_total", total)
	}
}

// Dropped returns how many copies Keep has dropped.
func (s *Store) Dropped() uint64 { return s.dropped.Load() }

// Bytes returns the objects' bytes on disk, as counted at the last sweep
// plus what has been written since.
func (s *Store) Bytes() int64 { return s.bytes.Load() }

// Named renews the copies an audit record names: retention counts from
// the last record that named a copy. It never blocks: a map lookup, and
// at most once an hour per copy a send the writer takes (dropped when
// its channel is full; the next record renews it).
func (s *Store) Named(copies []Copy) {
	now := s.o.Now()
	for i := range copies {
		c := &copies[i]
		if !c.HasBody() {
			continue
		}
		s.mu.Lock()
		last, ok := s.renewed[c.Sum]
		due := !ok || now.Sub(last) >= renewEvery
		if due {
			s.renewed[c.Sum] = now
		}
		s.mu.Unlock()
		if due {
			select {
			case s.renew <- c.Sum:
			default:
			}
		}
	}
}

// run is the writer: it writes queued copies, renews named ones and
// sweeps hourly, until Close.
func (s *Store) run() {
	defer close(s.done)
	var tick <-chan time.Time
	if !s.o.NoSweeper {
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case k := <-s.queue:
			s.write(k)
		case sum := <-s.renew:
			s.touch(sum)
		case <-tick:
			if _, err := s.sweep(false, s.o.MaxBytes); err != nil {
				s.log.Warn("evidence store: sweep", "dir", s.o.Dir, "err", err)
			}
			if err := s.compactIndex(); err != nil {
				s.log.Warn("evidence store: index not compacted", "dir", s.o.Dir, "err", err)
			}
		case <-s.stop:
			s.drain()
			return
		}
	}
}

// write keeps one copy: its object unless stored, then its index line.
func (s *Store) write(k kept) {
	defer s.queued.Add(-int64(len(k.body)))
	if k.body != nil {
		n, err := s.putObject(k.c.Sum, k.body)
		if err != nil {
			s.drop(k.c, "write failed: "+err.Error())
			return
		}
		total := s.bytes.Add(n)
		s.mu.Lock()
		s.known[k.c.Sum] = struct{}{}
		s.mu.Unlock()
		if s.o.MaxBytes > 0 && total > s.o.MaxBytes {
			// Past the bound between hourly sweeps (many origins, or one
			// whose body changes at every fetch): swept now, down to 7/8
			// of it, so that the next sweep is an eighth of max_bytes of
			// writes away rather than at the next copy.
			if _, err := s.sweep(false, s.o.MaxBytes-s.o.MaxBytes/8); err != nil {
				s.log.Warn("evidence store: sweep", "dir", s.o.Dir, "err", err)
			}
		}
	}
	if err := s.index.add(k.c); err != nil {
		s.log.Error("evidence store: write index", "url", k.c.URL, "err", err)
	}
}

// touch renews a copy's object: its mtime becomes now. An object that is
// not a regular file (a link put in its place) is left alone: Chtimes
// follows links, and would renew a file outside the store.
func (s *Store) touch(sum [32]byte) {
	now := s.o.Now()
	p := s.objectPath(sum)
	if info, err := os.Lstat(p); err != nil || !info.Mode().IsRegular() {
		if err == nil {
			s.log.Warn("evidence store: not an object, not renewed", "file", p, "mode", info.Mode().Type().String())
		}
		return
	}
	if err := os.Chtimes(p, now, now); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("evidence store: renew copy", "file", p, "err", err)
	}
}

// drain writes what is queued when Close is called, until the queue is
// empty or Close's wait is over.
func (s *Store) drain() {
	deadline := time.NewTimer(s.wait)
	defer deadline.Stop()
	for {
		select {
		case k := <-s.queue:
			s.write(k)
		case <-deadline.C:
			return
		default:
			return
		}
	}
}

// Close writes what is queued, for at most wait, then stops the writer
// and closes the index. Copies kept after Close are dropped.
func (s *Store) Close(wait time.Duration) error {
	err := ErrClosed
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.wait = wait
		close(s.stop)
		<-s.done
		if n := len(s.queue); n > 0 {
			s.dropped.Add(uint64(n))
			s.log.Warn("evidence store: copies not written at shutdown", "count", n)
		}
		err = s.index.close()
	})
	return err
}
