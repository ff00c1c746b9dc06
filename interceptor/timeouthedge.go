package interceptor

import (
	"context"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// timeoutHedge runs a unary call whose retry policy sets
// hedgeOnPerTryTimeout (Envoy's hedge_on_per_try_timeout): the retry loop
// of call_attempt.go and call_retry.go, with each attempt on a goroutine of
// its own (the hedging engine's hedgeCall: a reply and holders per attempt,
// the winner's adopted by the caller's), so that an attempt whose timer
// admitted a retry keeps running while the retry goes. The timer decides as
// for any call (retryFacts.timeoutVerdict, then retryFacts.timeoutAdmit at once: no
// grace, the attempt runs on anyway); when it admits a retry it sends it
// here (c.timerEvents) instead of cutting its attempt off. The first success
// wins: the other attempts are cancelled and the call returns after they
// ended. A failure while another attempt runs, or while a retry the timer
// admitted waits out its pause, is recorded and ends nothing; the last
// failure, with nothing else running, decides as usual (afterAttempt: a
// retry after its pause, or the call's end). grpcOpts are the file's
// options, then the caller's.
func (k *core) timeoutHedge(callCtx context.Context, c *call, callerReply proto.Message, req any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, grpcOpts []grpc.CallOption) error {
	// Room for every attempt's end and every timer's retry: a timer's
	// goroutine never waits long to report.
	hc := getHedgeCall(2 * c.pol.MaxAttempts)
	defer putHedgeCall(hc)
	hc.method, hc.req, hc.cc, hc.invoker = c.method, req, cc, invoker
	hc.base = hc.split(hc.base, grpcOpts, &hc.onFinish)
	hctx, hcancel := context.WithCancel(callCtx)
	defer hcancel()
	c.timerEvents = hc.results
	th := timeoutHedgeState{c: c, hc: hc, hctx: hctx, replyType: callerReply.ProtoReflect().Type()}
	th.launch(callerReply)
	var pause *time.Timer
	var pending <-chan time.Time
	stopPause := func() {
		if pending != nil {
			pause.Stop()
			pending = nil
		}
	}
	defer stopPause()
	done := callCtx.Done()
	for {
		select {
		case r := <-hc.results:
			if r.fired {
				// Attempt r.n's timer admitted a retry: it goes after its
				// pause, beside the attempts running.
				c.retryBeside(callCtx, r.verdict, r.admission)
				if r.verdict.Pause <= 0 {
					th.launch(callerReply)
					continue
				}
				pause = time.NewTimer(r.verdict.Pause)
				pending = pause.C
				continue
			}
			th.inFlight--
			err, _ := attemptOutcome(callCtx, r.err, false)
			if err == nil {
				if pending != nil {
					c.settleUnsent()
				}
				stopPause()
				hcancel()
				th.drain()
				hc.adopt(callerReply, r.out)
				// The budget hears the attempt's own admission.
				c.admission = r.admission
				c.afterAttempt(callCtx, nil, nil, false, false)
				hc.finished(nil)
				return nil
			}
			committed := *r.out.headerAddr != nil && c.o.idemKey == ""
			if th.inFlight > 0 || pending != nil {
				// Another attempt may still succeed: this failure ends
				// nothing.
				c.recordBeside(callCtx, r, err, committed)
				th.last = err
				continue
			}
			hc.adoptMeta(r.out)
			c.admission = r.admission
			retry, d := c.afterAttempt(callCtx, err, *r.out.trailerAddr, committed, false)
			if !retry {
				hc.finished(err)
				return c.finish(err)
			}
			if perr := c.pause(callCtx, d, err); perr != nil {
				hc.finished(perr)
				return perr
			}
			th.launch(callerReply)
		case <-pending:
			pending = nil
			th.launch(callerReply)
		case <-done:
			done = nil
			if pending == nil {
				// The attempts running end with the caller's status.
				continue
			}
			c.settleUnsent()
			stopPause()
			if th.inFlight == 0 {
				// Only the pause was left: end as a pause the caller
				// ended does.
				err := c.pause(callCtx, 0, th.last)
				hc.finished(err)
				return err
			}
		}
	}
}

// timeoutHedgeState is what timeoutHedge's goroutine keeps of the attempts.
type timeoutHedgeState struct {
	c         *call
	hc        *hedgeCall
	hctx      context.Context
	replyType protoreflect.MessageType
	inFlight  int
	// last is the last failure that decided nothing.
	last error
}

// launch starts the call's next attempt on a goroutine of its own, with its
// per-attempt timer (nextAttempt).
func (th *timeoutHedgeState) launch(callerReply proto.Message) {
	c, hc := th.c, th.hc
	first := c.attempt == 0
	var out *hedgeOutputs
	if first {
		out = &hc.first
		out.reply = callerReply
	} else {
		out = &hedgeOutputs{reply: th.replyType.New().Interface()}
	}
	hc.prepare(out)
	actx, acancel, at := c.nextAttempt(th.hctx)
	th.inFlight++
	// The attempt carries its admission to its end: attempts overlap, and
	// the next retry's admission must not be recorded against this one.
	adm := c.admission
	c.admission = budget.AdmitNone
	go hc.runTimed(actx, c.attempt, adm, out, at, acancel)
}

// drain waits for every attempt still running (cancelled by now), telling
// the budget and the breaker of each as a hedge that lost is told.
func (th *timeoutHedgeState) drain() {
	for th.inFlight > 0 {
		r := <-th.hc.results
		if r.fired {
			continue
		}
		th.inFlight--
		o := budget.Other
		if r.err == nil {
			o = budget.Success
		}
		th.c.recordAttempt(r, o, o)
	}
}

// runTimed is one attempt's goroutine under timeoutHedge: the attempt, then
// its timer stopped (which waits for a decision under way, so that a retry
// the timer admitted reaches the loop before the end does), then its end.
func (hc *hedgeCall) runTimed(ctx context.Context, n int, adm budget.Admission, out *hedgeOutputs, at *attemptTimer, cancel context.CancelFunc) {
	start := time.Now()
	err := hc.invoker(ctx, hc.method, hc.req, out.reply, hc.cc, out.opts...)
	at.stop()
	if err == nil {
		at.served(time.Since(start))
	}
	cancel()
	hc.results <- hedgeResult{n: n, err: err, out: out, took: time.Since(start), admission: adm}
}

// retryBeside accounts for a retry the per-attempt timer admitted while its
// attempt runs on (hedgeOnPerTryTimeout): as afterAttempt does for a retry
// after an attempt cut off, but the attempt, still running, is recorded
// when it ends.
func (c *call) retryBeside(callCtx context.Context, v policy.Verdict, adm budget.Admission) {
	c.emit(callCtx, Event{Kind: EventRetry, Method: c.method, Attempt: c.attempt, Code: codes.DeadlineExceeded, Err: errAttemptTimeout, Pause: v.Pause})
	c.retry, c.prev = c.retry+1, v.Pause
	c.afterTimeout = true
	// The retry goes as the timer's admission let it: launch hands it to
	// the attempt.
	c.admission = adm
}

// settleUnsent tells the budget that the retry the timer admitted, which
// waits out its pause, will not be sent (the call ended first): its
// admission is settled (a Gate's probe lease freed), as an attempt that
// said nothing of the server.
func (c *call) settleUnsent() {
	if c.budget != nil && c.admission != budget.AdmitNone {
		c.budget.Record(budget.Attempt{Number: c.attempt + 1, Outcome: budget.Other, Admission: c.admission})
	}
	c.admission = budget.AdmitNone
}

// recordBeside tells the breaker and the budget how attempt r.n ended when
// its failure err decides nothing (another attempt runs, or a retry waits):
// what afterAttempt would tell them.
func (c *call) recordBeside(callCtx context.Context, r hedgeResult, err error, committed bool) {
	a := c.attemptFacts(callCtx, err, *r.out.trailerAddr, committed, false)
	a.Number = r.n
	c.recordAttempt(r, c.pol.Decide(&a).Record, breakerOutcome(callCtx, err, false))
}

// recordAttempt tells c's breaker and budget (c.record) how attempt r.n,
// which decides nothing, ended, with the admission it went with (a probe's
// end frees the Gate's probe lease).
func (c *call) recordAttempt(r hedgeResult, budgetO, breakerO budget.Outcome) {
	a := budget.Attempt{Number: r.n, Outcome: budgetO, Admission: r.admission}
	if r.admission != budget.AdmitNone {
		a.Took = r.took
	}
	c.record(r.n+c.before == 1, breakerO, &a)
}
