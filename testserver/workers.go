package testserver

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Workers makes the server pay for its work, as a server with a pool of
// worker threads and a bounded FIFO queue in front of them does: every
// attempt the other server-wide modes admit costs worker time, and one that
// would have to wait while the queue is full is rejected, which costs
// worker time too. Under load, rejections and work done for callers that
// gave up take time from the attempts that could succeed.
//
// The rules, on the server's clock:
//
//   - Count workers serve the attempts in arrival order. An attempt that
//     arrives while a worker is free is taken at once; otherwise it waits
//     in the queue until a worker is free and every attempt that arrived
//     before it has been taken.
//   - A worker spends Service on an attempt it serves; the attempt's script
//     (headers_first, delays, failures) runs when the service time is over.
//   - An attempt that would have to wait while Queue attempts already wait
//     is rejected at once with RESOURCE_EXHAUSTED. The rejection costs a
//     tenth of Service (RejectionCost), spent by a worker in the same order
//     as an attempt that arrived then, though it takes no place in the
//     queue: the work of reading and refusing a request competes with
//     serving.
//   - A worker checks an attempt's deadline when it takes it, as a handler
//     that starts with ctx.Err() does: an attempt whose deadline (the
//     grpc-timeout its caller sent) passed while it waited is dropped for a
//     tenth of Service, like a rejection, and ends DEADLINE_EXCEEDED.
//     Everything else a caller does after its attempt arrived costs the
//     full Service: a deadline that passes during the service, and a
//     cancellation at any time (a busy handler notices one only when it
//     answers, and the answer is lost; and the server books an attempt's
//     worker time when it arrives, when a deadline is known and a
//     cancellation is not). Deadlines are how callers usually give up; a
//     cancellation is rarer (a hedge that lost, a process that quit).
//   - From ReducedFrom to ReducedTo only the first Reduced workers take
//     attempts: the others finish what they started before ReducedFrom and
//     then stand idle until ReducedTo. Reduced is clamped to [0, Count];
//     zero times, or ReducedTo <= ReducedFrom, mean no reduction.
//
// So the server serves at most Count ÷ Service attempts per second (Reduced
// ÷ Service during the reduction), less a tenth of Service for every
// rejection and dropped attempt. Rejections by the other server-wide modes
// (outage, Capacity, failure rate) cost nothing.
//
// Worker time is booked when an attempt arrives: the server works out when
// a worker will take it and for how long, and the attempt's handler waits
// until then on the server's clock; a handler whose caller gave up returns
// at once, but the booking stands. No goroutine runs the workers. The zero
// value (Count 0) turns the mode off. A Workers is a plain value.
type Workers struct {
	// Count is the number of workers; 0 or less turns the mode off.
	Count int
	// Queue is the most attempts that may wait for a worker; 0 or less
	// means none may: an attempt that finds no worker free is rejected.
	Queue int
	// Service is the worker time a served attempt costs; 0 or less means
	// attempts cost nothing and never wait.
	Service time.Duration
	// Reduced is how many workers take attempts from ReducedFrom to
	// ReducedTo.
	Reduced int
	// ReducedFrom and ReducedTo bound the reduction, on the server's clock:
	// [ReducedFrom, ReducedTo).
	ReducedFrom, ReducedTo time.Time
}

// RejectionCost is the worker time an attempt costs when the Workers mode
// rejects it (queue full) or drops it (deadline passed): a tenth of the
// service time.
func (w Workers) RejectionCost() time.Duration { return w.Service / 10 }

// reducedAt reports whether worker i may not take an attempt at t.
func (w Workers) reducedAt(i int, t time.Time) bool {
	return i >= w.Reduced && !w.ReducedFrom.IsZero() && w.ReducedTo.After(w.ReducedFrom) &&
		!t.Before(w.ReducedFrom) && t.Before(w.ReducedTo)
}

// workerPool is the Workers mode's booking: guarded by Server.mu.
type workerPool struct {
	cfg Workers
	// freeAt is, per worker, when its booked work ends.
	freeAt []time.Time
	// lastStart is when the last booking starts: none starts earlier, so
	// attempts are taken in arrival order.
	lastStart time.Time
	// waiting are the start times of the attempts booked to start after
	// they arrived, in order; those that have started are dropped lazily.
	waiting []time.Time
	// work is the worker time booked so far.
	work time.Duration
}

// SetWorkers replaces the Workers mode; the zero Workers turns it off.
// Bookings made so far stand: busy workers stay busy and queued attempts
// keep their turn. A larger Count adds idle workers, a smaller one forgets
// the last workers' bookings.
func (s *Server) SetWorkers(w Workers) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setWorkersLocked(w)
}

func (s *Server) setWorkersLocked(w Workers) {
	w.Reduced = min(max(w.Reduced, 0), max(w.Count, 0))
	p := &s.workers
	p.cfg = w
	n := max(w.Count, 0)
	if n == 0 {
		*p = workerPool{cfg: w}
		return
	}
	if len(p.freeAt) > n {
		p.freeAt = p.freeAt[:n]
	}
	for len(p.freeAt) < n {
		p.freeAt = append(p.freeAt, time.Time{})
	}
}

// on reports whether the mode is on: attempts cost time.
func (p *workerPool) on() bool { return p.cfg.Count > 0 && p.cfg.Service > 0 }

// dropStarted forgets the waiting attempts a worker has taken by now.
func (p *workerPool) dropStarted(now time.Time) {
	i := 0
	for i < len(p.waiting) && !p.waiting[i].After(now) {
		i++
	}
	p.waiting = p.waiting[i:]
}

// next is the worker that can take the next booking arriving at `at`, and
// when: the earliest time at or after `at` and the last booking's start
// at which a worker is free and allowed to work; ties go to the lowest
// worker.
func (p *workerPool) next(at time.Time) (worker int, start time.Time) {
	worker = -1
	for i, free := range p.freeAt {
		t := at
		if p.lastStart.After(t) {
			t = p.lastStart
		}
		if free.After(t) {
			t = free
		}
		if p.cfg.reducedAt(i, t) {
			t = p.cfg.ReducedTo
		}
		if worker < 0 || t.Before(start) {
			worker, start = i, t
		}
	}
	return worker, start
}

func (p *workerPool) book(worker int, start time.Time, cost time.Duration) {
	p.freeAt[worker] = start.Add(cost)
	p.lastStart = start
	p.work += cost
}

// queue books an admitted attempt arriving at `at` whose deadline is
// deadline (zero for none), both on the server's clock. It returns when
// the attempt's handler may go on and whether the worker dropped it
// (deadline passed), or a rejection when the queue is full.
func (p *workerPool) queue(at, deadline time.Time) (until time.Time, dropped bool, rej *rejection) {
	p.dropStarted(at)
	worker, start := p.next(at)
	if start.After(at) && len(p.waiting) >= p.cfg.Queue {
		p.book(worker, start, p.cfg.RejectionCost())
		return time.Time{}, false, &rejection{st: status.Newf(codes.ResourceExhausted,
			"testserver: queue full: %d attempts waiting for %d workers", len(p.waiting), p.cfg.Count)}
	}
	cost := p.cfg.Service
	if !deadline.IsZero() && !deadline.After(start) {
		cost, dropped = p.cfg.RejectionCost(), true
	}
	p.book(worker, start, cost)
	if start.After(at) {
		p.waiting = append(p.waiting, start)
	}
	return start.Add(cost), dropped, nil
}
