package audit

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/robotsgate/robotsgate/proxy/identity"
)

// Log writes one Record per line, as JSON (the same bytes as log/slog's
// JSON handler would write: no HTML escaping): docs/data-teams.md's audit
// log. It never shares its stream with operational logs, and a failed
// write is reported through its OnError, never turning a block into a
// pass. A Log is safe for concurrent use; each record goes out in one
// write.
//
// Every line is chained (docs/auditors.md): the Log sets each record's
// Prev to the hash of the line it wrote before (LineHash). Into a file,
// the chain continues from the file's last line when the file is not
// empty (a last line cut short by a crash is ended with "\n" first, and
// stays in the chain as the incomplete line it is); from the head
// remembered at Options.HeadPath when the file is new or empty (after a
// rotation while robotsgate was stopped); else from ZeroHead. A Reopen
// continues the chain in memory into the new file, unless that file
// already has lines: then from its last line. On stdout the chain starts
// at ZeroHead at every start, and there are no checkpoints (nothing can
// be read back or signed in place).
//
// With Options.Key, a file gets signed checkpoint lines (Checkpoint): at
// Open (event "start", signing the head it continues from), every
// Options.Interval if lines were written since the last one ("interval"),
// into the old file at a Reopen if lines were written since the last one
// ("rotate"), and at Close ("shutdown").
type Log struct {
	stdout  io.Writer           // where records go when the path is ""
	onError func(error, Record) // a failed write
	warn    func(msg string, args ...any)
	info    func(msg string, args ...any)
	// starting: OpenWith's first open of the file, which the run before
	// may have left without its shutdown checkpoint.
	starting bool
	now      func() time.Time
	ck       Checkpoints
	done     chan struct{} // closed by Close: ends the interval's goroutine

	mu    sync.Mutex
	path  string       // the file written to; "" for stdout
	f     *os.File     // the file written to; nil for stdout
	w     io.Writer    // f or stdout
	buf   bytes.Buffer // a record's line, reused under mu
	enc   *json.Encoder
	head  Hash // the hash of the last line written: the next line's prev
	lines int  // lines written since the last checkpoint
	key   *identity.Key
	// torn is the part of a line that a failed write left (a disk full
	// midway); the next write ends it first. nil: none.
	torn []byte
	// unchained writes lines without prev: for the benchmark that
	// measures what the chain costs.
	unchained bool
}

// Checkpoints are how a Log signs its chain; the zero value: not at all
// (prev is written whatever they are).
type Checkpoints struct {
	// Key signs checkpoints; nil: no checkpoints.
	Key *identity.Key
	// Interval is [evidence] checkpoint_interval; 0: checkpoints at
	// start, rotation and shutdown only.
	Interval time.Duration
	// HeadPath is where the chain's head is remembered
	// (<state_dir>/audit-head): written at every checkpoint, reopen and
	// close; read when the audit file is new or empty. "": nowhere.
	HeadPath string
}

// Options are how a Log writes besides its path.
type Options struct {
	// Stdout receives records when the path is ""; nil: os.Stdout.
	Stdout io.Writer
	// OnError is told of every failed write; nil: ignored.
	OnError func(error, Record)
	// Now is the clock of checkpoints; nil: time.Now.
	Now func() time.Time
	// Checkpoints sign the chain.
	Checkpoints Checkpoints
	// Warn is told, with slog's key-value pairs, what the operational log
	// should warn of (a start after a run that stopped uncleanly); nil:
	// nothing is.
	Warn func(msg string, args ...any)
	// Info is told, likewise, what the operational log should say at a
	// start: where the chain goes on from, in a new file; nil: nothing is.
	Info func(msg string, args ...any)
}

// Open opens the audit log: the file at path appended to (created with
// mode 0640), or stdout when path is "", with its chain and without
// checkpoints. onError is told of every failed write; nil: ignored.
func Open(path string, stdout io.Writer, onError func(error, Record)) (*Log, error) {
	return OpenWith(path, Options{Stdout: stdout, OnError: onError})
}

// OpenWith opens the audit log at path ("" = stdout) as o says, and
// writes its start checkpoint when o has a key and path is a file.
func OpenWith(path string, o Options) (*Log, error) {
	if o.OnError == nil {
		o.OnError = func(error, Record) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Warn == nil {
		o.Warn = func(string, ...any) {}
	}
	if o.Info == nil {
		o.Info = func(string, ...any) {}
	}
	l := &Log{stdout: o.Stdout, onError: o.OnError, warn: o.Warn, info: o.Info, now: o.Now, ck: o.Checkpoints, key: o.Checkpoints.Key, done: make(chan struct{})}
	l.enc = json.NewEncoder(&l.buf)
	l.enc.SetEscapeHTML(false)
	l.starting = true
	if err := l.Reopen(path); err != nil {
		return nil, err
	}
	l.starting = false
	// A start checkpoint that cannot be written is a failed write, as a
	// record's is: reported, and no reason not to start.
	l.mu.Lock()
	err := l.checkpoint(EventStart, false)
	l.mu.Unlock()
	if err != nil {
		l.onError(err, Record{Msg: MsgCheckpoint})
	}
	if l.key != nil && l.ck.Interval > 0 {
		go l.every(l.ck.Interval)
	}
	return l, nil
}

// every writes an interval checkpoint every d, until Close.
func (l *Log) every(d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
			l.mu.Lock()
			err := l.checkpoint(EventInterval, true)
			l.mu.Unlock()
			if err != nil {
				l.onError(err, Record{Msg: MsgCheckpoint})
			}
		}
	}
}

