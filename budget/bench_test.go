package budget

import (
	"testing"
	"time"
)

// The decide-and-record path as the interceptors drive it: a retry is asked
// for, then its attempt ends. The settings keep each budget in its working
// range (neither empty nor refusing everything) for the whole run, and the
// wrappers read the real clock, as in production.
func benchBudgets(b *testing.B) []struct {
	name string
	bud  Budget
} {
	th, err := newThrottle(ThrottleSettings{MaxTokens: 100, TokenRatio: 1})
	if err != nil {
		b.Fatal(err)
	}
	tb, err := newTokenBucket(TokenBucketSettings{})
	if err != nil {
		b.Fatal(err)
	}
	ra, err := newRatio(RatioSettings{})
	if err != nil {
		b.Fatal(err)
	}
	gate, err := New(DefaultSettings())
	if err != nil {
		b.Fatal(err)
	}
	return []struct {
		name string
		bud  Budget
	}{{"throttle", th}, {"token-bucket", tb}, {"ratio", ra}, {"default-gate", gate}}
}

func decideAndRecord(bud Budget) {
	bud.Record(Attempt{Number: 1, Outcome: Failure})
	if bud.Allow(Request{Number: 2}) {
		bud.Record(Attempt{Number: 2, Outcome: Success})
	}
}

func BenchmarkDecideAndRecord(b *testing.B) {
	for _, c := range benchBudgets(b) {
		b.Run(c.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				decideAndRecord(c.bud)
			}
		})
	}
	for _, c := range benchBudgets(b) {
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					decideAndRecord(c.bud)
				}
			})
		})
	}
}

// A deferred retry's round trip through a Gate that refuses every retry:
// Enter, one Poll (a probe while none is out, else none), Leave; and the
// probe's outcome now and then, so that probes keep going.
func BenchmarkGateEnterPollLeave(b *testing.B) {
	g, err := Deferring(refuseAll{}, DeferSettings{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		w, err := g.Enter(Request{Number: 2}, 0, time.Time{})
		if err != nil {
			b.Fatal(err)
		}
		if a, _, _ := w.Poll(); a == admitProbe {
			g.Record(Attempt{Number: 2, Outcome: Failure, Admission: admitProbe})
		}
		w.Leave()
	}
}

type refuseAll struct{}

func (refuseAll) Record(Attempt)     {}
func (refuseAll) Allow(Request) bool { return false }
func (refuseAll) State() State       { return State{Kind: "refuse"} }

// The paths a Gate adds to every call and every retry, from two goroutines
// at once: a first attempt's success recorded while the gate is settled
// (one atomic load), and a retry asked for (the gate's lock, then the
// budget's).
func BenchmarkGateHotPaths(b *testing.B) {
	g, err := Deferring(&tokenOnly{}, DeferSettings{})
	if err != nil {
		b.Fatal(err)
	}
	g.Record(Attempt{Number: 1, Outcome: Success})
	b.Run("record-success", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				g.Record(Attempt{Number: 1, Outcome: Success})
			}
		})
	})
	b.Run("allow-retry", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				g.Allow(Request{Number: 2})
			}
		})
	})
}

// tokenOnly is a budget that costs nothing and admits every retry: the
// benchmark measures the gate alone.
type tokenOnly struct{}

func (tokenOnly) Record(Attempt)     {}
func (tokenOnly) Allow(Request) bool { return true }
func (tokenOnly) State() State       { return State{} }
