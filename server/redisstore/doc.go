// Package redisstore is a server.Store in Redis, for a service of many
// replicas: every replica that shares one Redis (and one Prefix) sees the
// same idempotency keys, so a retry that lands on another replica replays
// the outcome, or waits for the running request, instead of running the
// handler a second time.
//
// # What is stored
//
// One Redis string per idempotency key, under Prefix followed by the key
// the server hands the store (Prefix defaults to DefaultPrefix,
// "stagger:idem:"). That key is server.StoreKey's: the caller's scope
// hashed (43 bytes of base64url SHA-256), a colon, then the idempotency
// key, so the same key from two callers is two Redis keys, and no scope
// (a certificate's subject) is kept in the clear. Its value is binary:
//
//	running entry: 0x01, the 32-byte fingerprint, the claim's token
//	done entry:    0x02, the 32-byte fingerprint, the outcome
//
// A running entry expires after its lease, a done entry after its TTL: both
// are Redis expiries (PX, in milliseconds; a lease or TTL is rounded down
// to the millisecond, and is at least one), so Redis's clock decides, the
// store runs no goroutine and a key nobody asks for again costs nothing
// past its TTL. Redis bounds the memory (maxmemory), not this package.
//
// # Atomicity and round trips
//
// Each operation is one Lua script over its one key, so it is atomic
// across every replica: Claim sets a running entry unless the key holds
// one (and otherwise returns what it holds); Complete replaces the running
// entry with the done one only when the entry still holds the caller's
// token, and returns server.ErrLeaseLost otherwise; Release deletes the
// running entry only when it holds the caller's token. Each is one round
// trip (EVALSHA); the first call of a script on a Redis that has not seen
// it (a new or restarted server, or after SCRIPT FLUSH) takes a second one
// (EVAL), which also loads it.
//
// # When Redis is down
//
// Every operation returns an *Error wrapping the client's error, and
// server.WithIdempotency fails the request with UNAVAILABLE without running the
// handler: the service refuses idempotent-keyed writes rather than risk
// running one twice. How long an operation waits for a Redis that does not
// answer, or refuses connections, is the client's business: set
// redis.Options DialTimeout, ReadTimeout, WriteTimeout, MaxRetries and
// DialerRetries (by default go-redis retries a command three times, and a
// dial five times 100 ms apart), or ContextTimeoutEnabled so that the
// request's deadline bounds it. A Redis that refuses writes for want of memory (maxmemory
// with the noeviction policy) makes the error wrap server.ErrStoreFull too.
//
// # What Redis can lose
//
// The store keeps at-most-once only as long as Redis keeps its writes.
// Redis replicates asynchronously, so a failover to a replica that had not
// received the last writes loses them; a restart loses whatever the
// persistence settings had not saved (everything without RDB or AOF);
// a maxmemory policy other than noeviction deletes entries (every entry
// has a TTL, so the volatile-* policies apply to them too). A lost running
// entry lets a retry claim the key and run the handler while the first run
// goes on; a lost done entry lets a retry run the handler again instead of
// replaying. Where that matters: maxmemory-policy noeviction, AOF with
// appendfsync everysec or always, and a handler that is itself safe to run
// twice in the rare failover. The store does not use WAIT.
//
// # Redis Cluster
//
// Every operation touches one key, so the store works with a
// redis.ClusterClient (and a Ring): keys spread over the slots by their
// whole name. Prefix may not contain '{' or '}', which would make a hash
// tag that puts every key in one slot.
//
// # Concurrency
//
// A Store is safe for concurrent use, and any number of Stores (one per
// replica, each with its own client) may share a Redis.
package redisstore
