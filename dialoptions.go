package stagger

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
)

// DialOptions returns the dial options that make a connection follow the
// policy file cfg (nil: no file; give a policy with interceptor.WithPolicy):
// stagger's unary and stream interceptors, interceptor.HeaderWatch (so that
// a unary call commits at its first response header), and
// grpc.WithDisableRetry.
//
// grpc-go's own retry is disabled because retries at two layers multiply. A
// consequence: a retry policy delivered by the name resolver's service config
// is then not applied by grpc-go; put it in cfg instead.
//
// DialOptions is safe by default: when the file declares no budget and opts
// give none (interceptor.WithBudget), calls use budget.DefaultBackends():
// stagger's default budget, one per backend (the connection's target),
// shared by every connection of the process to that target; a retry it
// refuses waits, within the call's deadline, for the server to come back
// (deferral: budget.Gate, one per method of the backend) instead of ending
// the call. A file's budgets and circuit breakers are kept per backend too,
// built from its settings by the two interceptors DialOptions returns, in
// one interceptor.State they share: every connection dialed with this
// result shares them per target, and a second DialOptions call has its own
// (as grpc-go keeps one throttle per channel; interceptor.WithState in opts
// shares one State between calls, and exposes it for metrics). So one cfg
// may dial every connection of a process: a down backend's retries are
// judged and paid by that backend alone. opts are applied to both
// interceptors after cfg, so they can override it (interceptor.WithBudget(nil)
// means unlimited).
//
// The backend each attempt goes to is the load-balancing policy's choice,
// not the interceptors': add grpc.WithDefaultServiceConfig(elsewhere.ServiceConfig)
// (package balancer/elsewhere) for retries and hedges that go to a backend
// the call has not used yet.
//
// Interceptors given before DialOptions run outside stagger and see one call;
// those given after run inside it and see every attempt (the interceptor
// package, "Where stagger goes in a chain").
//
// For a file that changes while the program runs, use DialOptionsFromSource.
func DialOptions(cfg *policy.Config, opts ...interceptor.Option) []grpc.DialOption {
	return dialOptions(interceptor.WithConfig(cfg), budget.DefaultBackends(), opts)
}

// DialOptionsFromSource is DialOptions for a policy file that can change
// while the program runs: each call follows src.Config() as it is when the
// call starts, so a reload applies to the next call and never to a call in
// flight. src is usually a *policy.Source from policy.WatchFile, which
// polls the file and keeps the last good config when a new one does not
// parse (or from policy.NewSource, whose Update swaps configs in).
//
//	src, err := policy.WatchFile("retry.json")
//	if err != nil { ... }
//	defer src.Close()
//	opts := append(stagger.DialOptionsFromSource(src), grpc.WithTransportCredentials(creds))
//	conn, err := grpc.NewClient(target, opts...)
//
// The safety is DialOptions': grpc-go's own retry is off, and a call whose
// current config declares no budget uses budget.DefaultBackends(). The
// budget is chosen per call (and per backend), from the config the call
// starts with, so a reload moves calls between budgets:
//
//   - a file that adds a budget: the next calls use the file's, new and
//     with the state a fresh budget of its settings has; the calls already
//     running, or waiting in the default budget (deferral), stay with it;
//   - a file that removes its budget: the next calls use
//     budget.DefaultBackends(), never unlimited;
//   - a file whose budget settings are unchanged (only the methods changed):
//     the same budgets, every backend's state included (the interceptors'
//     interceptor.State keeps them);
//   - changed settings: new budgets, and the old ones' state is dropped.
//
// interceptor.WithBudget in opts overrides every file's budget, so the
// budget then stays the same across reloads whatever the files declare.
//
// A reload that fails (a file that does not parse) leaves the last good
// config in force; policy.OnReload hears of it at once, and the logger of
// interceptor.WithLogger in opts at error level, on the next call.
//
// A nil src, or a nil *policy.Source (the result of a WatchFile whose error
// was not checked), is a programming error that DialOptionsFromSource does
// not panic on: every call made through the connection fails at once, before
// reaching the server, with codes.FailedPrecondition and a message naming
// the cause.
func DialOptionsFromSource(src interceptor.ConfigSource, opts ...interceptor.Option) []grpc.DialOption {
	if isNilSource(src) {
		return nilSourceDialOptions()
	}
	return dialOptions(interceptor.WithConfigSource(src), budget.DefaultBackends(), opts)
}

// dialOptions builds the dial options for a config option (a file or a
// source) with fallback as the budgets of calls whose file declares none.
func dialOptions(config interceptor.Option, fallback *budget.Backends, opts []interceptor.Option) []grpc.DialOption {
	all := make([]interceptor.Option, 0, len(opts)+3)
	// One State for both interceptors: a target's unary and stream calls
	// spend the same tokens.
	all = append(all, config, interceptor.WithDefaultBudgets(fallback), interceptor.WithState(interceptor.NewState()))
	all = append(all, opts...)
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(all...)),
		grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(all...)),
		grpc.WithStatsHandler(interceptor.HeaderWatch()),
		grpc.WithDisableRetry(),
	}
}

// errNilSource is the status of every call of a connection dialed with a nil
// source.
var errNilSource = status.Error(codes.FailedPrecondition,
	"stagger: DialOptionsFromSource was given a nil source (was the error of policy.WatchFile checked?)")

// isNilSource reports a nil interface or a nil *policy.Source, whose Config
// would panic. Other nil pointers are left alone: their Config method may
// well be written for a nil receiver.
func isNilSource(src interceptor.ConfigSource) bool {
	if src == nil {
		return true
	}
	s, ok := src.(*policy.Source)
	return ok && s == nil
}

func nilSourceDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(context.Context, string, any, any, *grpc.ClientConn, grpc.UnaryInvoker, ...grpc.CallOption) error {
			return errNilSource
		}),
		grpc.WithChainStreamInterceptor(func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, grpc.Streamer, ...grpc.CallOption) (grpc.ClientStream, error) {
			return nil, errNilSource
		}),
		grpc.WithDisableRetry(),
	}
}
