package budget

import (
	"math"
	"testing"

	"github.com/stagger-go/stagger/criticality"
)

// levelsUnset is every level a request can name, Unset first.
var levelsUnset = [...]criticality.Level{criticality.Unset, criticality.Sheddable, criticality.SheddablePlus, criticality.Critical, criticality.CriticalPlus}

// The reserve by criticality, level by level, at the thresholds
// Request.Criticality states, for each budget kind: a retry of each level
// is allowed at exactly the least level the rule allows it at, and refused
// a thousandth of a token (or one retry) below. Unset sits where CRITICAL
// does, and CRITICAL where the kind put every retry before levels existed.
func TestBudgetReserveByLevel(t *testing.T) {
	// The least tokens (or the most retries in the window) at which a
	// retry of each level is allowed, by level index.
	t.Run("token bucket", func(t *testing.T) {
		// Capacity 100, cost 5: tokens − 5 must be at least 25 (SHEDDABLE),
		// 12.5, 0 (CRITICAL, as before: tokens ≥ cost) and −20.
		least := map[criticality.Level]float64{
			criticality.Unset: 5, criticality.Sheddable: 30, criticality.SheddablePlus: 17.5,
			criticality.Critical: 5, criticality.CriticalPlus: -15,
		}
		for _, l := range levelsUnset {
			for _, tc := range []struct {
				tokens float64
				want   bool
			}{{least[l], true}, {least[l] - 0.001, false}} {
				b, err := newTokenBucket(TokenBucketSettings{Capacity: 100, RetryCost: 5})
				if err != nil {
					t.Fatal(err)
				}
				b.tokens.Store(int64(math.Round(tc.tokens * milli)))
				if got := b.Allow(Request{Number: 2, Criticality: l}); got != tc.want {
					t.Errorf("%v at %.3f tokens: Allow = %v, want %v", l, tc.tokens, got, tc.want)
				}
			}
		}
	})
	t.Run("throttle", func(t *testing.T) {
		// MaxTokens 10: tokens must be above 5 + 5 × 0.25 (SHEDDABLE),
		// 5 + 5 × 0.125, 5 (gRFC A6) and 5 − 5 × 0.2.
		above := map[criticality.Level]float64{
			criticality.Unset: 5, criticality.Sheddable: 6.25, criticality.SheddablePlus: 5.625,
			criticality.Critical: 5, criticality.CriticalPlus: 4,
		}
		for _, l := range levelsUnset {
			for _, tc := range []struct {
				tokens float64
				want   bool
			}{{above[l] + 0.001, true}, {above[l], false}} {
				b, err := newThrottle(ThrottleSettings{MaxTokens: 10, TokenRatio: 0.1})
				if err != nil {
					t.Fatal(err)
				}
				b.tokens.Store(int64(math.Round(tc.tokens * milli)))
				if got := b.Allow(Request{Number: 2, Criticality: l}); got != tc.want {
					t.Errorf("%v at %.3f tokens: Allow = %v, want %v", l, tc.tokens, got, tc.want)
				}
			}
		}
	})
	t.Run("ratio", func(t *testing.T) {
		// 200 requests at 10 %: an allowance of 20 retries, of which
		// SHEDDABLE may take 15, SHEDDABLE_PLUS 17.5, CRITICAL 20 and
		// CRITICAL_PLUS 24.
		most := map[criticality.Level]int{
			criticality.Unset: 20, criticality.Sheddable: 15, criticality.SheddablePlus: 17,
			criticality.Critical: 20, criticality.CriticalPlus: 24,
		}
		for _, l := range levelsUnset {
			clk := &manualClock{now: t0}
			b, err := newRatio(RatioSettings{Percent: 10}, WithClock(clk.Now))
			if err != nil {
				t.Fatal(err)
			}
			for range 200 {
				b.Record(Attempt{Number: 1, Outcome: Success})
			}
			// Fill the window with CRITICAL_PLUS retries up to one less
			// than the level's most, then ask twice.
			for i := range most[l] - 1 {
				if !b.Allow(Request{Number: 2, Criticality: criticality.CriticalPlus}) {
					t.Fatalf("%v: filler retry %d refused", l, i+1)
				}
			}
			if !b.Allow(Request{Number: 2, Criticality: l}) {
				t.Errorf("%v: retry %d refused, want allowed", l, most[l])
			}
			if b.Allow(Request{Number: 2, Criticality: l}) {
				t.Errorf("%v: retry %d allowed, want refused", l, most[l]+1)
			}
		}
	})
}

// A token bucket's CRITICAL_PLUS debt: successes pay it back (a reward is
// not lost to the clamp at 0), and no other level spends until it is paid.
func TestTokenBucketCriticalPlusDebt(t *testing.T) {
	b, err := newTokenBucket(TokenBucketSettings{Capacity: 100, Initial: 5, RetryCost: 5, SuccessReward: 1})
	if err != nil {
		t.Fatal(err)
	}
	plus := Request{Number: 2, Criticality: criticality.CriticalPlus}
	critical := Request{Number: 2, Criticality: criticality.Critical}
	for i := range 5 {
		if !b.Allow(plus) {
			t.Fatalf("CRITICAL_PLUS retry %d refused", i+1)
		}
	}
	if got := b.State().Level; got != -20 {
		t.Fatalf("level after five CRITICAL_PLUS retries = %v, want -20", got)
	}
	if b.Allow(plus) {
		t.Fatal("CRITICAL_PLUS went past its reserve")
	}
	// A failure takes nothing; 24 first-try successes pay 24 of the 25.
	b.Record(Attempt{Number: 2, Outcome: Failure, Admission: AdmitNone})
	for range 24 {
		b.Record(Attempt{Number: 1, Outcome: Success})
	}
	if got := b.State().Level; got != 4 {
		t.Fatalf("level after 24 rewards = %v, want 4", got)
	}
	if b.Allow(critical) {
		t.Fatal("CRITICAL spent while the debt left less than its cost")
	}
	b.Record(Attempt{Number: 1, Outcome: Success})
	if !b.Allow(critical) {
		t.Fatal("CRITICAL refused at its cost")
	}
}
