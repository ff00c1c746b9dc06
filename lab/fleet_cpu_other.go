//go:build !unix

package lab

import "time"

// cpuTime is 0 where the process's CPU time is not read (FleetResult.CPU
// is then 0).
func cpuTime() time.Duration { return 0 }
