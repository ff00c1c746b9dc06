package interceptor

import (
	"context"
	"encoding/hex"
	"math/rand/v2"

	"google.golang.org/grpc/metadata"
)

// newIdempotencyKey returns 128 random bits in hex, from math/rand/v2's
// ChaCha8, seeded from the OS and lock-free.
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

// hasOutgoing reports whether ctx's outgoing metadata already carries header.
func hasOutgoing(ctx context.Context, header string) bool {
	md, ok := metadata.FromOutgoingContext(ctx)
	return ok && len(md.Get(header)) > 0
}
