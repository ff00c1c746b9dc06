package server

import (
	"context"
	"errors"
	"time"
)

// Fingerprint identifies a request: the SHA-256 of its full method name and
// its deterministic protobuf encoding. A key reused with another
// fingerprint is refused, never answered with the other request's outcome.
type Fingerprint [32]byte

// Entry is what a Store keeps under an idempotency key: a running entry,
// which a lease bounds, or a done one, which holds the outcome to replay.
type Entry struct {
	// Fingerprint is the request's that claimed the key.
	Fingerprint Fingerprint
	// Token names the claim of a running entry (the lease holder).
	Token string
	// Done: the handler ran and Outcome is what to replay (encoded by
	// the interceptor; opaque to the store).
	Done    bool
	Outcome []byte
}

// Store keeps the idempotency keys of one service, for Dedup. It must be
// safe for concurrent use, and every operation must be atomic for one key
// across every server that shares the store (for Redis: one script per
// operation). An error from a Store fails the request with UNAVAILABLE and
// never runs the handler.
//
// The key a Store gets is opaque, and distinct keys must stay distinct: it
// is StoreKey's, which folds the caller's scope into the idempotency key,
// so callers are kept apart by the key alone and a Store needs no notion
// of them.
type Store interface {
	// Claim puts a running entry (fp, token) under key, for at most lease,
	// unless key holds an entry that has not expired. It reports whether it
	// did; when it did not, found is the entry key holds.
	Claim(ctx context.Context, key string, fp Fingerprint, token string, lease time.Duration) (claimed bool, found Entry, err error)
	// Complete turns the running entry token holds into a done entry with
	// outcome, kept for ttl. It returns ErrLeaseLost when key no longer
	// holds token's entry: its lease expired (and another request may have
	// claimed the key).
	Complete(ctx context.Context, key, token string, outcome []byte, ttl time.Duration) error
	// Release deletes the running entry token holds, so that a retry runs
	// the handler again; it does nothing when key holds another entry.
	Release(ctx context.Context, key, token string) error
}

// ErrLeaseLost is Store.Complete's error when the claim's lease expired
// before the handler finished.
var ErrLeaseLost = errors.New("server: the idempotency key's lease expired before the handler finished")

// ErrStoreFull is a Store's error when it cannot take a new key without
// dropping a running one (MemoryStore: every entry is running).
var ErrStoreFull = errors.New("server: the idempotency store is full of running requests")
