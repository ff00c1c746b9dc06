package policy

import (
	"time"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// DefaultPushbackCeiling is the longest server pushback stagger waits for when a
// Policy sets none: a longer pushback stops retrying, so a hostile or broken
// server cannot park a client (a difference from grpc-go, which waits).
const DefaultPushbackCeiling = 5 * time.Minute

// DefaultMaxAttemptsCap is gRFC A6's cap on maxAttempts in a policy file: larger
// values are treated as this one unless the client raises the cap in code.
const DefaultMaxAttemptsCap = 5

// CodeSet is a set of gRPC status codes, as a bit set (code c is bit c). The
// zero value is the empty set.
type CodeSet uint32

// NewCodeSet returns the set of the given codes. Codes above 16 are ignored.
func NewCodeSet(cs ...codes.Code) CodeSet {
	var s CodeSet
	for _, c := range cs {
		if c <= 16 {
			s |= 1 << c
		}
	}
	return s
}

// Has reports whether c is in the set.
func (s CodeSet) Has(c codes.Code) bool { return c <= 16 && s&(1<<c) != 0 }

// Codes lists the set's codes in increasing order.
func (s CodeSet) Codes() []codes.Code {
	var out []codes.Code
	for c := codes.Code(0); c <= 16; c++ {
		if s.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// Predicate classifies an error that status codes cannot: it returns decided
// false to leave the decision to the codes, or decided true with retry saying
// whether to retry. It runs for failed attempts only, and never overrides the
// rules no policy may break (the caller's own deadline or cancellation, a
// committed attempt, maxAttempts, pushback that says stop, a message size
// limit grpc-go raised locally); an attempt stagger's own timer cut off is
// retried without asking it.
type Predicate func(err error) (retry, decided bool)

// Policy is how a method retries: how many attempts, which failures, how long to
// pause, per-attempt timeout and pushback. It is a value; it is safe for
// concurrent use once built, as long as nobody modifies it.
type Policy struct {
	// MaxAttempts counts attempts, the first included: 3 means at most 2
	// retries. Below 2 the method does not retry. A policy file's value is
	// capped at DefaultMaxAttemptsCap unless raised when parsing; a Policy
	// built in code is used as written.
	MaxAttempts int
	// Backoff is the pause before each retry.
	Backoff Backoff
	// RetryableCodes are retried as listed, as grpc-go does, except a
	// RESOURCE_EXHAUSTED raised by grpc-go itself for a message size limit
	// (see IsLocalResourceExhausted). The zero set means stagger's default
	// decisions, DefaultRetryableCodes: UNAVAILABLE, and RESOURCE_EXHAUSTED
	// sent by the server.
	RetryableCodes CodeSet
	// PerAttemptRecvTimeout, when > 0, cuts off an attempt that has received
	// no response header or message after that long, and retries it whatever
	// the codes say (grpc C-core's perAttemptRecvTimeout), when a retry can
	// go: attempts left, a pause that ends before the caller's deadline
	// (the attempt runs on through it, and an answer in it is the call's),
	// and at the pause's end the budget and circuit breaker admitting it at
	// once, and the server not slow for every attempt (the interceptors'
	// rule: see interceptor.UnaryClientInterceptor). Otherwise the attempt
	// is not cut off: it runs on, and its answer is the call's. It applies
	// only to methods known to be idempotent and to unary calls with an
	// idempotency key (interceptor.WithIdempotencyKey).
	PerAttemptRecvTimeout time.Duration
	// HedgeOnPerTryTimeout (Envoy's hedge_on_per_try_timeout), with
	// PerAttemptRecvTimeout: when the timer fires and a retry can go, the
	// attempt is not cut off but keeps running beside the retry, and the
	// first success wins (the other attempts are cancelled); the call fails
	// only when every attempt has, the last failure deciding as usual. For
	// unary calls whose reply is a protobuf message; streams cut the
	// attempt off as without it. Off by default.
	HedgeOnPerTryTimeout bool
	// PushbackCeiling is the longest server pushback honoured; a longer one
	// stops retrying. Zero means DefaultPushbackCeiling.
	PushbackCeiling time.Duration
	// Predicate, when set, decides for errors the codes cannot classify. It
	// must be safe for concurrent use: every call of the method runs it.
	Predicate Predicate
}

// Hedging is a gRFC A6 hedging policy: send the first attempt, then another
// every Delay while none has succeeded, up to MaxAttempts in all.
type Hedging struct {
	// MaxAttempts counts attempts, the first included.
	MaxAttempts int
	// Delay is the pause between hedges; 0 sends all attempts at once.
	Delay time.Duration
	// NonFatalCodes: an attempt failing with one of these sends the next hedge
	// at once; any other failure ends the call.
	NonFatalCodes CodeSet
	// Adaptive, when true, hedges after the method's observed p95 latency
	// instead of Delay (a stagger extension; Delay is used until enough
	// calls were seen).
	Adaptive bool
}

// Method is everything a Config says about one method.
type Method struct {
	// Retry is the method's retry policy; nil means it does not retry.
	Retry *Policy
	// Hedging is the method's hedging policy; nil means it does not hedge. A
	// method has at most one of Retry and Hedging.
	Hedging *Hedging
	// Idempotent, when set, overrides the method's proto idempotency_level.
	Idempotent *bool
	// Timeout, when > 0, is the call's deadline unless the caller's own is
	// earlier (grpc-go's meaning).
	Timeout time.Duration
	// WaitForReady, when set, is applied to each call as grpc.WaitForReady.
	WaitForReady *bool
	// MaxRequestMessageBytes and MaxResponseMessageBytes, when set, are
	// applied to each call as grpc.MaxCallSendMsgSize and
	// grpc.MaxCallRecvMsgSize.
	MaxRequestMessageBytes  *int
	MaxResponseMessageBytes *int
	// Breaker is the circuit breaker and adaptive throttling that guard
	// the method: the file's top-level circuitBreaker and
	// adaptiveThrottling with the entry's own fields over them (defaults
	// applied); nil when none applies. The interceptors build the
	// breakers themselves from it (Config.NewBreakers).
	Breaker *breaker.Settings
	// Criticality is the entry's "criticality" (a stagger extension):
	// the criticality of the method's calls that no call option and no
	// context names (see package interceptor, WithCriticality);
	// criticality.Unset when the entry names none.
	Criticality criticality.Level
}

// Reason says why an attempt is not retried (or, with ReasonNone, that it is).
type Reason uint8

const (
	// ReasonNone: retry.
	ReasonNone Reason = iota
	// ReasonSuccess: the attempt succeeded.
	ReasonSuccess
	// ReasonNotRetryable: the policy does not retry this failure.
	ReasonNotRetryable
	// ReasonAttempts: no attempt is left.
	ReasonAttempts
	// ReasonCommitted: the attempt had received response headers or a message.
	ReasonCommitted
	// ReasonPushback: the server's pushback says stop (negative, malformed,
	// repeated, or above the ceiling).
	ReasonPushback
	// ReasonDeadline: the next pause would not end before the caller's deadline.
	ReasonDeadline
	// ReasonCaller: the caller cancelled or its deadline passed.
	ReasonCaller
	// ReasonBudget: the retry budget refused (decided by the interceptor).
	ReasonBudget
	// ReasonNotIdempotent: the method is not known to be idempotent (and the
	// call carries no idempotency key, or is a stream), so stagger does not
	// hedge it or retry it after its own per-attempt timeout.
	ReasonNotIdempotent
	// ReasonStreaming: the method streams and its hedging policy is not
	// applied. The interceptors no longer give it (they hedge streams until
	// commit); it keeps its value for code that names it.
	ReasonStreaming
	// ReasonAmbiguous: the attempt may have run on the server (its request
	// reached the wire) and ended without a status from the server (a
	// connection reset, EOF or GOAWAY), and the method is not known to be
	// safe to repeat (not idempotent, no idempotency key): a retry could run
	// it twice (Attempt.Ambiguous).
	ReasonAmbiguous
	// ReasonDeferred: the budget refused the retry, the call waited for a
	// later admission (budget.Deferrer), and the wait ended without one:
	// no retry could start (and finish, by the method's recent latency)
	// before its deadline, a Gate's rules did not hold the retry past its
	// pause, or a call without a deadline reached the wait limit (also
	// when its retry waited for a connection that failed to connect). The
	// Report and the EventGiveUp's Budget say the backend's state.
	ReasonDeferred
	// ReasonBreaker: the circuit breaker that guards the call is open: its
	// first attempt failed fast, or a retry it refused could not wait for
	// the breaker's probe (no deferring budget).
	ReasonBreaker
	// ReasonThrottled: client-side adaptive throttling rejected the call's
	// first attempt locally.
	ReasonThrottled
	// ReasonRetriedRequest: the call is made while serving a request that
	// arrived as a retry or a hedge (grpc-previous-rpc-attempts above 0), and
	// stagger's server side asks such calls to make one attempt: the layer
	// above is retrying already (retry at one layer).
	ReasonRetriedRequest
	// ReasonNoPolicy: neither the file nor the interceptor's options give
	// the method a retry or hedging policy, so its one attempt's failure
	// was never a candidate for a retry. As a notice (interceptor's
	// EventNotice, once per method): a call's own WithMaxAttempts, WithCodes
	// or WithPredicate had no policy to apply to.
	ReasonNoPolicy
	// ReasonOutage: the server has been down for longer than a call
	// without a deadline waits (MaxWait), and the budget's Gate fails such
	// calls' retries at once instead of
	// holding them until they fail (budget.ErrOutageLasting, the Gate's
	// futility rule), until a probe finds the server back.
	ReasonOutage
	// ReasonReplyType: the method hedges, but the call's reply is not a
	// protobuf message (a codec of the caller's, or a nil reply), and each
	// concurrent attempt needs a reply of its own: the call is not hedged,
	// its attempts go one at a time, the next after a non-fatal failure
	// (EventNotice, once per method).
	ReasonReplyType
	// ReasonOverridden: a policy given on one call (interceptor.WithPolicy
	// as a call option) is not applied, because the file has an entry for
	// the method and the entry decides (EventNotice, once per method).
	ReasonOverridden
	// ReasonOneAttempt: the policy given in code (interceptor.WithPolicy)
	// sets what only retries use (a per-attempt timeout, codes, a backoff, a
	// predicate, a pushback ceiling) but allows fewer than 2 attempts
	// (MaxAttempts 0 or 1, and no WithMaxAttempts raised it), so none of it
	// applies: the call makes one attempt (EventNotice, once per method).
	ReasonOneAttempt
	// ReasonInvalidOption: a value given in code for one setting of the
	// policy (interceptor.WithBackoff, WithPerAttemptTimeout) breaks a
	// rule, so it is not applied and the policy's own value stays
	// (interceptor's EventNotice, once per method; its Err names the field).
	ReasonInvalidOption
	// ReasonForeignOption: a call carried another retry library's call
	// option (go-grpc-middleware's retry.WithMax, WithCodes, ...), which
	// compiles and grpc ignores (interceptor's EventNotice, once per
	// method): stagger's per-call options take its place. The interceptors
	// take the safe reading of those that lower the attempts
	// (retry.Disable(): one; WithMax(n): at most n) and apply no other.
	ReasonForeignOption
	// ReasonDisabled: stagger was off for the call: the process-wide
	// switch (interceptor.SetDisabled, STAGGER_DISABLE) or its policy
	// file's "disabled" (Config.Disabled), on when it started or turned on
	// while it ran, or the call's own interceptor.Disable. Its one attempt
	// (or, turned on while it ran, its latest) was never a candidate for a
	// retry; the call's code says how it ended.
	ReasonDisabled
)

var reasonNames = [...]string{"retry", "success", "not retryable", "attempts", "committed", "pushback", "deadline", "caller", "budget", "not idempotent", "streaming", "ambiguous", "deferred", "breaker", "throttled", "retried request", "no policy", "outage", "reply type", "overridden", "one attempt", "invalid option", "foreign option", "disabled"}

// String returns a short lower-case name, as used in logs and hooks.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Attempt describes an attempt that just ended, for Decide. The interceptors
// fill it; Decide reads it and nothing else, so it is a pure function.
type Attempt struct {
	// Number counts attempts: 1 is the first.
	Number int
	// Err is the attempt's error; nil means it succeeded.
	Err error
	// Trailer is the attempt's trailer metadata (for pushback).
	Trailer metadata.MD
	// Committed: response headers or a message arrived before the failure.
	Committed bool
	// TimedOut: stagger's per-attempt timer cut the attempt off.
	TimedOut bool
	// CallerDone: the caller's own context is done (cancelled or past its
	// deadline). Told apart from TimedOut by the contexts, not by the code.
	CallerDone bool
	// Ambiguous: the attempt's request may have reached the server, the
	// server wrote no status (the transport ended the attempt: reset, EOF,
	// GOAWAY), and the call is not known to be safe to repeat. The
	// interceptors set it only for a method not known to be idempotent
	// (call option, file, proto idempotency_level) and a call without an
	// idempotency key; Decide then does not retry a failure it would
	// otherwise retry (ReasonAmbiguous), a deliberate difference from gRFC
	// A6, which retries it.
	Ambiguous bool
	// Retry is the number the next retry has in the backoff sequence: 1 for
	// the first retry and for the first retry after a pushback (gRFC A6: the
	// sequence restarts after a pushback), then 2, 3, ...
	Retry int
	// Prev is the pause before the previous retry, for decorrelated jitter:
	// Backoff.Initial when Retry == 1.
	Prev time.Duration
	// Remaining is the time left before the caller's deadline; meaningful
	// only when HasDeadline.
	Remaining   time.Duration
	HasDeadline bool
	// U is uniform in [0, 1), for the jitter.
	U float64
}

// Verdict is Decide's answer.
type Verdict struct {
	// Retry: send another attempt after Pause.
	Retry bool
	// Pause is the pause before the next attempt.
	Pause time.Duration
	// Pushback: Pause is the server's pushback, and the backoff sequence
	// restarts (the next Prev passed to Delay is Initial).
	Pushback bool
	// Reason says why not, when Retry is false.
	Reason Reason
	// Record is what the budget should be told of this attempt.
	Record budget.Outcome
}
