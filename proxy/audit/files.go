package audit

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// logFile is one file given to Verify, as its probe found it.
type logFile struct {
	name  string
	gz    bool
	empty bool
	// first is the prev of its first line; firstOK false when that line
	// has none that reads.
	first   Hash
	firstOK bool
	last    Hash // the hash of its last line
	// lastOK false: its last line is not known (a line too long, or a
	// gzip file whose probe stopped at a line no robotsgate writes).
	lastOK bool
}

// lineReader reads an audit file line by line, gzip or plain (told by
// its first bytes, not its name), each line at most MaxLine bytes.
type lineReader struct {
	f  *os.File
	gz *gzip.Reader
	r  *bufio.Reader
}

// errLongLine: a line longer than MaxLine, which cannot be read on.
var errLongLine = fmt.Errorf("a line longer than %d bytes: not an audit log robotsgate wrote, and the rest of the file is not read", MaxLine)

// OpenFile opens an audit log file given to a command (verify, replay,
// evidence -audit) for reading. It must be a regular file (a link to one
// is followed): it is opened without blocking, so that a FIFO given by
// mistake, with no writer, is refused at once rather than waited on for
// ever, and a device is refused rather than read without end.
func OpenFile(name string) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	switch {
	case err != nil:
	case info.IsDir():
		err = fmt.Errorf("%s: is a directory", name)
	case !info.Mode().IsRegular():
		err = fmt.Errorf("%s: not a regular file (%s)", name, info.Mode().Type())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openLines opens the file at name for reading its lines (OpenFile).
func openLines(name string) (*lineReader, bool, error) {
	f, err := OpenFile(name)
	if err != nil {
		return nil, false, err
	}
	lr := &lineReader{f: f}
	br := bufio.NewReaderSize(f, 64<<10)
	magic, _ := br.Peek(2)
	var src io.Reader = br
	gz := bytes.Equal(magic, []byte{0x1f, 0x8b})
	if gz {
		if lr.gz, err = gzip.NewReader(br); err != nil {
			f.Close()
			return nil, true, fmt.Errorf("%s: gzip: %w", name, err)
		}
		src = lr.gz
	}
	lr.r = bufio.NewReaderSize(src, MaxLine+1)
	return lr, gz, nil
}

// next returns the next line without its "\n", whether it had one, or
// io.EOF after the last. The line is valid until the next call.
func (lr *lineReader) next() (line []byte, ended bool, err error) {
	line, err = lr.r.ReadSlice('\n')
	switch {
	case err == nil:
		return line[:len(line)-1], true, nil
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, false, errLongLine
	case errors.Is(err, io.EOF) && len(line) > 0:
		return line, false, nil
	}
	return nil, false, err
}

func (lr *lineReader) Close() error { return lr.f.Close() }

// probe reads what ordering the files needs: the prev of name's first
// line and the hash of its last. A plain file's last line is read from
// its end; a gzip file is read through.
func probe(name string) (logFile, error) {
	lf := logFile{name: name}
	lr, gz, err := openLines(name)
	if err != nil {
		return lf, err
	}
	defer lr.Close()
	lf.gz = gz
	line, _, err := lr.next()
	if errors.Is(err, io.EOF) {
		lf.empty = true
		return lf, nil
	}
	if err != nil {
		return lf, nil // Verify reports it, where it is
	}
	if li, err := parseLine(line); err == nil {
		lf.first, lf.firstOK = li.prev, true
	}
	if !gz {
		info, err := lr.f.Stat()
		if err != nil {
			return lf, err
		}
		if lf.last, _, err = tailHash(lr.f, info.Size()); err != nil {
			return lf, nil // Verify reports the long line, where it is
		}
		lf.lastOK = true
		return lf, nil
	}
	// A gzip file is read through, but not past a line robotsgate never
	// writes (shorter than a prev, or not an object): a gzip bomb of
	// empty lines, a few KiB that decompress to gigabytes, stops here at
	// its first line, and Verify at its first MaxFindings.
	for {
		if len(line) < len(prevKey)+64 || line[0] != '{' {
			return lf, nil // Verify reports it
		}
		lf.last = LineHash(line)
		if line, _, err = lr.next(); errors.Is(err, io.EOF) {
			lf.lastOK = true
			return lf, nil
		} else if err != nil {
			return lf, nil // Verify reports it
		}
	}
}

// tailHash returns the hash of the last line of f, of size bytes (a
// line ended or not, read from the end), and whether it ends with "\n".
// A last line longer than MaxLine is an error.
func tailHash(f *os.File, size int64) (Hash, bool, error) {
	n := min(size, MaxLine+2) // the line, its "\n", and the "\n" before it
	b := make([]byte, n)
	if _, err := f.ReadAt(b, size-n); err != nil && !errors.Is(err, io.EOF) {
		return Hash{}, false, err
	}
	ended := len(b) > 0 && b[len(b)-1] == '\n'
	if ended {
		b = b[:len(b)-1]
	}
	i := bytes.LastIndexByte(b, '\n')
	if i < 0 && n < size || len(b)-i-1 > MaxLine {
		return Hash{}, false, fmt.Errorf("its last line is longer than %d bytes: not an audit log robotsgate wrote (move it aside)", MaxLine)
	}
	return LineHash(b[i+1:]), ended, nil
}
