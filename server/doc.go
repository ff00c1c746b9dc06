// Package server is stagger's server side: gRPC server interceptors that
// stop retries multiplying down a call chain, hand a request's criticality
// down it, and shed load, the least critical first, with a pushback that
// says when to come back. stagger's client packages never import it.
//
// Most services are the middle of a chain: A calls B, which calls C. When
// every layer makes 3 attempts and C is down, one user request becomes 27
// attempts at C. A retry budget per process cannot see that; the fix is to
// retry at one layer only, the one just above the failure (Google's SRE
// book, "Handling Overload"): when a server's own retries to its dependency
// are exhausted, it answers "do not retry", and the layers above do not.
// gRFC A6 has the wire signal: a negative grpc-retry-pushback-ms trailer.
// grpc-go's built-in retry and stagger obey it; go-grpc-middleware's retry
// does not.
//
// The setup:
//
//	side, err := server.New() // propagation on; see the Options
//	if err != nil { ... }
//	srv := grpc.NewServer(side.ServerOptions()...)
//
// # Don't-retry propagation (on by default)
//
// A handler that returns an error gets gRFC A6's "do not retry" (the trailer
// grpc-retry-pushback-ms: -1) added to it when
//
//   - the error, wrapped or not, is a stagger client call's that gave up
//     retrying (interceptor.Error's GaveUp: no attempt left, budget,
//     deferral, circuit breaker, throttling, deadline, an ambiguous failure,
//     the downstream server's own "do not retry", a retried request); or
//   - a stagger client call made under the handler's context (or a context
//     derived from it) gave up, whatever error the handler then returns: a
//     handler that wraps the downstream error in a status of its own still
//     propagates it; or
//   - the handler called DontRetry with its context.
//
// The handler does nothing for the first two. The status code, message and
// details are those the handler returned, unchanged; a successful reply is
// never touched. A handler that panics, returns a non-status error or a nil
// reply gets exactly what it would without the interceptor (the panic goes
// on up the stack; a recovery interceptor outside this one sees it). A
// trailer of the same name the handler set itself is not read: the caller
// then gets two values, which gRFC A6 also reads as "do not retry".
//
// What a caller's retry layer does with it: stagger and grpc-go's built-in
// retry stop (stagger's reason "pushback", which, one layer up, propagates
// again, so the signal climbs the whole chain and C sees one layer's
// retries); gRFC A6 counts it as a failure for retry throttling.
// go-grpc-middleware ignores it and retries; WithRetryAtOneLayer bounds
// what its retries cost below.
//
// # Retry at one layer (WithRetryAtOneLayer)
//
// A request that arrives as a retry or a hedge (grpc-previous-rpc-attempts,
// or go-grpc-middleware's x-retry-attempt, above 0) has its downstream
// stagger calls make one attempt and no hedges; a call that fails then ends
// with reason "retried request", which propagation reports upward. A hedge
// counts as a retry: the layer above is already sending the request more
// than once. The handler's calls also carry the header
// stagger-upstream-retry, so that the next server (with the option) treats
// its request as retried too, although it arrives as a first attempt. With
// go-grpc-middleware at the top of user → A → B → C (3 attempts at every
// hop), C sees 3 + 1 + 1 attempts per user call instead of 9 (27 without
// the server side).
//
// # Load shedding (WithConcurrencyLimit)
//
// Past a limit of unary calls running at once, a new call is answered
// RESOURCE_EXHAUSTED at once, with a pushback (the trailer, and a
// google.rpc.RetryInfo detail) of the observed service time times a random
// factor in [0.5, 1.5): gRFC A6 clients that retry RESOURCE_EXHAUSTED wait
// exactly the pushback instead of their backoff, so the random factor, set
// by the server, is what spreads their return. The standard health check is
// never shed (WithExempt). Streams are not limited.
//
// The less critical calls are shed first: each criticality may fill only
// its share of the limit (CriticalityShares: by default a SHEDDABLE call is
// admitted below 80 % of the limit, a SHEDDABLE_PLUS one below 90 %, the
// others up to the limit), so a server overloaded with sheddable work
// still admits critical calls at once, and the shed less critical come
// back later (a longer pushback). Shed and ShedLevel count the refusals.
//
// With grpc-go's orca option before these interceptors
// (grpc.NewServer(orca.CallMetricsServerOption(nil), side.ServerOptions()...)),
// every call the limit counts carries a load report (gRFC A51, the trailer
// endpoint-load-metrics-bin): its application utilization is the calls
// running over the limit, at most 1, set as the call is admitted (a handler
// that sets its own later wins); a shed call carries one with its refusal.
// Without the option nothing is sent. stagger's clients read the reports
// (interceptor.Report.Load, budget.Attempt.Load).
//
// # Criticality
//
// A request's criticality (package criticality), sent by a stagger client
// in the header stagger-criticality (interceptor.WithCriticality, or a
// policy file's "criticality"), goes into the handler's context
// (criticality.FromContext; Criticality returns it, CRITICAL for a request
// that named none), unary calls and streams alike, so that the stagger
// calls the handler makes under that context carry it on: a SHEDDABLE
// request's downstream calls are SHEDDABLE, whatever this server's policy
// file says (interceptor.WithCriticality has the order). A request without
// the header puts nothing in the context, and counts as CRITICAL. A value
// that names no criticality counts as none (so garbage gains a caller
// nothing), and the first is logged through slog.Default(); of several
// values, the least critical counts. Reading the header costs a request
// that carries none no allocation (one lookup among its headers, about 80
// ns); one that carries it, two allocations.
//
// The header is the caller's word, as in Google's stack, where callers are
// trusted. A server that takes calls from callers it does not trust should
// remove it (an interceptor before these that replaces the incoming
// metadata), or any of them could claim CRITICAL_PLUS.
//
// # Idempotency keys (WithIdempotency)
//
// Retrying a write that is not idempotent is safe only when the server
// de-duplicates it. A client call with interceptor.WithIdempotencyKey
// (interceptor.DefaultIdempotencyHeader) sends one random key on every
// attempt, and stagger then retries its ambiguous failures (a reset after
// the request left, even after response headers arrived: a unary call with a
// key is not committed by them); with WithIdempotency(store, ...) the
// server runs the handler at most once per key:
//
//   - the first request with a key claims it in the store, with a lease,
//     and runs the handler;
//   - a repeat while it runs waits for it (polling the store, within the
//     repeat's own deadline: past it, DEADLINE_EXCEEDED);
//   - a repeat after it finished gets the stored outcome (the reply, or the
//     status with its details, and the headers and trailers the handler
//     set) without running the handler, with the response header
//     idempotent-replayed: true;
//   - a key reused with another request (another method, or a message whose
//     deterministic encoding differs: Fingerprint) gets FAILED_PRECONDITION
//     naming the key, never the other request's outcome (the IETF
//     Idempotency-Key draft's rule);
//   - each of these holds within one caller's scope (below): the same key
//     from another caller is another key;
//   - a key that is empty, repeated, longer than MaxKeyLength (255) or not
//     printable ASCII gets INVALID_ARGUMENT naming the header;
//   - a store that fails (Redis down) fails the request with UNAVAILABLE,
//     which the client may retry, and the handler does not run.
//
// Which outcomes are kept: every one but the codes a client may retry
// (UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED, DEADLINE_EXCEEDED, CANCELED):
// for those the key is released and a retry runs the handler again, since
// such a failure says the request did not take effect (a handler that
// applied a write and then returns one of them breaks that promise). OK and
// every other status are replayed for TTL (24 hours by default, as Stripe
// keeps them). A handler that panics releases its key.
//
// The key comes from the header (Header; the default matches the client's
// DefaultIdempotencyHeader) or from the request itself (Key: AIP-155's
// request_id). Streams are not de-duplicated: a stream with a key runs as
// it would without the option.
//
// Keys belong to their caller, as Stripe scopes a key to the account that
// sent it. An outcome is found only by requests of the scope that stored
// it: another caller that sends the same key with the same request runs the
// handler (where per-caller authorization usually lives) and gets its own
// reply, headers and trailers, never the first caller's; a key it reuses
// with another request is judged against its own requests only, so the
// refusal tells it nothing of other callers' keys. By default a caller is
// its verified TLS client certificate (grpc.Creds with a tls.Config whose
// ClientAuth is RequireAndVerifyClientCert or VerifyClientCertIfGiven): its
// URI SANs (a SPIFFE ID) when it has any, else its subject and issuer. A
// certificate the server did not verify against its ClientCAs names no one.
//
// Callers without a verified certificate (a server without TLS or without
// client certificates, behind a proxy that ends TLS, or with another kind
// of credentials) share one scope: any of them that sends another's key
// with the same request gets the other's stored outcome, headers and
// trailers included, without running the handler. With keys that can be
// guessed (an application's request_id, a client's counter) that leaks
// answers between callers and skips the handler's authorization. New
// cannot know whether callers will have certificates (the credentials go
// to grpc.NewServer, and one server may take callers with and without), so
// the first request with a key from such a caller logs a warning, once per
// WithIdempotency (IdempotencyOptions.Logger). IdempotencyOptions.Scope
// names callers another way, such as the tenant of an authenticated token:
// a Scope that fails refuses the request (UNAUTHENTICATED, or the status it
// returned) and stores nothing; one that returns "" for every caller shares
// keys on purpose, without the warning. A Store sees the scope folded into
// the key (StoreKey: a hash of the scope, then the key), so a Store keeps
// callers apart without knowing of them.
//
// At most once, and its limits: a claim's lease lasts until the request's
// deadline and a second more (Lease, one minute, without a deadline; at most
// MaxLease). If the server dies while the handler runs, the key is free
// again when the lease expires, and a retry runs the handler: the work of
// the dead one may have been done or not, and only the application knows.
// A handler that runs past its lease can run twice the same way; its
// outcome is then not stored (ErrLeaseLost), and it is still the answer of
// its own request. A store that loses entries (a MemoryStore evicting done
// entries past its bounds, a Redis failover) forgets them the same way.
//
// Stores: NewMemoryStore (bounded by entries and bytes, TTLs without a
// goroutine per entry) for a service of one replica; the Redis store of the
// nested module github.com/stagger-go/stagger/server/redisstore for a fleet.
// Both pass the same contract tests (package storetest).
//
// # Where to retry in a chain
//
// Retry at the edge that sees the failure, and let the layers above obey its
// verdict: give every layer a retry policy (each may be the one just above
// a failure), install this package's interceptors on every server that is
// also a client, and keep a retry budget on each client (stagger's default)
// for the failures that do not come back as a verdict (timeouts, lost
// connections). `stagger check` says the same beside a policy file.
package server
