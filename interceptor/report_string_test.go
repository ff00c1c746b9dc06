package interceptor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc/codes"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/policy"
)

// TestReportString: a Report prints what happened and nothing else; a
// zero one prints nothing (its zero TimerReason is not "retry").
func TestReportString(t *testing.T) {
	if got := fmt.Sprint(Report{}); got != "" {
		t.Errorf("zero Report prints %q, want nothing", got)
	}
	if got := fmt.Sprintf("%+v", Report{Attempts: 1, Reason: policy.ReasonSuccess}); strings.Contains(got, "timeout") || strings.Contains(got, "retry") {
		t.Errorf("a call whose timer refused nothing prints %q", got)
	}
	r := Report{
		Attempts: 2, Retries: 1, Delay: 30 * time.Millisecond, Reason: policy.ReasonDeferred, Code: codes.Unavailable,
		Target: "dns:///payments:443", Criticality: criticality.Sheddable,
		Budget: budget.State{Kind: "token-bucket", Level: 0.4, Capacity: 10, Health: "outage", Waiting: 3},
	}
	want := "2 attempts (1 retries), ended: deferred, code Unavailable, backend dns:///payments:443 (its Gate sees it down, budget 0.4 of 10, 3 calls waiting), paused 30ms, criticality SHEDDABLE"
	if got := r.String(); got != want {
		t.Errorf("Report prints\n%q, want\n%q", got, want)
	}
	r = Report{Attempts: 1, Reason: policy.ReasonSuccess, TimerRefused: 1, TimerReason: policy.ReasonBudget}
	if got := r.String(); !strings.Contains(got, "1 attempts ran past their timeout (budget refused the retry)") {
		t.Errorf("Report prints %q: no word of the timer's refusal", got)
	}
	r = Report{Attempts: 1, Reason: policy.ReasonSuccess, Load: budget.Load{Utilization: 0.42, Reported: true}}
	if got := r.String(); !strings.Contains(got, ", backend reports 42% utilization") {
		t.Errorf("Report prints %q: no word of the backend's load report", got)
	}
	r.Load = budget.Load{Malformed: true}
	if got := r.String(); strings.Contains(got, "utilization") {
		t.Errorf("Report prints %q: a malformed report says no utilization", got)
	}
}

// TestDeferredLogLine: the log line of a deferred retry has a constant
// message and names the backend and what its budget and Gate make of it
// in attributes.
func TestDeferredLogLine(t *testing.T) {
	var msg string
	fields := map[string]any{}
	o := options{logger: logging.LoggerFunc(func(_ context.Context, _ logging.Level, m string, kv ...any) {
		msg = m
		for i := 0; i+1 < len(kv); i += 2 {
			fields[kv[i].(string)] = kv[i+1]
		}
	})}
	o.emit(context.Background(), Event{Kind: EventDeferred, Target: "dns:///payments:443", Budget: budget.State{Kind: "token-bucket", Level: 2, Capacity: 10, Health: "failing"}})
	if msg != msgDeferred {
		t.Errorf("message %q, want the constant %q", msg, msgDeferred)
	}
	if fields["grpc.target"] != "dns:///payments:443" || fields["stagger.gate"] != "failing" || fields["stagger.budget.level"] != 2.0 {
		t.Errorf("fields %v: want the target, the Gate's health and the level", fields)
	}
}

// TestReportStringBreaker: a call a breaker ended reports its state.
func TestReportStringBreaker(t *testing.T) {
	r := Report{Attempts: 0, Reason: policy.ReasonBreaker, Code: codes.Unavailable, Target: "dns:///payments:443",
		Breaker: breaker.Snapshot{Key: "dns:///payments:443 /shop.Pay/Get", State: breaker.StateOpen, Requests: 20, Failures: 12}}
	if got, want := r.String(), "0 attempts, ended: breaker, code Unavailable, backend dns:///payments:443 (breaker open, 12 of 20 first attempts failed in its window)"; got != want {
		t.Errorf("Report prints\n%q, want\n%q", got, want)
	}
}
