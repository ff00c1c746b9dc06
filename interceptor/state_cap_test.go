package interceptor

import (
	"strconv"
	"testing"

	"github.com/stagger-go/stagger/policy"
)

// A State keeps the budgets and breakers of at most stateCap distinct
// settings: a process whose files cycle through many keeps a bounded
// State, and a call past the bound still gets budgets and breakers of its
// own, the file's settings, only not kept.
func TestStateKeepsAtMostStateCapSettings(t *testing.T) {
	st := new(State)
	n := stateCap + 10
	for i := range n {
		cfg, err := policy.ParseConfig([]byte(`{
			"retryThrottling": {"maxTokens": ` + strconv.Itoa(10+i) + `, "tokenRatio": 0.1},
			"circuitBreaker": {"failureRatio": 0.5, "minimumThroughput": ` + strconv.Itoa(5+i) + `}
		}`))
		if err != nil {
			t.Fatal(err)
		}
		bs := st.budgets(cfg, true)
		if bs == nil {
			t.Fatalf("settings %d: no budgets", i)
		}
		if got, want := bs.Get("t", "/a.S/M").State().Capacity, float64(10+i); got != want {
			t.Fatalf("settings %d: a budget of maxTokens %g, want the file's %g", i, got, want)
		}
		if st.breakers(cfg, nil, true) == nil {
			t.Fatalf("settings %d: no breakers", i)
		}
	}
	if got := len(st.Budgets()); got != stateCap {
		t.Errorf("after %d distinct budget settings the State holds %d, want %d", n, got, stateCap)
	}
	if got := len(st.Breakers()); got != stateCap {
		t.Errorf("after %d distinct breaker settings the State holds %d, want %d", n, got, stateCap)
	}
}
