//go:build go1.25

package test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// An EventEnd carries the connection's canonical target, as grpc-go's
// OpenTelemetry plugin records it (a grpc.NewClient of "127.0.0.1:port" is
// "dns:///127.0.0.1:port"), and whether the call came from generated code
// (grpc.StaticMethodCallOption) or was a generic one (ClientConn.Invoke,
// NewStream without it): on the fast path, on a retried call and on a
// stream.
func TestEventEndCanonicalTargetAndStaticMethod(t *testing.T) {
	srv := testserver.New()
	defer srv.Close()
	addr, err := srv.StartTCP()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var e ends
	cc, err := grpc.NewClient(addr, append(stagger.DialOptions(cfg, interceptor.WithBudget(nil), interceptor.WithCallHook(e.hook)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	want := "dns:///" + addr
	if got := cc.CanonicalTarget(); got != want {
		t.Fatalf("CanonicalTarget %q, want %q", got, want)
	}
	ctx := context.Background()
	client := testingv1.NewTestServiceClient(cc)
	if _, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: "retried", FailAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := cc.Invoke(ctx, testingv1.TestService_Get_FullMethodName, &testingv1.GetRequest{Script: &testingv1.Script{}}, new(testingv1.GetResponse)); err != nil {
		t.Fatal(err)
	}
	if err := cc.Invoke(ctx, testingv1.TestService_Get_FullMethodName, &testingv1.GetRequest{Script: &testingv1.Script{Key: "generic retried", FailAttempts: 1}}, new(testingv1.GetResponse)); err != nil {
		t.Fatal(err)
	}
	// A server stream, from generated code and as a generic one.
	ls, err := client.ListItems(ctx, &testingv1.ListItemsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	drain(t, ls)
	gs, err := cc.NewStream(ctx, &testingv1.TestService_ServiceDesc.Streams[0], testingv1.TestService_ListItems_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	if err := gs.SendMsg(&testingv1.ListItemsRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := gs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	drain(t, gs)
	events, _ := e.all()
	var got []string
	for _, ev := range events {
		got = append(got, fmt.Sprintf("attempts %d static %v canonical %v target %v", ev.Attempt, ev.StaticMethod, ev.CanonicalTarget == want, ev.Target == addr))
	}
	wantLines := []string{
		"attempts 1 static true canonical true target true",
		"attempts 2 static true canonical true target true",
		"attempts 1 static false canonical true target true",
		"attempts 2 static false canonical true target true",
		"attempts 1 static true canonical true target true",
		"attempts 1 static false canonical true target true",
	}
	if fmt.Sprint(got) != fmt.Sprint(wantLines) {
		t.Errorf("ends:\n%q\nwant\n%q", got, wantLines)
	}
}

// drain receives from s until it ends, and fails t unless it ends with io.EOF.
func drain(t *testing.T, s grpc.ClientStream) {
	t.Helper()
	for {
		if err := s.RecvMsg(new(testingv1.ListItemsResponse)); err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			return
		}
	}
}
