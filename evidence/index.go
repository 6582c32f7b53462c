package evidence

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"
)

// indexName is the index's file in the store's directory.
const indexName = "index.jsonl"

// MaxIndexLine bounds one line of the index: a longer one is reported and
// skipped, never read whole.
const MaxIndexLine = 16 << 10

// Entry is one line of the index: a copy kept, as fetched.
type Entry struct {
	URL     string    `json:"url"`
	SHA256  string    `json:"sha256"` // hex; "" for an answer with no body
	Fetched time.Time `json:"fetched"`
	Status  int       `json:"status"`
	For     string    `json:"for,omitempty"` // the URL asked for, when a redirect made URL differ
}

// Copy returns e as a Copy (its sum checked by DecodeEntry).
func (e *Entry) Copy() Copy {
	c := Copy{URL: e.URL, For: e.For, Fetched: e.Fetched, Status: e.Status}
	if e.SHA256 != "" {
		hex.Decode(c.Sum[:], []byte(e.SHA256))
	}
	return c
}

// entryOf is the index line of c.
func entryOf(c Copy) Entry {
	return Entry{URL: c.URL, SHA256: c.Hex(), Fetched: c.Fetched.UTC(), Status: c.Status, For: c.For}
}

// DecodeEntry decodes one index line, refusing what the store would not
// have written: unknown fields, no URL, a sha256 that is not 64 lower-case
// hex digits or "", no fetch time, a status outside 0-999.
func DecodeEntry(line []byte) (Entry, error) {
	var e Entry
	if len(line) > MaxIndexLine {
		return e, fmt.Errorf("line of %d bytes, more than %d", len(line), MaxIndexLine)
	}
	d := json.NewDecoder(bytes.NewReader(line))
	d.DisallowUnknownFields()
	if err := d.Decode(&e); err != nil {
		return Entry{}, fmt.Errorf("not an index entry: %v", err)
	}
	if d.More() {
		return Entry{}, errors.New("not an index entry: more after the object")
	}
	switch {
	case e.URL == "" || strings.ContainsAny(e.URL, " \t\r\n"):
		return Entry{}, fmt.Errorf("bad url %q", e.URL)
	case strings.ContainsAny(e.For, " \t\r\n") || e.For == e.URL:
		return Entry{}, fmt.Errorf("bad for %q", e.For)
	case e.SHA256 != "" && (!isHexSum(e.SHA256) || e.SHA256 == strings.Repeat("0", 64)):
		return Entry{}, fmt.Errorf("bad sha256 %q", e.SHA256)
	case e.Fetched.IsZero():
		return Entry{}, errors.New("no fetched time")
	case e.Status < 0 || e.Status > 999:
		return Entry{}, fmt.Errorf("bad status %d", e.Status)
	}
	return e, nil
}

