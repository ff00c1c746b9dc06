package test

import (
	"context"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

const middlewareModule = "github.com/grpc-ecosystem/go-grpc-middleware/v2"

// TestMiddlewareCallbackAsTheGuideSays checks what
// docs/migrating-from-go-grpc-middleware.md says of the middleware's
// OnRetryCallback, on the release this test is built with (the oldest lane
// builds the core module's v2.1.0, the newest the workspace's v2.3.4):
// v2.1.0 calls it after every failed attempt, the last included, before
// the pause, with attempt counted from 0; v2.3.4 after the pause, just
// before each retry, from 1.
func TestMiddlewareCallbackAsTheGuideSays(t *testing.T) {
	version := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == middlewareModule {
				version = d.Version
				if d.Replace != nil {
					version = d.Replace.Version
				}
			}
		}
	}
	type heard struct {
		attempt uint
		at      time.Time
	}
	var mu sync.Mutex
	var calls []heard
	srv := testserver.New()
	defer srv.Close()
	const pause = 200 * time.Millisecond
	conn, err := grpc.NewClient(testserver.BufnetTarget, srv.DialOption(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(retry.UnaryClientInterceptor(
			retry.WithMax(3),
			retry.WithBackoff(retry.BackoffLinear(pause)),
			retry.WithCodes(codes.Unavailable),
			retry.WithOnRetryCallback(func(_ context.Context, attempt uint, _ error) {
				mu.Lock()
				calls = append(calls, heard{attempt, time.Now()})
				mu.Unlock()
			}),
		)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = testingv1.NewTestServiceClient(conn).Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: "down", FailAttempts: 100}})
	arrived := srv.Attempts("down")
	mu.Lock()
	defer mu.Unlock()
	if len(arrived) != 3 {
		t.Fatalf("%d attempts, want 3", len(arrived))
	}
	switch version {
	case "v2.1.0":
		// After attempts 1, 2 and 3, numbered 0, 1, 2, each before the
		// pause that follows it.
		if len(calls) != 3 {
			t.Fatalf("v2.1.0: %d callbacks, want 3 (the last attempt's too)", len(calls))
		}
		for i, c := range calls {
			if c.attempt != uint(i) || c.at.Sub(arrived[i].Ended) > pause/2 {
				t.Errorf("v2.1.0: callback %d: attempt %d, %v after attempt %d ended; want %d, at once", i, c.attempt, c.at.Sub(arrived[i].Ended), i+1, i)
			}
		}
	case "v2.3.4":
		// Before attempts 2 and 3, numbered 1 and 2, each after the pause.
		if len(calls) != 2 {
			t.Fatalf("v2.3.4: %d callbacks, want 2", len(calls))
		}
		for i, c := range calls {
			if c.attempt != uint(i+1) || c.at.Sub(arrived[i].Ended) < pause*3/4 || c.at.After(arrived[i+1].Arrived) {
				t.Errorf("v2.3.4: callback %d: attempt %d, %v after attempt %d ended; want %d, after the %v pause and before attempt %d",
					i, c.attempt, c.at.Sub(arrived[i].Ended), i+1, i+1, pause, i+2)
			}
		}
	default:
		t.Skipf("go-grpc-middleware %q: the guide states v2.1.0's and v2.3.4's behaviour only", version)
	}
}
