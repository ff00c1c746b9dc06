//go:build go1.25

package test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// One backend is one backend however it is spelled: two ClientConns that
// dial "127.0.0.1:P" and "dns:///127.0.0.1:P" (one canonical target) share
// one budget and one Gate per method, kept under the canonical target, as
// the metrics' grpc.target is; the Report keeps each call's target as
// dialled.
func TestTwoSpellingsShareOneBudget(t *testing.T) {
	srv := testserver.New()
	defer srv.Close()
	addr, err := srv.StartTCP()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := budget.NewBackends(budget.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	cfg := parse(t, retryFile)
	for _, target := range []string{addr, "dns:///" + addr} {
		cc, err := grpc.NewClient(target, append(stagger.DialOptions(cfg, interceptor.WithDefaultBudgets(bs)),
			grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		var r interceptor.Report
		if _, err := testingv1.NewTestServiceClient(cc).Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: target}}, interceptor.WithReport(&r)); err != nil {
			t.Fatal(err)
		}
		// A stream goes through the same budget.
		ls, err := testingv1.NewTestServiceClient(cc).ListItems(context.Background(), &testingv1.ListItemsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		drain(t, ls)
		if r.Target != target {
			t.Errorf("the report's target %q, want %q as dialled", r.Target, target)
		}
		_ = cc.Close()
	}
	targets := map[string]bool{}
	for _, s := range bs.States() {
		targets[s.Target] = true
	}
	if len(targets) != 1 || !targets["dns:///"+addr] {
		t.Fatalf("the budget keeps targets %v, want one: dns:///%s", targets, addr)
	}
}

// A stream with interceptor.Disable has a Report too: one attempt, reason
// disabled, and its code once it ended (grpc.OnFinish).
func TestDisableReportOfAStream(t *testing.T) {
	srv := testserver.New()
	defer srv.Close()
	cc, err := srv.Dial(stagger.DialOptions(parse(t, retryFile), interceptor.WithBudget(nil))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var r interceptor.Report
	ls, err := testingv1.NewTestServiceClient(cc).ListItems(context.Background(), &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "s", FailAttempts: 1}},
		interceptor.Disable(), interceptor.WithReport(&r))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err = ls.Recv(); err != nil {
			break
		}
	}
	if r.Attempts != 1 || r.Reason.String() != "disabled" || r.Code != codes.Unavailable {
		t.Fatalf("the stream ended %v; report %+v, want 1 attempt, reason disabled, UNAVAILABLE", err, r)
	}
}
