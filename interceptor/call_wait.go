package interceptor

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/holdset"
	"github.com/stagger-go/stagger/policy"
)

// pause waits d before a stream's next attempt (a unary call's loop waits
// in its select). It returns nil, or the call's final error when callCtx
// ended first (pauseEnded).
func (c *call) pause(callCtx context.Context, d time.Duration, last error) error {
	if c.deferReq != nil {
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

// waitDeferred is pause for a retry the budget refused: it waits in the
// Deferrer no sooner than d, and returns nil when admitted, or the call's
// final error, for the reason the wait ended (waitGate).
func (c *call) waitDeferred(callCtx context.Context, d time.Duration, last error) error {
	req := *c.deferReq
	c.deferReq = nil
	req.Waited = c.inGate
	adm, why := c.waitGate(callCtx, req, d)
	e := Event{Method: c.method, Attempt: c.attempt, Code: status.Code(last), Err: last, Deferred: c.deferred, Admission: adm}
	if why != policy.ReasonNone {
		return c.giveUp(callCtx, e, why, last)
	}
	c.admission, e.Kind = adm, c.retryKind()
	c.emit(callCtx, e)
	return nil
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
	c.waitEnd, c.heldBy = budget.WaitRule(err), heldBy(err)
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

// heldBy names the Gate's rule that held a wait past its pause ("": none).
func heldBy(err error) string {
	var r interface{ HeldBy() string }
	if errors.As(err, &r) {
		return r.HeldBy()
	}
	return ""
}
