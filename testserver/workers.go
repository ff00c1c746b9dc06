package testserver

import (
	"context"
	"slices"
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
//     tenth of Service (RejectionCost) of a worker's time, and comes first:
//     the next worker to be free spends it before it takes the next
//     attempt from the queue (the rejections pending are worked off in
//     their order, before any attempt that waits). Reading and refusing a
//     request is work done now, by the threads that would serve.
//   - A worker checks an attempt's deadline when it takes it, as a handler
//     that starts with ctx.Err() does: an attempt whose deadline (the
//     grpc-timeout its caller sent) passed while it waited is dropped for a
//     tenth of Service, like a rejection, and ends DEADLINE_EXCEEDED.
//     Everything else a caller does after its attempt arrived costs the
//     full Service: a deadline that passes during the service, and a
//     cancellation at any time (a busy handler notices one only when it
//     answers, and the answer is lost; a queued attempt whose caller
//     cancelled still waits for its turn, its caller gone). Deadlines are
//     how callers usually give up; a cancellation is rarer (a hedge that
//     lost, a process that quit).
//   - From ReducedFrom to ReducedTo only the first Reduced workers take
//     work: the others finish what they started before ReducedFrom and
//     then stand idle until ReducedTo. Reduced is clamped to [0, Count];
//     zero times, or ReducedTo <= ReducedFrom, mean no reduction.
//   - From SlowFrom to SlowTo the server is slow: work a worker begins then
//     (served, rejected or dropped) costs Slow times as much. A Slow of 1
//     or less, zero times, or SlowTo <= SlowFrom mean no slowdown.
//
// So the server serves at most Count ÷ Service attempts per second (Reduced
// ÷ Service during the reduction, Count ÷ (Slow × Service) during the
// slowdown), less a tenth of Service for every rejection and dropped
// attempt, and for every attempt a layer in front of the service refused
// (Server.Refused records those). Rejections by the other server-wide
// modes (outage, Capacity, failure rate) cost nothing.
//
// Work done for a caller that had gone is wasted (Stats.Wasted): an
// attempt dropped because its deadline had passed, one whose deadline
// passes before its service ends, and one whose caller cancelled it before
// its service ended (counted when the server sees the cancellation, or
// when a worker takes it if that is later).
//
// No goroutine runs the workers: the server works out, whenever an attempt
// arrives or a handler looks, which work has begun by then and when the
// rest will, and each waiting handler sleeps on the server's clock until
// its attempt is done, woken early when a rejection or a dropped attempt
// moves its turn. A handler whose caller gave up returns at once; its
// attempt keeps its place in the queue and costs what the rules say. The
// zero value (Count 0) turns the mode off. A Workers is a plain value.
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
	// Slow multiplies the cost of the work begun from SlowFrom to SlowTo
	// (on the server's clock: [SlowFrom, SlowTo)); 1 or less means none.
	Slow             float64
	SlowFrom, SlowTo time.Time
	// ReportLoad: every attempt the mode takes or rejects carries a load
	// report (gRFC A51) through grpc-go's orca package, when the server has
	// its option (WithServerOptions(orca.CallMetricsServerOption(nil))):
	// application utilization, the workers busy when the attempt arrived
	// (its own included) over Count. An attempt the other modes refuse
	// (an outage) carries none, as a server that is down sends none.
	ReportLoad bool
}

// RejectionCost is the worker time an attempt costs when the Workers mode
// rejects it (queue full) or drops it (deadline passed): a tenth of the
// service time.
func (w Workers) RejectionCost() time.Duration { return w.Service / 10 }

// slowAt is the factor the cost of work begun at t is multiplied by.
func (w Workers) slowAt(t time.Time) float64 {
	if w.Slow > 1 && !w.SlowFrom.IsZero() && w.SlowTo.After(w.SlowFrom) &&
		!t.Before(w.SlowFrom) && t.Before(w.SlowTo) {
		return w.Slow
	}
	return 1
}

// at is cost d of work begun at t, slowed down when the server is slow then.
func (w Workers) at(d time.Duration, t time.Time) time.Duration {
	if f := w.slowAt(t); f != 1 {
		return time.Duration(float64(d) * f)
	}
	return d
}

// reducedAt reports whether worker i may not take an attempt at t.
func (w Workers) reducedAt(i int, t time.Time) bool {
	return i >= w.Reduced && !w.ReducedFrom.IsZero() && w.ReducedTo.After(w.ReducedFrom) &&
		!t.Before(w.ReducedFrom) && t.Before(w.ReducedTo)
}

