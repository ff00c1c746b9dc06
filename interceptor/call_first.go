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
	"github.com/stagger-go/stagger/policy"
)

// A call's first attempt asks the circuit breaker alone (the budget pays
// for retries): admitFirst, or the fast path written out
// (unaryInterceptor).

// admitFirst finds the call's circuit breaker (for cc's target) and asks it
// for the first attempt. It returns nil, or the call's final error when the
// breaker is open or throttling rejected the attempt: UNAVAILABLE, with a
// message that names the breaker, as an *Error of no attempts whose
// Unwrap reaches the *breaker.Refusal.
func (c *call) admitFirst(ctx context.Context, cc *grpc.ClientConn, grpcOpts []grpc.CallOption) error {
	c.cc = cc
	if c.breakers == nil {
		return nil
	}
	c.br = findBreaker(c.breakers, c.brCache, cc, callTarget(ctx, cc), c.method)
	err := c.br.Admit(c.crit, c.o)
	if err == nil {
		if cc != nil && !c.br.Settings().NoPacing && waitsForReady(c.fileOpts, grpcOpts) {
			holdUntilReady(ctx, cc, c.br)
		}
		return nil
	}
	return c.refused(ctx, err)
}

// findBreaker returns the breaker in bs of a call of method on target,
// cc's (nil: a front end's), through cache (nil: none), the method's cache
// of the first target it was called on; bs keys it by the canonical
// target (canonicalTarget), as the budgets are.
func findBreaker(bs *breaker.Set, cache *atomic.Pointer[breakerRef], cc *grpc.ClientConn, target, method string) *breaker.Breaker {
	if cache != nil {
		if r := cache.Load(); r != nil && r.target == target {
			return r.b
		}
	}
	br := bs.Get(canonicalTarget(cc, target), method)
	if cache != nil {
		// The first target only: a method called on several targets
		// looks the others up, rather than allocate on every switch.
		cache.CompareAndSwap(nil, &breakerRef{target: target, b: br})
	}
	return br
}

// refused returns the final error of a call whose breaker (c.br) refused
// its first attempt with err, and tells the hooks and the logger.
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
// caller's, waits for a ready connection (grpc.WaitForReady(true)); the last
// one given wins, as in grpc.
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
// ready, as grpc would; when the wait saw a connection attempt fail
// (TRANSIENT_FAILURE: the server was gone, not a first connection), it then
// holds it for the start br.Pace gives it, so that the calls that queued
// during an outage reach the recovering server at the pace the process sent
// them instead of all at once. An idle connection is asked to connect. It
// returns when the attempt may go, or when ctx ends (the attempt then fails
// at once with the caller's status, as it would in grpc).
func holdUntilReady(ctx context.Context, cc *grpc.ClientConn, br *breaker.Breaker) {
	held := false
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
		case connectivity.Shutdown:
			return
		default:
			if s == connectivity.Idle {
				cc.Connect()
			}
			held = held || s == connectivity.TransientFailure
			if !cc.WaitForStateChange(ctx, s) {
				return
			}
			continue
		}
		break
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

// refusedError is a call stagger refused before its first attempt: the
// status the caller sees, and why (a *breaker.Refusal).
type refusedError struct {
	st  *status.Status
	err error
}

func (e *refusedError) Error() string              { return e.st.Err().Error() }
func (e *refusedError) GRPCStatus() *status.Status { return e.st }
func (e *refusedError) Unwrap() error              { return e.err }
