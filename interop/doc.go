// Package interop runs grpc-go's own interop test cases (package
// google.golang.org/grpc/interop, written by the grpc-go team) through a
// client dialed with stagger.DialOptions, against grpc-go's interop test
// server on loopback TCP, with failures injected in front of the server:
// a call that stagger retried or hedged must look to the caller like one
// that never failed. The cases (14: every one that needs no credentials
// and no second server) each run under a retry policy and a hedging
// policy on every method, and under each failure pattern: none; every
// call's first attempt UNAVAILABLE; its first two (with grpc-go's
// retryThrottling, as the default budget lets a fresh process whose every
// attempt failed make one retry); RESOURCE_EXHAUSTED with a 20 ms
// pushback; the first connection reset before the handler; the first
// connection's server sending GOAWAY and draining after failing the first
// attempt; and, for server_streaming under the retry policy with the
// stream made resumable (interceptor.WithResume), the connection reset
// after two of the four messages, which the client must resume from the
// last message it received. A pattern that injected nothing fails its
// case, except in the three cases whose calls end before the server's
// interceptors run. One case is stagger's own, stagger_gave_up: calls whose
// every attempt fails, which stagger gives up on, whose error must say so
// (interceptor.Error) and keep the server's status; grpc-go's
// status_code_and_message and special_status_message check that a call
// ending on the server's non-retryable answer prints grpc-go's text.
//
// It is a module of its own so that the core module does not require the
// interop package's dependencies. Its go.mod requires the oldest grpc-go
// the core supports: `cd interop && GOWORK=off go test ./...` runs the cases
// on it (make test-oldest), and the workspace runs them on the newest
// (make test-newest).
//
// Each case runs in a process of its own (the test binary run again with
// STAGGER_INTEROP_CASE set): the interop helpers end the process through
// grpclog.Fatal when a check fails.
package interop
