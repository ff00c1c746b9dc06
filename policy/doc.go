// Package policy holds stagger's pure decisions: the backoff and its jitter
// kinds, the retry and hedging policies of a method, and the policy files
// (gRPC service configs, gRFC A6) that configure them per method.
//
// Nothing here performs an RPC, reads the clock or draws a random number
// behind the caller's back: time and randomness come in as arguments, so the
// same code runs in the interceptors, in tests on fixed values and in the
// simulator on virtual time.
//
// # Model
//
// An interceptor runs an attempt, then describes how it ended in an Attempt
// and asks Policy.Decide. The Verdict says whether to retry, after what
// pause, why not (a Reason), and what the retry budget should be told
// (budget.Success, Failure or Other). Decide does not consult the budget: the
// interceptor records the outcome, and asks the budget's Allow only when the
// verdict is a retry. Counting words are fixed: an attempt includes the first
// call, so MaxAttempts 3 allows 2 retries.
//
// The pause is Backoff.Delay(retry, prev, u): with term =
// min(Max, Initial × Multiplier^(retry−1)), computed to the bit as grpc-go
// computes it, the jitter kinds are
//
//	JitterProportional  term × U(0.8, 1.2)   gRFC A6 since 2024; the default
//	JitterFull          U(0, term)           spreads load best
//	JitterEqual         term/2 + U(0, term/2)
//	JitterNone          term
//	JitterDecorrelated  min(Max, U(Initial, 3×prev))
//
// Jitter is applied after the cap, so clients never bunch at Max, except
// with JitterDecorrelated, which is defined with the cap outside. Huge retry
// numbers or multipliers saturate; a pause is never negative.
//
// The rules Decide applies, in grpc-go's order, are listed on Decide. Server
// pushback is the grpc-retry-pushback-ms trailer, read as grpc-go reads it
// (one base-10 int32 of milliseconds; negative, malformed, out of range or
// repeated: stop retrying), or, when there is no trailer, a
// google.rpc.RetryInfo status detail. A valid pushback is waited exactly and
// restarts the backoff sequence: the next retry is retry 1 again, with prev
// back to Initial.
//
// # Defaults
//
//   - A Policy with no RetryableCodes uses stagger's default decisions
//     (DefaultRetryableCodes): UNAVAILABLE, and RESOURCE_EXHAUSTED sent by
//     the server. DEADLINE_EXCEEDED is retried only for an attempt
//     stagger's own per-attempt timer cut off (Attempt.TimedOut), which the
//     interceptors arm only for methods known to be idempotent.
//   - Whatever the codes, the caller's own cancellation or deadline is never
//     retried, nor a committed attempt, nor a RESOURCE_EXHAUSTED that
//     grpc-go raised for a message size limit (IsLocalResourceExhausted).
//   - Pushback above the ceiling, DefaultPushbackCeiling (5 minutes) unless
//     Policy.PushbackCeiling says otherwise, stops retrying rather than
//     parking the call; a pause that would not end before the caller's
//     deadline is not taken (ReasonDeadline).
//   - A policy file's maxAttempts is capped at DefaultMaxAttemptsCap (5, as
//     gRFC A6) unless the client raises the cap; a Policy built in code is
//     used as written.
//   - The zero Jitter is JitterProportional; the nil Random is math/rand/v2's
//     generator.
//   - A method's idempotency comes from its proto option idempotency_level
//     (IdempotencyOf); a policy file or a call option can override it.
//
// Validate on Backoff, Policy and Hedging reports every rule broken, each as
// a *FieldError naming the field with the policy file's keys, the rule and
// the value: "policy: initialBackoff: must be > 0, got 0s".
//
// # Policy files
//
// TODO(policy files): Config, ParseConfig, LoadFile, method matching and
// reload are described here by their author.
//
// # Concurrency
//
// Backoff, Policy, Hedging, Method, Attempt and Verdict are values: once
// built and no longer modified, any number of goroutines may use them at
// once, and Delay and Decide are pure functions. A Policy's Predicate must
// itself be safe for concurrent use. IdempotencyOf is safe for concurrent
// use and, once a method is cached, takes no lock. The nil Random takes no
// lock; NewSeededRandom's takes a mutex, which suits tests and the
// simulator, not a busy process.
package policy
