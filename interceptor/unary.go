package interceptor

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/stagger-go/stagger/balancer/elsewhere"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/policy"
)

// UnaryClientInterceptor returns the retrying unary client interceptor. The
// package documentation has the model and where it belongs in a chain; the
// rules of the per-attempt timeout and of hedging follow, which
// StreamClientInterceptor shares except where it says otherwise.
//
// Per-attempt timeout. The per-attempt timeout (perAttemptRecvTimeout) applies only to methods
// known to be idempotent (the Idempotent call option, else the file's
// "idempotent", else the proto option idempotency_level) and to unary calls
// that carry an idempotency key (WithIdempotencyKey). Otherwise the call
// runs without it, and the logger and hooks say so once per method. It is
// stagger's own timer, not a context deadline: the server sees only the
// caller's deadline, so it can never answer DEADLINE_EXCEEDED for stagger's
// timer. When the timer fires it asks whether the policy would retry:
// attempts are left and the retry's pause (backoff; a timed-out attempt has
// no pushback) ends before the caller's deadline. If so, the attempt runs on
// through that pause (its grace), and an answer in it is the call's; at the
// pause's end the timer decides, once, whether the retry goes now: the
// circuit breaker is closed and the budget admits the retry at once (a
// budget that would make it wait, as budget.Gate does, has not admitted
// it). When it goes, the timer cancels the attempt and the retry leaves at
// once (whatever the listed codes; the budget paid for it then). When it
// cannot, the attempt is not cancelled: it runs on as if it had no timer,
// and its answer is the call's, judged by the usual rules (a success ends
// the call; a failure may still be retried as any failure is). One more
// rule tells a lost attempt from a slow server, per method: when an attempt
// was sent after this one long enough ago (a quarter of the timeout) and no
// attempt sent after this one was served (answered with success, or a
// stream's first header) while it waits, the server is slow for every
// attempt and serves them in order, so a retry would only join its queue:
// the timer waits another period and asks again. After one such period
// the retry may go as the method's scout (one at a time, the gaps between
// scouts doubling from one timeout until an attempt sent after the latest
// scout is served), in case the attempts were lost, not queued.
// A quiet process, which sent nothing after the attempt, retries as
// before (they keep the lab's slowdown-90 level with no retry at all:
// BENCHMARKS.md, "Figures behind the code's choices"). So the timer
// never makes a call fail that would have succeeded without it: a slow
// server that answers within the caller's deadline is waited for when no
// retry could replace the slow attempt, and the last attempt always runs to
// its answer or the caller's deadline. The timer decides at fixed times:
// when the timeout has passed since the attempt left, and when the pause
// after that has; an attempt that ends after one of them meets its
// decision, taken as of that time, however late the machine ran the
// timer's goroutine. So a caller that sends one attempt at a time
// (nothing else sent meanwhile) has each attempt that the server holds
// past the timeout plus the pause cut off then, when a retry can go,
// loaded or not. A call whose retry the timer admitted but whose caller's
// deadline then passes in the pause ends with DEADLINE_EXCEEDED. Whether the timer cut an attempt off is the timer's own
// record (firing, with its decision, and stopping exclude each other),
// never read from the context or the status code after the fact. For a
// unary call the timer covers the whole attempt: an interceptor cannot see
// headers arrive before the response. For a stream it stops at the first
// response header or message; a header or message that finds it has cut
// the attempt off is not delivered (one that finds it fired and the attempt
// running on is).
//
// With hedgeOnPerTryTimeout (a retryPolicy key, after Envoy's
// hedge_on_per_try_timeout; off by default) a unary call's attempt whose
// timer admitted a retry is not cut off: it keeps running while the retry
// goes (after its pause), each attempt on a goroutine of its own with a
// reply of its own (so the reply must be a proto.Message; a call whose
// reply is not one is cut off as without the key). The first success wins:
// its reply, headers, trailer and peer become the caller's, and the other
// attempts are cancelled; the call returns once they have ended. A failure
// while another attempt runs, or while a retry waits out its pause, ends
// nothing (the budget and the breaker hear of it); the last failure, with
// nothing else running, decides as usual. Every such retry is admitted as
// the timer fires, as above, and maxAttempts counts them: at most
// maxAttempts attempts run at once. Hooks hear EventRetry for each, with the
// timer's DEADLINE_EXCEEDED. Streams are not hedged this way: their
// attempts are cut off as without the key.
//
// Hedging. A unary method whose file entry has a hedgingPolicy is hedged (gRFC A6;
// grpc-go ignores hedgingPolicy): the first attempt is sent, then another
// every hedgingDelay while none has succeeded, up to maxAttempts in all (all
// at once when the delay is 0). The first OK wins: its reply, headers,
// trailers and peer become the caller's, and every other attempt is
// cancelled. A code not in nonFatalStatusCodes, or a failure after response
// headers, ends the call with that status and cancels the rest; a non-fatal
// code sends the next hedge at once. When every attempt failed the call
// returns the last status. Every hedge asks the budget first
// (budget.Request.Hedge); a refusal stops hedging beside the attempts in
// flight, which go on, and should they all fail non-fatally the next
// attempt is a retry (below). A server's valid pushback delays the next hedge by that
// much; a negative or malformed one stops hedging. A hedge that could not
// leave before the caller's deadline is not sent. Hedges carry
// grpc-previous-rpc-attempts (1, 2, ...). The call returns only after every
// attempt it sent has ended: no attempt outlives it. Hooks hear EventHedge,
// EventHedgeStop and EventHedgeWon.
//
// Only methods known to be idempotent, and unary calls that carry an
// idempotency key, are hedged (as for the per-attempt timeout above);
// others run once, and the logger and hooks say so once per
// method (EventNotice with Hedging set). Each hedge of a unary call
// unmarshals into a reply of its own, a new instance of the caller's reply
// type, so the reply must be a proto.Message: a call with another reply
// (a codec of the caller's, a nil reply) is not hedged: its attempts go one
// at a time into the caller's reply, the next at once after a non-fatal
// failure (after a pushback, if one came), as grpc-go's retry would, and
// the logger and hooks say why once per method (policy.ReasonReplyType).
// A hedge the budget refuses while no attempt is in flight (or refused
// beside attempts that have all failed since) is a retry: with a budget
// that defers (a Gate) it waits as a retry would. The
// caller's grpc.OnFinish runs once.
//
// Hedges reach distinct backends only as the load-balancing policy allows:
// pick_first sends every hedge to the one backend it picked, where hedging
// helps against a slow request but not a slow server; round_robin spreads
// them over the ready backends, but concurrent calls share its rotation, so
// two hedges of one call can meet on one backend; stagger_elsewhere
// (package balancer/elsewhere) sends the attempts of one call, hedges and
// retries alike, to distinct READY backends while there are enough. The
// interceptors give every call that may retry or hedge the context that
// policy reads (elsewhere.NewCallContext; nothing, and no allocation, while
// the policy is not in use in the process).
//
// With "adaptive": true (a stagger extension) the delay is the method's
// observed p95 latency, from a histogram per interceptor and method
// (log-spaced buckets of atomic counters, older samples halved every 1024;
// the estimate is at most 25% high), and the file's hedgingDelay until 20
// calls were seen. It learns from winning attempts only, which hedging makes
// faster, so it errs toward hedging sooner; the budget bounds the cost.
func UnaryClientInterceptor(opts ...Option) grpc.UnaryClientInterceptor {
	return newCore(opts).unaryInterceptor()
}

