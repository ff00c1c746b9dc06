package lab

import (
	"errors"
	"regexp"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/internal/fleet"
	"github.com/stagger-go/stagger/testserver"
)

// FleetReport is a fleet run's configuration (defaults filled in) and its
// results, in the order of FleetConfig.Contenders.
type FleetReport struct {
	Config  FleetConfig
	Results []FleetResult
	// Wall is how long the run took.
	Wall time.Duration
}

// FleetResult is what one contender's fleet did. Times "after the return"
// count from the end of the outage; "outage calls" are the calls made
// during it. Every count of attempts is the server's own (its records of
// each call's attempts) unless it says client.
type FleetResult struct {
	Contender string
	// Calls is the calls made; Served those that succeeded.
	Calls, Served int
	// Load is the attempts that arrived at the server per Bin, from the
	// start of the load; Refused the RESOURCE_EXHAUSTED it sent per Bin.
	Load, Refused []int
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
	// RefusedBefore is the RESOURCE_EXHAUSTED the server sent during the
	// warmup (the baseline of the load alone); RefusedAfter those it sent
	// after the return, of which RefusedFresh hit first attempts of
	// calls made after the return.
	RefusedBefore, RefusedAfter, RefusedFresh int
	// OutageCalls is the calls made during the outage, OutageServed those
	// of them that succeeded, HeldAtReturn those still in flight at the
	// return, OutageLate those whose first attempt reached the server
	// only after the return (a late first attempt finds it serving).
	OutageCalls, OutageServed, HeldAtReturn, OutageLate int
	// HeldP50, HeldP90 and HeldMax are when the outage calls that
	// succeeded finished, after the return.
	HeldP50, HeldP90, HeldMax time.Duration
	// FailedAfter is the calls that failed after the return; FailedRoom
	// those of them that failed while the server had room: it refused
	// nothing in the Bin of the failure and the Bin before.
	// RoomReasons counts FailedRoom by error (the rule, for stagger's
	// give-ups, and the text, digits as #), most first; AfterReasons,
	// FailedAfter.
	FailedAfter, FailedRoom   int
	RoomReasons, AfterReasons []FleetReason
	// Longest is the longest call (from its start to its return).
	Longest time.Duration
	// P50 and P99 are of the calls that succeeded, FailP50 and FailP99 of
	// those that failed.
	P50, P99, FailP50, FailP99 time.Duration
	// DownAttempts is the attempts that arrived during the outage;
	// DownPerCall, DownAttempts ÷ OutageCalls.
	DownAttempts int
	DownPerCall  float64
	// Limit is the room's limit: the share of the outage calls an oracle
	// serves, sending them from the return on, earliest bound first, into
	// the room the calls made after the return leave, never above
	// Capacity, each before its bound (Deadline; without one, the default
	// Gate's MaxWait).
	Limit float64
	// Reported is the calls whose stagger Report says an answer to them
	// carried a load report (Reports; the other layers say nothing).
	Reported int
	// ClientAttempts is the attempts the clients began (their stats
	// handlers; transparent retries not counted); ServerReceived the
	// server's Stats.Received, RecordedAttempts its records of the calls'
	// attempts, ServerRefused the RESOURCE_EXHAUSTED among them and
	// ServerUnavailable the UNAVAILABLE (the outage's). The first three
	// agree when nothing was lost. ServerRejected is the server's
	// Stats.Rejected: ServerRefused + ServerUnavailable.
	ClientAttempts                                     int
	ServerReceived, ServerRejected                     int64
	RecordedAttempts, ServerRefused, ServerUnavailable int
	// Cut is the calls the lab cancelled past Drain.
	Cut int
	// The machine: IssueLateP99 and IssueLateMax are how late the clients
	// made their calls against their schedule; ReachP99 and ReachMax how
	// long a call's first attempt took to reach the server (its record's
	// arrival − the call's start; a retry layer that holds first attempts
	// adds to it); CPU is the cores the process used, on average, while
	// the contender ran (its server's and the lab's included; 0 where the
	// platform does not say).
	IssueLateP99, IssueLateMax, ReachP99, ReachMax time.Duration
	CPU                                            float64
}

// FleetReason is a kind of failure and how many calls failed so.
type FleetReason = fleet.Reason

