package interceptor

import (
	"context"
	"encoding/hex"
	"math/rand/v2"

	"google.golang.org/grpc/metadata"
)

// newIdempotencyKey returns 128 random bits in hex. math/rand/v2's generator
// is ChaCha8 seeded from the OS: unpredictable enough that two calls never
// share a key, and it takes no lock.
func newIdempotencyKey() string {
	var b [16]byte
	for i := 0; i < 2; i++ {
		u := rand.Uint64()
		for j := 0; j < 8; j++ {
			b[i*8+j] = byte(u >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:])
}

// hasOutgoing reports whether ctx's outgoing metadata already carries header
// (the caller chose the call's idempotency key, e.g. its request's own ID):
// stagger then sends that key and adds none of its own.
func hasOutgoing(ctx context.Context, header string) bool {
	md, ok := metadata.FromOutgoingContext(ctx)
	return ok && len(md.Get(header)) > 0
}
