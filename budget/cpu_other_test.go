//go:build !linux

package budget_test

import "time"

// threadCPU is unknown here (see cpu_linux_test.go).
func threadCPU() (time.Duration, bool) { return 0, false }
