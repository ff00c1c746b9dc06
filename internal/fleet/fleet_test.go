package fleet

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ms = time.Millisecond

// TestReturn: the return's figures count the bins from the return on,
// against Capacity × Bin (10 attempts here).
func TestReturn(t *testing.T) {
	s := Shape{Capacity: 100, Warmup: time.Second, Outage: time.Second}
	arrivals := make([]int, 31)
	arrivals[19] = 50 // in the outage: not after the return
	arrivals[20], arrivals[21], arrivals[22] = 12, 11, 5
	arrivals[30] = 3 // past the first second
	got := s.Return(arrivals)
	want := ReturnFigures{FirstSecond: 28, ReturnBins: make([]int, 30), PeakAfter: 1.2, Above11: 100 * ms, Above10: 200 * ms}
	want.ReturnBins[0], want.ReturnBins[1], want.ReturnBins[2], want.ReturnBins[10] = 12, 11, 5, 3
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Return = %+v\nwant     %+v", got, want)
	}
}

// TestCalls: outage calls, held calls, failures after the return (with
// room where the server refused nothing in the failure's Bin and the one
// before), failures before the bound, and nearest-rank quantiles.
func TestCalls(t *testing.T) {
	s := Shape{Warmup: time.Second, Outage: time.Second}
	refused := make([]int, 25)
	refused[24] = 1
	calls := []Call{
		{Begin: 500 * ms, End: 600 * ms, OK: true},      // before the outage
		{Begin: 1200 * ms, End: 2500 * ms, OK: true},    // held, served 0.5 s after the return
		{Begin: 1500 * ms, End: 2350 * ms, Reason: "a"}, // held, failed after with room, early
		{Begin: 1800 * ms, End: 1900 * ms, Reason: "b"}, // failed in the outage
		{Begin: 2100 * ms, End: 2450 * ms, Reason: "a"}, // failed after, the server refusing
	}
	got := s.Calls(calls, refused, time.Second)
	want := CallFigures{
		OutageCalls: 3, OutageServed: 1, HeldAtReturn: 2, OutageFailedEarly: 1,
		HeldP50: 500 * ms, HeldP90: 500 * ms, HeldMax: 500 * ms,
		FailedAfter: 2, FailedRoom: 1,
		AfterReasons: []Reason{{"a", 2}}, RoomReasons: []Reason{{"a", 1}},
		Longest: 1300 * ms, P50: 100 * ms, P99: 1300 * ms, FailP50: 350 * ms, FailP99: 850 * ms,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Calls =\n%+v\nwant\n%+v", got, want)
	}
	if got := s.Calls(calls, refused, 0).OutageFailedEarly; got != 1 {
		t.Errorf("no bound: OutageFailedEarly = %d, want every outage call failed after the return (1)", got)
	}
	if got := s.Calls(calls, refused, 500*ms).OutageFailedEarly; got != 0 {
		t.Errorf("bound 0.5 s: OutageFailedEarly = %d, want 0 (the failure lasted 0.85 s)", got)
	}
}

func TestByCount(t *testing.T) {
	got := ByCount(map[string]int{"b": 2, "a": 2, "c": 5})
	want := []Reason{{"c", 5}, {"a", 2}, {"b", 2}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ByCount = %v, want %v", got, want)
	}
}

func TestChecks(t *testing.T) {
	var errs []string
	bad := func(field, rule string, v any) { errs = append(errs, field+": "+rule) }
	Shape{Clients: 0, Workers: 2, Capacity: 3000, Load: 11, Warmup: 150 * ms, Outage: time.Second, After: time.Second}.
		CheckRoom("Processes", "Concurrency", 100, bad)
	Shape{Warmup: 150 * ms, Outage: time.Second, After: 2 * time.Hour}.CheckTimes(bad)
	want := []string{
		"Processes: must be in [1, 100]",
		"Capacity: must be in [1, Concurrency × 1000] (at least 1 ms per attempt)",
		"Load: must be in (0, 10] (a share of Capacity)",
		"Warmup: must be a whole number of 100ms in [100ms, 1h]",
		"After: must be a whole number of 100ms in [100ms, 1h]",
	}
	if strings.Join(errs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("checks:\n%s\nwant\n%s", strings.Join(errs, "\n"), strings.Join(want, "\n"))
	}
	if d := (Shape{}).WithDefaults(); d.ServiceTime() != 50*ms {
		t.Errorf("default ServiceTime = %v, want 50ms", d.ServiceTime())
	}
}

// TestLimit: the oracle serves the outage calls, earliest bound first, in
// the room the calls after the return leave per Bin (Capacity × Bin = 2
// here), none past its bound, none before the return, none after the load.
func TestLimit(t *testing.T) {
	s := Shape{Capacity: 20, Warmup: time.Second, Outage: time.Second, After: time.Second}
	outage := func(n int, begin time.Duration) []Call {
		var cs []Call
		for range n {
			cs = append(cs, Call{Begin: begin})
		}
		return cs
	}
	// One fresh call per Bin after the return: room 1 a Bin.
	fresh := func(per int) []Call {
		var cs []Call
		for b := range 10 {
			for range per {
				cs = append(cs, Call{Begin: 2*time.Second + time.Duration(b)*Bin})
			}
		}
		return cs
	}
	warm := Call{Begin: 500 * ms} // before the outage: not held
	for _, tc := range []struct {
		name  string
		calls []Call
		bound time.Duration
		want  float64
	}{
		{"no outage calls", []Call{warm}, 0, 0},
		{"no load after: 2 a Bin for 10 Bins", append(outage(30, time.Second), warm), 0, 20.0 / 30},
		{"room 1 a Bin", append(outage(30, time.Second), fresh(1)...), 0, 10.0 / 30},
		{"no room", append(outage(5, time.Second), fresh(2)...), 0, 0},
		{"over capacity is no room", append(outage(5, time.Second), fresh(3)...), 0, 0},
		// Bounds end 1.25 s after Begin: those of the calls begun at 1 s
		// at 2.25 s (three Bins from the return), at 1.5 s at 2.75 s.
		{"bounds", append(outage(10, time.Second), outage(10, 1500*ms)...), 1250 * ms, (6.0 + 10) / 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.Limit(tc.calls, tc.bound); got != tc.want {
				t.Errorf("Limit = %v, want %v", got, tc.want)
			}
		})
	}
}
