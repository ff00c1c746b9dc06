package lab

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/testserver"
)

// maxSeconds bounds a timeline, so that a clock jump cannot exhaust
// memory.
const maxSeconds = 1 << 16

// callLog collects the calls' outcomes.
type callLog struct {
	// keyed: keep every call that has a script key in keyedCalls.
	keyed bool

	mu         sync.Mutex
	calls      int
	latencies  []time.Duration // of successful calls
	failures   []time.Duration // of failed calls
	firsts     []time.Duration // to the first message, of successful streams
	all        []loggedCall
	keyedCalls []keyedCall
	// levels counts the calls by the criticality the lab gave them
	// (ScenarioMixedCriticality), by criticality.Level.Index.
	levels [4]levelCount
}

// loggedCall is one call: when it began and returned, and whether it
// succeeded.
type loggedCall struct {
	begin, end time.Time
	ok         bool
}

// keyedCall is one call whose attempts the servers recorded under key.
type keyedCall struct {
	key        string
	begin, end time.Time
	ok         bool
}

func (l *callLog) add(key string, ok bool, begin, end time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if ok {
		l.latencies = append(l.latencies, end.Sub(begin))
	} else {
		l.failures = append(l.failures, end.Sub(begin))
	}
	l.all = append(l.all, loggedCall{begin, end, ok})
	if l.keyed && key != "" {
		l.keyedCalls = append(l.keyedCalls, keyedCall{key, begin, end, ok})
	}
}

func summarize(cfg *Config, name string, log *callLog, counter *attemptCounter, arrivals []int64, st testserver.Stats, t0 time.Time) Result {
	r := Result{Contender: name, Calls: log.calls, Successes: len(log.latencies)}
	counter.mu.Lock()
	r.Attempts, r.OutageAttempts = counter.attempts, counter.outage
	perSecond := slices.Clone(counter.perSecond)
	counter.mu.Unlock()
	if r.Calls > 0 {
		r.AttemptsPerCall = float64(r.Attempts) / float64(r.Calls)
		r.SuccessRate = float64(r.Successes) / float64(r.Calls)
	}
	r.OutageLoad = outageLoad(cfg, r.OutageAttempts)
	crit, shed := log.levels[criticality.Critical.Index()], log.levels[criticality.Sheddable.Index()]
	r.CriticalCalls, r.CriticalSuccess = crit.calls, crit.rate()
	r.SheddableCalls, r.SheddableSuccess = shed.calls, shed.rate()
	r.Goodput = goodput(cfg, log.all, t0)
	if st.Work > 0 {
		r.Wasted = float64(st.Wasted) / float64(st.Work)
	}
	r.Timeline = timeline(cfg, log.all, perSecond, t0)
	if cfg.Scenario.HasTrigger() {
		r.Recovered, r.Recover = recovery(cfg, log.all, t0)
		gap := AfterGap
		if cfg.Scenario == ScenarioChain {
			gap = 0
		}
		after := t0.Add(cfg.OutageEnd + gap)
		ok := 0
		for _, c := range log.all {
			if !c.begin.Before(after) {
				r.CallsAfter++
				if c.ok {
					ok++
				}
			}
		}
		if r.CallsAfter > 0 {
			r.SuccessAfter = float64(ok) / float64(r.CallsAfter)
		}
	}
	r.Load = make([]int, len(arrivals))
	perBin := float64(cfg.Capacity) * Bin.Seconds()
	for b, n := range arrivals {
		r.Load[b] = int(n)
		at := time.Duration(b) * Bin
		if at >= cfg.OutageEnd && at < cfg.Duration {
			r.PeakAfter = max(r.PeakAfter, float64(n)/perBin)
		}
	}
	counter.mu.Lock()
	peaks := counter.flight.peaks()
	counter.mu.Unlock()
	r.PeakInFlight, r.PeakAttemptsInFlight, r.PeakWaiting = peaks[flightCall], peaks[flightAttempt], peaks[flightWaiting]
	if cfg.Scenario.HasTrigger() {
		counter.mu.Lock()
		r.MeanInFlight = counter.flight.mean(flightCall, t0.Add(cfg.OutageStart), t0.Add(cfg.OutageEnd))
		counter.mu.Unlock()
	}
	lat := slices.Clone(log.latencies)
	slices.Sort(lat)
	r.P50, r.P99, r.P999 = percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 0.999)
	fails := slices.Clone(log.failures)
	slices.Sort(fails)
	r.FailP50, r.FailP99 = percentile(fails, 0.5), percentile(fails, 0.99)
	firsts := slices.Clone(log.firsts)
	slices.Sort(firsts)
	r.FirstP50, r.FirstP99, r.FirstP999 = percentile(firsts, 0.5), percentile(firsts, 0.99), percentile(firsts, 0.999)
	return r
}

