package staggerotel

import (
	"context"
	"testing"

	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// The switch shows on a metric: with it on, every call's end is counted
// with stagger.reason "disabled", a success (grpc.status OK) as a failure,
// and not as "success" or "no policy".
func TestSwitchShowsOnCallEnds(t *testing.T) {
	defer interceptor.SetDisabled(interceptor.Disabled())
	interceptor.SetDisabled(true)
	e := newEnv(t, retryConfig, Options{})
	e.get(t, context.Background(), &testingv1.Script{})
	_, _ = e.client.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "failing", FailAttempts: 1}})
	byStatus := map[string]string{}
	for _, dp := range sum(t, collect(t, e.reader), MetricCallEnds) {
		a := attrMap(dp.Attributes)
		byStatus[a["grpc.status"]] = a[AttrReason]
	}
	if byStatus["OK"] != "disabled" || byStatus["UNAVAILABLE"] != "disabled" {
		t.Fatalf("call.ends' reason by status %v, want disabled for OK and UNAVAILABLE", byStatus)
	}
}
