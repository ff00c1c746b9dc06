//go:build unix

package policy

import "syscall"

// openNonblock opens a named pipe without waiting for a writer; a regular
// file ignores it.
const openNonblock = syscall.O_NONBLOCK
