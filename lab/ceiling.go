package lab

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
	"time"
)

// Ceiling is the success rate an ideal client could reach in cfg's scenario
// (defaults filled in) without ever sending the server more than its
// capacity, for the calls the lab offers (every client's calls, evenly
// spread as Run spreads them). See CeilingOf for the rule. ScenarioSlowReplica
// has no outage: its ceiling is computed without one (1 whenever Rate is at
// most Capacity). The refused scenarios follow the same rule as
// ScenarioUnavailable: the server is as useless while gone as while it
// answers UNAVAILABLE.
func Ceiling(cfg Config) float64 {
	cfg = cfg.Defaults()
	in := CeilingInput{Starts: callStarts(&cfg), Capacity: float64(cfg.Capacity), CallTimeout: cfg.CallTimeout}
	if cfg.Scenario != ScenarioSlowReplica {
		in.OutageStart, in.OutageEnd = cfg.OutageStart, cfg.OutageEnd
	}
	return CeilingOf(in)
}

// CeilingInput describes the calls and the server CeilingOf reckons with.
type CeilingInput struct {
	// Starts are the calls' start times, counted from the start of the
	// load; each element is one call.
	Starts []time.Duration
	// Capacity is the attempts per second the server serves.
	Capacity float64
	// OutageStart and OutageEnd bound the outage, during which the server
	// serves nothing; none when OutageEnd <= OutageStart.
	OutageStart, OutageEnd time.Duration
	// CallTimeout is each call's deadline, counted from its start; 0 or
	// less means none.
	CallTimeout time.Duration
}

// CeilingOf is the success rate (of len(in.Starts) calls) an ideal client
// reaches without ever sending more than in.Capacity attempts per second,
// counted in Bin-wide bins:
//
//   - a call made outside the outage succeeds at once, as long as its bin
//     has capacity left (Capacity × the bin's time outside the outage, whole
//     attempts, in start order);
//   - every other call (made during the outage, or over a full bin) waits
//     for spare capacity: what the calls made at once leave of each bin,
//     spread evenly over the bin's time outside the outage, and the whole
//     capacity once no more calls are made. An outage call waits from
//     OutageEnd, an over-capacity call from its start; each must be served
//     by its deadline (start + CallTimeout).
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
func CeilingOf(in CeilingInput) float64 {
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
	inOutage := func(t time.Duration) bool { return t >= outS && t < outE }
	horizon := starts[n-1] + in.CallTimeout
	bins := int(horizon/Bin) + 1

	// First attempts, bin by bin.
	var waiting []waitingCall
	spare := make([]float64, bins)
	atOnce := 0
	next := 0
	for b := 0; b < bins; b++ {
		from, to := time.Duration(b)*Bin, time.Duration(b+1)*Bin
		capacity := in.Capacity * upTime(from, to, outS, outE).Seconds()
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
		up := upTime(from, to, outS, outE)
		if spare[b] <= 1e-9 || up <= 0 {
			continue
		}
		rate := spare[b] / up.Seconds() // attempts per second over the bin's up time
		for _, piece := range upPieces(from, to, outS, outE) {
			t := piece[0]
			for t < piece[1] {
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
				if end > piece[1] {
					accrued += rate * (piece[1] - t).Seconds()
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

// upTime is how much of [from, to) lies outside the outage [outS, outE).
func upTime(from, to, outS, outE time.Duration) time.Duration {
	var up time.Duration
	for _, p := range upPieces(from, to, outS, outE) {
		up += p[1] - p[0]
	}
	return up
}

// upPieces are the parts of [from, to) outside the outage [outS, outE), in
// order: at most one before it and one after it.
func upPieces(from, to, outS, outE time.Duration) [][2]time.Duration {
	var out [][2]time.Duration
	if e := min(to, outS); from < e {
		out = append(out, [2]time.Duration{from, e})
	}
	if s := max(from, outE); s < to {
		out = append(out, [2]time.Duration{s, to})
	}
	return out
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
