//go:build go1.25

package test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// TestBesideFailureTellsOverload: under hedgeOnPerTryTimeout, an attempt
// that fails with RESOURCE_EXHAUSTED while its retry runs tells the budget
// it is a sign of overload (and of a pushback when it carries one), as the
// same failure does when it ends the call: a Gate's overload rule counts
// it. The attempt ends nothing, so it is not the call's final one.
func TestBesideFailureTellsOverload(t *testing.T) {
	for _, pushback := range []bool{false, true} {
		t.Run(fmt.Sprint("pushback=", pushback), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &admitRecorder{}
				b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, hedgeTimerFile)), interceptor.WithBudget(rec)})
				// Attempt 1 fails at 1.5s, beside its retry (sent at 1.1s),
				// which answers at 1.6s.
				sc := &testingv1.Script{Key: "k", FailAttempts: 1, Code: int32(codes.ResourceExhausted), AttemptDelays: delays(1500*time.Millisecond, 500*time.Millisecond)}
				if pushback {
					sc.Pushback = []string{"100"}
				}
				if _, err := b.client.Get(context.Background(), &testingv1.GetRequest{Script: sc}); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				rec.mu.Lock()
				defer rec.mu.Unlock()
				for _, a := range rec.records {
					if a.Number == 1 {
						if !a.Overload || a.Pushback != pushback || a.Final {
							t.Errorf("pushback %v: the budget heard attempt 1 as %+v; want Overload, Pushback %v, not Final", pushback, a, pushback)
						}
						return
					}
				}
				t.Errorf("pushback %v: the budget heard %+v, nothing of attempt 1", pushback, rec.records)
			})
		})
	}
}
