package interceptor

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/policy"
)

// admitFirst asks the call's breaker for the first attempt (the budget
// pays for retries only). It returns nil, or the call's final error when
// the breaker refused (refused).
func (c *call) admitFirst(ctx context.Context, cc *grpc.ClientConn, grpcOpts []grpc.CallOption) error {
	c.cc = cc
	if c.breakers == nil {
		return nil
	}
	c.br = findBreaker(c.breakers, c.brCache, cc, callTarget(ctx, cc), c.method)
	if err := admitBreaker(ctx, cc, c.br, c.crit, c.o, c.fileOpts, grpcOpts); err != nil {
		return c.refused(ctx, err)
	}
	return nil
}

// admitBreaker asks br for a call's first attempt, and holds a
// waitForReady one until it may go (holdUntilReady).
func admitBreaker(ctx context.Context, cc *grpc.ClientConn, br *breaker.Breaker, crit criticality.Level, o *options, fileOpts, grpcOpts []grpc.CallOption) error {
	if err := br.Admit(crit, o); err != nil {
		return err
	}
	if cc != nil && !br.Settings().NoPacing && waitsForReady(fileOpts, grpcOpts) {
		holdUntilReady(ctx, cc, br)
	}
	return nil
}

// findBreaker returns the breaker in bs of a call of method on target,
// through the method's cache of the first target (nil: none).
func findBreaker(bs *breaker.Set, cache *atomic.Pointer[breakerRef], cc *grpc.ClientConn, target, method string) *breaker.Breaker {
	if cache != nil {
		if r := cache.Load(); r != nil && r.target == target {
			return r.b
		}
	}
	br := bs.Get(canonicalTarget(cc, target), method)
	if cache != nil {
		// The first target only: others are looked up, not allocated for.
		cache.CompareAndSwap(nil, &breakerRef{target: target, b: br})
	}
	return br
}

// refused returns the final error of a call whose breaker refused its
// first attempt with err (UNAVAILABLE, an *Error of no attempts whose
// Unwrap reaches the *breaker.Refusal), and tells the hooks.
func (c *call) refused(ctx context.Context, err error) error {
	reason := policy.ReasonBreaker
	if errors.Is(err, breaker.ErrThrottled) {
		reason = policy.ReasonThrottled
	}
	refused := &refusedError{st: status.New(codes.Unavailable, err.Error()), err: err}
	c.reason = reason
	c.emit(ctx, Event{Kind: EventGiveUp, Method: c.method, Code: codes.Unavailable, Err: refused, Reason: reason})
	return c.failed(0, refused)
}

// waitsForReady reports whether a call with the file's options, then the
// caller's, waits for a ready connection; the last one given wins.
func waitsForReady(fileOpts, opts []grpc.CallOption) bool {
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

// holdUntilReady holds a waitForReady call's first attempt until cc is
// ready, as grpc would, then, when a connection attempt failed meanwhile
// (an outage), for br.Pace: calls queued in an outage reach the server at
// the pace they were sent. It returns when the attempt may go or ctx ends.
func holdUntilReady(ctx context.Context, cc *grpc.ClientConn, br *breaker.Breaker) {
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

// refusedError is a call the breaker refused: the status the caller sees,
// and why (a *breaker.Refusal).
type refusedError struct {
	st  *status.Status
	err error
}

func (e *refusedError) Error() string              { return e.st.Err().Error() }
func (e *refusedError) GRPCStatus() *status.Status { return e.st }
func (e *refusedError) Unwrap() error              { return e.err }
