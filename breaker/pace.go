package breaker

import (
	"math"
	"time"
)

// PaceGain is how much faster than the rate the server answered first
// attempts over the window Pace lets held first attempts go: new calls keep
// arriving beside them, so the server sees up to 1 + PaceGain times its
// usual load until the backlog is gone (the lab's refused-wfr: a peak
// under 2× capacity), while the held calls' deadlines run.
const PaceGain = 1.25

// Pace returns how long a first attempt that was held while its connection
// was not ready (a waitForReady call) waits, once the connection is ready,
// before it goes: held attempts go one at a time, at PaceGain times the
// rate the server answered first attempts over the window (at least one a
// second), so
// that the calls that queued during an outage reach the recovering server
// at the pace the process sent them before it, beside the new calls,
// instead of all at once. It reserves the start it returns.
func (b *Breaker) Pace() time.Duration {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.foldLocked(now)
	rate := math.Max(PaceGain*float64(total(&b.w.Sum, brAccepts)+total(&b.w.Sum, brFailures))/b.s.SamplingWindow.Seconds(), 1)
	at := b.paceAt.Add(time.Duration(float64(time.Second) / rate))
	if at.Before(now) {
		at = now
	}
	b.paceAt = at
	return at.Sub(now)
}
