//go:build go1.25

package test

import (
	"context"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// failFirstStreamAttempts fails every stream's first attempt with
// UNAVAILABLE before its handler runs (Trailers-Only: no headers).
func failFirstStreamAttempts(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if md, _ := metadata.FromIncomingContext(ss.Context()); len(md.Get("grpc-previous-rpc-attempts")) == 0 {
		return status.Error(codes.Unavailable, "first attempts fail")
	}
	return handler(srv, ss)
}

// A retried stream's Header returns the headers of the attempt whose
// messages follow, as grpc-go's own retry does (its interop case
// DoCustomMetadata): it returned the failed first attempt's (none), and
// the messages of the second came after.
func TestStreamHeaderIsTheCommittedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New(testserver.WithServerOptions(grpc.ChainStreamInterceptor(failFirstStreamAttempts)))
		defer srv.Close()
		cc, err := srv.Dial(stagger.DialOptions(parse(t, fastRetryFile), interceptor.WithDefaultBudgets(freshDefaults(t)))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		st, err := testingv1.NewTestServiceClient(cc).ListItems(context.Background(), &testingv1.ListItemsRequest{Script: &testingv1.Script{HeadersFirst: true, ResponseCount: 2}})
		if err != nil {
			t.Fatal(err)
		}
		md, err := st.Header()
		if err != nil || len(md.Get(testserver.HeadersFirstHeader)) != 1 {
			t.Fatalf("Header() = %v, %v; want the second attempt's, with %s", md, err, testserver.HeadersFirstHeader)
		}
		n := 0
		for {
			if _, err := st.Recv(); err != nil {
				if err != io.EOF {
					t.Fatalf("Recv: %v", err)
				}
				break
			}
			n++
		}
		if n != 2 {
			t.Errorf("%d messages, want 2", n)
		}
		if tr := st.Trailer(); tr == nil {
			t.Error("Trailer() is nil after the stream ended")
		}
	})
}

// A stream whose every attempt fails without headers: Header returns nil,
// nil, as grpc-go does, and Recv the final status.
func TestStreamHeaderOfAFailedCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New()
		defer srv.Close()
		cc, err := srv.Dial(stagger.DialOptions(parse(t, fastRetryFile), interceptor.WithDefaultBudgets(freshDefaults(t)))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		st, err := testingv1.NewTestServiceClient(cc).ListItems(context.Background(), &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "down", FailAttempts: 10, ResponseCount: 2}})
		if err != nil {
			t.Fatal(err)
		}
		if md, err := st.Header(); md != nil || err != nil {
			t.Fatalf("Header() = %v, %v; want nil, nil", md, err)
		}
		if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("Recv: %v, want UNAVAILABLE", err)
		}
		if n := len(srv.Attempts("down")); n != 3 {
			t.Errorf("%d attempts, want 3", n)
		}
	})
}

// freshDefaults is stagger's default budgets, new for a test: the
// process's (budget.DefaultBackends) would carry one test's Gate, and its
// synctest bubble's channels, into the next test on the same target.
func freshDefaults(t *testing.T) *budget.Backends {
	t.Helper()
	bs, err := budget.NewBackends(budget.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

// Header against RecvMsg on real time over loopback TCP: every stream's
// first attempt fails without headers; Header, called first or from a
// second goroutine while the first is in Recv, returns the committed
// attempt's headers or nil (never the failed attempt's), and every stream
// delivers its messages once.
func TestRealTimeStreamHeaderBesideRecv(t *testing.T) {
	srv := testserver.New(testserver.WithTCP(), testserver.WithServerOptions(grpc.ChainStreamInterceptor(failFirstStreamAttempts)))
	t.Cleanup(srv.Close)
	cc, err := srv.DialTCP(stagger.DialOptions(rtConfig(t, rtNoTimerFile), interceptor.WithDefaultBudgets(freshDefaults(t)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := testingv1.NewTestServiceClient(cc)
	for i := range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{HeadersFirst: true, ResponseCount: 3}})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		headerDone := make(chan metadata.MD, 1)
		concurrent := i%2 == 1
		readHeader := func() {
			md, err := st.Header()
			if err != nil {
				t.Errorf("stream %d: Header: %v", i, err)
			}
			headerDone <- md
		}
		if concurrent {
			go readHeader()
		} else {
			readHeader()
		}
		n := 0
		for {
			if _, err := st.Recv(); err != nil {
				if err != io.EOF {
					t.Errorf("stream %d: Recv: %v", i, err)
				}
				break
			}
			n++
		}
		md := <-headerDone
		cancel()
		if n != 3 {
			t.Errorf("stream %d: %d messages, want 3", i, n)
		}
		if md != nil && len(md.Get(testserver.HeadersFirstHeader)) != 1 {
			t.Errorf("stream %d: Header() = %v, want the committed attempt's or nil", i, md)
		}
		if !concurrent && md == nil {
			t.Errorf("stream %d: Header() = nil before Recv, want the committed attempt's", i)
		}
	}
}
