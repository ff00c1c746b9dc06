package sim

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
)

// smallFleet is a fleet small and short enough for tests: 5 processes,
// room for 200 attempts/s (10 at a time), a 2 s outage.
func smallFleet(seed uint64, workers int) FleetConfig {
	return FleetConfig{Processes: 5, Capacity: 200, Concurrency: 10, Load: 0.5,
		Warmup: time.Second, Outage: 2 * time.Second, After: 3 * time.Second, Seed: seed, Workers: workers}
}

func TestFleetDeterministic(t *testing.T) {
	run := func(seed uint64, workers int) []FleetResult {
		t.Helper()
		res, err := Fleet(smallFleet(seed, workers))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b := run(7, 1), run(7, 3)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different results with 1 and 3 workers:\n%+v\n%+v", a, b)
	}
	if c := run(8, 2); reflect.DeepEqual(a, c) {
		t.Fatalf("seeds 7 and 8 gave the same results: %+v", a)
	}
}

// TestFleetServerRefusesPastConcurrency: the lab's server with no queue
// takes an attempt when a worker is free, refuses it otherwise, and the
// refusal costs the next worker to be free a tenth of the service time.
// Each answer reports its busy workers over all (FleetConfig.Reports);
// down, none.
func TestFleetServerRefusesPastConcurrency(t *testing.T) {
	ms := time.Millisecond
	f := &fleetServer{service: 50 * ms, down: time.Hour, back: 2 * time.Hour, free: make([]time.Duration, 2), reports: true}
	for _, step := range []struct {
		at      time.Duration
		refused bool
		util    float64
	}{
		{0, false, 0.5},
		{0, false, 1},
		{0, true, 1},        // both busy until 50 ms; worker 0 works the refusal off until 55 ms
		{50 * ms, false, 1}, // worker 1 is free at 50 ms
		{52 * ms, true, 1},  // worker 0 is free only at 55 ms, then works this refusal off until 60 ms
		{59 * ms, true, 1},  // worker 0 busy until 60 ms, then with this refusal until 65 ms
		{70 * ms, false, 1}, // worker 1 busy until 100 ms, worker 0 with this until 120 ms
	} {
		took, load, err := f.answer(step.at, step.at, 1)
		if load != (budget.Load{Utilization: step.util, Reported: true}) {
			t.Fatalf("attempt at %v: load %+v, want utilization %v", step.at, load, step.util)
		}
		if got := err != nil; got != step.refused {
			t.Fatalf("attempt at %v: refused %v, want %v", step.at, got, step.refused)
		}
		if step.refused && (err != errRefused || took != 0) {
			t.Fatalf("attempt at %v: %v after %v, want RESOURCE_EXHAUSTED at once", step.at, err, took)
		}
		if !step.refused && took != 50*ms {
			t.Fatalf("attempt at %v: served in %v, want the service time", step.at, took)
		}
	}
	if f.refusedBefore != 3 {
		t.Errorf("refusedBefore = %d, want 3", f.refusedBefore)
	}
	if _, load, _ := f.answer(time.Hour, time.Hour, 1); load != (budget.Load{}) {
		t.Errorf("a down server reports %+v, want none", load)
	}
}

// TestFleetSanity: the figures add up, and the contenders differ as their
// policies say: without retries nothing of the outage is served and every
// call is one attempt; plain retries multiply the outage's attempts by
// the policy's 4 and overshoot the room at the return; stagger's Gates
// hold the outage calls and serve some of them after it, without the
// overshoot.
func TestFleetSanity(t *testing.T) {
	cfg := smallFleet(3, 0)
	res, err := Fleet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]FleetResult{}
	for _, r := range res {
		by[r.Contender] = r
		// 100 calls/s for 6 s, evenly.
		if r.Calls != 600 {
			t.Errorf("%s: %d calls, want 600", r.Contender, r.Calls)
		}
		if r.OutageCalls != 200 {
			t.Errorf("%s: %d outage calls, want 200", r.Contender, r.OutageCalls)
		}
		if r.Served > r.Calls || r.OutageServed > r.OutageCalls || r.FailedRoom > r.FailedAfter {
			t.Errorf("%s: counts do not nest: %+v", r.Contender, r)
		}
		reasons := 0
		for _, rr := range r.AfterReasons {
			reasons += rr.Count
		}
		if reasons != r.FailedAfter {
			t.Errorf("%s: reasons count %d failures, FailedAfter %d", r.Contender, reasons, r.FailedAfter)
		}
	}
	nr, rt, st := by["no-retry"], by["retry-3"], by["stagger"]
	if nr.Attempts != nr.Calls || nr.OutageServed != 0 || nr.DownPerCall != 1 || nr.Served != nr.Calls-nr.OutageCalls {
		t.Errorf("no-retry: %+v, want one attempt per call, every call outside the outage served", nr)
	}
	if rt.DownPerCall < 3 || rt.PeakAfter <= 1.1 {
		t.Errorf("retry-3: %.2f attempts per outage call, peak %.2fx: want above 3 (4 attempts, less those past the return) and above 1.1x", rt.DownPerCall, rt.PeakAfter)
	}
	if st.OutageServed <= rt.OutageServed || st.DownPerCall > 1.5 || st.PeakAfter > 1.2 || st.Bound != 10*time.Second {
		t.Errorf("stagger: %d outage calls served (retry-3 %d), %.2f attempts per outage call, peak %.2fx, bound %v: want more served, about one attempt, no overshoot, MaxWait's 10 s",
			st.OutageServed, rt.OutageServed, st.DownPerCall, st.PeakAfter, st.Bound)
	}
}

