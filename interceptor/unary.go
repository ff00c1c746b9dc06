package interceptor

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/stagger-go/stagger/balancer/elsewhere"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/internal/loadreport"
	"github.com/stagger-go/stagger/policy"
)

// UnaryClientInterceptor returns the retrying unary client interceptor. The
// package documentation has the model and where it belongs in a chain; the
// rules of the per-attempt timeout and of hedging follow, which
// StreamClientInterceptor shares except where it says otherwise.
//
// Per-attempt timeout. The per-attempt timeout (perAttemptRecvTimeout)
// applies only to methods known to be idempotent (the Idempotent call
// option, else the file's "idempotent", else the proto option
// idempotency_level) and to unary calls that carry an idempotency key
// (WithIdempotencyKey); otherwise the call runs without it, and the logger
// and hooks say so once per method. It is stagger's own timer, not a
// context deadline: the server sees only the caller's deadline. When the
// timer fires it asks whether the policy would retry (attempts are left and
// the retry's pause ends before the caller's deadline). If so, the attempt
// runs on through that pause, and an answer in it is the call's; at the
// pause's end the timer decides, once, whether the retry goes now: the
// circuit breaker is closed and the budget admits it at once (a budget that
// would make it wait, as budget.Gate does, has not admitted it). Then the
// attempt is cancelled and the retry leaves at once, whatever the listed
// codes. Otherwise the attempt runs on as if it had no timer, and its
// answer is judged by the usual rules. A lost attempt is told from a slow
// server per method: when attempts were sent after this one long enough
// ago (a quarter of the timeout) and none of them was served (answered with
// success, or a stream's first header), the server is slow for every
// attempt and a retry would only join its queue: the timer waits another
// period and asks again, and after one such period the retry may go as the
// method's scout (one at a time, the gaps doubling from one timeout until
// an attempt sent after the latest scout is served). A quiet process, which
// sent nothing after the attempt, retries as before (BENCHMARKS.md,
// "Figures behind the code's choices"). So the timer never makes a call
// fail that would have succeeded without it, and the last attempt always
// runs to its answer or the caller's deadline. The timer decides at fixed
// times (the timeout after the attempt left, and the pause after that), as
// of those times however late the machine runs it. A call whose retry the timer admitted but whose deadline passes in
// the pause ends with DEADLINE_EXCEEDED. The timer stops as its attempt
// commits (the package doc says when); a stream's message that finds the
// attempt cut off is not delivered.
//
// With hedgeOnPerTryTimeout (a retryPolicy key, after Envoy's
// hedge_on_per_try_timeout; off by default) a unary call's attempt whose
// timer admitted a retry is not cut off: it runs on beside the retry, each
// attempt with a reply of its own (so the reply must be a proto.Message;
// others are cut off as without the key). The first success wins: its
// reply, headers, trailer and peer become the caller's, the other attempts
// are cancelled, and the call returns once they have ended. A failure while
// another attempt runs or a retry waits out its pause ends nothing (the
// budget and the breaker hear of it); the last failure decides as usual.
// maxAttempts counts every such retry; hooks hear EventRetry for each, with
// the timer's DEADLINE_EXCEEDED. Streams are not hedged this way.
//
// Hedging. A unary method whose file entry has a hedgingPolicy is hedged
// (gRFC A6; grpc-go ignores hedgingPolicy): the first attempt is sent, then
// another every hedgingDelay while none has succeeded, up to maxAttempts
// in all (all at once when the delay is 0). The first OK wins: its reply,
// headers, trailers and peer become the caller's, and every other attempt
// is cancelled. A code not in nonFatalStatusCodes, or a failure after
// response headers, ends the call with that status; a non-fatal code sends
// the next hedge at once, or after the server's valid pushback (a negative
// or malformed one stops hedging). When every attempt failed the call
// returns the last status. Every hedge asks the budget first
// (budget.Request.Hedge); a refusal stops hedging beside the attempts in
// flight, and should they all fail non-fatally the next attempt is a
// retry: with a budget that defers (a Gate) it waits as a retry would. A
// hedge that could not leave before the caller's deadline is not sent.
// Hedges carry grpc-previous-rpc-attempts; the call returns only after
// every attempt it sent has ended, and the caller's grpc.OnFinish runs
// once. Hooks hear EventHedge, EventHedgeStop and EventHedgeWon.
//
// Only methods known to be idempotent, and unary calls that carry an
// idempotency key, are hedged; others run once, and the logger and hooks
// say so once per method (EventNotice with Hedging set). Each hedge
// unmarshals into a new instance of the caller's reply type, so the reply
// must be a proto.Message: other calls (a codec of the caller's, a nil
// reply) send their attempts one at a time into the caller's reply, the
// next after a non-fatal failure, as grpc-go's retry would, and the logger
// and hooks say why once per method (policy.ReasonReplyType).
//
// Hedges reach distinct backends only as the load-balancing policy spreads
// them: pick_first sends every hedge to its one backend; package
// balancer/elsewhere has a policy that spreads one call's attempts.
//
// With "adaptive": true (a stagger extension) the delay is the method's
// observed p95 latency, from a histogram per interceptor and method that
// halves older samples and rounds up, never down; the file's hedgingDelay
// until enough calls were seen. It learns from winning attempts only, so it
// errs toward hedging sooner; the budget bounds the cost.
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	return newCore(opts).unaryInterceptor()
}