// SetKey sets the key later checkpoints are signed with (after a reload
// that rotated the [identity] key); nil: none. It does nothing to a Log
// opened without one.
func (l *Log) SetKey(k *identity.Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.key != nil && k != nil {
		l.key = k
	}
}

// Reopen (re)opens the audit log at path ("" = stdout), closing the file
// it wrote to before: after log rotation, or when audit.file changes on
// reload. It holds the lock that writes take, so every record goes whole
// to the old file or the new one; on failure the old one stays. With a
// key, the old file gets a rotate checkpoint first if lines were written
// since the last one.
func (l *Log) Reopen(path string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	// The old file is signed up to its end first: when path is the same
	// file (no rotation), its last line is then that checkpoint. A line
	// a failed write cut short is ended first, with or without a key, so
	// that the chain goes on from it into the new file.
	if err := l.endTorn(); err != nil {
		l.onError(err, Record{Msg: MsgCheckpoint})
	}
	if err := l.checkpoint(EventRotate, true); err != nil {
		l.onError(err, Record{Msg: MsgCheckpoint})
	}
	var f *os.File
	w := l.stdout
	head := l.head
	if path != "" {
		var err error
		if f, head, err = l.openFile(path); err != nil {
			return fmt.Errorf("open audit log %s: %w", path, err)
		}
		w = f
	}
	if l.f != nil {
		l.f.Close()
	}
	// A line still cut short is the old file's: when path is the same
	// file, openFile ended it, and the chain goes on from it.
	l.f, l.w, l.path, l.head, l.torn = f, w, path, head, nil
	l.rememberHead()
	return nil
}

// openFile opens the file at path for appending and returns the head its
// next line continues from: its last line's hash, or for an empty file
// the head remembered in memory (a Log already writing) or at HeadPath,
// or ZeroHead.
func (l *Log) openFile(path string) (*os.File, Hash, error) {
	// Its directory is made if missing (as the state directory is): a
	// config naming .robotsgate/audit.log works on a fresh clone.
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, Hash{}, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, Hash{}, err
	}
	t, err := tailOf(f)
	if err != nil {
		f.Close()
		return nil, Hash{}, err
	}
	if t.cut {
		l.warn("audit: the file's last line was cut short (a write a kill -9, a crash or a full disk left unfinished): it is ended and kept as it is; audit verify will report it as an incomplete record", "file", path)
	}
	h := t.head
	switch {
	case !t.empty && l.starting && l.key != nil: // a start, with evidence on
		l.warnUncleanStop(f, path)
	case !t.empty:
	case l.f != nil:
		h = l.head // a reopen: the file's chain goes on from memory
	case l.ck.HeadPath != "":
		var ok bool
		if h, ok, err = readHead(l.ck.HeadPath); err != nil {
			f.Close()
			return nil, Hash{}, fmt.Errorf("continue the chain: %w", err)
		}
		if l.starting && l.key != nil {
			if ok {
				l.info("audit: a new file: its chain continues from the head remembered in audit-head (the last line written before)", "file", path, "head_file", l.ck.HeadPath)
			} else {
				l.info("audit: a new chain starts: no earlier line in the file, and no audit-head", "file", path)
			}
		}
		if !ok {
			h = Hash{}
		}
	}
	return f, h, nil
}

// Write writes one record, setting its Prev.
func (l *Log) Write(r *Record) {
	l.mu.Lock()
	err := l.endTorn()
	if err == nil {
		if !l.unchained {
			r.Prev = l.prevHex()
		}
		err = l.writeLine(r)
	}
	l.mu.Unlock()
	if err != nil {
		l.onError(err, *r)
	}
}

// prevHex is the chain's head in hex, for a line's prev (ZeroHead for
// the zero Hash, the start of a chain). Under mu.
func (l *Log) prevHex() string {
	var b [2 * len(Hash{})]byte
	hex.Encode(b[:], l.head[:])
	return string(b[:])
}