// timeline is Result.Timeline: the calls, their outcomes and the attempts
// (perSecond, from the attemptCounter) per second from t0, over Duration
// and whatever seconds the last calls took beyond it.
func timeline(cfg *Config, calls []loggedCall, perSecond []int, t0 time.Time) []Second {
	n := int((cfg.Duration + time.Second - 1) / time.Second)
	n = max(n, len(perSecond))
	second := func(t time.Time) int {
		if t.Before(t0) {
			return -1
		}
		return min(int(t.Sub(t0)/time.Second), maxSeconds-1)
	}
	for _, c := range calls {
		n = max(n, second(c.end)+1)
	}
	out := make([]Second, n)
	for i, a := range perSecond {
		out[i].Attempts = a
	}
	for _, c := range calls {
		if b := second(c.begin); b >= 0 {
			out[b].Calls++
			if c.ok {
				out[b].CallsSucceeded++
			}
		}
		if e := second(c.end); e >= 0 && c.ok {
			out[e].Successes++
		}
	}
	return out
}

// recovery is Result.Recovered and Recover: the first whole second k
// after the trigger's end from which the calls made in every second
// [OutageEnd + j s, OutageEnd + (j+1) s), j >= k, until Duration succeed
// at RecoverThreshold or more.
func recovery(cfg *Config, calls []loggedCall, t0 time.Time) (bool, time.Duration) {
	end := t0.Add(cfg.OutageEnd)
	n := int((cfg.Duration - cfg.OutageEnd + time.Second - 1) / time.Second)
	if n <= 0 {
		return false, 0
	}
	made, ok := make([]int, n), make([]int, n)
	for _, c := range calls {
		if c.begin.Before(end) {
			continue
		}
		if j := int(c.begin.Sub(end) / time.Second); j < n {
			made[j]++
			if c.ok {
				ok[j]++
			}
		}
	}
	k := n // none of the seconds yet
	for j := n - 1; j >= 0; j-- {
		if made[j] > 0 && float64(ok[j]) < RecoverThreshold*float64(made[j]) {
			break
		}
		k = j
	}
	if k == n {
		return false, 0
	}
	return true, time.Duration(k) * time.Second
}

// goodput is Result.Goodput.
func goodput(cfg *Config, calls []loggedCall, t0 time.Time) float64 {
	from := time.Duration(0)
	if cfg.Scenario.HasTrigger() {
		from = cfg.OutageStart
	}
	// What the server could serve over [from, Duration), summed by the
	// millisecond; where it limits nothing, what was offered.
	var capacity float64
	const step = time.Millisecond
	for t := from; t < cfg.Duration; t += step {
		c := cfg.CapacityAt(t)
		if math.IsInf(c, 1) {
			c = cfg.Rate
		}
		capacity += c * step.Seconds()
	}
	if capacity <= 0 {
		return 0
	}
	lo, hi := t0.Add(from), t0.Add(cfg.Duration)
	ok := 0
	for _, c := range calls {
		if c.ok && !c.end.Before(lo) && c.end.Before(hi) {
			ok++
		}
	}
	return float64(ok) / capacity
}

// outageLoad is Result.OutageLoad for attempts made during the outage: ÷
// what the server can serve in that time, its capacity when up (Capacity),
// in ScenarioOverload the reduced capacity, in the slowdowns the slowed
// one.
func outageLoad(cfg *Config, attempts int) float64 {
	capacity := float64(cfg.Capacity)
	switch {
	case cfg.Scenario.overloaded():
		capacity = cfg.ReducedCapacity()
	case cfg.Scenario.slowed():
		capacity /= cfg.Slow
	}
	return float64(attempts) / (capacity * (cfg.OutageEnd - cfg.OutageStart).Seconds())
}

// percentile is the nearest-rank percentile of sorted values; 0 for none.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
