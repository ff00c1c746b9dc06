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
// after every attempt, asked before every retry) and the pause itself, which
// ends at once when the caller cancels (the call then returns CANCELED).
//
// The admission order of every retry: the caller's deadline (Decide: no
// pause that outlasts it), then the budget, then the wait. When the budget
// refuses and it is a budget.Deferrer (stagger's token bucket and ratio, the
// default budget among them), the call waits for a later admission instead
// of ending (EventDeferred; see budget.Gate): no sooner than its pause, no
// later than a millisecond before its deadline (a call without one waits at
// most the budget's MaxWait), on the caller's goroutine; it then retries
// (EventRetry with how long it waited and what admitted it) or ends with the
// last attempt's status, reason "deferred" (reason "budget" when too many
// calls wait already; CANCELED when the caller cancels). A budget that is
// not a Deferrer (the gRFC A6 throttle, a user's own) ends the call at once,
// reason "budget". Hedges are never deferred: a refused hedge is not sent. Decide never
// chooses a pause that outlasts the caller's deadline: the call returns the
// last attempt's real status at once instead.
//
// Which policy applies: the file's entry for the method (WithConfig or
// WithConfigSource), else the policy given in code (WithPolicy), else none:
// the call runs once, untouched but for the file's timeout, waitForReady and
// message size limits, which keep grpc-go's meaning. A method whose entry
// has a hedgingPolicy is hedged instead (see Hedging).
//
// Rules no policy can break: an attempt whose response headers arrived is
// committed and never retried (the interceptor learns of headers through a
// grpc.Header option per attempt, or the caller's own), except the attempt
// of a unary call that carries an idempotency key (WithIdempotencyKey): its
// application has seen nothing of the attempt and the key lets the server
// replay, so a failure after headers is retried as one before; and a
// resumable server stream continues with a new request (see Resumable
// streams); the caller's own deadline or cancellation is never retried; a
// RESOURCE_EXHAUSTED that
// grpc-go raised locally for a message size limit is never retried; an
// ambiguous failure of a call not safe to repeat is never retried (below).
//
// The caller's deadline. An attempt that ends with CANCELED or
// DEADLINE_EXCEEDED when the caller's context has ended, or when its
// deadline is at most 1 ms away, ended for the caller's deadline: the server
// (which sees that deadline as grpc-timeout) or grpc can report it a moment
// before the context's own timer does. Such a call is not retried (reason
// "caller") and returns DEADLINE_EXCEEDED. A call returns CANCELED only when
// the caller cancelled it.
//
// The per-attempt timeout (perAttemptRecvTimeout) applies only to methods
// known to be idempotent: the Idempotent call option, else the file's
// "idempotent", else the proto option idempotency_level. Otherwise the call
// runs without it, and the logger and hooks say so once per method. It is
// stagger's own timer, not a context deadline: the server sees only the
// caller's deadline, so it can never answer DEADLINE_EXCEEDED for stagger's
// timer. When the timer fires it decides, then and once, whether a retry can
// go now: attempts are left, the retry's pause (backoff; a timed-out attempt
// has no pushback) ends before the caller's deadline, the circuit breaker is
// closed, and the budget admits the retry at once (a budget that would make
// it wait, as budget.Gate does, has not admitted it). When one can, the
// timer cancels the attempt and the retry goes after its pause (whatever
// the listed codes; the budget paid for it as the timer fired). When none
// can, the attempt is not cancelled: it runs on as if it had no timer, and
// its answer is the call's, judged by the usual rules (a success ends the
// call; a failure may still be retried as any failure is). So the timer
// never makes a call fail that would have succeeded without it: a slow
// server that answers within the caller's deadline is waited for when no
// retry could replace the slow attempt, and the last attempt always runs to
// its answer or the caller's deadline. A call whose retry the timer
// admitted but whose caller's deadline then passes in the pause ends with
// DEADLINE_EXCEEDED. Whether the timer cut an attempt off is the timer's own
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
// Ambiguous failures (a deliberate difference from gRFC A6). A call not
// known to be safe to repeat (the method is not known to be idempotent, by
// the test above, and the call carries no idempotency key) is not retried
// after an attempt that may have run on the server and ended without a
// status from it: its request reached the wire (grpc gave it a transport
// stream) and the transport, not the server, ended it (a connection reset,
// EOF, GOAWAY or RST_STREAM after the request left). The call ends with that
// status, reason "ambiguous", in the event and the logger. Attempts that
// never left the client (connection refused, no ready transport) and
// statuses the server wrote stay retryable as gRFC A6 says. The cost: a
// method without idempotency_level whose server crashes mid-call fails where
// A6 would retry it; mark it idempotent in the file or the proto, or send
// an idempotency key (WithIdempotencyKey) that the server de-duplicates.
//
// What the interceptors know of the wire, per attempt, comes from the call
// options grpc already fills (no stats.Handler, which would cost about 15
// allocations per call inside grpc-go): a grpc.Header option (headers
// arrived: committed), a grpc.Trailer option (pushback; nil when the attempt
// got no transport stream; a server's Trailers-Only status keeps its
// content-type there, a stream the transport ended leaves it empty), and for
// streams ClientStream.Header and Trailer. The interceptors installed by
// hand know exactly what stagger.DialOptions's know. They cannot see when
// the first response header of a unary call arrives before its reply (hence
// the unary per-attempt timer above).
//
// Retries carry the grpc-previous-rpc-attempts header (1, 2, ...) as outgoing
// metadata, beside the caller's own metadata, and their context carries the
// attempt number (AttemptFromContext).
//
// The final error of a call stagger retried (or could have) is an *Error: its
// GRPCStatus is the last attempt's status unchanged, and Attempts(err) reads
// the number of attempts. Error.GaveUp says whether stagger gave up on a
// failure it would otherwise have retried.
//
// Calls made while serving a request (package server, stagger's server
// side, put the request in the handler's context): a call that gives up
// (Error.GaveUp) marks the request, and the server side answers the
// request's caller with gRFC A6's "do not retry", so that the layers above
// do not retry what this one already did. When the request arrived as a
// retry or a hedge and the server side asks for it (WithRetryAtOneLayer),
// the calls made under it make one attempt and send no hedges (reason
// "retried request"). Only a failed attempt looks the request up: a call
// that succeeds at once pays nothing for it.
//
// # Where stagger goes in a chain
//
// grpc chains interceptors in the order the dial options give them, the
// first outermost. An interceptor given before stagger's (before
// stagger.DialOptions) runs outside it: it sees one call per logical call
// and the call's final error. One given after runs inside: it sees every
// attempt, with its number in the context (AttemptFromContext). So give
// before stagger what should run once per call (call metrics, the logical
// call's span, caches), and after it what must run once per attempt
// (authentication: a token may expire between attempts; per-attempt logging;
// anything that writes headers). grpc's OpenTelemetry plugin measures calls
// with an interceptor and attempts with a stats handler: given before
// stagger.DialOptions it counts one call and every attempt, given after it
// counts every attempt as a call. Never chain two retrying layers: retries
// multiply (stagger.DialOptions turns grpc-go's own retry off for that
// reason).
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
// Per call, WithMaxAttempts and WithCodes replace the maxAttempts and the
// retryable codes of the method's retry policy, or of its hedging policy
// (whose codes are the non-fatal ones); they change nothing else, and no
// code they list makes the caller's own deadline or cancellation retried.
// WithCodes() with no code retries no code. WithMaxAttempts is bounded as a
// file's maxAttempts is: by the file's cap (policy.Config.MaxAttemptsCap; 5
// without a file), or by the policy's own maxAttempts when larger; the
// logger and hooks hear once per method that a call asked for more
// (EventNotice, reason "attempts"). docs/migrating-from-go-grpc-middleware.md
// maps go-grpc-middleware's retry options onto these.
//
// # Hedging
//
// A unary method whose file entry has a hedgingPolicy is hedged (gRFC A6;
// grpc-go ignores hedgingPolicy): the first attempt is sent, then another
// every hedgingDelay while none has succeeded, up to maxAttempts in all (all
// at once when the delay is 0). The first OK wins: its reply, headers,
// trailers and peer become the caller's, and every other attempt is
// cancelled. A code not in nonFatalStatusCodes, or a failure after response
// headers, ends the call with that status and cancels the rest; a non-fatal
// code sends the next hedge at once. When every attempt failed the call
// returns the last status. Every hedge asks the budget first
// (budget.Request.Hedge); a refusal stops hedging, and the attempts in
// flight go on. A server's valid pushback delays the next hedge by that
// much; a negative or malformed one stops hedging. A hedge that could not
// leave before the caller's deadline is not sent. Hedges carry
// grpc-previous-rpc-attempts (1, 2, ...). The call returns only after every
// attempt it sent has ended: no attempt outlives it. Hooks hear EventHedge,
// EventHedgeStop and EventHedgeWon.
//
// Only methods known to be idempotent are hedged (as for the per-attempt
// timeout above); others run once, and the logger and hooks say so once per
// method (EventNotice with Hedging set). Each hedge of a unary call
// unmarshals into a reply of its own, a new instance of the caller's reply
// type, so the reply must be a proto.Message (ErrHedgeReply otherwise). The
// caller's grpc.OnFinish runs once.
//
// Streams (server, client and bidi) are hedged until they commit, as gRFC
// A6 says: hedges start every hedgingDelay, up to maxAttempts, and race
// until one commits: the first whose response headers arrive (or that ends
// OK without any), or, when the application calls Context (which commits,
// as in grpc-go) or a message overflows the replay buffer, the oldest
// attempt open. The others are cancelled and the stream is then the
// winner's: its messages, headers, trailer and peer, and its failure, which
// is final. Before the commit the rules are the unary call's: a non-fatal
// code sends the next hedge at once (or after a valid pushback), a fatal
// one ends the stream with it, the budget is asked before every hedge, and
// a stream whose attempts all failed ends with the last status. Every
// message sent before the commit (and CloseSend) is kept in the replay
// buffer (see StreamClientInterceptor) and sent to every attempt: to those
// open as it is sent, in turn, and to each later hedge when it starts, in
// order, before anything else; so a message waits for the slowest open
// attempt's flow control, as an unhedged stream waits for its one. SendMsg
// returns before any attempt answers; RecvMsg and Header wait for the
// commit. A hedged stream runs one goroutine of its own until it commits
// (hooks hear its hedge events there) and one per attempt until the
// attempt's headers arrive or it ends; none outlives the stream. The
// adaptive delay learns from the winners' times to commit.
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
//
// # Circuit breaking
//
// A policy file's circuitBreaker and adaptiveThrottling (or WithBreakers in
// code) guard calls with breaker.Breaker: one per connection target and
// method (scope METHOD, the default: one failing method, or one whose keys
// fail, does not stop the others; M. Brooker measured breakers turning
// such partial failures into complete ones) or one per target (scope
// TARGET). The breakers belong to the Config, as its budget does, shared by
// every interceptor built from it and kept across reloads with unchanged
// settings. Per-backend ejection is gRPC's outlier detection
// load-balancing policy (gRFC A50), configured in the service config's
// loadBalancingConfig for grpc-go to apply; stagger does not re-implement
// it.
//
// The admission order of a call: the breaker and throttling before the
// first attempt; for a retry, Decide (the caller's deadline included), then
// the breaker, then the budget, then the wait. While a breaker is open a
// first attempt fails at once, UNAVAILABLE with a message that names the
// breaker and says when it probes next, as an *Error of no attempts and
// reason breaker (errors.Is(err, breaker.ErrOpen)); a retry is
// refused: with a deferring budget (budget.Gate, the default's) it waits,
// within its deadline, and the gate lets it go only as the breaker allows
// (budget.Request.Breaker): the breaker's half-open probe is the gate's
// probe, one attempt, a new call's first or a waiting retry, whichever asks
// first. Without a deferring budget a refused retry ends its call (reason
// breaker), unless it can go as the probe. Hedges are not sent while the
// breaker is not closed. What counts as a failure: UNAVAILABLE,
// RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED that is not the caller's; the
// caller's own cancellation or deadline counts for nothing; any other
// status is an answer from a working server.
//
// Adaptive throttling (the SRE book's client-side throttling) rejects first
// attempts locally, reason throttled, with probability max(0, (requests −
// K × accepts) / (requests + 1)) over the breaker's window; retries are the
// budget's to admit.
//
// waitForReady calls (the file's waitForReady or grpc.WaitForReady(true))
// guarded by a breaker are held by stagger while their connection is not
// ready, as grpc would hold them; when the wait saw a connection attempt
// fail (the server was gone), each then waits for its start from
// breaker.Breaker.Pace: one at a time, at the rate the server answered over
// the window, instead of all at once when the connection comes back.
// circuitBreaker.paceReconnect false turns that off.
//
// State changes reach the hooks and the logger (EventBreaker) of the
// interceptor whose call's attempt or asking made them, after every lock is
// released; breaker.Set.Snapshots gives every breaker's state for
// metrics. The breaker's check on a call's success path is one atomic load
// to admit and one mutex to record, with no allocation.
//
// # Hooks, reports and metrics
//
// WithHook's hooks and the logger hear each retry, resume, give-up, hedge,
// deferral and breaker change as it happens. WithCallHook's hooks hear the same, with
// the caller's context (its trace span), and one EventEnd per call: the
// attempts sent, the retries or hedges among them, the time spent between
// attempts with none running, why the call ended (ReasonSuccess when it
// succeeded), its code and the connection's target. WithReport, per call,
// fills a Report with the same facts, so "succeeded after 2 retries" can be
// counted by the caller. A call hook on a call that succeeds at once costs
// no allocation. The nested module github.com/stagger-go/stagger/otel turns
// the end events into gRFC A96's retry metrics in OpenTelemetry.
//
// The logger (WithLogger, any go-grpc-middleware v2 logging.Logger) writes
// one line per event but EventEnd: retries, hedges, hedge ends and
// deferrals at debug level; budget refusals, notices and open breakers at
// warn. Its fields: grpc.method, stagger.event (the kind: "retry", "give
// up", "hedge", "hedge won", ...), stagger.attempt, grpc.code; then
// stagger.pause for a retry, a hedge or a deferral, and stagger.pushback
// (true) when the pause is the server's; stagger.backend, the address the
// failed attempt went to, when the stagger_elsewhere policy picked it
// (Event.Backend); stagger.reason when the event has
// a reason (a give-up, a notice, a hedge stop); stagger.deferred and
// stagger.admission after a wait for the budget. Durations are strings in
// time.Duration's format ("1.5s", "250ms"), so a JSON handler prints them
// readably rather than as integer nanoseconds. A breaker's line has
// stagger.breaker, stagger.from, stagger.failures, stagger.answered and
// stagger.break.
//
// The logger also gets, at warn level, the warnings of the policy file
// (policy.Config.Warnings: a misspelt key, a service or method the program's
// protos do not declare, each with its "did you mean"), once per file when a
// call first follows it, and again after a reload: "stagger: policy file:
// ..." with stagger.field and, when known, stagger.line and stagger.column.
// Hooks do not get them; they are not events of a call.
//
// # Resumable streams
//
// gRFC A6 commits a stream at its first response header or message: a
// server stream that breaks at message 90,000 of 100,000 fails the whole
// call, since a retry would deliver the first 90,000 again. A method whose
// request can say where to start (a page token, a start key, a resume
// token) can continue instead, as Google's client libraries do per API
// (gax's StreamResumptionStrategy: Bigtable's ReadRows resumes after the
// last row key, Spanner from a resume_token). WithResume registers, per
// server-streaming method, a ResumeFunc: given the call's request and the
// last message the application received, it returns the request that
// continues the stream after that message (TypedResume adapts one written
// for the generated types):
//
//	resume := interceptor.TypedResume(func(req *pb.ListItemsRequest, last *pb.ListItemsResponse) (*pb.ListItemsRequest, error) {
//		next := proto.Clone(req).(*pb.ListItemsRequest)
//		next.StartAfter = last.GetReply().GetSeq()
//		return next, nil
//	})
//	opts := stagger.DialOptions(cfg, interceptor.WithResume(pb.TestService_ListItems_FullMethodName, resume))
//
// A committed stream of that method that fails is then decided as one that
// had not committed, under the method's retry policy and every usual rule
// (the codes, maxAttempts, backoff, pushback, the caller's deadline, the
// breaker and the budget, which is charged per resume as for a retry); when
// it would be retried, the resume function builds the next request (only
// when messages arrived since the last one was built: a resumed attempt that
// failed after response headers but before a message is sent the same
// request again), and a new attempt is opened with it, after the pause. The
// application reads one stream: every message once, in order, none
// skipped, and the final status. Hooks hear EventResume (not EventRetry),
// reported before the function runs; resumed attempts carry the ResumeHeader
// request header (the number of the resume: 1, 2, ...) on top of
// grpc-previous-rpc-attempts.
//
// Counting. An attempt that delivers a message restarts the count: it
// becomes attempt 1 and the backoff sequence starts over, so maxAttempts
// bounds the failures in a row since the last message, not the resumes (a
// stream that keeps progressing is resumed as often as it breaks, each
// resume admitted by the budget), and grpc-previous-rpc-attempts,
// AttemptFromContext and Event.Attempt count since that message. The
// call's total (EventEnd, Report, Attempts(err)) counts every attempt.
//
// Ambiguity. A resume function declares that the method's request may be
// sent again (a server stream that reads), so a resumable call is taken as
// safe to repeat: a stream broken by its connection (reset, GOAWAY), whose
// status no server wrote, is resumed or retried too, where a call not known
// to be idempotent would otherwise end (reason ambiguous). Register one only
// for methods where that holds. The per-attempt timeout still follows the
// method's idempotency as above.
//
// When the function returns ErrCannotResume (or an error wrapping it) the
// call ends with the stream's own error, as without a resume function
// (reason committed). When it returns another error, returns no request, or
// panics, the call ends with INTERNAL, a *ResumeError naming the method and
// the function's error, with the stream's failure in its message (both
// reachable through errors.Is and errors.As); either way at once, without a
// pause. A code the policy does not retry ends the stream without calling
// the function.
//
// What it costs: a resumable stream keeps a reference to its request and to
// the last message received, and allocates nothing per message (the
// application must not modify a message after RecvMsg returned it, as it
// must not after SendMsg). Context commits a resumable stream for good, as
// it commits any stream: a resumed attempt would cancel the context the
// application holds. Without a resume function, or without a retry policy
// for the method, streams behave as gRFC A6 says.
//
// Client-streaming and bidi methods are not resumed (WithResume changes
// nothing for them): what the server did with the messages sent so far, and
// which to send again, is the application's protocol, which one request
// built from the last response cannot express; a bidi stream's responses
// may not even follow its requests one to one. Their streams commit as
// gRFC A6 says.
//
// # Concurrency
//
// The interceptors are safe for concurrent use by any number of calls. Hooks
// and the logger run on the call's goroutine (a hedged stream's hedge
// events on its own goroutine), outside every lock, with a copy of the
// event; they must be safe for concurrent use.
package interceptor
