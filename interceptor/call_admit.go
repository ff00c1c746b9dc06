package interceptor

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/internal/connready"
	"github.com/stagger-go/stagger/internal/holdset"
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
// waitForReady one until it may go (connready.Hold).
func admitBreaker(ctx context.Context, cc *grpc.ClientConn, br *breaker.Breaker, crit criticality.Level, o *options, fileOpts, grpcOpts []grpc.CallOption) error {
	if err := br.Admit(crit, o); err != nil {
		return err
	}
	if cc != nil && !br.Settings().NoPacing && connready.WaitsForReady(fileOpts, grpcOpts) {
		connready.Hold(ctx, cc, br)
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

// refusedError is a call the breaker refused: the status the caller sees,
// and why (a *breaker.Refusal).
type refusedError struct {
	st  *status.Status
	err error
}

func (e *refusedError) Error() string              { return e.st.Err().Error() }
func (e *refusedError) GRPCStatus() *status.Status { return e.st }
func (e *refusedError) Unwrap() error              { return e.err }

// pause waits d before a stream's next attempt (a unary call's loop waits
// in its select). It returns nil, or the call's final error when callCtx
// ended first (pauseEnded).
func (c *call) pause(callCtx context.Context, d time.Duration, last error) error {
	if c.deferReq != nil || c.awaitReady {
		return c.waitDeferred(callCtx, d, last)
	}
	if d > 0 {
		start := time.Now()
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-callCtx.Done():
			t.Stop()
		}
		c.paused(time.Since(start))
	}
	return c.pauseEnded(callCtx, last)
}

// pauseEnded ends a pause: nil, or, when callCtx ended, the call's final
// error: CANCELED when the caller cancelled, else last (Decide chooses no
// pause past the deadline: a timer that fired late).
func (c *call) pauseEnded(callCtx context.Context, last error) error {
	if callCtx.Err() == nil {
		return nil
	}
	why := policy.ReasonDeadline
	if callCtx.Err() == context.Canceled {
		why = policy.ReasonCaller
	}
	return c.giveUp(callCtx, Event{Method: c.method, Attempt: c.attempt}, why, last)
}

// giveUp ends the call after a pause, a wait or a refused resume, for why, with last, or
// CANCELED when the caller cancelled (ReasonCaller); e is the EventGiveUp
// to emit, without its code, error and reason.
func (c *call) giveUp(callCtx context.Context, e Event, why policy.Reason, last error) error {
	if why == policy.ReasonCaller {
		last = status.Error(codes.Canceled, context.Canceled.Error())
	}
	e.Kind, e.Code, e.Err, e.Reason = EventGiveUp, status.Code(last), last, why
	c.reason = why
	c.emit(callCtx, e)
	return c.finish(last)
}

// paused counts d as a pause, a pushback's when the pending pause is one.
func (c *call) paused(d time.Duration) {
	c.pausedFor += d
	if c.pushback {
		c.pushedBack += d
	}
}

// waitDeferred is pause for a retry the budget refused, or that waits for
// its connection (awaitReady: waitReady): it waits in the Deferrer no
// sooner than d, and returns nil when admitted, or the call's final error,
// for the reason the wait ended (waitGate).
func (c *call) waitDeferred(callCtx context.Context, d time.Duration, last error) error {
	e := Event{Method: c.method, Attempt: c.attempt, Code: status.Code(last), Err: last}
	if c.awaitReady {
		c.awaitReady = false
		if why := c.waitReady(callCtx, d); why != policy.ReasonNone {
			return c.giveUp(callCtx, e, why, last)
		}
		return nil
	}
	req := *c.deferReq
	c.deferReq = nil
	req.Waited = c.inGate
	adm, why := c.waitGate(callCtx, req, d)
	e.Deferred, e.Admission = c.deferred, adm
	if why != policy.ReasonNone {
		return c.giveUp(callCtx, e, why, last)
	}
	c.admission, e.Kind = adm, c.retryKind()
	c.emit(callCtx, e)
	return nil
}

// waitReady is the pause, no sooner than d, of a retry whose attempt never
// left the client: until the connection is ready (ReasonNone), the call's
// deadline, or without one connready.MaxWait less its earlier waits.
func (c *call) waitReady(callCtx context.Context, d time.Duration) policy.Reason {
	start := time.Now()
	ctx, stop := holdContext(callCtx, c.o.state)
	defer stop()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, connready.MaxWait-c.inGate)
		defer cancel()
	}
	ready := connready.Ready(ctx, c.cc, d)
	waited := time.Since(start)
	c.inGate += waited
	c.paused(waited)
	switch {
	case ready:
		return policy.ReasonNone
	case errors.Is(callCtx.Err(), context.Canceled):
		return policy.ReasonCaller
	case callCtx.Err() != nil:
		return policy.ReasonDeadline
	case holdset.Ended(ctx):
		return policy.ReasonDisabled
	}
	return policy.ReasonDeferred
}

// waitGate waits in the Deferrer for req, no sooner than d (a retry, or a
// refused hedge with nothing in flight), and returns how it was let go, or
// why the wait ended (ReasonNone: admitted): the caller, the switch, or
// the Gate's rule. Up to d the wait counts as the pause, past it as the
// Gate's (deferred).
func (c *call) waitGate(callCtx context.Context, req budget.Request, d time.Duration) (budget.Admission, policy.Reason) {
	start := time.Now()
	holdCtx, stopHold := holdContext(callCtx, c.o.state)
	adm, err := c.budget.(budget.Deferrer).Wait(holdCtx, req, d)
	stopHold()
	waited := time.Since(start)
	c.inGate += waited
	c.deferred += max(waited-d, 0)
	c.paused(min(waited, d))
	if err == nil {
		return adm, policy.ReasonNone
	}
	// The Gate's rule that held the wait past its pause ("": none).
	var held interface{ HeldBy() string }
	c.waitEnd, c.heldBy = budget.WaitRule(err), ""
	if errors.As(err, &held) {
		c.heldBy = held.HeldBy()
	}
	switched := holdset.Ended(holdCtx)
	if switched {
		c.waitEnd = "switch"
	}
	switch {
	case errors.Is(callCtx.Err(), context.Canceled):
		return adm, policy.ReasonCaller
	case switched:
		return adm, policy.ReasonDisabled
	case errors.Is(err, budget.ErrTooManyWaiting):
		return adm, policy.ReasonBudget
	case errors.Is(err, budget.ErrOutageLasting):
		return adm, policy.ReasonOutage
	}
	return adm, policy.ReasonDeferred
}
