// Package filestore is the robots.txt cache's embedded fetch.Store: the
// last good copy and failure marks of each origin kept in a file of its
// own under the state directory, so that a restart while an origin is
// down keeps enforcing its last rules.
package filestore

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

	"github.com/robotsgate/robotsgate/internal/recency"
	"github.com/robotsgate/robotsgate/internal/statefile"
	"github.com/robotsgate/robotsgate/robots/fetch"
)

// Store is the embedded fetch.Store: one file per origin under a directory,
// written atomically (a temporary file renamed over the old one), bounded
// in bytes and in files (the least recently written are removed past
// either bound: the index it keeps in memory costs ~200 bytes a file, so
// the count bounds that too).
// A file that does not decode is logged, removed and treated as absent;
// a directory that cannot be used is an error at open, never later.
type Store struct {
	dir      string
	maxBytes int64
	log      *slog.Logger

	maxFiles int
	maxFile  int64 // bytes of one file: maxStoreFile

	mu    sync.Mutex
	files map[fileKey]*storedFile
	// lru holds the files, most recently written first: the least
	// recently written is removed first.
	lru   recency.List[storedFile]
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
	lru  recency.Links[storedFile]
}

// fileRecord is the on-disk form of a Record.
type fileRecord struct {
	Version int             `json:"v"`
	Origin  string          `json:"origin"`
	Good    *fetch.GoodCopy `json:"good,omitempty"`
	Failure *fetch.Failure  `json:"failure,omitempty"`
}

const fileVersion = 1

// maxStoreBody is the largest body a Store is sized for: the most
// robotsgate's config lets robots.max_bytes be (64 MiB).
const maxStoreBody = 64 << 20

// maxStoreFile bounds one file of a Store, written or read: the
// largest body, base64-encoded in the JSON (4/3 of it, 85.3 MiB), and 16
// MiB for the rest, whose strings (URL, note, last error) each come from
// no more than a response header (at most 64 KiB, see NewTransport) and
// grow at most sixfold when JSON escapes them. A file larger than this is
// not one the store wrote (write refuses to make one), and it is never
// read whole.
const maxStoreFile = (maxStoreBody+2)/3*4 + 16<<20

// MaxFiles bounds the files of a Store: 100,000 origins' last
// good copies, an index of ~20 MB.
const MaxFiles = 100_000

// Open opens (creating it, mode 0700) the store in dir, holding
// at most maxBytes of files, and at most MaxFiles. Files already there are counted, oldest
// first in line for removal; unreadable entries are skipped.
func Open(dir string, maxBytes int64, log *slog.Logger) (*Store, error) {
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
	s := &Store{dir: dir, maxBytes: maxBytes, maxFiles: MaxFiles, maxFile: maxStoreFile, log: log, files: map[fileKey]*storedFile{},
		lru: recency.New(func(f *storedFile) *recency.Links[storedFile] { return &f.lru })}
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
		s.lru.PushNewest(sf)
		s.bytes += sf.size
	}
	s.mu.Lock()
	s.trim()
	s.mu.Unlock()
	return s, nil
}

// fileName is o's file: a hash, so that any origin makes a safe name.
func fileName(o fetch.Origin) string { return fileKeyOf(o).name() }

func fileKeyOf(o fetch.Origin) fileKey {
	sum := sha256.Sum256([]byte(o.String()))
	return fileKey(sum[:16])
}

// Load reads o's file. What is under its name and is not a regular file
// within maxStoreFile (a symbolic link, which is not followed, a FIFO,
// which is not waited on, a device or a directory), or does not decode,
// is logged, removed (a link itself, never what it points to) and treated
// as absent.
func (s *Store) Load(_ context.Context, o fetch.Origin) (fetch.Record, error) {
	name := fileName(o)
	b, err := statefile.ReadFile(filepath.Join(s.dir, name), s.maxFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fetch.Record{}, nil
	case errors.Is(err, statefile.ErrSymlink), errors.Is(err, statefile.ErrNotRegular), errors.Is(err, statefile.ErrTooLarge):
		s.log.Warn("robots.txt store: ignoring and removing what is not a file it wrote", "file", filepath.Join(s.dir, name), "origin", o.String(), "err", err)
		s.remove(name)
		return fetch.Record{}, nil
	case err != nil:
		return fetch.Record{}, fmt.Errorf("robots.txt store: %w", err)
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
		return fetch.Record{}, nil
	}
	return fetch.Record{Good: fr.Good, Failure: fr.Failure}, nil
}

// SaveGood writes g as o's last good copy, clearing its failure marks.
func (s *Store) SaveGood(_ context.Context, o fetch.Origin, g *fetch.GoodCopy) error {
	return s.write(o, &fileRecord{Version: fileVersion, Origin: o.String(), Good: g})
}

// SaveFailure writes o's failure marks, keeping its good copy.
func (s *Store) SaveFailure(ctx context.Context, o fetch.Origin, f *fetch.Failure) error {
	rec, err := s.Load(ctx, o)
	if err != nil {
		return err
	}
	return s.write(o, &fileRecord{Version: fileVersion, Origin: o.String(), Good: rec.Good, Failure: f})
}

func (s *Store) write(o fetch.Origin, fr *fileRecord) error {
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
		s.lru.Touch(sf)
	} else {
		sf := &storedFile{key: key, size: int64(len(b))}
		s.files[key] = sf
		s.lru.PushNewest(sf)
		s.bytes += sf.size
	}
	s.trim()
	return nil
}

// Delete removes o's file.
func (s *Store) Delete(_ context.Context, o fetch.Origin) error {
	s.remove(fileName(o))
	return nil
}

// remove deletes a file and forgets it.
func (s *Store) remove(name string) {
	os.Remove(filepath.Join(s.dir, name))
	key, ok := keyOf(name)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sf, ok := s.files[key]; ok {
		s.bytes -= sf.size
		s.lru.Unlink(sf)
		delete(s.files, key)
	}
}

// trim removes the least recently written files while over a bound,
// never the newest. s.mu is held.
func (s *Store) trim() {
	for (s.bytes > s.maxBytes || len(s.files) > s.maxFiles) && !s.lru.Single() {
		sf := s.lru.Oldest()
		os.Remove(filepath.Join(s.dir, sf.key.name()))
		s.bytes -= sf.size
		s.lru.Unlink(sf)
		delete(s.files, sf.key)
	}
}

// Bytes returns the bytes of files held.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}
