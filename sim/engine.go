package sim

import (
	"container/heap"
	"math/rand/v2"
	"time"
)

// Epoch is the wall-clock time of virtual time zero, the time the clock
// handed to budgets (Sim.Now) reports when a run starts.
var Epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Sim is a discrete-event simulator: a virtual clock, a queue of events
// ordered by time and then by the order they were scheduled, and one seeded
// random source. Nothing sleeps; Run jumps the clock from event to event, so
// the same seed and the same schedule give the same run.
//
// A Sim is not safe for concurrent use: one goroutine runs it, and the events
// run on that goroutine. Independent runs may use separate Sims in parallel.
type Sim struct {
	now   time.Duration
	seq   uint64
	queue eventQueue
	rng   *rand.Rand
}

// New returns a simulator at virtual time zero whose randomness comes from a
// PCG source seeded with seed and stream.
func New(seed, stream uint64) *Sim {
	return &Sim{rng: rand.New(rand.NewPCG(seed, stream))}
}

// Elapsed is the virtual time since the start of the run.
func (s *Sim) Elapsed() time.Duration { return s.now }

// Now is the virtual time as a time.Time (Epoch + Elapsed); pass it to
// budget.WithClock so budgets run on virtual time.
func (s *Sim) Now() time.Time { return Epoch.Add(s.now) }

// Rand is the run's random source.
func (s *Sim) Rand() *rand.Rand { return s.rng }

// At schedules f at virtual time t; a time in the past means now. Events at
// the same time run in the order they were scheduled.
func (s *Sim) At(t time.Duration, f func()) {
	if t < s.now {
		t = s.now
	}
	s.seq++
	heap.Push(&s.queue, event{at: t, seq: s.seq, f: f})
}

// After schedules f after d of virtual time.
func (s *Sim) After(d time.Duration, f func()) { s.At(s.now+d, f) }

// Run runs events until none is left.
func (s *Sim) Run() {
	for s.queue.Len() > 0 {
		s.step()
	}
}

// RunUntil runs the events scheduled up to and including t, then sets the
// clock to t (if it is later than the last event). Later events stay queued.
func (s *Sim) RunUntil(t time.Duration) {
	for s.queue.Len() > 0 && s.queue[0].at <= t {
		s.step()
	}
	if t > s.now {
		s.now = t
	}
}

// Pending is the number of events queued.
func (s *Sim) Pending() int { return s.queue.Len() }

func (s *Sim) step() {
	e := heap.Pop(&s.queue).(event)
	s.now = e.at
	e.f()
}

type event struct {
	at  time.Duration
	seq uint64
	f   func()
}

// eventQueue is a min-heap by (at, seq): seq breaks ties in scheduling order,
// which is what makes runs reproducible.
type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	n := len(old)
	e := old[n-1]
	old[n-1] = event{}
	*q = old[:n-1]
	return e
}
