package audit

import (
	"fmt"
	"slices"

	"github.com/robotsgate/robotsgate/proxy/identity"
)

// line checks one line: its place in the chain, and a checkpoint's
// signature and count.
func (v *verifier) line(a at, b []byte, ended bool) {
	li, err := parseLine(b)
	v.rep.Lines++
	v.reached = v.reached || v.hasWant && a.hash == v.want
	if len(li.time) > 0 {
		if v.rep.First == "" {
			v.rep.First = string(li.time)
		}
		v.lastTime = append(v.lastTime[:0], li.time...)
	}
	switch {
	case err != nil && !ended:
		v.report(a, false, "an incomplete record: the file ends in the middle of this line (a write cut short)")
	case err != nil:
		v.report(a, false, "an incomplete or unreadable record: %v", err)
	case !v.started:
		v.checkStart(a, li.prev)
	case !v.linked: // order reported it: a new part of the chain
		v.end()
		v.run, v.broken, v.swappedPrev, v.fork = runState{}, nil, nil, nil
	default:
		v.checkPrev(a, li.prev)
	}
	switch r := &v.run; {
	case err == nil && li.ck != nil:
		v.checkpoint(a, li.ck)
	case err == nil && r.last != nil && r.last.Event == EventShutdown:
		// Every run begins with a start checkpoint: no run wrote this.
		v.report(a, false, "a line robotsgate did not write, inserted after the run's shutdown: it follows the shutdown checkpoint at %s with no start checkpoint between (every run begins with one)", r.lastAt)
	default:
		r.record(a)
	}
	v.started = true
	v.prev = a.hash
	v.back[1], v.back[0] = v.back[0], a
}

// report adds a finding at where; each at among args is written as
// "line N" in where's file, "FILE:N" in another.
func (v *verifier) report(where at, note bool, format string, args ...any) {
	if v.full() {
		return
	}
	for i, a := range args {
		if x, ok := a.(at); ok {
			args[i] = x.rel(where.file)
		}
	}
	v.add(where.file, where.line, fmt.Sprintf(format, args...), note)
}

// rel is a's place as seen from file: "line N" there, "FILE:N" in
// another file.
func (a at) rel(file string) string {
	if a.file == file {
		return fmt.Sprintf("line %d", a.line)
	}
	return a.String()
}

func lineCount(n int) string {
	if n == 1 {
		return "1 line"
	}
	return fmt.Sprintf("%d lines", n)
}

// record counts a record of the run.
func (r *runState) record(a at) {
	if r.since == 0 {
		r.unsigned = a
	}
	r.since++
}

// checkStart checks the first line's prev: -from exactly when given
// (a new chain there is a log wiped and started again, which does not
// continue the head kept), else ZeroHead.
func (v *verifier) checkStart(a at, prev Hash) {
	switch {
	case v.hasFrom && prev == v.from:
	case v.hasFrom && prev == Hash{}:
		v.report(a, false, "the first line starts a new chain (its prev is 64 zeros), not -from's %s: the files given do not continue the head given (a log wiped or replaced, and started again)", v.from)
	case v.hasFrom:
		v.report(a, false, "the first line continues %s, not -from's %s: the files given do not continue the head given", prev, v.from)
	case prev == Hash{}:
	default:
		v.report(a, false, "the first line does not start a chain: its prev is %s, not 64 zeros (give the file before it too, or -from %s if an earlier verify ended at that head)", prev, prev)
	}
}

// checkPrev checks that a's prev is the hash of the line before, and
// names what a mismatch shows: an inserted line, a swapped pair, or a
// break that the next checkpoint's count tells as an altered line or
// lines removed.
func (v *verifier) checkPrev(a at, prev Hash) {
	if v.resolveFork(a, prev) || prev == v.prev {
		return
	}
	if v.swappedPrev != nil && prev == *v.swappedPrev {
		v.swappedPrev = nil // the swapped pair's second half, reported
		return
	}
	before, twoBack := v.back[0], v.back[1]
	if twoBack.line != 0 && prev == twoBack.hash {
		if br := v.broken; br != nil && br.after == before && br.prev == a.hash {
			v.report(before, false, "lines in the wrong order: %s was written before this line (its prev names %s, and this line's prev names it)", a, twoBack)
			v.broken, v.swappedPrev = nil, &before.hash
			return
		}
		if br := v.broken; br != nil && br.after == before {
			v.broken = nil // the inserted line's own prev
		}
		// Two lines continue twoBack: the line after tells which one
		// the chain goes on from.
		v.fork = &fork{first: before, second: a, parent: twoBack}
		return
	}
	v.flushBreak()
	v.broken = &chainBreak{before: before, after: a, prev: prev}
}

