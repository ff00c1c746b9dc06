// Package server is stagger's server side: gRPC server interceptors that
// stop retries multiplying down a call chain, and shed load with a pushback
// that says when to come back. stagger's client packages never import it.
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
// # Where to retry in a chain
//
// Retry at the edge that sees the failure, and let the layers above obey its
// verdict: give every layer a retry policy (each may be the one just above
// a failure), install this package's interceptors on every server that is
// also a client, and keep a retry budget on each client (stagger's default)
// for the failures that do not come back as a verdict (timeouts, lost
// connections). `stagger check` says the same beside a policy file.
package server
