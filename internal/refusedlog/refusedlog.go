// Package refusedlog summarises, per backend, the calls a retry budget
// ended and the hedges it refused, and says when a backend begins to hold
// retries: the interceptors' logger (interceptor.WithLogger lists these
// lines) gets a few lines per backend where an outage would make one per
// call.
package refusedlog

import (
	"context"
	"sync"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
)

// The lines' messages: each a constant, what changes is in attributes.
const (
	msgRefusedSummary = "stagger: calls ended without the retry their budget refused, per backend since its last such line"
	msgHolding        = "stagger: a backend begins to hold calls: their retries wait for the budget (grpc.target)"
)

// The summary's tuning numbers, each with what set it.
const (
	// refusedLogEvery: not measured; the longest a call without a deadline waits for the budget.
	refusedLogEvery = 10 * time.Second
	// refusedLogTargets: the budget's own bound (budget.Backends), so each target has its line.
	refusedLogTargets = 1024
)

// Summary turns the calls their budget ended, and the hedges it refused,
// into at most one warn line per backend per refusedLogEvery: an outage
// makes such calls by the thousand,
// and one line each would be the costliest thing the process logs just
// when its operator reads the logs. A timer, armed while some count waits,
// says the counts when the interval ends.
//
// Safe for concurrent use. The logger runs outside the lock.
type Summary struct {
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

// New returns a Summary that logs to l.
func New(l logging.Logger) *Summary {
	return &Summary{logger: l, now: time.Now, every: refusedLogEvery, byTarget: map[string]*refusedTally{}, holding: map[string]time.Time{}}
}

type refusedLine struct {
	target string
	tally  refusedTally
	since  time.Duration
}

// Count adds a call its budget ended for reason r (budget, deferred or
// outage) to target's counts, and logs the line that is due; st is the
// budget's state. Callers pass the canonical target that keys the budget,
// so two spellings of one backend share a line.
func (s *Summary) Count(target string, r policy.Reason, st budget.State) {
	s.count(target, st, func(t *refusedTally) {
		switch r {
		case policy.ReasonBudget:
			t.budget++
		case policy.ReasonDeferred:
			t.deferred++
		default:
			t.outage++
		}
	})
}

// CountHedge adds a hedge the budget refused to target's counts, as Count.
func (s *Summary) CountHedge(target string, st budget.State) {
	s.count(target, st, func(t *refusedTally) { t.hedges++ })
}

func (s *Summary) count(target string, st budget.State, add func(*refusedTally)) {
	now := s.now()
	s.mu.Lock()
	target = boundedKey(s.byTarget, target)
	t := s.byTarget[target]
	if t == nil {
		t = &refusedTally{}
		s.byTarget[target] = t
	}
	add(t)
	if st.Kind != "" {
		t.state = st
	}
	var lines []refusedLine
	if t.last.IsZero() || now.Sub(t.last) >= s.every {
		lines = append(lines, s.takeLocked(target, t, now))
	}
	s.armLocked(now)
	s.mu.Unlock()
	s.log(lines)
}

// takeLocked returns t's line and starts its next interval at now.
func (s *Summary) takeLocked(target string, t *refusedTally, now time.Time) refusedLine {
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
func (s *Summary) armLocked(now time.Time) {
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
func (s *Summary) flush() {
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

func (s *Summary) log(lines []refusedLine) {
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
		s.logger.Log(context.Background(), logging.LevelWarn, msgRefusedSummary, BudgetFields(fields, t.state)...)
	}
}

// Held notes a retry of method that target's budget deferred (health, its
// Gate's, may be empty); target is canonical, as Count's. The first of a
// backend, or the first after an interval without one, is said at once at
// info level, so an outage shows while it holds calls, not only as they end.
func (s *Summary) Held(target, method, health string) {
	now := s.now()
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
	fields := []any{"grpc.target", target, "grpc.method", method}
	if health != "" {
		fields = append(fields, "stagger.gate", health)
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
func (s *Summary) forgetHoldingLocked(now time.Time) {
	for t, at := range s.holding {
		if now.Sub(at) >= s.every {
			delete(s.holding, t)
		}
	}
}

// BudgetFields appends the attributes of st, a budget's state, when it has
// one: its level, and its Gate's health when it has a Gate.
func BudgetFields(fields []any, st budget.State) []any {
	if st.Kind == "" {
		return fields
	}
	fields = append(fields, "stagger.budget.level", st.Level)
	if st.Health != "" {
		fields = append(fields, "stagger.gate", st.Health)
	}
	return fields
}