// TestFleetProcessesOwnGates: each process has its own Gate. One process
// making all the calls learns of the outage from its first failures and
// holds the rest; 50 processes each meet it anew, so more of their first
// failures go unheld: the fleet sends more attempts in the outage.
func TestFleetProcessesOwnGates(t *testing.T) {
	attempts := func(processes int) int {
		t.Helper()
		cfg := smallFleet(1, 0)
		cfg.Processes = processes
		cfg.Contenders = FleetContenders()[:1]
		res, err := Fleet(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res[0].DownAttempts
	}
	if one, many := attempts(1), attempts(50); many <= one {
		t.Errorf("attempts in the outage: %d with 1 process, %d with 50: want more with more Gates", one, many)
	}
}

func TestFleetConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  FleetConfig
		want string
	}{
		{"processes", FleetConfig{Processes: -1}, "Processes: must be in [1, 100000], got -1"},
		{"capacity", FleetConfig{Capacity: 60000}, "Capacity: must be in [1, Concurrency × 1000]"},
		{"load", FleetConfig{Load: 11}, "Load: must be in (0, 10]"},
		{"outage", FleetConfig{Outage: 150 * time.Millisecond}, "Outage: must be a whole number of 100ms"},
		{"call timeout", FleetConfig{CallTimeout: -time.Second}, "CallTimeout: must be in [0, 1h]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Fleet(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestFleetCallsKeepTheirBound: the fleet's processes tell the Gate the
// call's waits so far (Request.Waited), as the interceptors do, so a call
// without a deadline waits MaxWait in all, not in each of its waits: no
// call outlasts its bound by more than its attempts. Each wait bounded
// alone, calls of a 10 s outage ran 19.5 s.
func TestFleetCallsKeepTheirBound(t *testing.T) {
	cfg := smallFleet(1, 0)
	cfg.Outage = 10 * time.Second
	cfg.Contenders = FleetContenders()[:1]
	res, err := Fleet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	if r.Bound != 10*time.Second || r.Longest > r.Bound+time.Second {
		t.Errorf("longest call %v, bound %v: want at most the bound (10 s) and its attempts", r.Longest, r.Bound)
	}
}

// TestFleetEvenArrivals: the fleet's calls are the load's, evenly spaced,
// however many processes share them: a process whose first call would
// come after the load makes none.
func TestFleetEvenArrivals(t *testing.T) {
	for _, processes := range []int{1, 5, 2000} {
		cfg := smallFleet(1, 0)
		cfg.Processes = processes
		cfg.Contenders = FleetContenders()[2:] // no-retry
		res, err := Fleet(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// 100 calls/s for 6 s; 200 of them in the 2 s outage.
		if r := res[0]; r.Calls != 600 || r.OutageCalls != 200 || r.PeakAfter > 0.6 {
			t.Errorf("%d processes: %d calls, %d in the outage, peak %.2fx: want 600, 200, about the load's 0.5x", processes, r.Calls, r.OutageCalls, r.PeakAfter)
		}
	}
}

// TestFleetCallEndsOnce: with a deadline, the Gate may end a held call's
// wait at the very instant of the call's deadline event; the call is
// counted once whichever runs first (it was counted twice, so a fleet
// with deadlines reported more outage calls than it made).
func TestFleetCallEndsOnce(t *testing.T) {
	for _, timeout := range []time.Duration{500 * time.Millisecond, time.Second} {
		cfg := smallFleet(3, 0)
		cfg.CallTimeout = timeout
		res, err := Fleet(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Calls != 600 || r.OutageCalls != 200 || r.Served > r.Calls || r.OutageServed > r.OutageCalls {
				t.Errorf("deadline %v, %s: %d calls (%d served), %d in the outage (%d served): want 600 and 200, each counted once", timeout, r.Contender, r.Calls, r.Served, r.OutageCalls, r.OutageServed)
			}
		}
	}
}

// TestFleetReports: the server's load reports steer the Gate's return
// alone (the contenders without a Gate read nothing of them), and the room's
// limit is a share: at half the capacity and a 2 s outage, with the Gate's
// 10 s bound, the oracle serves every outage call. A fleet of 100 at 80 %
// load, which peaks past 1.2x without reports, stays within 1.1x with them
// and serves at least 60 % of the room's limit (BENCHMARKS.md, "A fleet of
// any size").
func TestFleetReports(t *testing.T) {
	off := smallFleet(5, 0)
	on := off
	on.Reports = true
	a, err := Fleet(off)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Fleet(on)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range a {
		if r.Limit != 1 {
			t.Errorf("%s: Limit %v, want 1 (room for every outage call)", r.Contender, r.Limit)
		}
		if r.Contender != "stagger" && !reflect.DeepEqual(r, b[i]) {
			t.Errorf("reports changed %s's figures:\n%+v\n%+v", r.Contender, r, b[i])
		}
	}
	big := FleetConfig{Processes: 100, Load: 0.8, Seed: 1, Contenders: FleetContenders()[:1]}
	for _, reports := range []bool{false, true} {
		big.Reports = reports
		res, err := Fleet(big)
		if err != nil {
			t.Fatal(err)
		}
		r := res[0]
		served := float64(r.OutageServed) / float64(r.OutageCalls) / r.Limit
		t.Logf("reports %v: peak %.2fx, outage calls served %.2f of the room's limit", reports, r.PeakAfter, served)
		switch {
		case !reports && r.PeakAfter <= 1.2:
			t.Errorf("without reports: peak %.2fx, want past 1.2x (else this test no longer shows what reports do)", r.PeakAfter)
		case reports && (r.PeakAfter > 1.1 || served < 0.6):
			t.Errorf("with reports: peak %.2fx, outage calls served %.2f of the room's limit; want at most 1.1x and at least 0.6", r.PeakAfter, served)
		}
	}
}
