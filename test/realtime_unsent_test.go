package test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// An attempt that never left the client, on real time over loopback TCP:
// while the port refuses connections, a call's attempt fails at once
// (UNAVAILABLE from grpc's transport, no stream); the Gate hears it as no
// evidence of the server (Outcome Other: its health stays quiet), its
// retry asks the budget nothing and waits for the connection, and goes
// once the port is back: the server sees the call once, as a first try
// (Number 1 to the budget). A server answering UNAVAILABLE is evidence:
// its retries are asked for and its failures counted. Repeated: the
// connectivity state is read after the failure, racing grpc's publishing
// it.
func TestRealTimeRefusedRetryWaitsForChannel(t *testing.T) {
	srv := testserver.New(testserver.WithTCP())
	t.Cleanup(srv.Close)
	inner := &refusingBudget{allow: math.MaxInt}
	gate, err := budget.Deferring(inner, budget.DeferSettings{Mode: budget.DeferOn})
	if err != nil {
		t.Fatal(err)
	}
	// The channel reconnects within 100 ms of the port's return.
	fast := grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 100 * time.Millisecond}, MinConnectTimeout: time.Second})
	cc, err := srv.DialTCP(append(stagger.DialOptions(rtConfig(t, rtNoTimerFile), interceptor.WithBudget(gate)), fast)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := testingv1.NewTestServiceClient(cc)
	get := func(key string, d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key}})
		return err
	}
	if err := get("warm", time.Second); err != nil {
		t.Fatal(err)
	}
	const closed = 300 * time.Millisecond
	for round := range 4 {
		srv.StopServing()
		// The channel fails to connect before the call starts.
		waitState(t, cc, connectivity.TransientFailure)
		inner.take()
		key := fmt.Sprint("refused-", round)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- get(key, 3*time.Second) }()
		// The first attempt fails at once; the Gate heard no failure.
		for deadline := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
			inner.mu.Lock()
			n := len(inner.recorded)
			inner.mu.Unlock()
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no attempt ended within 1 s of a refused connection", round)
			}
		}
		if h := gate.State().Health; h != "quiet" {
			t.Errorf("round %d: after a refused attempt the Gate's health is %q, want quiet (no evidence of the server)", round, h)
		}
		time.Sleep(closed - time.Since(start))
		back := time.Now()
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("round %d: the call failed (%v); its retry should have gone once the port was back", round, err)
		}
		if took := time.Since(start); took < closed {
			t.Errorf("round %d: the call ended after %v, before the port was back", round, took)
		}
		if recs := srv.Attempts(key); len(recs) != 1 {
			t.Errorf("round %d: the server saw %d attempts, want 1", round, len(recs))
		}
		atts, reqs := inner.take()
		if len(reqs) != 0 {
			t.Errorf("round %d: the budget was asked for %d retries (%+v), want none: the refused attempts never reached the server", round, len(reqs), reqs)
		}
		for i, a := range atts {
			last := i == len(atts)-1
			switch {
			case !last && a.Outcome != budget.Other:
				t.Errorf("round %d: refused attempt %d recorded as %v, want other", round, i+1, a.Outcome)
			case last && (a.Outcome != budget.Success || a.Number != 1):
				t.Errorf("round %d: the attempt the server answered recorded as %v number %d, want success number 1", round, a.Outcome, a.Number)
			}
		}
		t.Logf("round %d: %d attempts, served %v after the port was back", round, len(atts), time.Since(back))
	}
	// The server answers UNAVAILABLE: real evidence, its retries asked for.
	srv.SetOutage(true)
	if err := get("outage", time.Second); err == nil {
		t.Fatal("a call in an outage succeeded")
	}
	atts, reqs := inner.take()
	if len(reqs) != 2 || len(atts) != 3 {
		t.Fatalf("server answering UNAVAILABLE: %d retries asked, %d attempts told; want 2 and 3", len(reqs), len(atts))
	}
	for _, a := range atts {
		if a.Outcome != budget.Failure {
			t.Errorf("server answering UNAVAILABLE: attempt %d recorded as %v, want failure", a.Number, a.Outcome)
		}
	}
}

// waitState waits up to 5 s for cc to reach s, asking it to connect.
func waitState(t *testing.T, cc *grpc.ClientConn, s connectivity.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cc.Connect()
	for st := cc.GetState(); st != s; st = cc.GetState() {
		if !cc.WaitForStateChange(ctx, st) {
			t.Fatalf("the channel stayed %v, want %v", st, s)
		}
		cc.Connect()
	}
}
