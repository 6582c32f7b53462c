//go:build unix

package evidence

import "syscall"

// noFollow opens a file without following a link as its final component.
const noFollow = syscall.O_NOFOLLOW | syscall.O_CLOEXEC
