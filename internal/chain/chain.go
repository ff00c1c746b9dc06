// Package chain is what stagger's server side (package server) and its
// client interceptors (package interceptor) share about the request a server
// is serving: the server side puts a *Request in the handler's context; a
// stagger client call made under that context marks it when stagger gave up
// retrying, and reads from it whether the request arrived as a retry (then the
// call makes one attempt). Neither package imports the other.
package chain

import (
	"context"
	"sync/atomic"
)

// Request is one request a server is serving: a context (the handler's,
// with the Request in it), so that putting it there costs one allocation.
type Request struct {
	context.Context
	// Retried: the request arrived as a retry or a hedge, and the server
	// side asks downstream calls made under it to make one attempt.
	Retried bool
	// gaveUp: a stagger client call made under the request gave up
	// retrying; dontRetry: the handler asked that its caller not retry.
	gaveUp, dontRetry atomic.Bool
}

type key struct{}

// New returns a Request whose context is parent.
func New(parent context.Context, retried bool) *Request {
	return &Request{Context: parent, Retried: retried}
}

// Value returns r for the package's key, and parent's values otherwise.
func (r *Request) Value(k any) any {
	if _, ok := k.(key); ok {
		return r
	}
	return r.Context.Value(k)
}

// From returns the Request ctx belongs to, or nil.
func From(ctx context.Context) *Request {
	r, _ := ctx.Value(key{}).(*Request)
	return r
}

// GaveUp marks the request ctx belongs to (if any): a downstream call made
// while serving it gave up retrying.
func GaveUp(ctx context.Context) {
	if r := From(ctx); r != nil {
		r.gaveUp.Store(true)
	}
}

// DontRetry marks r: its handler asked that its caller not retry.
func (r *Request) DontRetry() { r.dontRetry.Store(true) }

// Marked reports whether r is marked, by GaveUp or DontRetry.
func (r *Request) Marked() bool { return r.gaveUp.Load() || r.dontRetry.Load() }

// RetriedRequest reports whether ctx belongs to a request that arrived as a
// retry, whose downstream calls make one attempt.
func RetriedRequest(ctx context.Context) bool {
	r := From(ctx)
	return r != nil && r.Retried
}