// workerPool is the Workers mode's state, guarded by Server.mu. Work is
// taken in this order: the pending rejections, then the queue. freeAt and
// lastStart describe the work begun; after and afterLast, the same once
// the pending rejections have begun too (kept step by step, so that many
// pending rejections cost nothing to plan around).
type workerPool struct {
	cfg Workers
	// now is the latest time the pool was brought up to.
	now time.Time
	// freeAt is, per worker, when the work it has begun ends.
	freeAt []time.Time
	// lastStart is when the latest work began: none begins earlier, so
	// work is taken in order.
	lastStart time.Time
	// rejections are when the rejections no worker has begun yet were
	// made, in order.
	rejections []time.Time
	// after and afterLast are freeAt and lastStart once the pending
	// rejections have begun too.
	after     []time.Time
	afterLast time.Time
	// queue is the attempts no worker has taken, in arrival order.
	queue []*job
	// work is the worker time of the work begun so far; wasted, the part
	// of it done for callers that had gone.
	work, wasted time.Duration
}

// job is an admitted attempt in the Workers mode.
type job struct {
	arrived, deadline time.Time // deadline zero for none
	// end is when the worker is done with it (planned until taken);
	// dropped, that its deadline passed before a worker took it.
	end     time.Time
	dropped bool
	// taken: a worker has begun it, at the cost cost. gone: its caller
	// gave up before its answer. wasted: its cost is counted as wasted.
	taken, gone, wasted bool
	cost                time.Duration
	// sleepUntil is when the attempt's handler means to wake; wake wakes
	// it sooner (nil when it does not sleep).
	sleepUntil time.Time
	wake       context.CancelFunc
}

// SetWorkers replaces the Workers mode; the zero Workers turns it off (the
// attempts waiting are then served at once). Work begun stands; a larger
// Count adds idle workers, a smaller one forgets the last workers' work.
func (s *Server) SetWorkers(w Workers) {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.workers.advance(now)
	s.setWorkersLocked(w)
	s.workers.replan()
}

func (s *Server) setWorkersLocked(w Workers) {
	w.Reduced = min(max(w.Reduced, 0), max(w.Count, 0))
	p := &s.workers
	p.cfg = w
	n := max(w.Count, 0)
	if !p.on() {
		for _, j := range p.queue {
			j.end = p.now
			j.wakeUp()
		}
		*p = workerPool{cfg: w, now: p.now}
		return
	}
	if len(p.freeAt) > n {
		p.freeAt = p.freeAt[:n]
	}
	for len(p.freeAt) < n {
		p.freeAt = append(p.freeAt, time.Time{})
	}
	p.after, p.afterLast = slices.Clone(p.freeAt), p.lastStart
	for _, at := range p.rejections {
		p.afterLast = p.takeRejection(p.after, p.afterLast, at)
	}
}

// on reports whether the mode is on: attempts cost time.
func (p *workerPool) on() bool { return p.cfg.Count > 0 && p.cfg.Service > 0 }