// unaryInterceptor returns the interceptor's function. Its body is the fast
// path: a call that needs nothing only unarySlow does (mi.fast) runs up to
// the end of its first attempt with no call state; the call is built (as
// start builds it) only when that attempt fails, the breaker refuses it or
// the call hooks must hear EventEnd (unaryGoOn), and then goes on in
// runUnary, where unarySlow's calls go too.
// Whatever it decides, it decides as start, admitFirst and afterAttempt
// do, in their order; a first attempt's success is recorded as
// afterAttempt records it (see recordFirstSuccess). It is written in the
// function grpc calls, not in a method that function calls: the call
// frame that saves shows (BENCHMARKS.md, "Issue 45: the success path").
func (k *core) unaryInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		o, grpcOpts := &k.opts, opts
		if len(opts) > 0 {
			o, grpcOpts = k.callOptions(opts)
		}
		cfg := o.config()
		if k.refusals != nil {
			k.logRefusal()
		}
		mi := k.method(cfg, method)
		if o == &k.opts && mi.fast && !switchedOff.Load() {
			pl := &mi.plan
			crit := callCriticality(ctx, o, mi.m)
			callCtx := ctx
			if crit != criticality.Unset {
				callCtx = metadata.AppendToOutgoingContext(ctx, criticality.Header, crit.String())
			}
			// The target only when something keyed by it needs it before the
			// attempt; the end of the call (fill) finds the same.
			var target string
			var b budget.Budget
			var br *breaker.Breaker
			if pl.budgets != nil || pl.breakers != nil {
				target = callTarget(ctx, cc)
			}
			b = pl.budget
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
				if err := br.Admit(crit, o); err != nil {
					return k.unaryGoOn(&firstAttempt{ctx, callCtx, mi, crit, b, br, grpcOpts}, cc, method, req, reply, invoker, firstRun{refused: err})
				}
				if cc != nil && !br.Settings().NoPacing && waitsForReady(mi.opts, grpcOpts) {
					holdUntilReady(callCtx, cc, br)
				}
			}
			if pl.retrying {
				ua := mi.ownAttempt()
				if ua == nil {
					ua = unaryAttempts.Get().(*unaryAttempt)
				}
				attemptOpts, headerAddr, trailerAddr := ua.own[:], &ua.header, &ua.trailer
				if len(mi.opts)+len(grpcOpts) > 0 {
					attemptOpts, headerAddr, trailerAddr = ua.prepare(mi.opts, grpcOpts)
					*headerAddr, *trailerAddr = nil, nil
				}
				err := invoker(callCtx, method, req, reply, cc, attemptOpts...)
				if err != nil {
					err = k.unaryGoOn(&firstAttempt{ctx, callCtx, mi, crit, b, br, grpcOpts}, cc, method, req, reply, invoker, firstRun{err: err, attemptOpts: attemptOpts, headerAddr: headerAddr, trailerAddr: trailerAddr})
					ua.finished(err)
					mi.giveAttempt(ua)
					return err
				}
				if !mi.giveOwnClean(ua) {
					ua.finished(nil)
					mi.giveAttempt(ua)
				}
			} else {
				if len(mi.opts) > 0 {
					grpcOpts = append(mi.opts[:len(mi.opts):len(mi.opts)], grpcOpts...)
				}
				if err := invoker(callCtx, method, req, reply, cc, grpcOpts...); err != nil {
					return k.unaryGoOn(&firstAttempt{ctx, callCtx, mi, crit, b, br, grpcOpts}, cc, method, req, reply, invoker, firstRun{err: err})
				}
			}
			if br != nil || b != nil {
				recordFirstSuccess(br, b, crit, o)
			}
			if len(o.callHooks) > 0 || o.report != nil {
				_ = k.unaryGoOn(&firstAttempt{ctx, callCtx, mi, crit, b, br, grpcOpts}, cc, method, req, reply, invoker, firstRun{})
			}
			return nil
		}
		return k.unarySlow(ctx, method, req, reply, cc, invoker, o, grpcOpts, cfg, mi)
	}
}

