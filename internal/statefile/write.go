package statefile

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile writes data to path whole: to a new file beside it, created
// with mode (never a moment readable by others when mode says so),
// synced, then renamed over it, so that a reader, or a start after a
// crash or a power loss, finds the old bytes or the new ones and never
// part of them. Its directory must exist. On failure nothing is left
// beside path, and the error names it.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".new-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
