package audit

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/robotsgate/robotsgate/proxy/identity"
)

// Finding is one thing Verify found, at a file's line (Line 0: the file
// as a whole).
type Finding struct {
	File string
	Line int
	Msg  string
	// Note is a finding that does not make the log fail (a run stopped
	// uncleanly that left no unsigned line).
	Note bool
}

// String writes f as verify prints it: FILE:LINE: what (FILE: what, for
// the file as a whole).
func (f Finding) String() string {
	if f.Line == 0 {
		return f.File + ": " + f.Msg
	}
	return fmt.Sprintf("%s:%d: %s", f.File, f.Line, f.Msg)
}

// VerifyOptions are what Verify checks against.
type VerifyOptions struct {
	// Keys are the public keys checkpoints may be signed with.
	Keys []*identity.Key
	// From is the head (hex) the first line must continue from, the
	// final head of an earlier verify; "": the first line must start a
	// chain (ZeroHead).
	From string
	// Head is a head (hex) the chain must reach: the final head of an
	// earlier verify of the same log, kept where its writers cannot edit
	// it. Lines cut from the end since, right after a checkpoint, leave
	// a chain otherwise whole: only a head kept elsewhere tells. "": none.
	Head string
}

// Report is what Verify found: the files in chain order, what they hold,
// and every finding.
type Report struct {
	Files       []string // in the chain's order
	Lines       int
	Checkpoints int
	Signed      int      // the checkpoints whose signature verified
	Keys        []string // the ids of the keys that signed checkpoints
	First, Last string   // the first and last lines' times, as written
	Head        string   // the hash of the last line: a later verify's -from
	Findings    []Finding
}

// Intact reports whether nothing but notes was found.
func (r *Report) Intact() bool {
	return !slices.ContainsFunc(r.Findings, func(f Finding) bool { return !f.Note })
}

// Verify checks audit logs: plain or gzip files, given in any order (the
// chain orders them: each file's first prev is the hash of the file
// before it's last line). It checks every line's prev against the hash
// of the line before; each checkpoint's head, signature (with o.Keys)
// and count of lines within one run; that the first line starts a chain
// (prev o.From when given, else ZeroHead); and that every line is signed by a
// checkpoint of the run that wrote it. A file that cannot be opened is
// an error; everything found while reading is a Finding, and a log
// that could not be read whole is never Intact.
func Verify(names []string, o VerifyOptions) (*Report, error) {
	var from Hash
	if o.From != "" {
		var err error
		if from, err = ParseHash(o.From); err != nil {
			return nil, fmt.Errorf("-from: %w", err)
		}
	}
	files := make([]logFile, 0, len(names))
	for _, n := range names {
		lf, err := probe(n)
		if err != nil {
			return nil, err
		}
		files = append(files, lf)
	}
	// prev is from until a line is read: files without a line end where
	// they began, at -from's head.
	v := &verifier{keys: o.Keys, from: from, hasFrom: o.From != "", prev: from, rep: &Report{Head: from.String()}}
	if o.Head != "" {
		var err error
		if v.want, err = ParseHash(o.Head); err != nil {
			return nil, fmt.Errorf("-head: %w", err)
		}
		v.hasWant = true
	}
	for _, seg := range order(files, from, v.hasFrom) {
		if seg.same != "" { // read once, where the other copy is
			v.add(seg.file.name, 0, "the same lines as "+seg.same+": given twice (read once)", true)
			continue
		}
		v.linked = seg.linked && !v.cut
		v.cut = false
		if !seg.linked && seg.why != "" {
			v.add(seg.file.name, 1, seg.why, false)
		}
		if v.stopped {
			break
		}
		v.rep.Files = append(v.rep.Files, seg.file.name)
		if err := v.file(seg.file.name); err != nil {
			return nil, err
		}
	}
	v.end()
	if v.rep.Lines == 0 && len(names) > 0 {
		v.add(names[0], 0, "no line in the files given: nothing is verified", false)
	}
	v.checkEnd()
	v.rep.sortFindings()
	return v.rep, nil
}