// recordFirstSuccess tells br and b (nil: none) that the first attempt of a
// call of criticality crit under o succeeded, as afterAttempt does: the
// breaker first, then the budget (an attempt that was not deferred, not
// timed, not after a timeout, and the call's last). It is retryFacts.record
// written out, the one other place an outcome is recorded: record
// does not inline, and calling it cost the success path 6 ns of 31
// (BenchmarkUnarySuccess/stagger).
func recordFirstSuccess(br *breaker.Breaker, b budget.Budget, crit criticality.Level, o *options) {
	if br != nil {
		br.Record(budget.Success, true, crit, o)
	}
	if b != nil {
		b.Record(budget.Attempt{Number: 1, Outcome: budget.Success, Final: true})
	}
}

// firstAttempt is what the fast path (unaryInterceptor) resolved before the first attempt, from
// which it builds the call when it needs one (fill).
type firstAttempt struct {
	// ctx is the caller's context, callCtx the one the attempts derive
	// from (start's callCtx).
	ctx, callCtx context.Context
	mi           *methodInfo
	crit         criticality.Level
	budget       budget.Budget
	br           *breaker.Breaker
	// opts are the call's grpc options (for Event.StaticMethod).
	opts []grpc.CallOption
}

// fill makes c the call start and admitFirst would have made for f, a
// call of method on cc under the interceptor's options o.
func (f *firstAttempt) fill(c *call, o *options, cc *grpc.ClientConn, method string) {
	c.o, c.method, c.ctx, c.crit = o, method, f.ctx, f.crit
	c.static = staticMethod(f.opts)
	c.follow(f.mi, &f.mi.plan, callTarget(f.ctx, cc), f.budget)
	c.br, c.cc = f.br, cc
}

