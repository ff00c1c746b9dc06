package interceptor

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"

	"google.golang.org/grpc/metadata"
)

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
