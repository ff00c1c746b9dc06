// Package interceptor holds stagger's gRPC client interceptors: retries with
// exponential backoff and jitter, a shared retry budget, server pushback,
// deadline awareness and per-method policy from a policy file.
//
// # Model
//
// A call is one invocation by the application; it makes one or more
// attempts (the first included: 3 attempts are 2 retries). After each failed
// attempt, policy.Policy.Decide says whether to retry and after what pause;
// the interceptor adds what Decide cannot know: the retry budget (recorded
// after every attempt, asked before every retry; a refusal ends the call with
// the last error, reason "budget") and the pause itself, which ends at once
// when the caller cancels (the call then returns CANCELED). Decide never
// chooses a pause that outlasts the caller's deadline: the call returns the
// last attempt's real status at once instead.
//
// Which policy applies: the file's entry for the method (WithConfig or
// WithConfigSource), else the policy given in code (WithPolicy), else none:
// the call runs once, untouched but for the file's timeout, waitForReady and
// message size limits, which keep grpc-go's meaning. A method whose entry
// hedges is sent once until the hedging engine runs it.
//
// Rules no policy can break: an attempt whose response headers arrived is
// committed and never retried (the interceptor learns of headers through a
// grpc.Header option per attempt, or the caller's own); the caller's own
// deadline or cancellation is never retried (told apart from stagger's
// per-attempt timer by the contexts, not the code); a RESOURCE_EXHAUSTED that
// grpc-go raised locally for a message size limit is never retried.
//
// The per-attempt timeout (perAttemptRecvTimeout) applies only to methods
// known to be idempotent: the Idempotent call option, else the file's
// "idempotent", else the proto option idempotency_level. Otherwise the call
// runs without it, and the logger and hooks say so once per method. For a
// unary call the timer covers the whole attempt: an interceptor cannot see
// headers arrive before the response.
//
// Retries carry the grpc-previous-rpc-attempts header (1, 2, ...) as outgoing
// metadata, beside the caller's own metadata, and their context carries the
// attempt number (AttemptFromContext).
//
// The final error of a call stagger retried (or could have) is an *Error: its
// GRPCStatus is the last attempt's status unchanged, and Attempts(err) reads
// the number of attempts.
//
// # Where stagger goes in a chain
//
// Put stagger first (outermost) among the client interceptors that should run
// once per call (metrics of calls, tracing of the logical call, caches), and
// before those that must run once per attempt: authentication (a token may
// expire between attempts), per-attempt logging and metrics, anything that
// writes headers. Interceptors after stagger see every attempt, with its
// number in the context; interceptors before it see one call and the final
// error. Never chain two retrying layers: retries multiply
// (stagger.DialOptions turns grpc-go's own retry off for that reason).
//
// # Options
//
// One Option type serves both when building an interceptor and as a
// grpc.CallOption on a single call; the interceptor's options are built once
// and copied only for calls that carry options of their own, so a call that
// succeeds at once, with no per-call option, allocates nothing in the
// interceptor. Defaults: no file, no policy in code (no retries), no budget
// (unlimited; stagger.DialOptions installs budget.Default instead), no logger,
// no hooks, no idempotency key, jitter from math/rand/v2.
//
// # Concurrency
//
// The interceptors are safe for concurrent use by any number of calls. Hooks
// and the logger run on the call's goroutine, outside every lock, with a copy
// of the event; they must be safe for concurrent use.
//
// # For the stream and hedging engines
//
// The decision loop is written once, in call.go, and every engine runs it:
//
//	var c call
//	callCtx, cancel, grpcOpts, run := k.start(ctx, method, opts, &c) // k *core from newCore(opts)
//	defer cancel()
//	if !run { /* disabled: pass through with grpcOpts */ }
//	for {
//		actx, acancel := c.nextAttempt(callCtx) // attempt number, previous-attempts header, per-attempt timer
//		err := ...                              // run the attempt on actx with grpcOpts
//		timedOut := c.timedOut(callCtx, actx, err)
//		acancel()
//		retry, pause := c.afterAttempt(callCtx, err, trailer, committed, timedOut)
//		if !retry { return c.finish(err) }      // *Error with attempts and reason
//		if err := c.pause(callCtx, pause, err); err != nil { return err }
//	}
//
// c.retrying false means the method has no retry policy: run one attempt and
// call afterAttempt so the budget hears of it. afterAttempt records the
// attempt in the budget, consults Decide and the budget, and emits the
// events; pause is deadline- and cancel-aware. A stream sets committed at
// the first header or message; a hedge asks the budget itself
// (budget.Request.Hedge) and reuses start, finish and the events.
package interceptor
