package budget

import (
	tune "github.com/stagger-go/stagger/internal/gatetune"
	"testing"
	"time"
)

// After an outage that ends with first attempts succeeding while nobody
// waits, Allow admits retries again: Record's fast path used to note the
// success for the next slow path but leave the outage flag that Allow
// reads, so a retry after a per-attempt timeout (which asks Allow, and
// cannot wait) was refused until the next failure.
func TestGateAllowAfterOutageEndsWhileNobodyWaits(t *testing.T) {
	clk := &manualClock{now: t0}
	open := &switchBudget{}
	open.open.Store(true)
	g := downServer(newGate(t, open, DeferSettings{}, clk))
	for range tune.Evidence {
		g.Record(Attempt{Number: 1, Outcome: Failure})
	}
	if g.Allow(retry2) {
		t.Fatal("Allow admitted a retry in an outage")
	}
	clk.advance(time.Second)
	g.Record(Attempt{Number: 1, Outcome: Success})
	if !g.Allow(retry2) {
		t.Error("Allow refused a retry after the server served while nobody waited: the outage flag is stale")
	}
	if !g.Allow(Request{Number: 2, AfterTimeout: true}) {
		t.Error("Allow refused a retry after a per-attempt timeout once the outage ended")
	}
}

// The interceptors find how a Gate admitted a retry through Admitter, an
// interface a user's wrapper can implement too.
var _ Admitter = (*Gate)(nil)
