// Package ceiling computes the success rate an ideal retry client could reach
// without ever sending a server more than its capacity: the ceiling the storm
// lab (package lab) and `stagger sim` print beside their figures. It lives in
// the core module so that the stagger command, which prints it for `stagger
// sim`, builds without the lab's module.
package ceiling

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
	"time"
)

// Bin is the width of the bins Of counts capacity in: the lab's load series'
// bins (lab.Bin is this).
const Bin = 100 * time.Millisecond

// Input describes the calls and the server Of reckons with.
type Input struct {
	// Starts are the calls' start times, counted from the start of the
	// load; each element is one call.
	Starts []time.Duration
	// Capacity is the attempts per second the server serves.
	Capacity float64
	// OutageStart and OutageEnd bound the outage, during which the server
	// serves OutageCapacity; none when OutageEnd <= OutageStart.
	OutageStart, OutageEnd time.Duration
	// OutageCapacity is the attempts per second the server serves during
	// the outage; 0, nothing (a server that is down).
	OutageCapacity float64
	// CallTimeout is each call's deadline, counted from its start; 0 or
	// less means none.
	CallTimeout time.Duration
}

// Of is the success rate (of len(in.Starts) calls) an ideal client
// reaches without ever sending more than in.Capacity attempts per second,
// counted in Bin-wide bins:
//
//   - a call made outside the outage succeeds at once, as long as its bin
//     has capacity left (Capacity × the bin's time outside the outage, plus
//     OutageCapacity × its time in it, whole attempts, in start order); so
//     does a call made in the outage when OutageCapacity is not 0;
//   - every other call (made during an outage that serves nothing, or over
//     a full bin) waits for spare capacity: what the calls made at once
//     leave of each bin, spread over the bin's time in proportion to the
//     capacity at each instant, and the whole capacity once no more calls
//     are made. An outage call waits from OutageEnd, an over-capacity call
//     from its start; each must be served by its deadline (start +
//     CallTimeout).
//
// The spare capacity is cut into slots of one attempt each, in time order;
// each slot serves, among the waiting calls whose wait began by the slot's
// start and whose deadline is not before the slot's end, the one with the
// earliest deadline (greedy earliest-deadline-first over unit slots, which
// serves as many as any order could). While no call waits, the capacity is
// lost, and the next slot begins when the next call's wait begins; a slot
// under way when a call's wait begins is not used for that call, so the
// figure errs low by at most a slot per such edge. Without a deadline every
// call is served in the end, and the ceiling is 1. With no calls it is 0.
//
// The ideal client sends first attempts at once, as every retry layer does;
// one that could also hold back first attempts within their deadlines (to
// let older calls go first) could do better.
func Of(in Input) float64 {
	n := len(in.Starts)
	if n == 0 || !(in.Capacity > 0) {
		return 0
	}
	if in.CallTimeout <= 0 {
		return 1
	}
	starts := slices.Clone(in.Starts)
	slices.Sort(starts)
	outS, outE := in.OutageStart, in.OutageEnd
	if outE <= outS {
		outS, outE = math.MaxInt64, math.MaxInt64 // no outage
	}
	down := !(in.OutageCapacity > 0)
	inOutage := func(t time.Duration) bool { return down && t >= outS && t < outE }
	pieces := func(from, to time.Duration) []capacityPiece {
		return capacityPieces(from, to, outS, outE, in.Capacity, in.OutageCapacity)
	}
	horizon := starts[n-1] + in.CallTimeout
	bins := int(horizon/Bin) + 1

	// First attempts, bin by bin.
	var waiting []waitingCall
	spare := make([]float64, bins)
	atOnce := 0
	next := 0
	for b := 0; b < bins; b++ {
		from, to := time.Duration(b)*Bin, time.Duration(b+1)*Bin
		capacity := binCapacity(pieces(from, to))
		room := int(math.Floor(capacity + 1e-9))
		used := 0
		for ; next < n && starts[next] < to; next++ {
			s := starts[next]
			switch {
			case inOutage(s):
				waiting = append(waiting, waitingCall{release: outE, deadline: s + in.CallTimeout})
			case used < room:
				used++
			default:
				waiting = append(waiting, waitingCall{release: s, deadline: s + in.CallTimeout})
			}
		}
		atOnce += used
		spare[b] = capacity - float64(used)
	}
	if len(waiting) == 0 {
		return float64(atOnce) / float64(n)
	}
	slices.SortStableFunc(waiting, func(x, y waitingCall) int { return cmp.Compare(x.release, y.release) })

	// Spare capacity, cut into one-attempt slots.
	var (
		ready     deadlineHeap
		released  int
		served    int
		accrued   float64 // capacity accrued towards the slot under way
		slotBegun bool
	)
	for b := 0; b < bins && (released < len(waiting) || ready.Len() > 0); b++ {
		from, to := time.Duration(b)*Bin, time.Duration(b+1)*Bin
		ps := pieces(from, to)
		capacity := binCapacity(ps)
		if spare[b] <= 1e-9 || capacity <= 0 {
			continue
		}
		for _, piece := range ps {
			// The spare attempts per second at this piece's instants.
			rate := piece.rate * spare[b] / capacity
			t := piece.from
			for t < piece.to {
				if !slotBegun {
					// A slot serves the calls waiting when it begins.
					for released < len(waiting) && waiting[released].release <= t {
						heap.Push(&ready, waiting[released].deadline)
						released++
					}
					if ready.Len() == 0 {
						if released == len(waiting) {
							break
						}
						// Nobody can use the capacity before the next
						// call's wait begins: the next slot begins then.
						t = waiting[released].release
						continue
					}
					slotBegun, accrued = true, 0
				}
				need := (1 - accrued) / rate
				end := max(t+time.Duration(math.Round(need*float64(time.Second))), t+1)
				if end > piece.to {
					accrued += rate * (piece.to - t).Seconds()
					break
				}
				for ready.Len() > 0 && ready[0] < end {
					heap.Pop(&ready) // can no longer be served in time
				}
				if ready.Len() > 0 {
					heap.Pop(&ready)
					served++
				}
				slotBegun, t = false, end
			}
		}
	}
	return float64(atOnce+served) / float64(n)
}

type waitingCall struct{ release, deadline time.Duration }

// capacityPiece is a part of time, [from, to), over which the server
// serves rate attempts per second.
type capacityPiece struct {
	from, to time.Duration
	rate     float64
}

// capacityPieces are the parts of [from, to) in which the server serves
// something, in order: before the outage [outS, outE) at up attempts per
// second, in it at down, after it at up again; parts serving nothing are
// left out.
func capacityPieces(from, to, outS, outE time.Duration, up, down float64) []capacityPiece {
	var out []capacityPiece
	add := func(f, t time.Duration, rate float64) {
		if f < t && rate > 0 {
			out = append(out, capacityPiece{f, t, rate})
		}
	}
	add(from, min(to, outS), up)
	add(max(from, outS), min(to, outE), down)
	add(max(from, outE), to, up)
	return out
}

// binCapacity is the attempts the pieces serve together.
func binCapacity(ps []capacityPiece) float64 {
	var c float64
	for _, p := range ps {
		c += p.rate * (p.to - p.from).Seconds()
	}
	return c
}

// deadlineHeap is a min-heap of deadlines.
type deadlineHeap []time.Duration

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
