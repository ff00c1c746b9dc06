// Package policy holds stagger's pure decisions: the backoff and its jitter
// kinds, the retry and hedging policies of a method, and the policy files
// (gRPC service configs, gRFC A6) that configure them per method.
//
// The decisions (Backoff, Policy.Decide) perform no RPC, read no clock and
// draw no random number behind the caller's back: time and randomness come
// in as arguments, so the same code runs in the interceptors, in tests on
// fixed values and in the simulator on virtual time. Source is the
// exception: it reads its file, and WatchFile polls it on a ticker of its
// own unless WithPollTicks supplies the ticks or WithPollInterval turns
// polling off.
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
//     interceptors arm only for methods known to be idempotent and unary
//     calls with an idempotency key. The timer
//     cuts an attempt off only when its retry can go (see
//     Policy.PerAttemptRecvTimeout); otherwise the attempt runs on.
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
// ParseConfig parses a policy file: a gRPC service config (gRFC A6) with
// stagger's extensions, in JSON or YAML. A document whose first character is
// '{' or '[' is JSON, read exactly as grpc-go reads it; anything else is
// YAML; AsJSON and AsYAML force the syntax. LoadFile reads a file and parses
// it the same way, also taking .yaml and .yml files as YAML. Keys may be
// written in lowerCamelCase or as proto field names (max_attempts). Among
// stagger's extensions: a retryBudget (tokenBucket or ratio) in place of
// retryThrottling, a budget's "defer" (true, false, or {"maxWaiting": n,
// "maxWait": "10s"}: whether retries the budget refuses wait for a later
// admission, see budget.Gate; "defer" alone, with no kind, is stagger's
// default budget, budget.DefaultSettings, where an empty tokenBucket is
// the kind's own defaults: 500 tokens starting full; a retryBudget defers
// unless it says false,
// retryThrottling refuses at once as gRFC A6 says unless it says true), a
// retryPolicy's jitter, perAttemptRecvTimeout and hedgeOnPerTryTimeout (see
// Policy), a method's idempotent and criticality (Method.Criticality: the
// criticality of its calls that neither a call option nor the request being
// served names, see interceptor.WithCriticality), durations written the Go way
// ("100ms") and status codes in lower case, and a circuitBreaker
// ({"failureRatio": 0.5, "minimumThroughput": 20, "samplingWindow": "10s",
// "breakDuration": "100ms", "maxBreakDuration": "1s", "scope": "METHOD",
// "paceReconnect": true}, every field optional) and adaptiveThrottling
// ({"k": 2, "window": "10s"}) at the top level, which a methodConfig entry
// may override field by field or turn off with false (see
// breaker.Settings and Config.BreakerSettingsFor). They count over one window:
// adaptiveThrottling's window must equal circuitBreaker's samplingWindow.
// A breaker field given as 0 is an error, not the default. A top-level
// "disabled": true is stagger's switch written in the file
// (Config.Disabled): a file reloaded with it turns stagger off for the
// calls that follow it, without a restart or code.
//
// Parsing never panics, takes time linear in the file's size, and does not
// stop at the first mistake: the error
// joins (errors.Join) one *FieldError per broken rule, each naming the path
// of the field ("methodConfig[0].retryPolicy.maxAttempts"), the rule and the
// value. A document that is not JSON or YAML fails with a single
// *SyntaxError placing the mistake: line and column for JSON (from the
// byte the decoder stopped at), the line for YAML (go.yaml.in/yaml/v3
// gives no column, and names the line where the enclosing block began, so
// the parser finds the line that broke the syntax itself), with the file's
// name from LoadFile and WatchFile: "retry.json:3:17: invalid JSON: ...".
// Common slips get the fix in the message: a comma before a closing
// bracket, a tab or a mis-indented line in YAML, a maxAttempts below 2.
//
// What does not stop a file from being used is a Warning, listed by
// Config.Warnings: among others an unknown key (ignored; the message names
// the known key it likely misspells: "maxAtempts: unknown key, ignored (did
// you mean "maxAttempts"?)"), a key given twice (the last one is used; of
// each of these two, the first 100 of a file are listed, then one warning
// says how many more), a maxAttempts above the cap (capped), a tokenRatio
// with more than 3 decimals (kept to 3, as gRFC A6 says), a timeout of zero
// or less (ignored), a backoff or hedgingDelay longer than what bounds its
// call (the entry's timeout; without one, the deferring budget's
// defer.maxWait, the default budget's when the file declares none; an hour
// in any case), the fields that grpc-go applies but stagger does not
// (loadBalancingPolicy, loadBalancingConfig, healthCheckConfig), and a name
// the proto files do not declare (below). A required key missing because it
// was misspelt says so in its error, Strict or not. OnWarnings receives the
// warnings of every parse, an invalid file's included (Config.Warnings has
// them only for a valid one).
//
// Names are checked against the proto files the program links
// (protoregistry.GlobalFiles), or those WithProtoFiles gives (files from a
// descriptor set, through protodesc.NewFiles): a service or method they do
// not declare is a warning, with the names likely meant when one differs
// only by package, case or a letter or two ("TestService" ->
// "stagger.testing.v1.TestService", "get" -> "Get"), since such a name
// matches no call. It is only a warning, never an error: a program may load
// a file before it registers the services the file names, or share a file
// with programs that link other protos. WithProtoFiles(nil) turns the check
// off. Reloads of a Source check names too.
//
// Two options change the rules: Strict turns unknown keys into errors, so
// that a typo fails the parse; WithMaxAttemptsCap moves the cap on
// maxAttempts (retry and hedging alike) away from DefaultMaxAttemptsCap. A
// cap below 2 keeps the default (as grpc.WithMaxCallAttempts does); one
// above MaxAttemptsCapLimit (1000) fails the parse, since no sensible call
// makes more attempts and a larger one only lets a typo size the work of
// every tool that reasons about the policy. CodeName prints a status code
// by the name a file uses ("UNAVAILABLE", "OK", "CANCELLED").
//
// A Config is the parsed file. Config.Method resolves a full method name
// ("/pkg.Service/Method"): the entry naming that method, else the entry
// naming its service ("/pkg.Service/"), else the default entry ({}), else
// nil. A Config is data: it holds the settings of the budget the file
// declares (retryThrottling or retryBudget: BudgetSettings) and of its
// circuit breakers (BreakerSettingsFor), never their tokens or state, so
// parsing a file builds nothing live and two parses of one file are equal.
// The interceptors build the budgets where the backend is known
// (NewBudgets, a budget.Backends: each target its own tokens and, where the
// budget defers, each method of the target its own Gate over them, on first
// use) and the breakers likewise (NewBreakers), and keep them
// (interceptor.State), so a down backend never spends or refills another's.
// WithBudgetOptions and WithBreakerOptions (a clock, ...) travel in the
// Config to where they are built.
//
// A Source follows a file that may change: WatchFile loads it (the first load
// must succeed) and polls it every DefaultPollInterval, or as
// WithPollInterval or WithPollTicks say; Reload reads it at once. A content
// already seen is not parsed again. Only a regular file of at most 4 MiB
// is read, by LoadFile as by a Source: a larger one is refused naming its
// size and the bound, without being read whole (ParseConfig refuses such a
// document too), and a named pipe, a device, a socket or a directory at
// the path is refused naming it and its kind, without waiting on it; a
// reload reads outside the lock that Update takes, so Close always
// returns. A new file that fails to read or parse leaves the last good
// Config in use and is reported through OnReload; a good one replaces the
// Config atomically. A refusal (Source.Refused) lasts until a good file
// comes, or the content in use comes back (a file that went missing and
// returned as it was); each new refusal is reported. When the new file
// declares the same budget settings (SourceEvent.BudgetKept), the interceptors that follow
// the Source keep every backend's budget state, so a reload that only
// touches methods neither refills nor empties them; new settings start
// afresh. NewSource and Update do the same for configs built elsewhere.
// A good file that names no method the process called or the known
// proto files declare (a misspelt service), or that turns off the retries
// of a method that had them, is swapped in as a reload with warnings (Source.Warned,
// SourceEvent.Warnings), not a plain success.
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
//
// A Config is immutable once built and safe for concurrent use; the *Method
// values it returns are shared and must not be modified; NewBudgets and
// NewBreakers may be called from any goroutine, and what they return is
// safe for concurrent use. A Source is safe for concurrent use: Config
// is one atomic load, so a caller sees the old Config or the new one, never a
// mix; reloads are serialised by a mutex, and the OnReload callback runs
// outside it, on the goroutine that reloaded (the polling goroutine, or the
// caller of Reload or Update), with its own copy of the event. Close stops
// the polling goroutine and waits for it, so it must not be called from an
// OnReload callback.
package policy