// fork is two lines in a row whose prevs name the same line: one of the
// two was inserted.
type fork struct{ first, second, parent at }

// resolveFork tells a fork's inserted line by the line after it (a, with
// prev): the chain goes on from the other one. It reports whether a's
// prev is thereby accounted for.
func (v *verifier) resolveFork(a at, prev Hash) bool {
	f := v.fork
	if f == nil {
		return false
	}
	v.fork = nil
	inserted, kept := f.first, f.second
	if prev == f.first.hash && a.line != 0 {
		inserted, kept = f.second, f.first
	}
	switch {
	case a.line == 0: // no line after
		v.report(f.first, false, "an inserted line: this line and %s both continue %s, and no line follows to tell which one was inserted", f.second, f.parent)
	default:
		v.report(inserted, false, "an inserted line: this line's prev names %s, as %s's does, and the chain goes on from %s", f.parent, kept, kept)
	}
	if v.run.since > 0 {
		v.run.since-- // not the run's
	}
	return prev == f.first.hash
}

// flushBreak reports a break that no checkpoint's count told apart.
func (v *verifier) flushBreak() {
	if br := v.broken; br != nil && br.before == v.recounted {
		v.report(br.after, false, "the chain breaks: this line's prev %s is not the hash of %s, the checkpoint whose count was altered", br.prev, br.before)
		v.broken = nil
	} else if br != nil {
		v.report(br.after, false, "the chain breaks: this line's prev %s is not the hash of %s, the line before: that line was altered, or lines were removed between the two", br.prev, br.before)
		v.broken = nil
	}
}

// checkpoint checks a checkpoint: its head, its signature, and its count
// of the run's lines; a start after a run that did not end with a
// shutdown checkpoint is an unclean stop.
func (v *verifier) checkpoint(a at, ck *Checkpoint) {
	v.rep.Checkpoints++
	if ck.Head != ck.Prev {
		v.report(a, false, "a checkpoint whose head %s is not its prev %s", ck.Head, ck.Prev)
	}
	signed := v.checkSig(a, ck) && ck.Head == ck.Prev
	r := &v.run
	switch {
	case ck.Event == EventStart:
		if ck.Lines != 0 {
			v.report(a, false, "a start checkpoint counting %d lines: want 0", ck.Lines)
		}
		v.flushBreak()
		if r.last != nil && r.last.Event != EventShutdown {
			v.uncleanStop(a)
		}
	case r.last == nil: // the run began before the lines given: nothing to count from
		v.flushBreak()
	case r.last.Event == EventShutdown:
		v.flushBreak()
		v.report(a, false, "a %s checkpoint after the shutdown at %s with no start checkpoint between: a run's start is missing", ck.Event, r.lastAt)
	default:
		v.count(a, ck, signed)
	}
	v.run = runState{last: ck, lastAt: a}
}