var digits = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// fleetReason is the kind of failure err is: when stagger gave up, its
// reason and the rule of the Gate's wait contract that ended a wait (rule,
// Report.WaitEnd), else the status code; then the error's text with its
// numbers as #.
func fleetReason(err error, rule string) string {
	text := digits.ReplaceAllString(err.Error(), "#")
	var e *interceptor.Error
	if errors.As(err, &e) {
		why := e.Reason.String()
		if rule != "" {
			why += "/" + rule
		}
		return why + ": " + text
	}
	return status.Code(err).String() + ": " + text
}

// summarizeFleet works out a contender's figures from its calls and its
// server's records of their attempts.
func summarizeFleet(cfg *FleetConfig, name string, calls []*fleetCall, srv *testserver.Server, t0 time.Time) FleetResult {
	r := FleetResult{Contender: name, Calls: len(calls)}
	down, back := t0.Add(cfg.Warmup), t0.Add(cfg.Warmup+cfg.Outage)
	bin := func(t time.Time) int { return int(t.Sub(t0) / Bin) }
	count := func(s *[]int, b int) {
		if b < 0 || b >= maxSeconds*int(time.Second/Bin) {
			return
		}
		for len(*s) <= b {
			*s = append(*s, 0)
		}
		(*s)[b]++
	}
	var reach []time.Duration
	timed := make([]fleet.Call, 0, len(calls))
	for _, c := range calls {
		recs := srv.Attempts(c.key)
		r.RecordedAttempts += len(recs)
		if c.begin.IsZero() {
			// Never began: the run was cut before its goroutine ran.
			c.begin, c.end = c.scheduled, c.scheduled
		}
		for _, a := range recs {
			count(&r.Load, bin(a.Arrived))
			if !a.Arrived.Before(down) && a.Arrived.Before(back) {
				r.DownAttempts++
			}
			if a.Attempt == 1 {
				reach = append(reach, max(a.Arrived.Sub(c.begin), 0))
				if !c.begin.Before(down) && c.begin.Before(back) && !a.Arrived.Before(back) {
					r.OutageLate++
				}
			}
			switch {
			case a.Rejected && a.Code == codes.ResourceExhausted:
				r.ServerRefused++
				count(&r.Refused, bin(a.Arrived))
				switch {
				case a.Arrived.Before(down):
					r.RefusedBefore++
				case !a.Arrived.Before(back):
					r.RefusedAfter++
					if a.Attempt == 1 && !c.begin.Before(back) {
						r.RefusedFresh++
					}
				}
			case a.Rejected && a.Code == codes.Unavailable:
				r.ServerUnavailable++
			}
		}
		if c.reported {
			r.Reported++
		}
		switch {
		case c.ok:
			r.Served++
		case c.code == codes.Canceled:
			r.Cut++
		}
		timed = append(timed, fleet.Call{Begin: c.begin.Sub(t0), End: c.end.Sub(t0), OK: c.ok, Reason: c.reason})
	}
	s := cfg.shape()
	cf := s.Calls(timed, r.Refused, 0)
	r.OutageCalls, r.OutageServed, r.HeldAtReturn = cf.OutageCalls, cf.OutageServed, cf.HeldAtReturn
	r.HeldP50, r.HeldP90, r.HeldMax = cf.HeldP50, cf.HeldP90, cf.HeldMax
	r.FailedAfter, r.FailedRoom, r.RoomReasons, r.AfterReasons = cf.FailedAfter, cf.FailedRoom, cf.RoomReasons, cf.AfterReasons
	r.Longest, r.P50, r.P99, r.FailP50, r.FailP99 = cf.Longest, cf.P50, cf.P99, cf.FailP50, cf.FailP99
	rf := s.Return(r.Load)
	r.FirstSecond, r.ReturnBins, r.PeakAfter, r.Above11, r.Above10 = rf.FirstSecond, rf.ReturnBins, rf.PeakAfter, rf.Above11, rf.Above10
	if r.OutageCalls > 0 {
		r.DownPerCall = float64(r.DownAttempts) / float64(r.OutageCalls)
	}
	bound := cfg.Deadline
	if bound == 0 {
		bound = budget.DefaultSettings().WithDefaults().Defer.MaxWait
	}
	r.Limit = s.Limit(timed, bound)
	slices.Sort(reach)
	r.ReachP99, r.ReachMax = percentile(reach, 0.99), percentile(reach, 1)
	return r
}
