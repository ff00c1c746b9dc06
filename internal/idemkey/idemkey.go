// Package idemkey makes the idempotency keys a stagger client sends on
// every attempt of a call (interceptor.WithIdempotencyKey): 128 random bits
// in hex, from math/rand/v2's ChaCha8, seeded from the OS and lock-free, so
// that two calls in a fleet never share one. Safe for concurrent use.
package idemkey

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
)

// New returns a fresh key.
func New() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	return hex.EncodeToString(b[:])
}
