package interceptor

import (
	"encoding/hex"
	"math/rand/v2"
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
