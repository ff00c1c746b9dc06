package lab

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/stats"
)

// attemptCounter counts the attempts of one contender's connections: grpc-go
// calls HandleRPC with a stats.Begin once per attempt, whichever layer
// retries, so the built-in retry is counted as the interceptors are. It also
// logs what is in flight (see flightLog).
type attemptCounter struct {
	outageFrom, outageTo time.Time
	// t0 is the start of the load: perSecond[i] counts the attempts begun
	// in its i-th second.
	t0 time.Time

	mu        sync.Mutex
	attempts  int
	outage    int
	perSecond []int
	flight    flightLog
}

// began is the attempts the clients have begun.
func (a *attemptCounter) began() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attempts
}

// callState is one call's part in flight, found through the contexts of
// its attempts, which derive from the call's.
type callState struct {
	attempts int       // in flight
	lastEnd  time.Time // when the last attempt ended, if attempts is 0
	ended    bool      // an attempt has ended and none is in flight
	returned bool
}

type callStateKey struct{}

// callStarted logs a call in flight and returns the context its attempts
// are told apart by.
func (a *attemptCounter) callStarted(ctx context.Context) (context.Context, *callState) {
	st := &callState{}
	a.mu.Lock()
	a.flight.add(flightCall, time.Now(), 1)
	a.mu.Unlock()
	return context.WithValue(ctx, callStateKey{}, st), st
}

func (a *attemptCounter) callEnded(st *callState) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if st.ended {
		// Waiting after its last attempt: until the call returns. A call
		// that gives up at once waits for no time.
		a.flight.add(flightWaiting, st.lastEnd, 1)
		a.flight.add(flightWaiting, now, -1)
		st.ended = false
	}
	st.returned = true // a hedge that ends later leaves no wait
	a.flight.add(flightCall, now, -1)
}

func (a *attemptCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}

func (a *attemptCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if !s.IsClient() {
		return
	}
	st, _ := ctx.Value(callStateKey{}).(*callState)
	switch s := s.(type) {
	case *stats.Begin:
		now := time.Now()
		a.mu.Lock()
		defer a.mu.Unlock()
		a.flight.add(flightAttempt, now, 1)
		if st != nil {
			st.attempts++
			if st.ended {
				a.flight.add(flightWaiting, st.lastEnd, 1)
				a.flight.add(flightWaiting, now, -1)
				st.ended = false
			}
		}
		if s.IsTransparentRetryAttempt {
			return
		}
		a.attempts++
		if !s.BeginTime.Before(a.outageFrom) && s.BeginTime.Before(a.outageTo) {
			a.outage++
		}
		if !a.t0.IsZero() && !s.BeginTime.Before(a.t0) {
			if i := int(s.BeginTime.Sub(a.t0) / time.Second); i < maxSeconds {
				for len(a.perSecond) <= i {
					a.perSecond = append(a.perSecond, 0)
				}
				a.perSecond[i]++
			}
		}
	case *stats.End:
		now := time.Now()
		a.mu.Lock()
		defer a.mu.Unlock()
		a.flight.add(flightAttempt, now, -1)
		if st != nil {
			st.attempts--
			if st.attempts == 0 && !st.returned {
				st.ended, st.lastEnd = true, now
			}
		}
	}
}

// flightLog logs when calls, attempts and waits begin and end, on the time
// package's clock, for their peaks. A call is in flight from the moment the
// lab makes it until it returns; an attempt from its stats.Begin to its
// stats.End (grpc-go pairs them, transparent retries included, and begins
// an attempt before it picks a connection, so a call waiting for a ready
// connection is in an attempt). A call waits from the end of an attempt,
// when no other attempt of it is in flight, until its next attempt begins or
// it returns: it is pausing between attempts (backoff, pushback, a budget
// holding its retry back), or giving up.
type flightLog struct {
	events []flightEvent
}

type flightKind uint8

const (
	flightCall flightKind = iota
	flightAttempt
	flightWaiting
	flightKinds
)

type flightEvent struct {
	at    time.Time
	kind  flightKind
	delta int8
}

func (l *flightLog) add(k flightKind, at time.Time, delta int8) {
	l.events = append(l.events, flightEvent{at, k, delta})
}

// peaks returns, per kind, the most intervals open at once. Intervals are
// half-open: one that ends when another begins does not overlap it, and
// one of no length counts for nothing.
func (l *flightLog) peaks() [flightKinds]int {
	ev := slices.Clone(l.events)
	slices.SortStableFunc(ev, func(x, y flightEvent) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return int(x.delta) - int(y.delta) // ends first
	})
	var open, peak [flightKinds]int
	for _, e := range ev {
		open[e.kind] += int(e.delta)
		peak[e.kind] = max(peak[e.kind], open[e.kind])
	}
	return peak
}

// mean returns the mean number of intervals of kind k open over [from,
// to), by time; 0 when the span is empty.
func (l *flightLog) mean(k flightKind, from, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	ev := slices.Clone(l.events)
	slices.SortStableFunc(ev, func(x, y flightEvent) int { return x.at.Compare(y.at) })
	open, area, at := 0, 0.0, from
	for _, e := range ev {
		if e.kind != k {
			continue
		}
		if e.at.After(from) {
			t := e.at
			if t.After(to) {
				t = to
			}
			if t.After(at) {
				area += float64(open) * t.Sub(at).Seconds()
				at = t
			}
		}
		open += int(e.delta)
	}
	if to.After(at) {
		area += float64(open) * to.Sub(at).Seconds()
	}
	return area / to.Sub(from).Seconds()
}

func (a *attemptCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (a *attemptCounter) HandleConn(context.Context, stats.ConnStats) {}