// isHexSum reports whether s is a SHA-256 in lower-case hex.
func isHexSum(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ScanIndex reads an index from r (named name in what it reports), handing
// each good entry to fn; each bad line (too long, not JSON, not an entry)
// is handed to bad with its line number and skipped. It stops at the first
// error of r or of fn.
func ScanIndex(r io.Reader, name string, fn func(Entry) error, bad func(line int, err error)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, long, err := readLine(br)
		if len(line) > 0 || long {
			switch e, derr := DecodeEntry(line); {
			case long:
				bad(n, fmt.Errorf("%s:%d: line longer than %d bytes", name, n, MaxIndexLine))
			case derr != nil:
				bad(n, fmt.Errorf("%s:%d: %w", name, n, derr))
			default:
				if ferr := fn(e); ferr != nil {
					return ferr
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
	}
}

// readLine reads one line without its newline, at most MaxIndexLine bytes
// of it: long reports a longer one, whose rest is skipped.
func readLine(br *bufio.Reader) (line []byte, long bool, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		if !long {
			if len(line)+len(frag) > MaxIndexLine+1 {
				long, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), long, err
	}
}

// index is the store's open index: appended to by the writer, a line for
// each change of a URL's copy (its body or status), so that it grows with
// what sites change, not with how often they are fetched. It remembers
// the last entry of at most maxLast URLs (any one of them forgotten when
// more come): a copy whose URL it forgot is indexed again, unchanged,
// which costs a line and loses nothing.
type index struct {
	f    *os.File
	name string
	last map[string]lastEntry
	max  int // URLs remembered at most: maxLast
}

// maxLast bounds the URLs whose last entry an index remembers: about 8
// MiB of them.
const maxLast = 1 << 16

// lastEntry is what an index remembers of a URL's last entry.
type lastEntry struct {
	sum     string // its sha256 (hex; "" for no body)
	status  int
	fetched time.Time
}

// same reports whether e names the copy l remembers.
func (l lastEntry) same(e *Entry) bool { return l.sum == e.SHA256 && l.status == e.Status }

// remember makes e its URL's last entry, unless a later one is; it
// forgets another URL when maxLast are remembered.
func (x *index) remember(e *Entry) {
	l, ok := x.last[e.URL]
	if ok && e.Fetched.Before(l.fetched) {
		return
	}
	if !ok && len(x.last) >= x.max {
		for u := range x.last { // any one: map order
			delete(x.last, u)
			break
		}
	}
	x.last[e.URL] = lastEntry{sum: e.SHA256, status: e.Status, fetched: e.Fetched}
}

// openIndex opens (creating, 0640) the index at path for appending, without
// following a link, and reads it; a bad line is logged with its file and
// line and skipped. A last line cut short (a crash mid-write) is ended, so
// that the next entry starts a line of its own.
func openIndex(path string, log *slog.Logger) (*index, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND|noFollow, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	info, err := f.Stat()
	if err == nil && !info.Mode().IsRegular() {
		err = fmt.Errorf("%w", fs.ErrInvalid)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s: not a regular file: %v", path, err)
	}
	x := &index{f: f, name: path, last: map[string]lastEntry{}, max: maxLast}
	err = ScanIndex(f, path, func(e Entry) error {
		x.remember(&e)
		return nil
	}, func(_ int, err error) {
		log.Warn("evidence store: index line skipped", "err", err)
	})
	if err == nil && info.Size() > 0 {
		err = endLine(f, info.Size())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return x, nil
}

// endLine writes a newline if the file of size does not end with one.
func endLine(f *os.File, size int64) error {
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, size-1); err != nil {
		return fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if b[0] != '\n' {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			return fmt.Errorf("write %s: %w", f.Name(), err)
		}
	}
	return nil
}

// add appends c's entry unless its URL's last entry names the same copy
// (a refetch that found it unchanged, or a restart reading it again).
func (x *index) add(c Copy) error {
	e := entryOf(c)
	if l, ok := x.last[e.URL]; ok && l.same(&e) {
		return nil
	}
	b, err := marshalEntry(e)
	if err != nil {
		return err
	}
	if _, err := x.f.Write(b); err != nil {
		return fmt.Errorf("write %s: %w", x.name, err)
	}
	x.remember(&e)
	return nil
}

// marshalEntry is e's index line, its newline included.
func marshalEntry(e Entry) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxIndexLine {
		return nil, fmt.Errorf("index entry of %d bytes for %.100s: more than %d", len(b), e.URL, MaxIndexLine)
	}
	return append(b, '\n'), nil
}

// close syncs and closes the index.
func (x *index) close() error {
	serr := x.f.Sync()
	if err := x.f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", x.name, err)
	}
	if serr != nil {
		return fmt.Errorf("sync %s: %w", x.name, serr)
	}
	return nil
}

// InForce returns the copy of url the store in dir had indexed as in
// force at at: the entry fetched last at or before at (ok false when none
// was). Bad index lines go to bad and are skipped.
func InForce(dir, url string, at time.Time, bad func(line int, err error)) (e Entry, ok bool, err error) {
	path := dir + string(os.PathSeparator) + indexName
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return Entry{}, false, fmt.Errorf("open evidence index: %w", err)
	}
	defer f.Close()
	err = ScanIndex(f, path, func(x Entry) error {
		if (x.URL == url || x.For == url) && !x.Fetched.After(at) && (!ok || !x.Fetched.Before(e.Fetched)) {
			e, ok = x, true
		}
		return nil
	}, bad)
	return e, ok, err
}
