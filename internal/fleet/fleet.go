// Package fleet holds what the fleet scenario's two runs share: the lab's,
// in real time over loopback TCP (lab.RunFleet), and the simulator's, on
// virtual time (sim.Fleet). Both take the scenario's shape, its defaults
// and its checks from Shape, and work out their figures from their calls
// (Shape.Calls) and from the attempts that reached the server per Bin
// (Shape.Return), so that a figure of one name means the same in both.
//
// It lives in the core module so that package sim, which the stagger
// command builds without the lab's module, can use it; the lab imports it
// from there. Its functions are pure: safe for concurrent use.
package fleet

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/stagger-go/stagger/internal/ceiling"
	"github.com/stagger-go/stagger/policy"
)

// Bin is the width of the bins the server's arrivals and refusals are
// counted in.
const Bin = ceiling.Bin

// Attempts is the fleet's retry policy's attempts, the first included.
const Attempts = 4

// Backoff is the fleet's backoff: 0.1 s, doubling, at most 1 s, gRFC A6's
// jitter.
var Backoff = policy.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: policy.JitterProportional}

// Shape is the scenario's load and server: Clients client processes offer
// Load × Capacity calls a second to a server that serves Workers attempts
// at a time, each for Workers ÷ Capacity, and answers UNAVAILABLE from
// Warmup to Warmup + Outage (the return); the load goes on for After.
// WithDefaults gives a zero field its default. A Shape is a plain value.
type Shape struct {
	Clients, Capacity, Workers int
	Load                       float64
	Warmup, Outage, After      time.Duration
}

// WithDefaults returns s with every zero field set to its default: 20
// clients, 1000 attempts/s, 50 workers (50 ms an attempt), 40 % load, a
// 2 s warmup, a 10 s outage, 15 s after it.
func (s Shape) WithDefaults() Shape {
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	set(&s.Clients, 20)
	set(&s.Capacity, 1000)
	set(&s.Workers, 50)
	if s.Load == 0 {
		s.Load = 0.4
	}
	setD(&s.Warmup, 2*time.Second)
	setD(&s.Outage, 10*time.Second)
	setD(&s.After, 15*time.Second)
	return s
}

// CheckRoom reports through bad each of Clients, Workers, Capacity and
// Load that a run cannot use. clients and workers are the names the
// caller's configuration gives Clients and Workers; most bounds both.
func (s Shape) CheckRoom(clients, workers string, most int, bad func(field, rule string, v any)) {
	in := fmt.Sprintf("must be in [1, %d]", most)
	if s.Clients < 1 || s.Clients > most {
		bad(clients, in, s.Clients)
	}
	if s.Workers < 1 || s.Workers > most {
		bad(workers, in, s.Workers)
	}
	if s.Capacity < 1 || (s.Workers >= 1 && s.Capacity > s.Workers*1000) {
		bad("Capacity", "must be in [1, "+workers+" × 1000] (at least 1 ms per attempt)", s.Capacity)
	}
	if !(s.Load > 0) || s.Load > 10 {
		bad("Load", "must be in (0, 10] (a share of Capacity)", s.Load)
	}
}

// CheckTimes reports through bad each of Warmup, Outage and After that is
// not a whole number of Bins in [Bin, 1h].
func (s Shape) CheckTimes(bad func(field, rule string, v any)) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Warmup", s.Warmup}, {"Outage", s.Outage}, {"After", s.After}} {
		if d.v < Bin || d.v%Bin != 0 || d.v > time.Hour {
			bad(d.name, fmt.Sprintf("must be a whole number of %v in [%v, 1h]", Bin, Bin), d.v)
		}
	}
}

// ServiceTime is the worker time an attempt costs: Workers ÷ Capacity.
func (s Shape) ServiceTime() time.Duration {
	return time.Duration(s.Workers) * time.Second / time.Duration(max(s.Capacity, 1))
}

// Call is one call of a run, its times counted from the start of the load.
type Call struct {
	Begin, End time.Duration
	OK         bool
	// Reason is the kind of a failure, as the run names it.
	Reason string
}

// Reason is a kind of failure and how many calls failed so.
type Reason struct {
	Reason string
	Count  int
}

// CallFigures is what a run's calls did. Times "after the return" count
// from the end of the outage; "outage calls" are the calls made during it.
type CallFigures struct {
	// OutageCalls is the calls made during the outage, OutageServed those
	// of them that succeeded, HeldAtReturn those still running at the
	// return.
	OutageCalls, OutageServed, HeldAtReturn int
	// OutageFailedEarly is the outage calls that failed after the return
	// sooner than the bound Calls was given after they began (every one
	// that failed after the return when the bound is zero).
	OutageFailedEarly int
	// HeldP50, HeldP90 and HeldMax are when the outage calls that
	// succeeded finished, after the return.
	HeldP50, HeldP90, HeldMax time.Duration
	// FailedAfter is the calls that failed after the return; FailedRoom
	// those that failed while the server had room (it refused nothing in
	// the Bin of the failure and the Bin before). AfterReasons counts
	// FailedAfter by Reason, RoomReasons FailedRoom, most first.
	FailedAfter, FailedRoom   int
	AfterReasons, RoomReasons []Reason
	// Longest is the longest call; P50 and P99 are of the calls that
	// succeeded, FailP50 and FailP99 of those that failed.
	Longest, P50, P99, FailP50, FailP99 time.Duration
}