// unaryInterceptor returns the interceptor's function. Its body is the fast
// path, the general one's first step: a call that needs nothing only
// unarySlow does (mi.fast) runs its first attempt with no call state, and
// builds the call only when that attempt fails, the breaker refuses it or
// the hooks must hear EventEnd (unaryGoOn). It is written in the function
// grpc calls: the call frame saved shows (BENCHMARKS.md, "Issue 45: the
// success path"). Its exits to unaryGoOn stay one per way out: one exit,
// with a firstRun the success path must zero, was slower.
func (k *core) unaryInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		o, grpcOpts := &k.opts, opts
		if len(opts) > 0 {
			o, grpcOpts = k.callOptions(opts)
		}
		cfg := o.config()
		if k.files.Source != nil {
			k.files.Reload(nil)
		}
		mi := k.method(cfg, method)
		if o == &k.opts && mi.fast && !switchedOff.Load() {
			pl := &mi.plan
			crit := callCriticality(ctx, o, mi.m)
			callCtx := ctx
			if crit != criticality.Unset {
				callCtx = withCriticality(ctx, crit)
			}
			// The target only when something keyed by it needs it.
			var target string
			var br *breaker.Breaker
			if pl.budgets != nil || pl.breakers != nil {
				target = callTarget(ctx, cc)
			}
			b := pl.budget
			if pl.budgets != nil {
				b = mi.budget(pl.budgets, cc, target, method)
			}
			if mi.timeout {
				var cancel context.CancelFunc
				callCtx, cancel = withMethodTimeout(ctx, callCtx, mi.m)
				defer cancel()
			}
			if pl.retrying {
				callCtx = elsewhere.NewCallContext(callCtx)
			}
			if pl.breakers != nil {
				br = findBreaker(pl.breakers, pl.brCache, cc, target, method)
				if err := admitBreaker(callCtx, cc, br, crit, o, pl.fileOpts, grpcOpts); err != nil {
					return k.unaryGoOn(&firstAttempt{ctx, callCtx, mi, crit, b, br, grpcOpts}, cc, method, req, reply, invoker, firstRun{refused: err})
				}
			}
			var load budget.Load // the answer's report (recordFirstSuccess)
			if pl.retrying {
				ua := mi.ownAttempt()
				if ua == nil {
					ua = unaryAttempts.Get().(*unaryAttempt)
				}
				attemptOpts := ua.own[:]
				if len(pl.fileOpts)+len(grpcOpts) > 0 {
					attemptOpts = ua.prepare(pl.fileOpts, grpcOpts)
				}
				err := invoker(callCtx, method, req, reply, cc, attemptOpts...)
				if err != nil {
					return k.unaryGoOn(&firstAttempt{ctx, callCtx, mi, crit, b, br, grpcOpts}, cc, method, req, reply, invoker, firstRun{err: err, attemptOpts: attemptOpts, ua: ua})
				}
				load = loadreport.Read(ua.trailer)
				if !mi.giveOwnClean(ua) {
					ua.finished(nil)
					mi.giveAttempt(ua)
				}
			} else {
				grpcOpts = withFileOpts(pl.fileOpts, grpcOpts)
				if err := invoker(callCtx, method, req, reply, cc, grpcOpts...); err != nil {
					return k.unaryGoOn(&firstAttempt{ctx, callCtx, mi, crit, b, br, grpcOpts}, cc, method, req, reply, invoker, firstRun{err: err})
				}
			}
			if br != nil || b != nil {
				recordFirstSuccess(br, b, crit, o, load)
			}
			if len(o.callHooks) > 0 || o.report != nil {
				_ = k.unaryGoOn(&firstAttempt{ctx, callCtx, mi, crit, b, br, grpcOpts}, cc, method, req, reply, invoker, firstRun{load: load})
			}
			return nil
		}
		return k.unarySlow(ctx, method, req, reply, cc, invoker, o, grpcOpts, cfg, mi)
	}
}

