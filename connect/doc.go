// Package staggerconnect runs connect-go clients through stagger: the same
// policy files, retry engine, budget and Gate, circuit breakers and
// throttling, criticality, idempotency keys, hedging, events, Report and
// metrics as package interceptor's gRPC interceptors, for the Connect, gRPC
// and gRPC-Web protocols alike.
//
//	cfg, err := policy.LoadFile("stagger.json")
//	retry, err := staggerconnect.NewClient(cfg)
//	client := testingv1connect.NewTestServiceClient(http.DefaultClient, url,
//		connect.WithInterceptors(retry))
//
// A Client is a connect.Interceptor. It drives package interceptor's
// engine, not a copy of it: each attempt goes down the rest of the Connect
// chain, and the engine hears what it would hear from grpc-go. So
// everything package interceptor's documentation says of a call holds,
// with these translations:
//
//   - The method is the procedure (Spec().Procedure,
//     "/pkg.Service/Method"), the names a policy file uses; the target (the
//     budgets' and breakers' key, Event.Target) is the host the client
//     calls (Peer().Addr). A Client keeps the file's budgets and breakers
//     in an interceptor.State of its own, as one stagger.DialOptions result
//     does; interceptor.WithState shares one between Clients. A procedure
//     whose Spec carries its Schema (protoc-gen-connect-go's clients set
//     it) is a registered method (Event.StaticMethod), as a call of
//     grpc-go's generated code is; Event.CanonicalTarget is the host.
//   - A Connect error is the attempt's status: its code, message and
//     details (a google.rpc.RetryInfo detail is pushback) and its metadata
//     (the grpc-retry-pushback-ms trailer, in every protocol).
//   - The ambiguity rule: an error the client made up (connect.IsWireError
//     false: a reset, a closed connection) after the request's headers were
//     written may have run on the server, which sent no status; it is
//     retried only for a method known to be idempotent or a call with an
//     idempotency key. One made before the request left (a refused
//     connection; a transport error that wraps context.Canceled though no
//     context of the call ended, which connect-go codes CANCELED) is sent
//     again at once, once per call, without counting an attempt, as
//     grpc-go retries a stream that never reached the server. A context
//     error that no context of the call explains, a second such failure
//     or one after the headers were written, is UNAVAILABLE to the policy,
//     a lost transport (the ambiguity rule applies to one that left),
//     never the fatal answer of a server.
//   - A method is idempotent when the call says so (WithCallOptions with
//     interceptor.Idempotent), else the file's "idempotent", else its proto
//     option or its Spec().IdempotencyLevel (IdempotencyNoSideEffects and
//     IdempotencyIdempotent are safe).
//   - The criticality header, the idempotency key and
//     grpc-previous-rpc-attempts are request headers; a header the caller's
//     request already carries is kept (a caller's own key). Each attempt
//     of a unary call sends a copy of the request, so the caller's is
//     never written (its HTTPMethod stays empty).
//   - A unary call is never committed before its response: Connect shows
//     its headers only with it.
//   - The hedges of a server stream go on the hedging delay while the
//     attempts before them wait for their response (connect-go sends a
//     server stream's request and waits for the response headers in one
//     step), when the HTTP client's transport is net/http's, or one that
//     calls the request's httptrace GetConn as it takes it: with another,
//     a server stream's hedge waits until the attempts before it have
//     their response headers.
//   - The final error is a *connect.Error: the last attempt's own when
//     stagger returned it as it was (no policy for the method), otherwise
//     one with that attempt's code, message, details and metadata as
//     connect-go gave them (a lost transport stagger retried as
//     UNAVAILABLE keeps connect-go's code), whose Unwrap reaches stagger's
//     *interceptor.Error (attempts, reason; interceptor.Attempts works on
//     it). When stagger decided the status (the caller left), its code and
//     message. When stagger gave up on a failure it would otherwise retry
//     (interceptor.Error's GaveUp), that *connect.Error comes wrapped in an
//     error whose text says so, as interceptor.Error's does ("stagger: gave
//     up: max retries exhausted: failed after 3 attempts: unavailable:
//     down"): connect.CodeOf and errors.As find the *connect.Error, its
//     message the server's, but a type assertion does not.
//   - A stream's ResponseHeader and ResponseTrailer are those of the
//     attempt it committed to, or of its last attempt once it ended, as
//     connect-go's stream gives them: a failed attempt that sent headers
//     and no message has them, though stagger retried it as a gRPC
//     Trailers-Only failure. The Connect conformance suite runs through a
//     Client with every code retried, and with every code hedged, and each
//     case ends as it does without stagger (make conformance).
//
// Per-call options (a Connect call has no call options) go in the call's
// context: WithCallOptions.
//
// waitForReady and the message size limits of a policy file are grpc-go's
// and do not apply to Connect calls.
package staggerconnect