// sortFindings puts the findings in the order of the lines they name:
// files in chain order (those outside it first), then lines. Some are
// found only later (an unclean stop when the next run's start is read).
func (r *Report) sortFindings() {
	at := make(map[string]int, len(r.Files))
	for i, f := range r.Files {
		at[f] = i + 1
	}
	slices.SortStableFunc(r.Findings, func(a, b Finding) int {
		if c := cmp.Compare(at[a.File], at[b.File]); c != 0 {
			return c
		}
		return cmp.Compare(a.Line, b.Line)
	})
}

// checkEnd reports how the chain ends: short of the head it must reach,
// or (a note) at a checkpoint other than a shutdown, after which lines
// may have been cut.
func (v *verifier) checkEnd() {
	if v.stopped || len(v.rep.Files) == 0 {
		return
	}
	last := v.rep.Files[len(v.rep.Files)-1]
	if v.hasWant && !v.reached {
		v.add(last, 0, fmt.Sprintf("no line given has hash %s, the head given with -head: lines were removed from the end since that head was taken, or the file that holds it was not given", v.want), false)
	}
	r := &v.run
	if r.since == 0 && r.last != nil && r.last.Event != EventShutdown && !v.hasWant && !v.cut {
		if r.last.Event == EventRotate {
			v.report(r.lastAt, true, "the chain ends at the rotate checkpoint at %s: it goes on in the file robotsgate reopened then, which is not given (give it too; or -head with the final head of an earlier verify to check that the chain reaches it)", r.lastAt)
		} else {
			v.report(r.lastAt, true, "the chain ends at the %s checkpoint at %s, not a shutdown: robotsgate is still writing this log, or lines after it were removed (verify cannot tell; give -head with the final head of an earlier verify to check that the chain reaches it)", r.last.Event, r.lastAt)
		}
	}
}

// segment is a file in the chain's order: linked when it continues the
// file before it; why says how it does not.
type segment struct {
	file   logFile
	linked bool
	why    string
	same   string // the file given before with the same lines: not read
}

// sameAs returns the index of a file before files[i] that holds the same
// lines (a rotated file given both plain and gzip), or -1: the same
// first prev and the same last line.
func sameAs(files []logFile, i int) int {
	f := files[i]
	if f.empty || !f.firstOK || !f.lastOK {
		return -1
	}
	return slices.IndexFunc(files[:i], func(g logFile) bool {
		return !g.empty && g.firstOK && g.lastOK && g.first == f.first && g.last == f.last
	})
}

// order puts files in the chain's order: from each file that continues
// no other given file (the chain's start, ZeroHead or from, first), the
// file that continues it, and so on. Empty files come last.
func order(files []logFile, from Hash, hasFrom bool) []segment {
	byFirst := map[Hash][]int{}
	lasts := map[Hash]bool{}
	for i, f := range files {
		if !f.empty && f.firstOK {
			byFirst[f.first] = append(byFirst[f.first], i)
		}
		if !f.empty && f.lastOK {
			lasts[f.last] = true
		}
	}
	used := make([]bool, len(files))
	var segs, same []segment
	for i := range files {
		if j := sameAs(files, i); j >= 0 {
			same = append(same, segment{file: files[i], same: files[j].name})
			used[i] = true
		}
	}
	follow := func(i int, why string) {
		segs = append(segs, segment{file: files[i], why: why})
		used[i] = true
		for files[i].lastOK {
			next := -1
			for _, j := range byFirst[files[i].last] {
				if !used[j] {
					next = j
					break
				}
			}
			if next < 0 {
				return
			}
			segs = append(segs, segment{file: files[next], linked: true})
			used[next], i = true, next
		}
	}
	starts := func(pick func(f logFile) bool, why func(f logFile) string) {
		for i, f := range files {
			if !used[i] && !f.empty && pick(f) {
				w := why(f)
				if len(segs) == 0 {
					w = "" // the first line's prev is the verifier's to check
				}
				follow(i, w)
			}
		}
	}
	ownChain := func(logFile) string {
		return "starts a chain of its own (its first line's prev is 64 zeros or -from): the files given hold more than one chain"
	}
	if hasFrom { // the file continuing -from first: its first line is checked against it
		starts(func(f logFile) bool { return f.firstOK && f.first == from }, ownChain)
	}
	starts(func(f logFile) bool { return f.firstOK && f.first == Hash{} }, ownChain)
	starts(func(f logFile) bool { return !f.firstOK || !lasts[f.first] }, func(f logFile) string {
		if !f.firstOK {
			return "its first line does not read: where it belongs in the chain is unknown"
		}
		return fmt.Sprintf("does not continue any file given: its first line's prev %s is no given file's last line (a file missing, or lines removed between files)", f.first)
	})
	starts(func(logFile) bool { return true }, func(f logFile) string { // a loop, or a second file continuing the same one
		return fmt.Sprintf("continues the same line (%s) as another file given: two files claim one place in the chain", f.first)
	})
	for i, f := range files {
		if !used[i] {
			segs = append(segs, segment{file: f, linked: true})
		}
	}
	return append(segs, same...)
}