// firstRun is what the fast path (unaryInterceptor) did before it built
// the call: the breaker refused the first attempt (refused), or the
// attempt ran and ended with err; a call that may retry ran it with
// its unaryAttempt's options (attemptOpts), grpc writing its header and
// trailer at headerAddr and trailerAddr. The fast path keeps the
// unaryAttempt: it runs the caller's OnFinish and gives it back once the
// call has ended.
type firstRun struct {
	refused                 error
	err                     error
	attemptOpts             []grpc.CallOption
	headerAddr, trailerAddr *metadata.MD
}

// unaryGoOn builds the call the fast path went without, as start and
// admitFirst would have, and goes on with it where the fast path stopped
// (runUnary, with first).
func (k *core) unaryGoOn(f *firstAttempt, cc *grpc.ClientConn, method string, req, reply any, invoker grpc.UnaryInvoker, first firstRun) error {
	var c call
	f.fill(&c, &k.opts, cc, method)
	return k.runUnary(&c, f.callCtx, req, reply, cc, invoker, f.opts, f.mi, &first)
}

// unarySlow runs every call the fast path (unaryInterceptor) does not: the engines of hedging and
// of hedgeOnPerTryTimeout, the per-attempt timer, a call with Options of
// its own, and a disabled one.
func (k *core) unarySlow(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, o *options, grpcOpts []grpc.CallOption, cfg *policy.Config, mi *methodInfo) error {
	var c call
	callCtx, cancel, grpcOpts, run := k.startWith(ctx, cc, method, o, grpcOpts, cfg, mi, &c)
	defer cancel()
	if !run {
		return invoker(callCtx, method, req, reply, cc, grpcOpts...)
	}
	return k.runUnary(&c, callCtx, req, reply, cc, invoker, grpcOpts, mi, nil)
}

// runUnary runs the unary call c, started (start) with the context its
// attempts derive from (callCtx) and the caller's grpc options, from where
// it stands: first is what the fast path did of it (nil: nothing). It is
// the one place a unary call ends (call.end: EventEnd, the Report),
// whichever engine ran its attempts.
func (k *core) runUnary(c *call, callCtx context.Context, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, grpcOpts []grpc.CallOption, mi *methodInfo, first *firstRun) error {
	var ua *unaryAttempt
	err := k.unaryEngine(c, callCtx, req, reply, cc, invoker, grpcOpts, mi, first, &ua)
	c.end(cc, err)
	if ua != nil {
		ua.finished(err)
		mi.giveAttempt(ua)
	}
	return err
}

