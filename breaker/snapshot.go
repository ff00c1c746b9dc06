package breaker

import (
	"math"
	"time"

	"github.com/stagger-go/stagger/criticality"
)

// Snapshot is a breaker's state for metrics and logs.
type Snapshot struct {
	Key   string
	State State
	// Requests, Accepts and Failures are the window's counts now.
	Requests, Accepts, Failures uint64
	// ThrottleP is the probability a CRITICAL first attempt (or one that
	// names no criticality) is rejected now (0 without throttling).
	ThrottleP float64
	// Break is the current break; Retry when the open breaker lets a
	// probe go.
	Break time.Duration
	Retry time.Time
	// Opened counts the times it opened; Rejected the attempts it refused
	// while not closed; Throttled the first attempts throttling rejected.
	Opened, Rejected, Throttled uint64
	At                          time.Time
}

// Snapshot returns the breaker's state now.
func (b *Breaker) Snapshot() Snapshot { return b.SnapshotFor(nil) }

// SnapshotFor is Snapshot for a call whose listener l (may be nil) hears
// the state change that reading the breaker may make (an open breaker whose
// break is over goes half-open), as Admit's and Record's callers hear theirs.
func (b *Breaker) SnapshotFor(l Listener) Snapshot {
	now := b.now()
	b.mu.Lock()
	ch, changed := b.probeLocked(now)
	b.w.Advance(now)
	s := Snapshot{
		Key: b.key, State: b.st,
		Requests: total(&b.w.Sum, brRequests), Accepts: total(&b.w.Sum, brAccepts), Failures: total(&b.w.Sum, brFailures),
		Break: b.breakFor, Opened: b.opened, Rejected: b.rejected, Throttled: b.thrott, At: now,
	}
	if b.st == StateOpen {
		s.Retry = b.retryAt
	}
	if c := criticality.Critical.Index(); b.s.ThrottleK > 0 && b.w.Sum[counter(c, brRequests)] > 0 {
		req := float64(b.w.Sum[counter(c, brRequests)]) + 1
		s.ThrottleP = min(math.Max(0, (req-1-b.ks[c]*float64(b.w.Sum[counter(c, brAccepts)]))/req), maxThrottleRejection)
	}
	b.mu.Unlock()
	if changed {
		b.tell(ch, l)
	}
	return s
}
