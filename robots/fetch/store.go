package fetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/robotsgate/robotsgate/internal/statefile"
)

// Store keeps what a Cache must not lose beyond itself: each origin's last
// good copy (the body, so that it can be parsed again) and the marks of a
// run of failures. A Cache consults it on a miss before fetching and
// writes to it after every fetch, so that a restarted process, or another
// instance sharing the store, answers as this one would. Implementations
// must be safe for concurrent use, bound what they hold (or leave that to a
// backend with its own bound and TTLs, as Redis), and treat a value
// they cannot read as absent (reporting it their own way): a Store never
// turns a malformed value into rules.
type Store interface {
	// Load returns what is held for o; a zero Record if nothing.
	Load(ctx context.Context, o Origin) (Record, error)
	// SaveGood records a successful fetch: g becomes the last good copy
	// and any failure marks are cleared.
	SaveGood(ctx context.Context, o Origin, g *GoodCopy) error
	// SaveFailure records the marks of a failed fetch; the good copy, if
	// any, stays.
	SaveFailure(ctx context.Context, o Origin, f *Failure) error
	// Delete forgets o (Cache.Purge).
	Delete(ctx context.Context, o Origin) error
}

// FetchLocker is implemented by a Store shared by several processes: at
// most one of them fetches an origin at a time, and the others wait for its
// result in the store (see CacheOptions.PeerWait).
type FetchLocker interface {
	// LockFetch tries to take o's fetch lock for ttl. ok is false when
	// another holder has it; unlock releases it (only if still held).
	LockFetch(ctx context.Context, o Origin, ttl time.Duration) (unlock func(), ok bool, err error)
}

// Record is what a Store holds for an origin.
type Record struct {
	Good    *GoodCopy // nil: none
	Failure *Failure  // nil: the latest fetch succeeded, or none failed
}

// GoodCopy is a fetched or unavailable answer as stored: enough to make
// the Entry again.
type GoodCopy struct {
	Outcome     Outcome   `json:"outcome"` // Fetched or Unavailable
	Status      int       `json:"status"`
	Body        []byte    `json:"body,omitempty"` // Fetched: the body after the MaxBytes cap
	DisallowAll bool      `json:"disallow_all,omitempty"`
	URL         string    `json:"url"`
	Truncated   bool      `json:"truncated,omitempty"`
	Note        string    `json:"note,omitempty"`
	FetchedAt   time.Time `json:"fetched_at"`
	Expires     time.Time `json:"expires"`
}

// Failure is the state of a run of failed fetches.
type Failure struct {
	UnreachableSince time.Time `json:"unreachable_since"`
	RetryAt          time.Time `json:"retry_at"`
	LastError        string    `json:"last_error"`
	LastKind         string    `json:"last_kind,omitempty"`
	LastStatus       int       `json:"last_status,omitempty"`
}

// Check reports whether g is a value a Store may hand back: a known
// outcome, a status in range, times set, and no body for an unavailable
// answer. A value read from a file or a shared store that fails it is
// ignored.
func (g *GoodCopy) Check() error {
	switch {
	case g.Outcome != Fetched && g.Outcome != Unavailable:
		return fmt.Errorf("outcome %q", g.Outcome)
	case g.Status < 100 || g.Status > 599:
		return fmt.Errorf("status %d", g.Status)
	case g.FetchedAt.IsZero() || g.Expires.IsZero():
		return errors.New("no fetch or expiry time")
	case g.Outcome == Unavailable && len(g.Body) > 0:
		return errors.New("a body for an unavailable answer")
	}
	return nil
}

// Check reports whether f is a value a Store may hand back.
func (f *Failure) Check() error {
	if f.UnreachableSince.IsZero() {
		return errors.New("no unreachable-since time")
	}
	return nil
}

// MaxClockSkew is how far apart the clocks of processes sharing a Store
// (a fleet's instances) may be: a time read from a Store may lie this far
// past the bound this process would keep to itself. Beyond it the value
// was not written by a Cache, whatever wrote it.
const MaxClockSkew = time.Minute

// CheckTimes reports whether g's times are ones a Cache whose TTL is ttl
// could have written by now: fetched no later than now, and expiring no
// later than now + ttl, each give or take MaxClockSkew. A copy that fails
// is not used: an expiry years ahead would make any copy, even an empty
// one that allows everything, fresh for ever.
func (g *GoodCopy) CheckTimes(now time.Time, ttl time.Duration) error {
	switch {
	case g.FetchedAt.After(now.Add(MaxClockSkew)):
		return fmt.Errorf("fetched at %s, in the future", g.FetchedAt.UTC().Format(time.RFC3339))
	case g.Expires.After(now.Add(ttl + MaxClockSkew)):
		return fmt.Errorf("expires at %s, more than the cache TTL (%v) from now", g.Expires.UTC().Format(time.RFC3339), ttl)
	}
	return nil
}

