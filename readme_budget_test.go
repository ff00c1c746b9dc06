package stagger_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stagger-go/stagger/budget"
)

// TestDocsReadmeBudgetArithmetic: README's Defaults say what the default
// budget's bucket does: with 30 % of attempts failing it gains on average
// (a retry that succeeds gets its cost back) and refuses a few retries in
// a hundred; with every attempt failing it pays for one retry. The bucket
// alone (no Gate), fed as the interceptors feed it: 5 attempts at most, a
// retry asked for after each failure.
func TestDocsReadmeBudgetArithmetic(t *testing.T) {
	run := func(p float64, calls int, seed uint64) (st budget.State, asked, refused int, mean float64) {
		s := budget.DefaultSettings()
		s.Defer = budget.DeferSettings{Mode: budget.DeferOff}
		b, err := budget.New(s)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(seed, 58))
		for range calls {
			for n := 1; n <= 5; n++ {
				if n > 1 {
					asked++
					if !b.Allow(budget.Request{Number: n}) {
						refused++
						break
					}
				}
				a := budget.Attempt{Number: n, Outcome: budget.Failure}
				if r.Float64() >= p {
					a.Outcome = budget.Success
				}
				b.Record(a)
				if a.Outcome == budget.Success {
					break
				}
			}
			mean += b.State().Level / float64(calls)
		}
		return b.State(), asked, refused, mean
	}
	for seed := uint64(1); seed <= 5; seed++ {
		st, asked, refused, mean := run(0.3, 5000, seed)
		if refused*100 >= 5*asked || mean < 0.4*st.Capacity {
			t.Errorf("seed %d, 30 %% of attempts failing: %d of %d retries refused, %.0f of %v tokens on average; README says the bucket gains and refuses a few retries in a hundred",
				seed, refused, asked, mean, st.Capacity)
		}
	}
	if st, _, _, _ := run(1, 200, 1); st.Allowed != 1 {
		t.Errorf("every attempt failing: %d retries allowed; README says 1", st.Allowed)
	}
}