// verifier is Verify's state through the chain's lines.
type verifier struct {
	keys    []*identity.Key
	from    Hash
	hasFrom bool
	rep     *Report
	linked  bool // the file being read continues the line before
	cut     bool // a file was not read to its end
	stopped bool // MaxFindings were found: no more is read
	want    Hash // a line the chain must reach (-head)
	hasWant bool
	reached bool // want was read

	started bool // a line was read
	prev    Hash // the hash of the line before
	// back are the two lines before: for a line whose prev names the
	// line before the line before (that line was inserted).
	back [2]at
	// swappedPrev is accepted as the next line's prev: a swapped pair
	// was found and reported.
	swappedPrev *Hash
	broken      *chainBreak // a break whose kind the next checkpoint tells
	fork        *fork       // two lines continuing one: the next line tells which was inserted
	run         runState
	keysUsed    map[string]bool
	lastTime    []byte // the last line's time, as written
	// recounted is the last checkpoint found with its count altered (its
	// head signed, the chain unbroken): its line's hash then breaks the
	// chain at the next line, which is that same edit.
	recounted at
}

// at is a line's place and hash.
type at struct {
	file string
	line int
	hash Hash
}

func (a at) String() string { return fmt.Sprintf("%s:%d", a.file, a.line) }

// chainBreak is a line whose prev names no line seen: the line before
// it was altered, or lines were removed between the two.
type chainBreak struct {
	before, after at
	prev          Hash // what after's prev names
}

// runState is what one run of robotsgate wrote since its last checkpoint.
type runState struct {
	last     *Checkpoint // the last checkpoint; nil before the first
	lastAt   at
	since    int // records since it
	unsigned at  // the first of them
}

// MaxFindings bounds the findings Verify keeps: past it, Verify stops
// reading (a file of a million bad lines, or a gzip bomb of empty lines
// that a few KiB decompress to, would otherwise hold a finding for each
// in memory, and take as long to report as to read).
const MaxFindings = 1000

// full reports whether MaxFindings are kept: add keeps no more.
func (v *verifier) full() bool { return len(v.rep.Findings) >= MaxFindings }

func (v *verifier) add(file string, line int, msg string, note bool) {
	if v.full() {
		return
	}
	v.rep.Findings = append(v.rep.Findings, Finding{File: file, Line: line, Msg: msg, Note: note})
}

// file reads one file's lines through the chain.
func (v *verifier) file(name string) error {
	lr, _, err := openLines(name)
	if err != nil {
		return err
	}
	defer lr.Close()
	for n := 1; ; n++ {
		line, ended, err := lr.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			msg := err.Error()
			if lr.gz != nil && errors.Is(err, io.ErrUnexpectedEOF) {
				msg = "the gzip stream ends early: the file was cut short (a copy or a compression not finished, or truncated)"
			}
			v.add(name, n, "cannot be read on: "+msg, false)
			v.cut = true
			return nil
		}
		v.line(at{file: name, line: n, hash: LineHash(line)}, line, ended)
		v.linked = true
		if v.full() {
			v.rep.Findings = append(v.rep.Findings, Finding{File: name, Line: n,
				Msg: fmt.Sprintf("%d findings: verify stops here, and does not read the rest of this file nor the files after it", MaxFindings)})
			v.cut, v.stopped = true, true
			return nil
		}
	}
}
