package refusedlog

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
)

// Summary, on a clock the test moves: a backend's first count is
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
	s := New(logging.LoggerFunc(func(_ context.Context, lvl logging.Level, msg string, kv ...any) {
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
		s.Count(target, r, budget.State{})
	}

	giveUp("a", policy.ReasonDeferred)
	if got := take(); len(got) != 1 || got[0].msg != msgRefusedSummary || got[0].fields["stagger.wait_ended"] != 1 || got[0].fields["grpc.target"] != "a" {
		t.Fatalf("first count: %+v, want one line at once", got)
	}
	for i := range 90 {
		now = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		giveUp("a", policy.ReasonBudget)
		giveUp("a", policy.ReasonOutage)
		s.CountHedge("a", budget.State{})
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

// Held, on a clock the test moves: a backend's first deferral is said at
// info level, the ones within an interval after it are not, and one after
// an interval without any is said again; past refusedLogTargets backends
// holding at once, a new one is said as "other", and the backends that
// stopped holding make room again; a flush forgets them too.
func TestHeldSaysWhenHoldingBegins(t *testing.T) {
	var mu sync.Mutex
	var targets []any
	s := New(logging.LoggerFunc(func(_ context.Context, lvl logging.Level, msg string, kv ...any) {
		if lvl != logging.LevelInfo || msg != msgHolding {
			t.Errorf("%v %q, want info %q", lvl, msg, msgHolding)
		}
		mu.Lock()
		targets = append(targets, kv[1])
		mu.Unlock()
	}))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	s.now = func() time.Time { return now }
	take := func() []any {
		mu.Lock()
		defer mu.Unlock()
		out := targets
		targets = nil
		return out
	}
	held := func(target string) { s.Held(target, "/a.S/M", "") }
	for i := range 100 {
		now = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		held("a")
	}
	if got := take(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("10 s of deferrals 100 ms apart: %v, want one line, a's first", got)
	}
	now = now.Add(refusedLogEvery)
	held("a")
	if got := take(); len(got) != 1 {
		t.Fatalf("after a quiet interval: %v, want a's line again", got)
	}
	for i := 1; i < refusedLogTargets; i++ {
		held(fmt.Sprint("t", i))
	}
	held("new")
	held("new2")
	if got := take(); len(got) != refusedLogTargets || got[len(got)-1] != "other" {
		t.Fatalf("%d lines, last %v; want %d, the last as other (then none for the next within its interval)", len(got), got[len(got)-1], refusedLogTargets)
	}
	now = now.Add(refusedLogEvery)
	held("new")
	if got := take(); len(got) != 1 || got[0] != "new" || len(s.holding) != 1 {
		t.Fatalf("an interval later: %v and %d kept, want new's own line and the others forgotten", got, len(s.holding))
	}
	now = now.Add(refusedLogEvery)
	s.flush()
	if len(s.holding) != 0 {
		t.Fatalf("a flush an interval after the last deferral kept %d backends, want none", len(s.holding))
	}
}
