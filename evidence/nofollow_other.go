//go:build !unix

package evidence

// noFollow: no such open flag here; the store's directories are still
// checked with Lstat before use.
const noFollow = 0
