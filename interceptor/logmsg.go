package interceptor

// The messages the logger (WithLogger) and slog.Default() get. Each is a
// constant, and what changes from line to line (a method, a target, a
// count, an error) is an attribute, so that a log pipeline can group,
// count and rate-limit lines by message. TestLogMessagesAreConstant holds
// every call that logs to that.
const (
	msgRetrying       = "stagger: retrying"
	msgGivingUp       = "stagger: giving up"
	msgAmbiguous      = "stagger: not retried: the request may have run on the server and the method is not known to be idempotent (mark it idempotent or send an idempotency key)"
	msgNoTimer        = "stagger: per-attempt timeout not applied: method not known to be idempotent"
	msgNoHedging      = "stagger: hedging not applied: method not known to be idempotent"
	msgCapped         = "stagger: WithMaxAttempts above the cap: lowered to the cap (stagger.attempt)"
	msgOverridden     = "stagger: the call's WithPolicy not applied: the policy file's entry for the method decides"
	msgNoPolicy       = "stagger: the call's WithMaxAttempts, WithCodes, WithPredicate, WithBackoff or WithPerAttemptTimeout not applied: no retry policy for the method (no file entry, no WithPolicy; a hedged method takes only WithMaxAttempts and WithCodes)"
	msgOneAttempt     = "stagger: WithPolicy allows one attempt (MaxAttempts below 2): its per-attempt timeout, codes and backoff do nothing"
	msgInvalidOption  = "stagger: the call's WithBackoff or WithPerAttemptTimeout not applied: its value breaks a rule (stagger.error); the policy's own stays"
	msgForeignOption  = "stagger: a go-grpc-middleware retry option on the call: retry.Disable() is read as one attempt and WithMax(n) as at most n, its others do nothing: use interceptor.Disable, WithMaxAttempts, WithCodes, WithBackoff, WithPerAttemptTimeout, WithPredicate"
	msgHedging        = "stagger: hedging"
	msgNoMoreHedges   = "stagger: no more hedges"
	msgHedgeWon       = "stagger: hedge won"
	msgDeferred       = "stagger: retry deferred: the budget refused it now, the call waits for a later admission"
	msgResuming       = "stagger: resuming stream"
	msgTimerRanOn     = "stagger: per-attempt timeout not applied: the retry was refused, the attempt runs on"
	msgBreaker        = "stagger: circuit breaker changed state (stagger.to)"
	msgPolicyWarning  = "stagger: policy file warning (stagger.warning)"
	msgNearlyNamed    = "stagger: the policy file nearly names the method (a typo?): the call does not follow that entry"
	msgReloadRefused  = "stagger: policy file not reloaded, the last good one stays in force (stagger.error)"
	msgSwitchedOff    = "stagger: switched off: each call is sent once, with no retry, no hedge and no wait; held calls end with their last status (stagger.switch)"
	msgSwitchedOn     = "stagger: switched back on: calls retry by their policy again (stagger.switch)"
	msgReloadWarned   = "stagger: policy file reloaded with warnings: it names no known method or turns a method's retries off (stagger.warnings)"
	msgRefusedSummary = "stagger: calls ended without the retry their budget refused, per backend since its last such line"
	msgHolding        = "stagger: a backend begins to hold calls: their retries wait for the budget (grpc.target)"
)
