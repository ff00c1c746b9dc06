package redisstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stagger-go/stagger/server"
)

// DefaultPrefix is Options.Prefix's default.
const DefaultPrefix = "stagger:idem:"

// Options configure a Store; the zero value takes the defaults.
type Options struct {
	// Prefix starts the Redis key of every idempotency key, so that the
	// store can share a Redis with other data (or with the stores of other
	// services, each with its own Prefix); default DefaultPrefix. The
	// replicas of one service must use the same. It may not contain '{' or
	// '}' (a Redis Cluster hash tag would put every key in one slot).
	Prefix string
}

// Store is a server.Store in Redis (see the package documentation). Make
// one with New; it is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	prefix string
}

var _ server.Store = (*Store)(nil)

// New returns a Store that keeps its entries in client's Redis, or an error
// naming a bad option. The Store does not own client: closing it is the
// caller's business, after the last use of the Store.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil || isNilPointer(client) {
		return nil, errors.New("redisstore: New: client is nil")
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("redisstore: Options.Prefix: must not contain '{' or '}' (a Redis Cluster hash tag would put every key in one slot), got %q", opts.Prefix)
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	return &Store{client: client, prefix: opts.Prefix}, nil
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// The first byte of a value: its kind. The fingerprint follows, then the
// token (running) or the outcome (done).
const (
	kindRunning = 1
	kindDone    = 2
	headerLen   = 1 + len(server.Fingerprint{})
)

// ErrBadValue is wrapped in an *Error when a key under the store's Prefix
// holds a value that this package did not write.
var ErrBadValue = errors.New("redisstore: the key holds a value this store did not write")

// Error is the error of an operation that Redis did not carry out (it could
// not be reached, or answered an error) or whose answer made no sense.
// server.ErrLeaseLost is returned as it is, never wrapped in an Error.
type Error struct {
	// Op is the operation: "claim", "complete" or "release".
	Op string
	// Key is the key the server handed the store (server.StoreKey: the
	// caller's scope hashed, a colon, the idempotency key), without the
	// Prefix.
	Key string
	// Err is the client's error, or ErrBadValue, or an error wrapping both
	// server.ErrStoreFull and the client's when Redis is out of memory.
	Err error
}

func (e *Error) Error() string { return fmt.Sprintf("redisstore: %s %q: %v", e.Op, e.Key, e.Err) }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

func fail(op, key string, err error) error {
	if redis.IsOOMError(err) {
		err = fmt.Errorf("%w (%w)", server.ErrStoreFull, err)
	}
	return &Error{Op: op, Key: key, Err: err}
}

// claimScript: KEYS[1] the key, ARGV[1] the running value, ARGV[2] the
// lease in milliseconds. It returns 1 when it claimed, else the value the
// key holds. It reads first so that a Redis out of memory still replays
// done entries; a key that holds ARGV[1] itself was claimed by this very
// claim, whose reply was lost and which the client sent again.
var claimScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
	return 1
end
if v then
	return v
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// completeScript: KEYS[1] the key, ARGV[1] the token, ARGV[2] the outcome,
// ARGV[3] the TTL in milliseconds. It returns 1 when it replaced the
// token's running entry with the done one, else 0.
var completeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v or string.len(v) < 33 or string.byte(v, 1) ~= 1 or string.sub(v, 34) ~= ARGV[1] then
	return 0
end
redis.call('SET', KEYS[1], '\2' .. string.sub(v, 2, 33) .. ARGV[2], 'PX', ARGV[3])
return 1
`)

// releaseScript: KEYS[1] the key, ARGV[1] the token. It deletes the
// token's running entry and returns 1, else returns 0.
var releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v or string.len(v) < 33 or string.byte(v, 1) ~= 1 or string.sub(v, 34) ~= ARGV[1] then
	return 0
end
redis.call('DEL', KEYS[1])
return 1
`)

// Claim implements server.Store. A lease must be positive; it is rounded
// down to the millisecond, and is at least one.
func (s *Store) Claim(ctx context.Context, key string, fp server.Fingerprint, token string, lease time.Duration) (bool, server.Entry, error) {
	ms, err := millis("lease", lease)
	if err != nil {
		return false, server.Entry{}, fail("claim", key, err)
	}
	v := make([]byte, 0, headerLen+len(token))
	v = append(v, kindRunning)
	v = append(v, fp[:]...)
	v = append(v, token...)
	res, err := claimScript.Run(ctx, s.client, []string{s.prefix + key}, v, ms).Result()
	if err != nil {
		return false, server.Entry{}, fail("claim", key, err)
	}
	switch res := res.(type) {
	case int64:
		return true, server.Entry{}, nil
	case string:
		e, ok := decode(res)
		if !ok {
			return false, server.Entry{}, fail("claim", key, ErrBadValue)
		}
		return false, e, nil
	default:
		return false, server.Entry{}, fail("claim", key, fmt.Errorf("unexpected reply %T from the claim script", res))
	}
}

// Complete implements server.Store. A ttl must be positive; it is rounded
// down to the millisecond, and is at least one. A Complete that the client
// retries after a lost reply finds the entry done and returns
// server.ErrLeaseLost although it completed it.
func (s *Store) Complete(ctx context.Context, key, token string, outcome []byte, ttl time.Duration) error {
	ms, err := millis("ttl", ttl)
	if err != nil {
		return fail("complete", key, err)
	}
	n, err := completeScript.Run(ctx, s.client, []string{s.prefix + key}, token, outcome, ms).Int64()
	if err != nil {
		return fail("complete", key, err)
	}
	if n == 0 {
		return server.ErrLeaseLost
	}
	return nil
}

// Release implements server.Store.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if err := releaseScript.Run(ctx, s.client, []string{s.prefix + key}, token).Err(); err != nil {
		return fail("release", key, err)
	}
	return nil
}

// decode parses a value the scripts return.
func decode(v string) (server.Entry, bool) {
	if len(v) < headerLen {
		return server.Entry{}, false
	}
	var e server.Entry
	copy(e.Fingerprint[:], v[1:headerLen])
	switch v[0] {
	case kindRunning:
		e.Token = v[headerLen:]
	case kindDone:
		e.Done = true
		if len(v) > headerLen {
			e.Outcome = []byte(v[headerLen:])
		}
	default:
		return server.Entry{}, false
	}
	return e, true
}

// millis converts a lease or TTL to Redis's PX: whole milliseconds, at
// least one.
func millis(name string, d time.Duration) (int64, error) {
	if d <= 0 {
		return 0, fmt.Errorf("%s must be positive, got %v", name, d)
	}
	return max(d.Milliseconds(), 1), nil
}
