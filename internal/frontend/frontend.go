// Package frontend is the seam between stagger's retry engine (package
// interceptor) and a front end other than grpc-go's interceptors (the
// connect-go front end, module connect). The engine talks to its transport
// through grpc-go's own shapes: an invoker or streamer it is given, the
// grpc.Header and grpc.Trailer call options it reads the wire facts from,
// and the *grpc.ClientConn, which such a front end does not have (it passes
// nil). What the ClientConn gave the engine, and what grpc-go's registry
// cannot, passes here:
//
//   - the target, which keys the circuit breakers and names the call in
//     events (WithTarget, on the call's context);
//   - which attempt of a stream the caller sees (Shown), for the front
//     end's own header and trailer methods.
//
// The idempotency a front end knows of a method beside the proto
// registry's (connect-go's Spec().IdempotencyLevel) is an exported option
// of the engine, interceptor.WithIdempotentMethods. Neither the engine nor
// the front end imports the other through here.
package frontend

import (
	"context"
	"sync/atomic"
)

type targetKey struct{}

// inUse: WithTarget was called in this process. Until then Target answers
// "" without looking at the context, so that a grpc-go call made without
// a ClientConn (a test's, a benchmark's) costs what it did before the seam.
var inUse atomic.Bool

// WithTarget returns ctx carrying the target of a call made without a
// *grpc.ClientConn.
func WithTarget(ctx context.Context, target string) context.Context {
	if !inUse.Load() {
		inUse.Store(true)
	}
	return context.WithValue(ctx, targetKey{}, target)
}

// Target returns the target WithTarget put in ctx, or "".
func Target(ctx context.Context) string {
	if ctx == nil || !inUse.Load() {
		return ""
	}
	t, _ := ctx.Value(targetKey{}).(string)
	return t
}

// Shown is implemented by the engine's client streams (package
// interceptor's retried and hedged streams). ShownStream returns the
// stream of the attempt whose answer the caller sees: the attempt the
// stream committed to, or the one whose end ended the call; nil while the
// stream has chosen none (attempts still race or retry). A front end reads
// headers and trailers from that attempt only, never from the last one it
// happened to hear from: the rule is in package interceptor's doc.
type Shown interface {
	ShownStream() any
}