// recordFirstSuccess is retryFacts.record written out for the fast path's
// first success: a call there costs (BenchmarkUnarySuccess/stagger).
func recordFirstSuccess(br *breaker.Breaker, b budget.Budget, crit criticality.Level, o *options, load budget.Load) {
	if br != nil {
		br.Record(budget.Success, true, crit, o)
	}
	if b != nil {
		b.Record(budget.Attempt{Number: 1, Outcome: budget.Success, Final: true, Load: load})
	}
}

// firstAttempt is what the fast path resolved before the first attempt.
type firstAttempt struct {
	// ctx is the caller's context, callCtx the one the attempts derive from.
	ctx, callCtx context.Context
	mi           *methodInfo
	crit         criticality.Level
	budget       budget.Budget
	br           *breaker.Breaker
	opts         []grpc.CallOption
}

// firstRun is what the fast path did before it built the call: the breaker
// refused the first attempt, or the attempt ran and ended with err (with
// attemptOpts, grpc writing into ua's holders; a success, with load).
type firstRun struct {
	refused     error
	err         error
	attemptOpts []grpc.CallOption
	ua          *unaryAttempt
	load        budget.Load
}

// unaryGoOn builds the call the fast path went without, as start and
// admitFirst would have, and goes on with it where the fast path stopped.
func (k *core) unaryGoOn(f *firstAttempt, cc *grpc.ClientConn, method string, req, reply any, invoker grpc.UnaryInvoker, first firstRun) error {
	c := call{method: method, static: staticMethod(f.opts), cc: cc}
	c.o, c.ctx, c.crit, c.br = &k.opts, f.ctx, f.crit, f.br
	c.follow(&f.mi.plan, callTarget(f.ctx, cc), f.budget)
	return k.runUnary(&c, f.callCtx, req, reply, cc, invoker, f.opts, f.mi, &first)
}

// unarySlow runs every call the fast path does not.
func (k *core) unarySlow(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, o *options, grpcOpts []grpc.CallOption, cfg *policy.Config, mi *methodInfo) error {
	var c call
	callCtx, cancel, grpcOpts, run := k.startWith(ctx, cc, method, o, grpcOpts, cfg, mi, &c)
	defer cancel()
	if !run {
		return invoker(callCtx, method, req, reply, cc, grpcOpts...)
	}
	return k.runUnary(&c, callCtx, req, reply, cc, invoker, grpcOpts, mi, nil)
}

// runUnary runs the unary call c from where it stands (first: what the fast
// path did of it; nil: nothing), and is where it ends (call.end).
func (k *core) runUnary(c *call, callCtx context.Context, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, grpcOpts []grpc.CallOption, mi *methodInfo, first *firstRun) error {
	var ua *unaryAttempt // the fast path's, or one the engine takes
	if first != nil {
		ua = first.ua
	}
	err := k.unaryEngine(c, callCtx, req, reply, cc, invoker, grpcOpts, mi, first, &ua)
	// The caller's holders and OnFinish before the end is announced; a
	// call the breaker refused (no attempt) ran nothing that would run it.
	switch {
	case ua != nil:
		ua.finished(err)
	case c.attempt == 0:
		var o callerOutputs
		o.split(nil, grpcOpts)
		o.finished(err)
	}
	c.end(cc, err)
	if ua != nil {
		mi.giveAttempt(ua)
	}
	return err
}

