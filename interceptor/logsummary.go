package interceptor

import (
	"context"
	"sync"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
)

// refusedSummary turns the calls their budget ended, and the hedges it
// refused, into at most one warn line per backend per refusedLogEvery (the
// lines WithLogger describes): an outage makes such calls by the thousand,
// and one line each would be the costliest thing the process logs just
// when its operator reads the logs. A timer, armed while some count waits,
// says the counts when the interval ends.
//
// Safe for concurrent use. The logger runs outside the lock.
type refusedSummary struct {
	logger logging.Logger
	now    func() time.Time
	every  time.Duration

	mu sync.Mutex
	// byTarget holds the backends that logged a line within the last
	// interval, or have counts waiting: at most refusedLogTargets, and
	// "other".
	byTarget map[string]*refusedTally
	timer    *time.Timer // nil until first needed
	armed    bool
	// holding holds when each backend last deferred a retry (held), bound
	// as byTarget; the backends that stopped holding are forgotten when it
	// is full and at each flush.
	holding map[string]time.Time
}

// refusedTally is one backend's counts since its last line, at last; state
// is its budget at the latest count.
type refusedTally struct {
	last                             time.Time
	budget, deferred, outage, hedges int
	state                            budget.State
}

func (t *refusedTally) pending() bool {
	return t.budget+t.deferred+t.outage+t.hedges > 0
}

func newRefusedSummary(l logging.Logger) *refusedSummary {
	return &refusedSummary{logger: l, now: time.Now, every: refusedLogEvery, byTarget: map[string]*refusedTally{}, holding: map[string]time.Time{}}
}

// summaryTarget returns the canonical target that keys target's budget
// (the call's budget lookup filled the cache), so two spellings of one
// backend share a line; target itself when the cache has none.
func summaryTarget(target string) string {
	if v, ok := canonicalTargets.Load(target); ok {
		return v.(string)
	}
	return target
}

type refusedLine struct {
	target string
	tally  refusedTally
	since  time.Duration
}

// count adds e, a give-up for its budget or a hedge the budget stopped, to
// its backend's counts, and logs the line that is due.
func (s *refusedSummary) count(e Event) {
	now := s.now()
	e.Target = summaryTarget(e.Target)
	s.mu.Lock()
	e.Target = boundedKey(s.byTarget, e.Target)
	t := s.byTarget[e.Target]
	if t == nil {
		t = &refusedTally{}
		s.byTarget[e.Target] = t
	}
	switch {
	case e.Kind == EventHedgeStop:
		t.hedges++
	case e.Reason == policy.ReasonBudget:
		t.budget++
	case e.Reason == policy.ReasonDeferred:
		t.deferred++
	default:
		t.outage++
	}
	if e.Budget.Kind != "" {
		t.state = e.Budget
	}
	var lines []refusedLine
	if t.last.IsZero() || now.Sub(t.last) >= s.every {
		lines = append(lines, s.takeLocked(e.Target, t, now))
	}
	s.armLocked(now)
	s.mu.Unlock()
	s.log(lines)
}

// takeLocked returns t's line and starts its next interval at now.
func (s *refusedSummary) takeLocked(target string, t *refusedTally, now time.Time) refusedLine {
	l := refusedLine{target: target, tally: *t}
	if !t.last.IsZero() {
		l.since = now.Sub(t.last)
	}
	*t = refusedTally{last: now}
	return l
}

// armLocked sets the timer, while some backend is in byTarget, for the end
// of the earliest interval. A backend that comes in later logs at once, so
// its interval ends later: the timer needs no change while armed.
func (s *refusedSummary) armLocked(now time.Time) {
	if s.armed || len(s.byTarget) == 0 {
		return
	}
	var due time.Time
	for _, t := range s.byTarget {
		if end := t.last.Add(s.every); due.IsZero() || end.Before(due) {
			due = end
		}
	}
	s.armed = true
	if s.timer == nil {
		s.timer = time.AfterFunc(due.Sub(now), s.flush)
		return
	}
	s.timer.Reset(due.Sub(now))
}

// flush logs the counts whose interval ended, and forgets the backends
// quiet for a whole interval (their next count is said at once).
func (s *refusedSummary) flush() {
	now := s.now()
	var lines []refusedLine
	s.mu.Lock()
	s.armed = false
	for target, t := range s.byTarget {
		if now.Sub(t.last) < s.every {
			continue
		}
		if t.pending() {
			lines = append(lines, s.takeLocked(target, t, now))
			continue
		}
		delete(s.byTarget, target)
	}
	s.forgetHoldingLocked(now)
	s.armLocked(now)
	s.mu.Unlock()
	s.log(lines)
}

func (s *refusedSummary) log(lines []refusedLine) {
	for _, l := range lines {
		t := &l.tally
		fields := []any{
			"grpc.target", l.target,
			"stagger.budget_refused", t.budget,
			"stagger.wait_ended", t.deferred,
			"stagger.outage", t.outage,
			"stagger.hedges_refused", t.hedges,
		}
		if l.since > 0 {
			fields = append(fields, "stagger.interval", l.since.String())
		}
		s.logger.Log(context.Background(), logging.LevelWarn, msgRefusedSummary, budgetFields(fields, t.state)...)

	}
}

// held notes e, a retry its budget deferred. The first of a backend, or
// the first after an interval without one, is said at once at info level,
// so an outage shows while it holds calls, not only as they end.
func (s *refusedSummary) held(e Event) {
	now := s.now()
	target := summaryTarget(e.Target)
	s.mu.Lock()
	if _, ok := s.holding[target]; !ok && len(s.holding) >= refusedLogTargets {
		s.forgetHoldingLocked(now)
	}
	target = boundedKey(s.holding, target)
	last, ok := s.holding[target]
	s.holding[target] = now
	s.mu.Unlock()
	if ok && now.Sub(last) < s.every {
		return
	}
	fields := []any{"grpc.target", target, "grpc.method", e.Method}
	if e.Budget.Health != "" {
		fields = append(fields, "stagger.gate", e.Budget.Health)
	}
	s.logger.Log(context.Background(), logging.LevelInfo, msgHolding, fields...)
}

// boundedKey returns target, or "other" when m has no room left for it.
func boundedKey[V any](m map[string]V, target string) string {
	if _, ok := m[target]; !ok && len(m) >= refusedLogTargets {
		return "other"
	}
	return target
}

// forgetHoldingLocked forgets the backends that deferred no retry for an
// interval.
func (s *refusedSummary) forgetHoldingLocked(now time.Time) {
	for t, at := range s.holding {
		if now.Sub(at) >= s.every {
			delete(s.holding, t)
		}
	}
}