// writeLine encodes v as one line, writes it and moves the chain's head
// to it. A line that could not be written leaves the head where it was.
// Under mu.
func (l *Log) writeLine(v any) error {
	l.buf.Reset()
	if err := l.enc.Encode(v); err != nil { // a line: Encode ends it with "\n"
		return err
	}
	if r, ok := v.(*Record); ok && l.buf.Len() > MaxLine {
		l.buf.Reset()
		if err := l.enc.Encode(clipped(r)); err != nil {
			return err
		}
		if l.buf.Len() > MaxLine { // clipped's bounds make it far shorter
			return fmt.Errorf("a record of %d bytes, cut, is still longer than %d", l.buf.Len(), MaxLine)
		}
	}
	if n, err := l.w.Write(l.buf.Bytes()); err != nil {
		if n > 0 {
			l.torn = append(l.torn[:0], l.buf.Bytes()[:n]...)
		}
		return err
	}
	if !l.unchained {
		l.head = LineHash(l.buf.Bytes())
	}
	l.lines++
	return nil
}

// Bounds of a record whose line would be longer than MaxLine.
const (
	clipString = 2 << 10 // bytes of each string
	clipList   = 16      // entries of each list
)

// clipped returns a copy of r fit for a line of at most MaxLine bytes
// (which verify reads, and a restart reads back): each string cut to
// clipString bytes, marked with how much was cut, and each list to
// clipList entries. A client's URL or User-Agent can be megabytes long
// (limits.max_header_bytes allows 16 MiB); even with every byte escaped
// as \u00XX, what is left is under 1 MiB.
func clipped(r *Record) *Record {
	c := *r
	for _, s := range []*string{&c.Client, &c.User, &c.Method, &c.URL, &c.Path, &c.Origin, &c.UserAgent,
		&c.Token, &c.RobotsURL, &c.Rule, &c.Reason, &c.Charged} {
		*s = clip(*s)
	}
	clipStrings := func(l []string) []string {
		out := make([]string, min(len(l), clipList))
		for i := range out {
			out[i] = clip(l[i])
		}
		return out
	}
	c.Agent, c.Purpose = clipStrings(c.Agent), clipStrings(c.Purpose)
	c.Copies = slices.Clone(c.Copies[:min(len(c.Copies), clipList)])
	for i := range c.Copies {
		c.Copies[i].URL = clip(c.Copies[i].URL)
	}
	return &c
}

// clip cuts s to at most clipString bytes, at a character's start, and
// says how many bytes were cut.
func clip(s string) string {
	if len(s) <= clipString {
		return s
	}
	n := clipString
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s…[%d bytes cut]", s[:n], len(s)-n)
}

// endTorn ends the part of a line a failed write left, with "\n", so
// that the next line starts a line of its own, and moves the chain's
// head to it (before the next line's prev is taken), as a start does with a last line cut short by a crash:
// verify names it as the incomplete record it is, and nothing after it.
// Under mu.
func (l *Log) endTorn() error {
	if l.torn == nil {
		return nil
	}
	if _, err := l.w.Write([]byte{'\n'}); err != nil {
		return fmt.Errorf("end a line cut short by a failed write: %w", err)
	}
	if !l.unchained {
		l.head = LineHash(l.torn)
	}
	l.torn = nil
	l.lines++ // a line of the chain, which the next checkpoint counts
	return nil
}

// checkpoint writes a checkpoint line of event to the file, if there is a
// key and a file; with ifLines, only if lines were written since the last
// one. Under mu.
func (l *Log) checkpoint(event string, ifLines bool) error {
	if l.key == nil || l.f == nil || ifLines && l.lines == 0 && l.torn == nil {
		return nil
	}
	if err := l.endTorn(); err != nil {
		return fmt.Errorf("write a %s checkpoint to %s: %w", event, l.path, err)
	}
	head := l.prevHex()
	c := Checkpoint{
		Time: Time(l.now()), Level: "INFO", Msg: MsgCheckpoint, Prev: head,
		Event: event, Lines: l.lines, Head: head, Sig: Sign(l.key.Private, head), Key: l.key.ID,
	}
	if event == EventStart {
		c.Lines = 0
	}
	if err := l.writeLine(&c); err != nil {
		return fmt.Errorf("write a %s checkpoint to %s: %w", event, l.path, err)
	}
	l.lines = 0
	l.rememberHead()
	return nil
}

// rememberHead writes the chain's head to HeadPath, if set. Under mu.
func (l *Log) rememberHead() {
	if l.ck.HeadPath == "" || l.f == nil {
		return
	}
	if err := writeHead(l.ck.HeadPath, l.path, l.head, l.now()); err != nil {
		l.onError(fmt.Errorf("remember the audit chain's head: %w", err), Record{Msg: MsgCheckpoint})
	}
}

// Close writes the shutdown checkpoint and closes the audit file, if
// any. Records written after Close are discarded.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.done:
		return nil
	default:
		close(l.done)
	}
	if l.f == nil {
		l.w = io.Discard
		return nil
	}
	cerr := l.checkpoint(EventShutdown, false)
	l.rememberHead()
	err := l.f.Close()
	l.f, l.w = nil, io.Discard
	if cerr != nil {
		return cerr
	}
	return err
}
