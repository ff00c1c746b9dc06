package lab

import (
	"context"

	"google.golang.org/grpc"

	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/server"
	"github.com/stagger-go/stagger/testserver"
)

// levelKey carries a ScenarioMixedCriticality call's criticality in its
// context, where only stagger-criticality's sayCriticality reads it: the
// other contenders' calls carry no criticality.
type levelKey struct{}

// callLevel is the criticality of a client's seq-th call (from 1) in
// ScenarioMixedCriticality: CRITICAL for three of every ten, spread out
// (the third, seventh and tenth), SHEDDABLE for the others.
func callLevel(seq int) criticality.Level {
	switch seq % 10 {
	case 3, 7, 0:
		return criticality.Critical
	}
	return criticality.Sheddable
}

// withLevel returns ctx carrying the lab's level for the call.
func withLevel(ctx context.Context, l criticality.Level) context.Context {
	return context.WithValue(ctx, levelKey{}, l)
}

// levelOf returns the level withLevel put in ctx, or Unset.
func levelOf(ctx context.Context) criticality.Level {
	l, _ := ctx.Value(levelKey{}).(criticality.Level)
	return l
}

// sayCriticality is stagger-criticality's outermost interceptor: it says
// the call's level the way a user does, criticality.NewContext.
func sayCriticality(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if l := levelOf(ctx); l != criticality.Unset {
		ctx = criticality.NewContext(ctx, l)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// levelCount counts one criticality's calls and their successes.
type levelCount struct{ calls, ok int }

// rate is the success rate, 0 without calls.
func (c levelCount) rate() float64 {
	if c.calls == 0 {
		return 0
	}
	return float64(c.ok) / float64(c.calls)
}

// ConcurrencyLimit is the limit of ScenarioMixedCriticality's server
// side (cfg after Defaults): Workers + Queue/2 calls in the server,
// running or queued, so that it refuses before the queue is full.
func (c Config) ConcurrencyLimit() int { return c.Workers + c.Queue/2 }

// mixedServerSide is ScenarioMixedCriticality's server side, in front of
// the workers: stagger's concurrency limit of Workers + Queue/2 calls in
// the server (running or queued), which refuses with a pushback, keeping a
// share for the more critical. An attempt it refuses costs the workers a
// rejection (testserver.Server.Refused), as one the queue refuses does: a
// limit in front must not make storms free. The server is set once made
// (*srv).
func mixedServerSide(cfg *Config, srv **testserver.Server) (testserver.Option, error) {
	si, err := server.New(server.WithConcurrencyLimit(cfg.ConcurrencyLimit()))
	if err != nil {
		return nil, err
	}
	// reached is set by the innermost interceptor: the limit let the
	// attempt through.
	type reachedKey struct{}
	outer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		reached := new(bool)
		resp, err := handler(context.WithValue(ctx, reachedKey{}, reached), req)
		if !*reached {
			(*srv).Refused()
		}
		return resp, err
	}
	inner := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		*ctx.Value(reachedKey{}).(*bool) = true
		return handler(ctx, req)
	}
	return testserver.WithServerOptions(grpc.ChainUnaryInterceptor(outer, si.Unary(), inner)), nil
}