// unaryEngine runs c's attempts (see runUnary) on the engine its plan
// names and returns its error. A loop runs on a copy of c, which c takes
// back as the loop ends (unaryLoop.call). A unaryAttempt it takes for the
// attempts is left in *ua, for runUnary to give back once the call has
// ended.
func (k *core) unaryEngine(c *call, callCtx context.Context, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, grpcOpts []grpc.CallOption, mi *methodInfo, first *firstRun, ua **unaryAttempt) error {
	switch {
	case first == nil:
		if err := c.admitFirst(callCtx, cc, grpcOpts); err != nil {
			return err
		}
	case first.refused != nil:
		return c.refused(callCtx, first.refused)
	case first.err == nil:
		// The fast path recorded the first attempt's success
		// (recordFirstSuccess).
		c.attempt, c.reason = 1, policy.ReasonSuccess
		return nil
	}
	hedges := c.hedged != nil && k.hedges(callCtx, c, false)
	switch {
	case hedges:
		hc := *c
		defer func() { *c = hc }()
		return k.hedge(callCtx, &hc, req, reply, cc, invoker, withFileOpts(c.fileOpts, grpcOpts))
	case c.hedged != nil || !c.retrying:
		// One attempt, which afterAttempt records: no retry policy, or a
		// hedging policy that allows one attempt or a call that may not
		// run twice (k.hedges said so once per method).
		c.attempt = 1
		var err error
		if first != nil {
			err = first.err
		} else {
			err = invoker(callCtx, c.method, req, reply, cc, withFileOpts(c.fileOpts, grpcOpts)...)
		}
		return c.afterOnlyAttempt(callCtx, err)
	}
	l := unaryLoop{own: *c, k: k, callCtx: callCtx, req: req, reply: reply, cc: cc, invoker: invoker}
	defer func() { *c = l.own }()
	if c.perAttempt > 0 {
		// Something can fire during an attempt: each runs on a goroutine
		// of its own, with outputs of its own.
		if callerReply, ok := reply.(proto.Message); ok && callerReply != nil && c.hedgeOnTimeout {
			// hedgeOnPerTryTimeout needs a reply per attempt, which
			// stagger makes only for a proto.Message; others cut attempts
			// off.
			l.beside, l.replyType = true, callerReply.ProtoReflect().Type()
		}
		// Room for the attempts that may run at once (one, but beside);
		// a timer's event waits for the loop (sendAt).
		n := 1
		if l.beside {
			n = c.pol.MaxAttempts
		}
		l.goroutines(n, withFileOpts(c.fileOpts, grpcOpts))
		return l.run()
	}
	l.inline, l.cancel = true, noCancel
	if first != nil {
		// The fast path's first attempt failed: the loop takes it up.
		l.attemptOpts, l.headerAddr, l.trailerAddr = first.attemptOpts, first.headerAddr, first.trailerAddr
		l.first, l.firstErr = true, first.err
	} else {
		*ua = mi.takeAttempt()
		l.attemptOpts, l.headerAddr, l.trailerAddr = (*ua).prepare(c.fileOpts, grpcOpts)
	}
	return l.run()
}

// withFileOpts puts the file's call options (fileOpts) before the
// caller's (grpcOpts), so that the caller's win, as in grpc-go.
func withFileOpts(fileOpts, grpcOpts []grpc.CallOption) []grpc.CallOption {
	if len(fileOpts) == 0 {
		return grpcOpts
	}
	return append(fileOpts[:len(fileOpts):len(fileOpts)], grpcOpts...)
}

// afterOnlyAttempt ends the one attempt of a call that neither retries
// nor hedges, which ended with err: the breaker and the budget hear of it
// (afterAttempt). It returns the call's error.
func (c *call) afterOnlyAttempt(callCtx context.Context, err error) error {
	if contextCode(err) && callerEnded(callCtx, err) {
		err = callerErr(callCtx, err)
	}
	c.afterAttempt(callCtx, err, nil, false, false)
	return err
}