// CheckTimes reports whether f's times are ones a Cache could have written
// by now: unreachable since no later than now, and retrying no later than
// now + 24 h (the longest wait a Cache sets, see CacheOptions.RetryAfter),
// each give or take MaxClockSkew. Marks that fail are not used: a retry
// time years ahead would stop every fetch of the origin, and with an old
// unreachable-since time lift its restrictions (UnreachableLimit) for
// ever.
func (f *Failure) CheckTimes(now time.Time) error {
	switch {
	case f.UnreachableSince.After(now.Add(MaxClockSkew)):
		return fmt.Errorf("unreachable since %s, in the future", f.UnreachableSince.UTC().Format(time.RFC3339))
	case f.RetryAt.After(now.Add(maxRetryAfter + MaxClockSkew)):
		return fmt.Errorf("retry at %s, more than %v from now", f.RetryAt.UTC().Format(time.RFC3339), maxRetryAfter)
	}
	return nil
}

// FileStore is the embedded Store: one file per origin under a directory,
// written atomically (a temporary file renamed over the old one), bounded
// in bytes and in files (the least recently written are removed past
// either bound: the index it keeps in memory costs ~200 bytes a file, so
// the count bounds that too).
// A file that does not decode is logged, removed and treated as absent;
// a directory that cannot be used is an error at open, never later.
type FileStore struct {
	dir      string
	maxBytes int64
	log      *slog.Logger

	maxFiles int
	maxFile  int64 // bytes of one file: maxStoreFile

	mu    sync.Mutex
	files map[fileKey]*storedFile
	// lru holds the files, most recently written first: the least
	// recently written is removed first.
	lru   recency[storedFile]
	bytes int64
}

// fileKey is a file's name without its hex and ".json": the index holds
// 16 bytes a file where a name would take 48.
type fileKey [16]byte

func (k fileKey) name() string { return hex.EncodeToString(k[:]) + ".json" }

// keyOf is the key of a file named name, if it is one fileName makes.
func keyOf(name string) (fileKey, bool) {
	var k fileKey
	h, ok := strings.CutSuffix(name, ".json")
	if !ok || len(h) != 2*len(k) {
		return k, false
	}
	_, err := hex.Decode(k[:], []byte(h))
	return k, err == nil
}

// storedFile is the index's record of one file: 48 bytes with its links.
type storedFile struct {
	key  fileKey
	size int64
	lru  recencyLinks[storedFile]
}

// fileRecord is the on-disk form of a Record.
type fileRecord struct {
	Version int       `json:"v"`
	Origin  string    `json:"origin"`
	Good    *GoodCopy `json:"good,omitempty"`
	Failure *Failure  `json:"failure,omitempty"`
}

const fileVersion = 1

// maxStoreBody is the largest body a FileStore is sized for: the most
// robotsgate's config lets robots.max_bytes be (64 MiB).
const maxStoreBody = 64 << 20

// maxStoreFile bounds one file of a FileStore, written or read: the
// largest body, base64-encoded in the JSON (4/3 of it, 85.3 MiB), and 16
// MiB for the rest, whose strings (URL, note, last error) each come from
// no more than a response header (at most 64 KiB, see NewTransport) and
// grow at most sixfold when JSON escapes them. A file larger than this is
// not one the store wrote (write refuses to make one), and it is never
// read whole.
const maxStoreFile = (maxStoreBody+2)/3*4 + 16<<20

// MaxStoreFiles bounds the files of a FileStore: 100,000 origins' last
// good copies, an index of ~20 MB.
const MaxStoreFiles = 100_000

// OpenFileStore opens (creating it, mode 0700) the store in dir, holding
// at most maxBytes of files, and at most MaxStoreFiles. Files already there are counted, oldest
// first in line for removal; unreadable entries are skipped.
func OpenFileStore(dir string, maxBytes int64, log *slog.Logger) (*FileStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("robots.txt store: %w", err)
	}
	// The store's own directory: a link in its place (someone else's) is
	// not followed, as none of its files are.
	if fi, err := os.Lstat(dir); err != nil {
		return nil, fmt.Errorf("robots.txt store: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("robots.txt store: %s is not a directory (%v): not followed", dir, fi.Mode().Type())
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &FileStore{dir: dir, maxBytes: maxBytes, maxFiles: MaxStoreFiles, maxFile: maxStoreFile, log: log, files: map[fileKey]*storedFile{},
		lru: recency[storedFile]{links: func(f *storedFile) *recencyLinks[storedFile] { return &f.lru }}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("robots.txt store: %w", err)
	}
	type aged struct {
		key  fileKey
		size int64
		mod  time.Time
	}
	var found []aged
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") { // left by a crash mid-write
			os.Remove(filepath.Join(dir, name))
			continue
		}
		// DirEntry.Type and Info describe the entry itself, never what a
		// link points to: links, FIFOs and the like are skipped unopened
		// (Load removes one that sits under an origin's name).
		key, ok := keyOf(name)
		if !ok || !e.Type().IsRegular() {
			continue // no origin's file: never loaded, never removed
		}
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		found = append(found, aged{key, info.Size(), info.ModTime()})
	}
	// Oldest first, each pushed in front of the older.
	slices.SortFunc(found, func(a, b aged) int { return a.mod.Compare(b.mod) })
	for _, f := range found {
		sf := &storedFile{key: f.key, size: f.size}
		s.files[f.key] = sf
		s.lru.pushNewest(sf)
		s.bytes += sf.size
	}
	s.mu.Lock()
	s.trim()
	s.mu.Unlock()
	return s, nil
}

