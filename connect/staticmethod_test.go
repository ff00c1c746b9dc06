package staggerconnect_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// A call of a generated client (its Spec carries the method's Schema) is a
// registered method, as grpc-go's generated code marks its calls, so that
// staggerotel records its name rather than "other"; its end carries the
// host as CanonicalTarget.
func TestGeneratedClientIsStaticMethod(t *testing.T) {
	p := protocols[0]
	ts := newTestServer(t, p.h2c, nil)
	var mu sync.Mutex
	var got []string
	hook := interceptor.WithCallHook(func(_ context.Context, e interceptor.Event) {
		if e.Kind != interceptor.EventEnd {
			return
		}
		mu.Lock()
		got = append(got, fmt.Sprintf("%s static %v canonical is target %v", e.Method, e.StaticMethod, e.CanonicalTarget != "" && e.CanonicalTarget == e.Target))
		mu.Unlock()
	})
	client := ts.testClient(p, newClient(t, retryFile, hook))
	ctx := context.Background()
	if _, err := client.Get(ctx, connect.NewRequest(&testingv1.GetRequest{Script: &testingv1.Script{Key: "get", FailAttempts: 1}})); err != nil {
		t.Fatal(err)
	}
	st, err := client.ListItems(ctx, connect.NewRequest(&testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "list", ResponseCount: 2}}))
	if err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/stagger.testing.v1.TestService/Get static true canonical is target true",
		"/stagger.testing.v1.TestService/ListItems static true canonical is target true",
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ends:\n%q\nwant\n%q", got, want)
	}
}
