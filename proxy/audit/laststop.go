package audit

import (
	"bytes"
	"errors"
	"io"
	"os"
)

// lastStopScan bounds how much of an audit file's end a start reads to
// find how the run before stopped: its last checkpoint is within a
// checkpoint_interval's lines of the end.
const lastStopScan = 16 << 20

// lastStop is what an audit file's end says of the run that wrote it
// last.
type lastStop struct {
	// checkpoint: a checkpoint was found in the part read (evidence was
	// on); clean: the last line is a shutdown checkpoint.
	checkpoint, clean bool
	// after is the lines after the last checkpoint; line is the first of
	// them (the checkpoint's own line when none), 0 when not known (the
	// file is longer than the part read).
	after, line int
}

// lastStopOf reads how the run that wrote f, of size bytes, stopped: its
// last line a shutdown checkpoint, or not (kill -9, a crash). It reads at
// most lastStopScan bytes from the end.
func lastStopOf(f *os.File, size int64) (lastStop, error) {
	n := min(size, lastStopScan)
	b := make([]byte, n)
	if _, err := f.ReadAt(b, size-n); err != nil && !errors.Is(err, io.EOF) {
		return lastStop{}, err
	}
	whole := n == size
	b = bytes.TrimSuffix(b, []byte("\n"))
	var s lastStop
	for rest := b; ; s.after++ {
		j := bytes.LastIndexByte(rest, '\n')
		if j < 0 && !whole {
			break // a line cut by the part read
		}
		line := rest[j+1:]
		if bytes.Contains(line, checkpointMsg) {
			if ck, ok, err := parseCheckpoint(line); err == nil && ok {
				s.checkpoint, s.clean = true, s.after == 0 && ck.Event == EventShutdown
				break
			}
		}
		if j < 0 {
			break
		}
		rest = rest[:j]
	}
	if whole && s.checkpoint {
		s.line = bytes.Count(b, []byte("\n")) + 1 - s.after // the checkpoint's line
		if s.after > 0 {
			s.line++
		}
	}
	return s, nil
}

// warnUncleanStop warns, on the operational log, of a file whose last run
// stopped without its shutdown checkpoint: verify reports an unclean stop
// there. Only for a file with checkpoints.
func (l *Log) warnUncleanStop(f *os.File, path string) {
	info, err := f.Stat()
	if err != nil {
		return
	}
	s, err := lastStopOf(f, info.Size())
	if err != nil || !s.checkpoint || s.clean {
		return
	}
	args := []any{"file", path}
	if s.line > 0 {
		args = append(args, "line", s.line)
	}
	if s.after == 0 {
		l.warn("audit: the run before stopped without its shutdown checkpoint (kill -9, a crash), right after a checkpoint: no line is unsigned, and audit verify will note an unclean stop there", args...)
		return
	}
	args = append(args, "unsigned_lines", s.after)
	l.warn("audit: the run before stopped without its shutdown checkpoint (kill -9, a crash): the unsigned_lines lines it wrote after its last checkpoint, the first at line, were never signed by it; audit verify will report an unclean stop there (this run's start checkpoint signs them as they are)", args...)
}