// count checks a checkpoint's lines against the run's records since its
// checkpoint before, and tells a break before it apart: with the count
// right, a line was altered; with lines missing, lines were removed. With
// the chain unbroken up to a checkpoint whose head is signed, a count
// that disagrees was itself altered.
func (v *verifier) count(a at, ck *Checkpoint, signed bool) {
	diff := ck.Lines - v.run.since
	br := v.broken
	v.broken = nil
	switch {
	case br != nil && diff == 0 && br.before == v.recounted:
		// the checkpoint whose count was altered, reported with it
	case br == nil && diff != 0 && signed:
		v.report(a, false, "a checkpoint whose count was altered: it counts %d lines since %s, and the chain there is unbroken with %d, up to a head its signature verifies (the edit changed this line's hash too: the chain breaks at the line after it)", ck.Lines, v.run.lastAt, v.run.since)
		v.recounted = a
	case br != nil && diff == 0:
		v.report(br.before, false, "an altered line: its hash no longer matches the prev of %s, the line after it (the checkpoint at %s counts the lines right)", br.after, a)
	case br != nil && diff > 0:
		v.report(br.after, false, "%s removed between %s and this line (the checkpoint at %s counts %d lines since %s; %d are here)", lineCount(diff), br.before, a, ck.Lines, v.run.lastAt, v.run.since)
	case br != nil:
		v.broken = br
		v.flushBreak()
		fallthrough
	case diff < 0:
		v.report(a, false, "%s more than the checkpoint counts since %s (it counts %d, %d are here): lines were inserted", lineCount(-diff), v.run.lastAt, ck.Lines, v.run.since)
	case diff > 0:
		v.report(a, false, "%s missing since the checkpoint at %s (it counts %d, %d are here): lines were removed", lineCount(diff), v.run.lastAt, ck.Lines, v.run.since)
	}
}

// uncleanStop reports a run that ended without a shutdown checkpoint,
// before the start checkpoint at a.
func (v *verifier) uncleanStop(a at) {
	r := &v.run
	if r.since == 0 {
		v.report(a, true, "the run before this start stopped without a shutdown checkpoint (kill -9 or a crash) after its checkpoint at %s; no line is unsigned", r.lastAt)
		return
	}
	v.report(r.unsigned, false, "an unclean stop: %s to %s (%s), after the checkpoint at %s, were never signed by the run that wrote them: it stopped without a shutdown checkpoint (kill -9, a crash) and the next run's start at %s signed them as it found them",
		r.unsigned, v.back[0], lineCount(r.since), r.lastAt, a)
}

// checkSig checks a checkpoint's signature with the key it names, and
// reports whether it verified.
func (v *verifier) checkSig(a at, ck *Checkpoint) bool {
	i := slices.IndexFunc(v.keys, func(k *identity.Key) bool { return k.ID == ck.Key })
	if i < 0 {
		ids := make([]string, len(v.keys))
		for j, k := range v.keys {
			ids[j] = k.ID
		}
		v.report(a, false, "a checkpoint signed with key %s, which is not among the keys given %v: pass that key's file with -key", ck.Key, ids)
		return false
	}
	if !VerifySig(v.keys[i].Public, ck.Head, ck.Sig) {
		v.report(a, false, "a checkpoint whose signature is not key %s's signature of its head", ck.Key)
		return false
	}
	v.rep.Signed++
	if v.keysUsed == nil {
		v.keysUsed = map[string]bool{}
	}
	if !v.keysUsed[ck.Key] {
		v.keysUsed[ck.Key] = true
		v.rep.Keys = append(v.rep.Keys, ck.Key)
	}
	return true
}

// end reports what the last lines read leave open: a break no checkpoint
// told apart, and lines no checkpoint signs yet.
func (v *verifier) end() {
	v.resolveFork(at{}, Hash{})
	v.flushBreak()
	v.rep.Head = v.prev.String()
	v.rep.Last = string(v.lastTime)
	r := &v.run
	switch {
	case r.since == 0, v.cut: // a file not read to its end says so
	case r.last == nil:
		v.report(r.unsigned, false, "an unsigned tail: %s to %s (%s), with no checkpoint before them in the files given, are not signed yet: a running robotsgate with [evidence] on signs them within checkpoint_interval (verify again then); with [evidence] off (or audit to stdout) nothing ever signs them", r.unsigned, v.back[0], lineCount(r.since))
	default:
		v.report(r.unsigned, false, "an unsigned tail: %s to %s (%s), after the last checkpoint at %s, are not signed yet: a running robotsgate signs them within checkpoint_interval (verify again then); a robotsgate that is not running stopped without a shutdown checkpoint (kill -9, a crash)",
			r.unsigned, v.back[0], lineCount(r.since), r.lastAt)
	}
}