// Calls works out the figures of calls. refused is the RESOURCE_EXHAUSTED
// the server sent per Bin from the start of the load; bound is how long a
// call may last by its own bound (0: none known).
func (s Shape) Calls(calls []Call, refused []int, bound time.Duration) CallFigures {
	var r CallFigures
	down, back := s.Warmup, s.Warmup+s.Outage
	refusedAt := func(b int) int {
		if b < 0 || b >= len(refused) {
			return 0
		}
		return refused[b]
	}
	var ok, failed, held []time.Duration
	after, room := map[string]int{}, map[string]int{}
	for _, c := range calls {
		d := c.End - c.Begin
		r.Longest = max(r.Longest, d)
		if c.OK {
			ok = append(ok, d)
		} else {
			failed = append(failed, d)
		}
		outage := c.Begin >= down && c.Begin < back
		if outage {
			r.OutageCalls++
			if c.End >= back {
				r.HeldAtReturn++
			}
			if c.OK {
				r.OutageServed++
				held = append(held, max(c.End-back, 0))
			}
		}
		if c.OK || c.End < back {
			continue
		}
		r.FailedAfter++
		after[c.Reason]++
		if b := int(c.End / Bin); refusedAt(b) == 0 && refusedAt(b-1) == 0 {
			r.FailedRoom++
			room[c.Reason]++
		}
		if outage && (bound == 0 || d < bound) {
			r.OutageFailedEarly++
		}
	}
	r.AfterReasons, r.RoomReasons = ByCount(after), ByCount(room)
	for _, d := range [][]time.Duration{ok, failed, held} {
		slices.Sort(d)
	}
	r.P50, r.P99 = quantile(ok, 0.5), quantile(ok, 0.99)
	r.FailP50, r.FailP99 = quantile(failed, 0.5), quantile(failed, 0.99)
	r.HeldP50, r.HeldP90, r.HeldMax = quantile(held, 0.5), quantile(held, 0.9), quantile(held, 1)
	return r
}

// ReturnFigures is the load the server met after the return.
type ReturnFigures struct {
	// FirstSecond is the attempts that arrived in the first second after
	// the return; ReturnBins the attempts per Bin in its first 3 s.
	FirstSecond int
	ReturnBins  []int
	// PeakAfter is the most attempts that arrived in one Bin after the
	// return, ÷ Capacity × Bin.
	PeakAfter float64
	// Above11 and Above10 are the time after the return spent above 1.1×
	// and above 1.0× Capacity (in whole Bins).
	Above11, Above10 time.Duration
}

// Return works out the return's figures from arrivals, the attempts that
// arrived at the server per Bin from the start of the load.
func (s Shape) Return(arrivals []int) ReturnFigures {
	var r ReturnFigures
	perBin := float64(s.Capacity) * Bin.Seconds()
	rb := int((s.Warmup + s.Outage) / Bin)
	for b := rb; b < len(arrivals); b++ {
		n := float64(arrivals[b])
		r.PeakAfter = max(r.PeakAfter, n/perBin)
		if n > 1.1*perBin {
			r.Above11 += Bin
		}
		if n > perBin {
			r.Above10 += Bin
		}
		if b < rb+int(time.Second/Bin) {
			r.FirstSecond += arrivals[b]
		}
	}
	r.ReturnBins = make([]int, 3*int(time.Second/Bin))
	for i := range r.ReturnBins {
		if rb+i < len(arrivals) {
			r.ReturnBins[i] = arrivals[rb+i]
		}
	}
	return r
}

// Limit is the room's limit for a run: the share of the outage calls that
// an oracle serves, which from the return on sends them, earliest bound
// first, into the room the calls made after the return leave in each Bin
// (Capacity × Bin less those calls, one attempt each: never above
// capacity, as the server refuses past it), each while its bound has not
// passed (Begin + bound; 0: the end of the load). No client can serve
// more of them without pushing a new call out, or one past its bound.
// 0 when the outage had no calls.
func (s Shape) Limit(calls []Call, bound time.Duration) float64 {
	down, back, end := s.Warmup, s.Warmup+s.Outage, s.Warmup+s.Outage+s.After
	var held []time.Duration // the outage calls' bounds
	fresh := make([]int, int((end-back)/Bin)+1)
	for _, c := range calls {
		switch {
		case c.Begin >= down && c.Begin < back && bound > 0:
			held = append(held, c.Begin+bound)
		case c.Begin >= down && c.Begin < back:
			held = append(held, end)
		case c.Begin >= back && c.Begin < end:
			fresh[(c.Begin-back)/Bin]++
		}
	}
	if len(held) == 0 {
		return 0
	}
	slices.Sort(held)
	perBin := float64(s.Capacity) * Bin.Seconds()
	served, room := 0, 0.0
	for b, next := 0, 0; b < len(fresh) && next < len(held); b++ {
		at := back + time.Duration(b)*Bin
		room += max(perBin-float64(fresh[b]), 0)
		for ; next < len(held) && room >= 1; next++ {
			if held[next] > at {
				served++
				room--
			}
		}
		room -= math.Floor(room) // room a Bin leaves unused is gone
	}
	return float64(served) / float64(len(held))
}

// ByCount lists counts, most first, then by reason.
func ByCount(counts map[string]int) []Reason {
	var rs []Reason
	for k, n := range counts {
		rs = append(rs, Reason{k, n})
	}
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Count != rs[j].Count {
			return rs[i].Count > rs[j].Count
		}
		return rs[i].Reason < rs[j].Reason
	})
	return rs
}

// quantile is the q-quantile of sorted, by the nearest rank; 0 for none.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
