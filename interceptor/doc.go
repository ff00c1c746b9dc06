// Package interceptor holds stagger's gRPC client interceptors: retries with
// exponential backoff and jitter, a shared retry budget, server pushback,
// deadline awareness, hedging, circuit breaking and per-method policy from a
// policy file. stagger.DialOptions installs them; UnaryClientInterceptor and
// StreamClientInterceptor build them by hand.
//
// # Model
//
// A call is one invocation by the application; it makes one or more
// attempts (the first included: 3 attempts are 2 retries). After each failed
// attempt, policy.Policy.Decide says whether to retry and after what pause;
// the interceptor adds what Decide cannot know: the retry budget (recorded
// after every attempt, asked before every retry) and the pause itself, which
// ends at once when the caller cancels (the call then returns CANCELED).
//
// A retry must fit before the caller's deadline (else the call returns the
// last attempt's status at once, where grpc-go waits for DEADLINE_EXCEEDED),
// then pass the circuit breaker and the budget (WithBreakers has the order).
// A budget.Deferrer (the default's Gate) that refuses makes the call wait for
// a later admission (EventDeferred; budget.Gate has the rules); another
// budget ends the call, reason "budget".
//
// Which policy applies: the file's entry for the method (WithConfig or
// WithConfigSource), else the policy given in code (WithPolicy), else none:
// the call runs once, untouched but for the file's timeout, waitForReady and
// message size limits, and ends with reason "no policy". A method whose
// entry has a hedgingPolicy, and that is known to be idempotent, is hedged
// instead (gRFC A6; grpc-go ignores hedgingPolicy): UnaryClientInterceptor
// has the rules, and StreamClientInterceptor what differs for streams.
//
// Rules no policy can break (two more follow). Commit: an attempt whose
// response headers or a message arrived is committed: never retried, its
// per-attempt timer stopped, the call's other attempts cancelled and no
// hedge sent (gRFC A6). grpc-go shows a unary call's interceptor the headers
// only with the attempt's end, so a unary attempt commits as it ends: until
// then its timer runs (one it cut off is retried; grpc C-core's stops at the
// first header) and hedges go. Exceptions: a unary call with an idempotency
// key, whose application has seen nothing of it, and a server stream that
// WithResume names, which continues where it broke. A RESOURCE_EXHAUSTED
// that grpc-go raised locally for a message size limit is never retried.
//
// The caller's deadline. An attempt that ends with CANCELED or
// DEADLINE_EXCEEDED when the caller's context has ended, or at most 1 ms
// before its deadline, ended for the caller's deadline: it is not retried
// (reason "caller") and the call returns DEADLINE_EXCEEDED. A call returns
// CANCELED only when the caller cancelled it.
//
// Ambiguous failures (a deliberate difference from gRFC A6). A call not
// known to be safe to repeat is not retried after an attempt that may have
// run on the server and ended without a status from it
// (policy.ReasonAmbiguous); its error's text says why. Mark such a method
// idempotent in the file or the proto, or send an idempotency key
// (WithIdempotencyKey) that the server de-duplicates.
//
// Retries carry the grpc-previous-rpc-attempts header. The per-attempt
// timeout (perAttemptRecvTimeout) has its rules in UnaryClientInterceptor. A
// call stagger ran fails with an *Error, the last attempt's status unchanged.
//
// # What the caller sees
//
// A retried or hedged call shows its caller the status, headers, trailer, peer
// and messages of one attempt (Connect's ResponseHeader and ResponseTrailer
// too), never a mix nor a losing hedge's: the one gRFC A6 picks, the attempt
// committed to (response headers, an OK end, for a stream Context or a full
// replay buffer), else the one whose end ended the call, once every other
// attempt has ended; one that never opened shows no metadata and no peer. A
// call ended by its caller's context returns the caller's status with the last
// attempt's metadata, as grpc-go does. A call ends once, the breaker's
// refusal too: grpc.OnFinish runs once with the caller's status, and the
// Report and holders are written, after every attempt of the call has
// ended (a hedged stream's driver too) and before the end is announced (the
// call returns, or RecvMsg returns the status).
//
// # Where stagger goes in a chain
//
// grpc-go runs the interceptor of grpc.WithUnaryInterceptor (and
// grpc.WithStreamInterceptor) outermost, then those of
// grpc.WithChainUnaryInterceptor in order, the first outermost;
// stagger.DialOptions chains. An interceptor before stagger's sees one call
// per logical call and its final error: give it what runs once per call
// (grpc's OpenTelemetry plugin, per-call logging, caches). One after it sees
// every attempt, its number in the context (AttemptFromContext): give it
// what must run per attempt (authentication: a token may expire between
// attempts; anything that writes headers). Never chain two retrying layers:
// retries multiply.
//
// # Options
//
// A call that succeeds at once, with no per-call option and no criticality,
// allocates nothing in the interceptor. Defaults: no file, no policy in code
// (no retries), no budget (unlimited; stagger.DialOptions installs one:
// WithDefaultBudgets), no breakers but the file's, no logger, no hooks, no
// idempotency key, no criticality (WithCriticality), jitter from math/rand/v2.
//
// # Hooks, reports and metrics
//
// Hooks (WithHook, WithCallHook) and the logger (WithLogger) hear each Event
// as it happens; WithReport fills a Report per call. The nested module
// github.com/stagger-go/stagger/otel turns them into gRFC A96's retry metrics.
//
// User code is fenced: a panic of a hook, the logger, a predicate
// (WithPredicate, WithPolicy's), WithIdempotentMethods' function, a resume
// function, a grpc.OnFinish function or a breaker.Set's onChange is
// recovered where it is called, whatever the goroutine, counted
// (RecoveredPanics) and logged to slog.Default() at error (at most one line
// per kind of callback per 10 s), and becomes a skipped event (a hook, a
// logger's line, an OnFinish), "not retried" (a predicate), "not
// idempotent", or the resume function's error. Nothing else of the call
// changes; no other call sees it.
//
// Bounds hold in every state: a stream's replay buffer while no attempt is
// live (the sender blocks: WithReplayBufferSize).
//
// # Concurrency
//
// The interceptors are safe for concurrent use by any number of calls; hooks
// and the logger must be too (WithHook). Each call has one owner that alone
// decides whether the next attempt goes, which attempt the caller sees, and
// the end; the rest send it events (docs/architecture.md names who sends each):
//
//	unary call: one loop on the caller's goroutine <- an attempt's end, the
//	    per-attempt timer, a retry's or a hedge's due time, the caller's context
//	stream: the caller's RecvMsg, or the watch on its context <- an attempt's
//	    end, the per-attempt timer (which cuts the attempt on its own goroutine)
//	hedged stream until its commit: one driver goroutine <- each attempt's
//	    headers or end, the hedging delay, an overflow, Context, the caller's context
package interceptor
