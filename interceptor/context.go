package interceptor

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"

	"google.golang.org/grpc/metadata"
)

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

// newIdempotencyKey returns 128 random bits in hex, from math/rand/v2's
// ChaCha8, seeded from the OS and lock-free.
func newIdempotencyKey() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	return hex.EncodeToString(b[:])
}

// hasOutgoing reports whether ctx's outgoing metadata already carries header.
func hasOutgoing(ctx context.Context, header string) bool {
	md, ok := metadata.FromOutgoingContext(ctx)
	return ok && len(md.Get(header)) > 0
}
