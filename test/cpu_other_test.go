//go:build !unix

package test

import "time"

// processCPU is unknown here (see cpu_unix_test.go).
func processCPU() (time.Duration, bool) { return 0, false }
