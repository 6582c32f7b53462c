// Package statefile reads files that robotsgate keeps for itself (under
// state_dir) or that an operator points it at (a secret file), without
// the hazards of os.ReadFile on a path someone else may have replaced: a
// symbolic link to /dev/zero (read forever), a FIFO (an open that blocks
// until a writer comes, which may be never), a device, or a huge file. A
// file is opened without blocking, checked on the open descriptor (so
// what is checked is what is read), and read up to a bound.
package statefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// Errors wrapped by ReadFile and ReadFollowing, with the path and the
// underlying error, to say why a file was not read.
var (
	// ErrSymlink: the path's final component is a symbolic link, which
	// ReadFile does not follow.
	ErrSymlink = errors.New("a symbolic link, not followed")
	// ErrNotRegular: the path names a directory, a FIFO, a device or a
	// socket, not a regular file.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file holds more than the bound given.
	ErrTooLarge = errors.New("larger than its bound")
)

// ReadFile reads the regular file at path, at most max bytes of it. A
// symbolic link as the final component is refused (ErrSymlink), so is
// anything but a regular file (ErrNotRegular: a FIFO is refused without
// waiting for a writer), and a file of more than max bytes (ErrTooLarge),
// which is never read whole. Errors say which it was and wrap the
// underlying one: errors.Is(err, fs.ErrNotExist) reports a missing file.
func ReadFile(path string, max int64) ([]byte, error) {
	b, _, err := read(path, max, false)
	return b, err
}

// ReadFollowing is ReadFile for a path an operator gives, whose symbolic
// links are followed (a Kubernetes Secret's files are links into a hidden
// directory): the file they end at must still be a regular file within
// max bytes, opened without blocking. It returns the file's mode as the
// open descriptor reports it, for the caller to check its permissions.
func ReadFollowing(path string, max int64) ([]byte, fs.FileMode, error) {
	return read(path, max, true)
}

func read(path string, max int64, follow bool) ([]byte, fs.FileMode, error) {
	f, err := open(path, follow)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("stat %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, info.Mode(), fmt.Errorf("read %s: %w (%v)", path, ErrNotRegular, info.Mode().Type())
	}
	if info.Size() > max {
		return nil, info.Mode(), fmt.Errorf("read %s: %w: %d bytes, bound %d", path, ErrTooLarge, info.Size(), max)
	}
	// The file may grow between the stat and the read: reading one byte
	// past max tells, and never more.
	r := io.LimitReader(f, max+1)
	b := make([]byte, 0, info.Size()+1)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grown since the stat: as os.ReadFile does
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, info.Mode(), fmt.Errorf("read %s: %w", path, err)
		}
	}
	if int64(len(b)) > max {
		return nil, info.Mode(), fmt.Errorf("read %s: %w: more than %d bytes", path, ErrTooLarge, max)
	}
	return b, info.Mode(), nil
}

// openError describes a failed open of path.
func openError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) { // it names the path already: "open P: ..."
		return err
	}
	return fmt.Errorf("open %s: %w", path, err)
}
