// Package connready holds a waitForReady call's first attempt until its
// connection is ready, as grpc would, and then, after an outage, for the
// breaker's pace.
package connready

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/stagger-go/stagger/breaker"
)

// WaitsForReady reports whether a call with the file's options, then the
// caller's, waits for a ready connection; the last one given wins.
func WaitsForReady(fileOpts, opts []grpc.CallOption) bool {
	wfr := false
	for _, list := range [2][]grpc.CallOption{fileOpts, opts} {
		for _, o := range list {
			if ff, ok := o.(grpc.FailFastCallOption); ok {
				wfr = !ff.FailFast
			}
		}
	}
	return wfr
}

// Hold holds a waitForReady call's first attempt until cc is
// ready, as grpc would, then, when a connection attempt failed meanwhile
// (an outage), for br.Pace: calls queued in an outage reach the server at
// the pace they were sent. It returns when the attempt may go or ctx ends.
func Hold(ctx context.Context, cc *grpc.ClientConn, br *breaker.Breaker) {
	held := false
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if s == connectivity.Shutdown {
			return
		}
		if s == connectivity.Idle {
			cc.Connect()
		}
		held = held || s == connectivity.TransientFailure
		if !cc.WaitForStateChange(ctx, s) {
			return
		}
	}
	if !held {
		return
	}
	if d := br.Pace(); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}
