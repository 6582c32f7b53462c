//go:build unix

package fetch

import (
	"fmt"
	"syscall"
)

// mapBytes maps n bytes of anonymous memory: resident only once written,
// never seen by the collector.
func mapBytes(n int) ([]byte, error) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes for the robots.txt cache: %w", n, err)
	}
	return b, nil
}

func unmapBytes(b []byte) { syscall.Munmap(b) }
