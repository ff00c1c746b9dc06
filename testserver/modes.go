package testserver

import (
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// SetOutage starts (true) or ends (false) an outage: while it lasts every
// attempt fails with UNAVAILABLE before its script runs. It is independent of
// the outage window; either one makes an outage.
func (s *Server) SetOutage(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outage = on
}

// SetOutageWindow makes every attempt that arrives at a time t with
// from <= t < to on the server's clock fail with UNAVAILABLE. Zero times, or
// to <= from, mean no window.
func (s *Server) SetOutageWindow(from, to time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outageFrom, s.outageTo = from, to
}

// SetCapacity replaces the capacity limit; the zero Capacity means no limit.
// Attempts already admitted keep running. Negative limits mean no limit.
func (s *Server) SetCapacity(c Capacity) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.capacity = c
}

// SetFailureRate makes each admitted attempt fail with UNAVAILABLE with
// probability p (clamped to [0, 1]; NaN means 0). The random source keeps its
// state: it is seeded once, by WithFailureRate (seed 0 by default).
func (s *Server) SetFailureRate(p float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failureRate = clamp01(p)
}

// SetResets starts (true) or ends (false) the reset mode: while it lasts,
// every attempt of a unary method or ListItems that its script would answer
// with success runs to completion (it counts in Executions and is recorded
// with Reset) and then, instead of answering, the server drops the attempt's
// connection, as Script.reset_attempts does for one key's first attempts: a
// TCP reset on TCP, a closed bufconn. ListItems sends at most
// messages_before_failure messages first. It makes a replica that resets
// every attempt it receives, whatever its key; Upload and Chat are not
// affected. Attempts a server-wide mode rejects, or the script fails, end as
// they would without it.
func (s *Server) SetResets(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resets = on
}

// SetDelayFactor makes every scripted delay (Script.delay and
// attempt_delays) of the attempts that arrive from now on f times as long:
// a slow replica among replicas that all get the same scripts. 0, a
// negative f, NaN and +Inf mean 1 (no change).
func (s *Server) SetDelayFactor(f float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delayFactor = f
}

// scaled returns d times the delay factor.
func (s *Server) scaled(d time.Duration) time.Duration {
	s.mu.Lock()
	f := s.delayFactor
	s.mu.Unlock()
	if !(f > 0) || math.IsInf(f, 1) || f == 1 {
		return d
	}
	return time.Duration(float64(d) * f)
}

// resetting reports whether the reset mode is on.
func (s *Server) resetting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resets
}

// rejection is a server-wide refusal: the status, and the pushback to send.
type rejection struct {
	st       *status.Status
	pushback string
}

// admit applies the server-wide modes, in this order: outage, capacity,
// failure rate, workers. An admitted attempt counts as in flight until it
// ends. deadline is the attempt's, on the server's clock (zero for none).
func (s *Server) admit(a *attempt, at, deadline time.Time) *rejection {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outage || (!s.outageFrom.IsZero() && !at.Before(s.outageFrom) && at.Before(s.outageTo)) {
		return &rejection{st: status.New(codes.Unavailable, "testserver: outage")}
	}
	c := s.capacity
	if c.MaxConcurrent > 0 && s.inFlight >= c.MaxConcurrent {
		return &rejection{st: status.Newf(codes.ResourceExhausted, "testserver: over capacity: %d attempts in flight, limit %d", s.inFlight, c.MaxConcurrent), pushback: c.Pushback}
	}
	if c.PerSecond > 0 {
		w := int64(0)
		if d := at.Sub(s.start); d > 0 {
			w = int64(d / time.Second)
		}
		if w != s.window {
			s.window, s.windowCount = w, 0
		}
		if s.windowCount >= c.PerSecond {
			return &rejection{st: status.Newf(codes.ResourceExhausted, "testserver: over capacity: %d attempts this second, limit %d", s.windowCount, c.PerSecond), pushback: c.Pushback}
		}
		s.windowCount++
	}
	if s.failureRate > 0 && s.rng.Float64() < s.failureRate {
		return &rejection{st: status.New(codes.Unavailable, "testserver: random failure")}
	}
	if s.workers.on() {
		j, rej := s.workers.admit(at, deadline)
		if s.workers.cfg.ReportLoad {
			a.load = s.workers.busy(at)
		}
		if rej != nil {
			return rej
		}
		a.job = j
	}
	s.inFlight++
	a.admitted = true
	return nil
}
