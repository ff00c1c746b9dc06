package breaker

import (
	"errors"
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
)

// TestThrottleCap: the rejection probability a Refusal and the Snapshot
// report is the SRE book's, capped at maxThrottleRejection; a draw at or
// above it is let through however few of the window's requests the server
// accepted.
func TestThrottleCap(t *testing.T) {
	for _, tc := range []struct {
		name              string
		requests, accepts uint64
		u                 float64 // the random draw
		wantP             float64 // 0: let through
	}{
		{"served every one", 100, 100, 0, 0},
		{"served half, K = 2", 100, 50, 0, 0},
		{"served a third", 300, 100, 0, (301 - 1 - 200) / 301.0},
		{"served a twentieth: at the cap", 100, 5, 0, maxThrottleRejection},
		{"served none: at the cap", 100, 0, 0, maxThrottleRejection},
		{"served none, a draw above the cap goes", 100, 0, maxThrottleRejection, 0},
		{"served none, a draw just below the cap is rejected", 100, 0, maxThrottleRejection - 1e-9, maxThrottleRejection},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &manualClock{now: t0}
			var changes []Change
			b := newTestBreaker(t, Settings{NoTrip: true, ThrottleK: 2}, clk, &changes, WithRandom(func() float64 { return tc.u }))
			l := criticality.Critical.Index()
			b.w.Add(t0, counter(l, brRequests), tc.requests)
			b.w.Add(t0, counter(l, brAccepts), tc.accepts)
			b.lastSent[l] = t0 // the probe rule is not due
			b.storeMayThrottle(true)
			err := b.Admit(criticality.Critical, nil)
			var r *Refusal
			switch {
			case tc.wantP == 0 && err != nil:
				t.Fatalf("Admit = %v, want nil", err)
			case tc.wantP > 0 && (!errors.As(err, &r) || !errors.Is(err, ErrThrottled)):
				t.Fatalf("Admit = %v, want a throttling Refusal", err)
			case tc.wantP > 0 && (r.P-tc.wantP > 1e-9 || tc.wantP-r.P > 1e-9):
				t.Fatalf("Refusal.P = %v, want %v", r.P, tc.wantP)
			}
			if p := b.Snapshot().ThrottleP; p > maxThrottleRejection {
				t.Fatalf("Snapshot().ThrottleP = %v, above the cap %v", p, maxThrottleRejection)
			}
		})
	}
}

// TestThrottleProbeRule: however high the probability, a level whose
// first attempts the throttle let none go for throttleProbeEvery lets the
// next one go; the one after it draws again.
func TestThrottleProbeRule(t *testing.T) {
	clk := &manualClock{now: t0}
	var changes []Change
	b := newTestBreaker(t, Settings{NoTrip: true, ThrottleK: 2}, clk, &changes, WithRandom(func() float64 { return 0 }))
	shed := criticality.Sheddable
	// Two seconds of a server that serves nothing, 10 first attempts a
	// second: the first is let through (no counts yet); after it the
	// probability rejects (u = 0) all but a probe a second.
	let := 0
	for i := range 20 {
		if err := b.Admit(shed, nil); err == nil {
			let++
			b.Record(budget.Failure, true, shed, nil)
		} else if i < 1 {
			t.Fatalf("attempt %d throttled: %v", i, err)
		}
		clk.advance(100 * time.Millisecond)
	}
	clk.advance(throttleProbeEvery)
	if err := b.Admit(shed, nil); err != nil {
		t.Fatalf("no probe after %v without a first attempt let go: %v", throttleProbeEvery, err)
	}
	b.Record(budget.Failure, true, shed, nil)
	if err := b.Admit(shed, nil); !errors.Is(err, ErrThrottled) {
		t.Fatalf("the attempt right after a probe: %v, want throttled (u = 0)", err)
	}
	if let > 3 {
		t.Fatalf("%d of 20 first attempts let go against a server that served none, want at most 3 (the first, a probe a second)", let)
	}
}

// TestThrottleBackRule: after an outage that filled the window with
// requests the server did not serve, the first first attempt served ends
// the throttling at once; a server that serves now and then (accepts
// within half a window) stays throttled.
func TestThrottleBackRule(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lastOK   time.Duration // before the success, since the last accept
		wantBack bool
	}{
		{"down for the whole window", 10 * time.Second, true},
		{"down for half the window", 5 * time.Second, true},
		{"served a second ago", time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &manualClock{now: t0}
			var changes []Change
			b := newTestBreaker(t, Settings{NoTrip: true, ThrottleK: 2}, clk, &changes, WithRandom(func() float64 { return 0 }))
			clk.advance(20 * time.Second)
			l := criticality.Critical
			now := clk.Now()
			b.w.Add(now, counter(l.Index(), brRequests), 100)
			b.lastAccept[l.Index()] = now.Add(-tc.lastOK)
			b.lastSent[l.Index()] = now.Add(-throttleProbeEvery) // a probe is due
			b.storeMayThrottle(true)
			if err := b.Admit(l, nil); err != nil {
				t.Fatalf("the probe: %v", err)
			}
			b.Record(budget.Success, true, l, nil)
			err := b.Admit(l, nil)
			if back := err == nil; back != tc.wantBack {
				t.Fatalf("after a served probe: Admit = %v, want back %v", err, tc.wantBack)
			}
			if s := b.Snapshot(); tc.wantBack && (s.Requests != 1 || s.Accepts != 1) {
				t.Fatalf("window after the back rule: %d requests, %d accepts; want 1 and 1 (the outage's forgotten)", s.Requests, s.Accepts)
			}
		})
	}
}
