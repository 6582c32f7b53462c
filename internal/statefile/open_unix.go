//go:build unix

package statefile

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// open opens path for reading without blocking (a FIFO with no writer
// opens at once, and is then refused as not regular) and, unless follow,
// without following a symbolic link as its final component.
func open(path string, follow bool) (*os.File, error) {
	flags := os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	if !follow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flags, 0)
	if err == nil {
		return f, nil
	}
	// O_NOFOLLOW on a link fails with ELOOP (EMLINK on the BSDs); a
	// real loop of links cannot, as the final one is not followed.
	if !follow && (errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK)) {
		return nil, fmt.Errorf("open %s: %w: %w", path, ErrSymlink, err)
	}
	return nil, openError(path, err)
}
