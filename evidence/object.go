package evidence

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/robotsgate/robotsgate/internal/statefile"
)

// Objects are compressed with gzip from the standard library: a robots.txt
// shrinks to a fifth or less, anyone can read an object with zcat, and no
// dependency is added for the few percent a better compressor would save
// on files this small.

// Errors wrapped by Get, with the object's file, to say why a body could
// not be read back.
var (
	// ErrMissing: no object holds the body (never stored, or removed by
	// retention or the size bound).
	ErrMissing = errors.New("copy not in the store")
	// ErrCorrupt: the object does not decompress, or to a body whose
	// SHA-256 is not its name.
	ErrCorrupt = errors.New("corrupted copy")
	// ErrTooLarge: the object decompresses past the store's bound on a body.
	ErrTooLarge = errors.New("copy larger than its bound")
)

// objectPath is where the body with sum is kept.
func (s *Store) objectPath(sum [32]byte) string {
	return ObjectPath(s.o.Dir, sum)
}

// ObjectPath is where the store in dir keeps the body with sum:
// objects/<first two hex digits>/<hex>.gz.
func ObjectPath(dir string, sum [32]byte) string {
	h := hex.EncodeToString(sum[:])
	return filepath.Join(dir, "objects", h[:2], h+".gz")
}

// putObject writes body's object unless it is stored already, and returns
// the bytes written: compressed to a temporary file in the object's
// directory (0640), then renamed over its name.
func (s *Store) putObject(sum [32]byte, body []byte) (int64, error) {
	p := s.objectPath(sum)
	if info, err := os.Lstat(p); err == nil && info.Mode().IsRegular() {
		return 0, nil // stored: the same name is the same body
	}
	dir := filepath.Dir(p)
	if err := makeDir(dir); err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return 0, fmt.Errorf("create object: %w", err)
	}
	tmp := f.Name()
	n, err := s.writeObject(f, body)
	if err == nil {
		now := s.o.Now() // retention counts from here until a record names it
		err = os.Chtimes(tmp, now, now)
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return 0, fmt.Errorf("write %s: %w", p, err)
	}
	return n, nil
}

// writeObject compresses body into f (the writer's goroutine only), syncs it, sets its mode and closes
// it, returning the bytes written.
func (s *Store) writeObject(f *os.File, body []byte) (int64, error) {
	defer f.Close()
	if err := f.Chmod(0o640); err != nil {
		return 0, err
	}
	if s.zw == nil { // the writer's own, reused: each new one allocates most of a megabyte
		s.zw, _ = gzip.NewWriterLevel(f, gzip.BestCompression)
	} else {
		s.zw.Reset(f)
	}
	zw := s.zw
	if _, err := zw.Write(body); err != nil {
		return 0, err
	}
	if err := zw.Close(); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return info.Size(), f.Close()
}

// Get returns the body the store keeps with sum. Its object is read
// without following links (the objects directory's own included), bounded
// before and after decompression (a planted gzip bomb is refused naming
// its file), and checked against sum: errors wrap ErrMissing, ErrCorrupt
// or ErrTooLarge and name the file.
func (s *Store) Get(sum [32]byte) ([]byte, error) {
	return GetObject(s.o.Dir, sum, s.o.MaxBody)
}

// Has reports whether the store holds the body with sum.
func (s *Store) Has(sum [32]byte) bool {
	info, err := os.Lstat(s.objectPath(sum))
	return err == nil && info.Mode().IsRegular()
}

// GetObject is Get for the store in dir, whose bodies are at most max
// bytes (0: DefaultMaxBody), for a reader (the evidence and replay
// commands) that does not open the store.
func GetObject(dir string, sum [32]byte, max int64) ([]byte, error) {
	if max <= 0 {
		max = DefaultMaxBody
	}
	p := ObjectPath(dir, sum)
	for _, d := range []string{dir, filepath.Join(dir, "objects"), filepath.Dir(p)} {
		info, err := os.Lstat(d)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w (no directory %s)", p, ErrMissing, d)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		if info.Mode()&fs.ModeSymlink != 0 || !info.IsDir() {
			return nil, fmt.Errorf("read %s: %s is %w", p, d, statefile.ErrSymlink)
		}
	}
	// A compressed body is never much larger than the body.
	z, err := statefile.ReadFile(p, max+max/8+1024)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", p, ErrMissing)
	}
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", p, ErrCorrupt, err)
	}
	body, err := io.ReadAll(io.LimitReader(zr, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", p, ErrCorrupt, err)
	}
	if int64(len(body)) > max {
		return nil, fmt.Errorf("%s: %w: decompresses past %d bytes", p, ErrTooLarge, max)
	}
	if SumOf(body) != sum {
		return nil, fmt.Errorf("%s: %w: its body's SHA-256 is %x", p, ErrCorrupt, SumOf(body))
	}
	return body, nil
}
