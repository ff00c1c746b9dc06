package interceptor

import "context"

type attemptKey struct{}

// AttemptFromContext returns the number of the attempt ctx belongs to (2 for
// the first retry, 3 for the second, ...) and true, when stagger sent the
// attempt as a retry, for the interceptors after stagger in the chain. For
// a first attempt it returns 1 and false: stagger leaves first attempts'
// contexts untouched, so a call that succeeds at once costs no allocation.
func AttemptFromContext(ctx context.Context) (n int, ok bool) {
	if v, ok := ctx.Value(attemptKey{}).(int); ok {
		return v, true
	}
	return 1, false
}