// fileName is o's file: a hash, so that any origin makes a safe name.
func fileName(o Origin) string { return fileKeyOf(o).name() }

func fileKeyOf(o Origin) fileKey {
	sum := sha256.Sum256([]byte(o.String()))
	return fileKey(sum[:16])
}

// Load reads o's file. What is under its name and is not a regular file
// within maxStoreFile (a symbolic link, which is not followed, a FIFO,
// which is not waited on, a device or a directory), or does not decode,
// is logged, removed (a link itself, never what it points to) and treated
// as absent.
func (s *FileStore) Load(_ context.Context, o Origin) (Record, error) {
	name := fileName(o)
	b, err := statefile.ReadFile(filepath.Join(s.dir, name), s.maxFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Record{}, nil
	case errors.Is(err, statefile.ErrSymlink), errors.Is(err, statefile.ErrNotRegular), errors.Is(err, statefile.ErrTooLarge):
		s.log.Warn("robots.txt store: ignoring and removing what is not a file it wrote", "file", filepath.Join(s.dir, name), "origin", o.String(), "err", err)
		s.remove(name)
		return Record{}, nil
	case err != nil:
		return Record{}, fmt.Errorf("robots.txt store: %w", err)
	}
	var fr fileRecord
	err = json.Unmarshal(b, &fr)
	switch {
	case err != nil:
	case fr.Version != fileVersion:
		err = fmt.Errorf("version %d", fr.Version)
	case fr.Origin != o.String():
		err = fmt.Errorf("holds %q", fr.Origin) // a hash collision, or a file moved by hand
	case fr.Good != nil:
		err = fr.Good.Check()
	}
	if err == nil && fr.Failure != nil {
		err = fr.Failure.Check()
	}
	if err != nil {
		s.log.Warn("robots.txt store: ignoring an unreadable file", "file", filepath.Join(s.dir, name), "origin", o.String(), "err", err)
		s.remove(name)
		return Record{}, nil
	}
	return Record{Good: fr.Good, Failure: fr.Failure}, nil
}

// SaveGood writes g as o's last good copy, clearing its failure marks.
func (s *FileStore) SaveGood(_ context.Context, o Origin, g *GoodCopy) error {
	return s.write(o, &fileRecord{Version: fileVersion, Origin: o.String(), Good: g})
}

// SaveFailure writes o's failure marks, keeping its good copy.
func (s *FileStore) SaveFailure(ctx context.Context, o Origin, f *Failure) error {
	rec, err := s.Load(ctx, o)
	if err != nil {
		return err
	}
	return s.write(o, &fileRecord{Version: fileVersion, Origin: o.String(), Good: rec.Good, Failure: f})
}

func (s *FileStore) write(o Origin, fr *fileRecord) error {
	b, err := json.Marshal(fr)
	if err != nil {
		return fmt.Errorf("robots.txt store: %w", err)
	}
	if int64(len(b)) > s.maxFile {
		// Load would refuse it: never write what will not be read.
		return fmt.Errorf("robots.txt store: write %s: %d bytes, over the bound of %d a file", o, len(b), s.maxFile)
	}
	name := fileName(o)
	tmp, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("robots.txt store: %w", err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("robots.txt store: write %s: %w", o, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(s.dir, name)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("robots.txt store: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := fileKeyOf(o)
	if sf, ok := s.files[key]; ok {
		s.bytes += int64(len(b)) - sf.size
		sf.size = int64(len(b))
		s.lru.touch(sf)
	} else {
		sf := &storedFile{key: key, size: int64(len(b))}
		s.files[key] = sf
		s.lru.pushNewest(sf)
		s.bytes += sf.size
	}
	s.trim()
	return nil
}

// Delete removes o's file.
func (s *FileStore) Delete(_ context.Context, o Origin) error {
	s.remove(fileName(o))
	return nil
}

// remove deletes a file and forgets it.
func (s *FileStore) remove(name string) {
	os.Remove(filepath.Join(s.dir, name))
	key, ok := keyOf(name)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sf, ok := s.files[key]; ok {
		s.bytes -= sf.size
		s.lru.unlink(sf)
		delete(s.files, key)
	}
}

// trim removes the least recently written files while over a bound,
// never the newest. s.mu is held.
func (s *FileStore) trim() {
	for (s.bytes > s.maxBytes || len(s.files) > s.maxFiles) && !s.lru.single() {
		sf := s.lru.oldest
		os.Remove(filepath.Join(s.dir, sf.key.name()))
		s.bytes -= sf.size
		s.lru.unlink(sf)
		delete(s.files, sf.key)
	}
}

// Bytes returns the bytes of files held.
func (s *FileStore) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}