// unaryEngine runs c's attempts and returns its error. The loop runs on a
// copy of c, which c takes back as it ends; a unaryAttempt it takes is left
// in *ua (nil before: the fast path took none), for runUnary to give back.
func (k *core) unaryEngine(c *call, callCtx context.Context, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, grpcOpts []grpc.CallOption, mi *methodInfo, first *firstRun, ua **unaryAttempt) error {
	switch {
	case first == nil:
		if err := c.admitFirst(callCtx, cc, grpcOpts); err != nil {
			return err
		}
	case first.refused != nil:
		return c.refused(callCtx, first.refused)
	case first.err == nil:
		// The fast path recorded the success (recordFirstSuccess).
		c.attempt, c.reason, c.load = 1, policy.ReasonSuccess, first.load
		return nil
	}
	l := unaryLoop{callCtx: callCtx, inv: invocation{c.method, req, cc, invoker}, reply: reply}
	if c.hedged != nil && k.hedges(callCtx, c, false) {
		// Hedging is retry with a start timer (hedgeState), on a copy of c.
		hc := *c
		defer func() { *c = hc }()
		h := hc.hedged.Hedging
		l.hedged, l.hs = true, k.newHedgeState(&hc, h)
		if l.replyType = replyTypeOf(reply); l.replyType == nil {
			// No reply per attempt: one at a time into the caller's; the
			// hooks hear why, once per method.
			k.noticeUnapplied(callCtx, &hc, policy.ReasonReplyType)
			l.hs.delay, l.hs.hist = -1, nil
		}
		l.goroutines(h.MaxAttempts, withFileOpts(c.fileOpts, grpcOpts))
		return l.run()
	}
	l.own = *c
	defer func() { *c = l.own }()
	if c.perAttempt > 0 {
		if c.hedgeOnTimeout {
			// Beside its attempt a retry needs a reply of its own.
			l.replyType = replyTypeOf(reply)
		}
		n := 1
		if l.beside = l.replyType != nil; l.beside {
			n = c.pol.MaxAttempts
		}
		l.goroutines(n, withFileOpts(c.fileOpts, grpcOpts))
		return l.run()
	}
	l.inline, l.cancel = true, noCancel
	switch {
	case first != nil:
		// first.err is not nil: a success returned above.
		l.attemptOpts, l.ua, l.firstErr = first.attemptOpts, first.ua, first.err
	case !c.retrying:
		// One attempt (no retry policy, or a hedging policy that cannot
		// apply): grpc fills the caller's holders and runs its OnFinish.
		l.attemptOpts = withFileOpts(c.fileOpts, grpcOpts)
	default:
		if *ua = mi.ownAttempt(); *ua == nil {
			*ua = unaryAttempts.Get().(*unaryAttempt)
		}
		l.ua = *ua
		l.attemptOpts = l.ua.prepare(c.fileOpts, grpcOpts)
	}
	return l.run()
}

// replyTypeOf is the type of each attempt's own reply (nil: made only for
// a proto.Message). Read it before the first attempt writes into reply:
// grpc resets it to unmarshal, racing with ProtoReflect.
func replyTypeOf(reply any) protoreflect.MessageType {
	if m, ok := reply.(proto.Message); ok && m != nil {
		return m.ProtoReflect().Type()
	}
	return nil
}

// withFileOpts puts the file's call options before the caller's, so that
// the caller's win, as in grpc-go.
func withFileOpts(fileOpts, grpcOpts []grpc.CallOption) []grpc.CallOption {
	if len(fileOpts) == 0 {
		return grpcOpts
	}
	return append(fileOpts[:len(fileOpts):len(fileOpts)], grpcOpts...)
}
