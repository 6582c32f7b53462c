//go:build !unix

package statefile

import (
	"fmt"
	"io/fs"
	"os"
)

// open opens path for reading and, unless follow, refuses a symbolic link
// as its final component: checked before the open and, against a swap in
// between, by comparing the file opened with the one checked. Windows has
// no FIFOs to block an open.
func open(path string, follow bool) (*os.File, error) {
	var before fs.FileInfo
	if !follow {
		info, err := os.Lstat(path)
		if err != nil {
			return nil, openError(path, err)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("open %s: %w", path, ErrSymlink)
		}
		before = info
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, openError(path, err)
	}
	if before != nil {
		if after, err := f.Stat(); err != nil || !os.SameFile(before, after) {
			f.Close()
			return nil, fmt.Errorf("open %s: %w: replaced while opened", path, ErrSymlink)
		}
	}
	return f, nil
}
