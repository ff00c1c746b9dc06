// Package connready holds a waitForReady call's first attempt until its
// connection is ready, as grpc would, and then, after an outage, for the
// breaker's pace; and a retry whose attempt never left the client until
// its connection is ready (Ready).
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
	if held, ready := wait(ctx, cc); !held || !ready {
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

// MaxWait bounds Ready's wait for a call without a deadline: a Gate's
// default DeferSettings.MaxWait, the longest a call without one is held.
const MaxWait = 10 * time.Second

// Ready waits, no sooner than pause, until cc is ready, and reports
// whether it is (false: ctx ended first, or cc shut down).
func Ready(ctx context.Context, cc *grpc.ClientConn, pause time.Duration) bool {
	if pause > 0 {
		t := time.NewTimer(pause)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
	}
	_, ready := wait(ctx, cc)
	return ready
}

// wait waits until cc is ready (ready), asking an idle one to connect;
// held: it saw a connection attempt fail meanwhile.
func wait(ctx context.Context, cc *grpc.ClientConn) (held, ready bool) {
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if s == connectivity.Shutdown {
			return held, false
		}
		if s == connectivity.Idle {
			cc.Connect()
		}
		held = held || s == connectivity.TransientFailure
		if !cc.WaitForStateChange(ctx, s) {
			return held, false
		}
	}
	return held, true
}
