package interceptor

import (
	"strconv"
	"testing"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
)

// A reload that changes the budget drops the old budgets from the State
// when the first call follows the new file; a call that read the old file
// just before the reload and builds its plan after gets budgets of its own
// and does not put the dropped ones back (they would linger, and a file
// going back to the old settings would find them).
func TestStateDropsWhatAReloadLeft(t *testing.T) {
	file := func(maxTokens int) *policy.Config {
		t.Helper()
		cfg, err := policy.ParseConfig([]byte(`{"retryThrottling": {"maxTokens": ` + strconv.Itoa(maxTokens) + `, "tokenRatio": 0.1}}`))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if bss := new(State).Budgets(); len(bss) != 0 {
		t.Fatalf("an empty State holds %d budgets", len(bss))
	}
	a, b := file(4), file(5)
	src := policy.NewSource(a)
	k := newCore([]Option{WithConfigSource(src)})
	// A throttle's capacity is its maxTokens.
	capacity := func(bs *budget.Backends) float64 { return bs.Get("t", "/a.S/M").State().Capacity }
	only := func(when string, maxTokens float64) {
		t.Helper()
		bss := k.opts.state.Budgets()
		if len(bss) != 1 || capacity(bss[0]) != maxTokens {
			var got []float64
			for _, bs := range bss {
				got = append(got, capacity(bs))
			}
			t.Fatalf("%s: the State holds budgets of maxTokens %v, want %g alone", when, got, maxTokens)
		}
	}
	k.method(a, "/a.S/M")
	only("a call following the first file", 4)
	if err := src.Update(b); err != nil {
		t.Fatal(err)
	}
	k.method(b, "/a.S/M")
	only("the first call following the new file", 5)
	if mi := k.method(a, "/a.S/N"); mi.plan.budgets == nil || capacity(mi.plan.budgets) != 4 {
		t.Fatal("a call that read the old file should still get the old file's budget")
	}
	only("a call that read the old file before the reload", 5)
}
