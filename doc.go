// Package stagger retries gRPC client calls the way the best systems do:
// exponential backoff with a chosen jitter, a retry budget shared by every
// call of the process, server pushback, deadline awareness, and per-method
// policy from service-config-style files. Its promise: retries that heal
// transient failures and never turn an outage into a retry storm.
//
// The one-line setup:
//
//	cfg, err := policy.LoadFile("retry.json")
//	if err != nil { ... }
//	opts := append(stagger.DialOptions(cfg), grpc.WithTransportCredentials(creds))
//	conn, err := grpc.NewClient(target, opts...)
//
// The packages: policy (decisions, policy files), budget (retry budgets),
// interceptor (the interceptors, their options and events), server (the
// server side for services that are also clients: "do not retry" propagated
// up a call chain, load shedding with pushback).
package stagger

import (
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc"
)

// DialOptions returns the dial options that make a connection follow the
// policy file cfg (nil: no file; give a policy with interceptor.WithPolicy):
// stagger's unary and stream interceptors, and grpc.WithDisableRetry.
//
// grpc-go's own retry is disabled because retries at two layers multiply. A
// consequence: a retry policy delivered by the name resolver's service config
// is then not applied by grpc-go; put it in cfg instead.
//
// DialOptions is safe by default: when the file declares no budget and opts
// give none (interceptor.WithBudget), calls use budget.Default(), one per
// process, shared by every connection made this way; a retry it refuses
// waits, within the call's deadline, for the server to come back (deferral:
// budget.Gate) instead of ending the call. opts are applied to both
// interceptors after cfg, so they can override it (interceptor.WithBudget(nil)
// means unlimited).
//
// Interceptors given before DialOptions run outside stagger and see one call;
// those given after run inside it and see every attempt (the interceptor
// package, "Where stagger goes in a chain").
func DialOptions(cfg *policy.Config, opts ...interceptor.Option) []grpc.DialOption {
	all := make([]interceptor.Option, 0, len(opts)+2)
	all = append(all, interceptor.WithConfig(cfg), interceptor.WithDefaultBudget(budget.Default()))
	all = append(all, opts...)
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(all...)),
		grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(all...)),
		grpc.WithDisableRetry(),
	}
}
