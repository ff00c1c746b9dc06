package lab

import (
	"math"
	"testing"
	"time"
)

func msList(ms ...int) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m) * time.Millisecond
	}
	return out
}

func TestCeilingOf(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name string
		in   CeilingInput
		want float64
	}{
		{
			// 10 calls, one per 100 ms; capacity 20/s (2 per bin); outage
			// [200, 500) ms; deadline 350 ms. 7 calls outside the outage
			// succeed at once, each bin keeping 1 attempt spare. The
			// outage calls at 200, 300, 400 ms (deadlines 550, 650, 750)
			// wait from 500 ms; the slots after it end at 600, 700, ...:
			// the first can no longer serve the call due at 550, serves
			// the one due at 650; the second serves the one due at 750.
			name: "outage calls served by the spare capacity after it",
			in: CeilingInput{Starts: msList(0, 100, 200, 300, 400, 500, 600, 700, 800, 900), Capacity: 20,
				OutageStart: 200 * ms, OutageEnd: 500 * ms, CallTimeout: 350 * ms},
			want: 9.0 / 10,
		},
		{
			// The same with a 2 s deadline: the spare capacity serves all 3.
			name: "every outage call in time",
			in: CeilingInput{Starts: msList(0, 100, 200, 300, 400, 500, 600, 700, 800, 900), Capacity: 20,
				OutageStart: 200 * ms, OutageEnd: 500 * ms, CallTimeout: 2 * time.Second},
			want: 1,
		},
		{
			// No spare capacity before the deadlines: 2 calls per bin,
			// 1 per bin of capacity, no outage, deadline 100 ms. The calls at
			// 0 and 100 succeed at once; those at 50 and 150 wait, and the
			// first spare slot (after the last call, from 200 ms, 100 ms
			// long) ends at 300 ms, after both deadlines (150 and 250).
			name: "over capacity, no spare in time",
			in:   CeilingInput{Starts: msList(0, 50, 100, 150), Capacity: 10, CallTimeout: 100 * ms},
			want: 2.0 / 4,
		},
		{
			// The same with a 200 ms deadline: the slot ending at 300 ms
			// serves the call due at 350.
			name: "over capacity, served after the load",
			in:   CeilingInput{Starts: msList(0, 50, 100, 150), Capacity: 10, CallTimeout: 200 * ms},
			want: 3.0 / 4,
		},
		{
			// The server is gone from 0 to 200 ms; the calls at 0, 10, ...,
			// 90 ms are due at 100-190 ms: whatever the capacity, none can
			// be served.
			name: "outage calls due before the recovery",
			in:   CeilingInput{Starts: msList(0, 10, 20, 30, 40, 50, 60, 70, 80, 90), Capacity: 1e6, OutageEnd: 200 * ms, CallTimeout: 100 * ms},
			want: 0,
		},
		{
			// The same server back at 100 ms: the call due at 100 ms cannot
			// be served (a slot takes time), the 9 others can.
			name: "outage call due at the recovery",
			in:   CeilingInput{Starts: msList(0, 10, 20, 30, 40, 50, 60, 70, 80, 90), Capacity: 1e6, OutageEnd: 100 * ms, CallTimeout: 100 * ms},
			want: 9.0 / 10,
		},
		{
			// The first case's server at a quarter of its capacity in the
			// outage (5/s): half an attempt per bin, 1.5 in all, which the
			// outage calls cannot have at once (a bin has no whole attempt
			// of room). The spare capacity, from 200 ms, is 5/s in the
			// outage and 10/s after: slots end at 400 ms (serving the call
			// of 200 ms, due at 550), 550 (the call of 300 ms, due at 650)
			// and 650 (the call of 400 ms, due at 750). Without it, 9 of 10.
			name: "outage at a quarter of the capacity",
			in: CeilingInput{Starts: msList(0, 100, 200, 300, 400, 500, 600, 700, 800, 900), Capacity: 20,
				OutageStart: 200 * ms, OutageEnd: 500 * ms, OutageCapacity: 5, CallTimeout: 350 * ms},
			want: 1,
		},
		{
			// At half the capacity every bin of the outage has a whole
			// attempt for its call.
			name: "outage at half the capacity",
			in: CeilingInput{Starts: msList(0, 50, 100, 150, 200, 250, 300, 350, 400, 450), Capacity: 20,
				OutageStart: 200 * ms, OutageEnd: 400 * ms, OutageCapacity: 10, CallTimeout: 10 * ms},
			want: 8.0 / 10,
		},
		{"no deadline", CeilingInput{Starts: msList(0, 1, 2), Capacity: 1, OutageStart: 0, OutageEnd: 5 * ms}, 1},
		{"no calls", CeilingInput{Capacity: 10, CallTimeout: time.Second}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CeilingOf(tc.in); math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("CeilingOf = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCeilingDefaults(t *testing.T) {
	for _, tc := range []struct {
		scenario Scenario
		want     float64
	}{
		// 400 calls/s, one every 2.5 ms, 3200 in 8 s. The 2400 made outside
		// [2 s, 4 s) succeed at once, leaving 100 attempts/s: from 4 s, a
		// slot every 10 ms, the one ending at 4 s + 10k ms serving the
		// outage call made at 2 s + 10k ms, due then; the last outage call
		// (3.9975 s) is due before the 200th slot ends at 6 s: 199.
		{ScenarioUnavailable, 2599.0 / 3200},
		{ScenarioRefused, 2599.0 / 3200},
		{ScenarioRefusedWait, 2599.0 / 3200},
		// 75 outage calls of 400, due at 4 s or later, and 450 attempts/s
		// spare from 3.5 s.
		{ScenarioBlip, 1},
		{ScenarioSlowReplica, 1},
		// 400 calls/s for 10 s, 4000 calls; in the overload [2 s, 6 s)
		// 250/s: each 100 ms bin serves 25 of its 40 calls at once, the
		// other 15 wait, with no spare capacity until 6 s. From 6 s 100
		// attempts/s are spare, a slot every 10 ms until 8 s, when the
		// last waiting calls (made before 6 s) are due: 200 slots, the
		// first of which (ending at 6.01 s) serves a call made after
		// 4.01 s; the last, ending at 8 s, none. 2400 + 1000 + 199.
		{ScenarioOverload, 3599.0 / 4000},
	} {
		if got := Ceiling(Config{Scenario: tc.scenario}); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Ceiling(%s) = %v, want %v", tc.scenario, got, tc.want)
		}
	}
}

func TestCallStartsMatchTheOfferedCalls(t *testing.T) {
	// tinyConfig's run offers 60 calls (TestRunAccounting).
	c := tinyConfig().Defaults()
	if n := len(callStarts(&c)); n != 60 {
		t.Errorf("callStarts gives %d calls, want 60", n)
	}
	c = Config{}.Defaults()
	if n := len(callStarts(&c)); n != 3200 {
		t.Errorf("callStarts gives %d calls at the defaults, want 3200", n)
	}
}

func TestCeilingLargeCapacityIsQuick(t *testing.T) {
	// About a slot per waiting call, not one per attempt of capacity (2^30
	// a second). 200 calls in the outage; the one made at 2 s is due at 4 s,
	// when the outage ends, and cannot be served.
	c := Config{Capacity: 1 << 30, Rate: 100}.Defaults()
	if got, want := Ceiling(c), 799.0/800; got != want {
		t.Errorf("Ceiling = %v, want %v", got, want)
	}
}
