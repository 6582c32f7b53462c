package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Log writes one Record per line, as JSON (the same bytes as log/slog's
// JSON handler would write: no HTML escaping): docs/data-teams.md's audit log. It
// never shares its stream with operational logs, and a failed write is
// reported through its OnError, never turning a block into a pass. A Log
// is safe for concurrent use; each record goes out in one write.
type Log struct {
	stdout  io.Writer           // where records go when the path is ""
	onError func(error, Record) // a failed write

	mu  sync.Mutex
	f   *os.File     // the file written to; nil for stdout
	w   io.Writer    // f or stdout
	buf bytes.Buffer // a record's line, reused under mu
	enc *json.Encoder
}

// Open opens the audit log: the file at path appended to (created with
// mode 0640), or stdout when path is "". onError is told of every failed
// write; nil: ignored.
func Open(path string, stdout io.Writer, onError func(error, Record)) (*Log, error) {
	if onError == nil {
		onError = func(error, Record) {}
	}
	l := &Log{stdout: stdout, onError: onError}
	l.enc = json.NewEncoder(&l.buf)
	l.enc.SetEscapeHTML(false)
	if err := l.Reopen(path); err != nil {
		return nil, err
	}
	return l, nil
}

// Reopen (re)opens the audit log at path ("" = stdout), closing the file
// it wrote to before: after log rotation, or when audit.file changes on
// reload. It holds the lock that writes take, so every record goes whole
// to the old file or the new one; on failure the old one stays.
func (l *Log) Reopen(path string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var f *os.File
	w := l.stdout
	if path != "" {
		// Its directory is made if missing (as the state directory is):
		// a config naming .robotsgate/audit.log works on a fresh clone.
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return fmt.Errorf("open audit log: %w", err)
		}
		var err error
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640); err != nil {
			return fmt.Errorf("open audit log: %w", err)
		}
		w = f
	}
	if l.f != nil {
		l.f.Close()
	}
	l.f, l.w = f, w
	return nil
}

// Write writes one record.
func (l *Log) Write(r *Record) {
	l.mu.Lock()
	l.buf.Reset()
	err := l.enc.Encode(r) // a line: Encode ends it with "\n"
	if err == nil {
		_, err = l.w.Write(l.buf.Bytes())
	}
	l.mu.Unlock()
	if err != nil {
		l.onError(err, *r)
	}
}

// Close closes the audit file, if any.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f, l.w = nil, io.Discard
	return err
}
