//go:build unix

package test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used (user and system): a
// benchmark's cost that other processes on a loaded machine disturb less
// than its wall time. ok is false where it is unknown.
func processCPU() (d time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
