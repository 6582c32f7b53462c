//go:build !unix

package fetch

// mapBytes allocates n bytes on the heap, where there is no mmap.
func mapBytes(n int) ([]byte, error) { return make([]byte, n), nil }

func unmapBytes([]byte) {}
