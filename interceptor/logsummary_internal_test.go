package interceptor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"

	"github.com/stagger-go/stagger/policy"
)

// refusedSummary, on a clock the test moves: a backend's first count is
// said at once, the rest when its interval ends, per reason; a backend
// quiet for an interval is forgotten, and its next count said at once;
// two backends count apart.
func TestRefusedSummary(t *testing.T) {
	type line struct {
		msg    string
		fields map[string]any
	}
	var mu sync.Mutex
	var lines []line
	s := newRefusedSummary(logging.LoggerFunc(func(_ context.Context, lvl logging.Level, msg string, kv ...any) {
		if lvl != logging.LevelWarn {
			t.Errorf("level %v, want warn", lvl)
		}
		f := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			f[kv[i].(string)] = kv[i+1]
		}
		mu.Lock()
		lines = append(lines, line{msg, f})
		mu.Unlock()
	}))
	defer func() {
		s.mu.Lock()
		s.timer.Stop()
		s.mu.Unlock()
	}()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	s.now = func() time.Time { return now }
	take := func() []line {
		mu.Lock()
		defer mu.Unlock()
		out := lines
		lines = nil
		return out
	}
	giveUp := func(target string, r policy.Reason) {
		s.count(Event{Kind: EventGiveUp, Target: target, Reason: r})
	}

	giveUp("a", policy.ReasonDeferred)
	if got := take(); len(got) != 1 || got[0].msg != msgRefusedSummary || got[0].fields["stagger.wait_ended"] != 1 || got[0].fields["grpc.target"] != "a" {
		t.Fatalf("first count: %+v, want one line at once", got)
	}
	for i := range 90 {
		now = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		giveUp("a", policy.ReasonBudget)
		giveUp("a", policy.ReasonOutage)
		s.count(Event{Kind: EventHedgeStop, Target: "a", Reason: policy.ReasonBudget})
	}
	giveUp("b", policy.ReasonBudget)
	if got := take(); len(got) != 1 || got[0].fields["grpc.target"] != "b" {
		t.Fatalf("within a's interval: %+v, want only b's first line", got)
	}
	now = t0.Add(refusedLogEvery)
	s.flush()
	got := take()
	if len(got) != 1 {
		t.Fatalf("a's interval ended: %+v, want a's line alone (b's interval has not)", got)
	}
	if f := got[0].fields; f["stagger.budget_refused"] != 90 || f["stagger.outage"] != 90 || f["stagger.hedges_refused"] != 90 || f["stagger.wait_ended"] != 0 || f["stagger.interval"] != "10s" {
		t.Fatalf("a's line %v, want 90 of each but wait_ended over 10s", f)
	}
	now = t0.Add(3 * refusedLogEvery)
	s.flush()
	if got := take(); len(got) != 0 {
		t.Fatalf("nothing counted: %+v, want no line", got)
	}
	s.mu.Lock()
	n := len(s.byTarget)
	s.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d backends kept after a quiet interval, want none", n)
	}
	giveUp("a", policy.ReasonBudget)
	if got := take(); len(got) != 1 {
		t.Fatalf("after a quiet interval: %+v, want the first count at once", got)
	}
}