// next is the worker that takes the next work, arrived at `at`, given
// when each worker is free and when the last work began, and when: the
// earliest time no earlier than those at which a worker is free and
// allowed to work; ties go to the lowest worker.
func (p *workerPool) next(free []time.Time, last, at time.Time) (worker int, start time.Time) {
	worker = -1
	for i, f := range free {
		t := at
		if last.After(t) {
			t = last
		}
		if f.After(t) {
			t = f
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

// takeRejection gives a rejection, made at `at`, to the next worker in
// free, and returns when it begins (the new last start).
func (p *workerPool) takeRejection(free []time.Time, last, at time.Time) time.Time {
	w, start := p.next(free, last, at)
	free[w] = start.Add(p.cfg.at(p.cfg.RejectionCost(), start))
	return start
}

// cost is what j costs a worker that takes it at start.
func (p *workerPool) cost(j *job, start time.Time) (time.Duration, bool) {
	if !j.deadline.IsZero() && !j.deadline.After(start) {
		return p.cfg.at(p.cfg.RejectionCost(), start), true
	}
	return p.cfg.at(p.cfg.Service, start), false
}

// advance begins, in order, the work that begins by now (the latest of now
// and the times seen before), then replans the rest.
func (p *workerPool) advance(now time.Time) {
	if now.After(p.now) {
		p.now = now
	}
	if !p.on() {
		return
	}
	for len(p.rejections) > 0 {
		w, start := p.next(p.freeAt, p.lastStart, p.rejections[0])
		if start.After(p.now) {
			return // the queue waits behind the rejections; its plan stands
		}
		cost := p.cfg.at(p.cfg.RejectionCost(), start)
		p.freeAt[w], p.lastStart = start.Add(cost), start
		p.work += cost
		p.rejections = p.rejections[1:]
	}
	taken := 0
	for _, j := range p.queue {
		w, start := p.next(p.freeAt, p.lastStart, j.arrived)
		if start.After(p.now) {
			break
		}
		cost, dropped := p.cost(j, start)
		p.freeAt[w], p.lastStart = start.Add(cost), start
		p.work += cost
		j.end, j.dropped = start.Add(cost), dropped
		j.taken, j.cost = true, cost
		// The caller is gone, or will be before the answer: its deadline
		// passed, or comes before the service ends, or it cancelled.
		if dropped || j.gone || (!j.deadline.IsZero() && !j.deadline.After(j.end)) {
			p.waste(j)
		}
		taken++
	}
	if taken == 0 {
		return
	}
	clear(p.queue[:taken])
	p.queue = p.queue[taken:]
	p.after, p.afterLast = slices.Clone(p.freeAt), p.lastStart
	p.replan()
}

// replan works out when the queued attempts will be done, from the state
// after the pending rejections, and wakes the handlers whose attempt will
// be done sooner than they sleep.
func (p *workerPool) replan() {
	free, last := slices.Clone(p.after), p.afterLast
	for _, j := range p.queue {
		w, start := p.next(free, last, j.arrived)
		cost, dropped := p.cost(j, start)
		free[w], last = start.Add(cost), start
		j.end, j.dropped = start.Add(cost), dropped
		if j.wake != nil && j.end.Before(j.sleepUntil) {
			j.wakeUp()
		}
	}
}

// busy is the share of the workers that work at t (the work begun by then).
func (p *workerPool) busy(t time.Time) float64 {
	n := 0
	for _, f := range p.freeAt {
		if f.After(t) {
			n++
		}
	}
	return float64(n) / float64(len(p.freeAt))
}

// waste counts j's cost as wasted, once.
func (p *workerPool) waste(j *job) {
	if !j.wasted {
		j.wasted = true
		p.wasted += j.cost
	}
}

// giveUp records that j's caller gave up: work a worker has begun on it is
// wasted; work not begun yet will be when a worker takes it.
func (p *workerPool) giveUp(j *job) {
	j.gone = true
	if j.taken {
		p.waste(j)
	}
}

func (j *job) wakeUp() {
	if j.wake != nil {
		j.wake()
		j.wake = nil
	}
}

// reject charges a rejection made now (p.now): a worker spends
// RejectionCost on it before the queue's next attempt.
func (p *workerPool) reject() {
	p.rejections = append(p.rejections, p.now)
	p.afterLast = p.takeRejection(p.after, p.afterLast, p.now)
	p.replan()
}

// admit brings the pool up to at and queues an attempt that arrived then
// (deadline zero for none), or rejects it when it would wait behind a full
// queue.
func (p *workerPool) admit(at, deadline time.Time) (*job, *rejection) {
	p.advance(at)
	j := &job{arrived: at, deadline: deadline}
	if len(p.queue) >= p.cfg.Queue {
		free, last := slices.Clone(p.after), p.afterLast
		for _, q := range p.queue {
			w, start := p.next(free, last, q.arrived)
			cost, _ := p.cost(q, start)
			free[w], last = start.Add(cost), start
		}
		if _, start := p.next(free, last, at); start.After(p.now) {
			p.reject()
			return nil, &rejection{st: status.Newf(codes.ResourceExhausted,
				"testserver: queue full: %d attempts waiting for %d workers", len(p.queue), p.cfg.Count)}
		}
	}
	p.queue = append(p.queue, j)
	p.replan()
	p.advance(at) // taken at once when a worker is free
	return j, nil
}

// awaitWorker waits until the Workers mode is done with j: it returns the
// error of the attempt's context if that ends first, or DEADLINE_EXCEEDED
// when the worker dropped the attempt.
func (s *Server) awaitWorker(ctx context.Context, j *job) error {
	for {
		now := s.clock.Now()
		s.mu.Lock()
		s.workers.advance(now)
		end, dropped := j.end, j.dropped
		now = s.workers.now
		var sleep context.Context
		cancel := context.CancelFunc(func() {})
		if now.Before(end) {
			sleep, cancel = context.WithCancel(ctx)
			j.sleepUntil, j.wake = end, cancel
		}
		s.mu.Unlock()
		if sleep == nil {
			if dropped {
				return status.Error(codes.DeadlineExceeded, "testserver: deadline passed while the attempt waited for a worker")
			}
			return nil
		}
		// Woken early or not, look again: the plan may have moved.
		_ = s.clock.Sleep(sleep, end.Sub(now))
		cancel()
		if err := ctx.Err(); err != nil {
			now := s.clock.Now()
			s.mu.Lock()
			s.workers.advance(now)
			if !j.taken || now.Before(j.end) {
				s.workers.giveUp(j)
			}
			s.mu.Unlock()
			return err
		}
	}
}
