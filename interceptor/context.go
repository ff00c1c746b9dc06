package interceptor

import "context"

type attemptKey struct{}

// AttemptFromContext returns the number of the attempt ctx belongs to (2 for
// the first retry, 3 for the second, ...) and true, when stagger sent the
// attempt as a retry. For a first attempt it returns 1 and false: stagger
// leaves first attempts' contexts untouched so that a call that succeeds at
// once costs no allocation, and a context without the mark is a first
// attempt whenever stagger is earlier in the chain.
//
// Interceptors placed after stagger in the chain (inner interceptors) run once
// per attempt and see this; those placed before it run once per call.
func AttemptFromContext(ctx context.Context) (n int, ok bool) {
	if v, ok := ctx.Value(attemptKey{}).(int); ok {
		return v, true
	}
	return 1, false
}
