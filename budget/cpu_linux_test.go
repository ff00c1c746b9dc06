//go:build linux

package budget_test

import (
	"syscall"
	"time"
)

// rusageThread is Linux's RUSAGE_THREAD (the syscall package does not name
// it).
const rusageThread = 1

// threadCPU is the CPU time the calling thread has used (lock the
// goroutine to it): a benchmark's cost that the other processes of a
// loaded machine, and its other goroutines, disturb less than its wall
// time. ok is false where it is unknown.
func threadCPU() (d time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
