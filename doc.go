// Package stagger retries gRPC client calls the way the best systems do:
// exponential backoff with a chosen jitter, a retry budget per backend
// (each connection target its own tokens and Gate: budget.Backends), server
// pushback, deadline awareness, and per-method policy from
// service-config-style files. Its promise: retries that heal
// transient failures and never turn an outage into a retry storm.
//
// The one-line setup:
//
//	cfg, err := policy.LoadFile("retry.json")
//	if err != nil { ... }
//	opts := append(stagger.DialOptions(cfg), grpc.WithTransportCredentials(creds))
//	conn, err := grpc.NewClient(target, opts...)
//
// A file that changes while the program runs: watch it with
// policy.WatchFile and dial with DialOptionsFromSource; each call follows
// the file as it is when the call starts, a bad file keeps the last good one
// in force, and the budget follows the file (see DialOptionsFromSource).
//
//	src, err := policy.WatchFile("retry.json") // polls every second
//	if err != nil { ... }
//	defer src.Close()
//	opts := append(stagger.DialOptionsFromSource(src), grpc.WithTransportCredentials(creds))
//
// Retries and hedges that go to another backend: an interceptor cannot
// choose the backend an attempt goes to, so with grpc-go's default
// pick_first every attempt goes to the one backend the connection uses, and
// with round_robin to whichever is next, the one that just failed included.
// The load-balancing policy stagger_elsewhere (package balancer/elsewhere)
// sends each retry and hedge of a call to a READY backend the call has not
// used yet, when there is one; name it in the service config given to grpc:
//
//	opts := append(stagger.DialOptions(cfg),
//		grpc.WithDefaultServiceConfig(elsewhere.ServiceConfig),
//		grpc.WithTransportCredentials(creds))
//
// The packages: policy (decisions, policy files), budget (retry budgets,
// per backend, and the Gate that defers what they refuse), breaker (circuit
// breakers and adaptive throttling), criticality (a call's criticality, which
// orders what budgets refuse first), interceptor (the interceptors, their
// options and events), balancer/elsewhere (the load-balancing policy above),
// server (the server side for services that are also clients: "do not retry"
// propagated up a call chain, load shedding with pushback). Nested modules:
// connect (staggerconnect, the connect-go front end), otel (OpenTelemetry
// metrics), server/redisstore (a Redis idempotency store).
package stagger
