package server

import (
	"time"

	"github.com/stagger-go/stagger/criticality"
)

// The server side's tuning numbers, in one place. Each is unexported on
// purpose: a retune must not change the API (the defaults a user can set
// are exported beside their options). Each says what it came from: a
// measurement, or "not measured" and the argument that set it.

// De-duplication (dedup.go).
const (
	// leaseMargin: a claim's lease lasts until the request's deadline and
	// leaseMargin more (and at least leaseMargin). Not measured: chosen so
	// that a handler that finishes as its deadline passes can still store
	// its outcome (a store write is a round trip of milliseconds; timers
	// fire late on a loaded machine), while the key of a server that died
	// is free again soon after its caller gave up.
	leaseMargin = time.Second
	// waitPollStart, waitPollMax: a repeat of a running request polls the
	// store, the gap doubling from waitPollStart up to waitPollMax. Not
	// measured: chosen so that a repeat that arrives as the first request
	// finishes (the common case: a retry after a lost reply) is answered
	// after one or two reads, while a long wait costs the store at most 20
	// reads a second per waiting request and adds at most 50 ms to its
	// answer.
	waitPollStart = 2 * time.Millisecond
	waitPollMax   = 50 * time.Millisecond
	// panicReleaseTimeout bounds the release of the key of a handler that
	// panicked (the request's context may be gone). Not measured: the same
	// second as leaseMargin; a release that cannot reach the store in it
	// leaves the key to its lease, which frees it anyway.
	panicReleaseTimeout = time.Second
	// fpBufferStart is the size a fingerprint buffer starts at, and
	// fpBufferKeep the largest one kept for reuse. Not measured: 512 bytes
	// hold a small request and its method name without growing; a buffer
	// past 64 KiB is dropped so that one large request does not pin its
	// memory in the pool.
	fpBufferStart = 512
	fpBufferKeep  = 64 << 10
)

// entryOverhead is what a MemoryStore entry costs beside its key and
// outcome, for MaxBytes: the map slot and the memEntry. Counted, not
// profiled: a memEntry is 136 bytes on 64-bit platforms (unsafe.Sizeof),
// and a map slot holds a string header and a pointer, 24 more.
const entryOverhead = 160

// Shedding (server.go, criticality.go).
const (
	// serviceEMAWeight: the service time's moving average, from which shed
	// calls' pushback is drawn, moves a serviceEMAWeight-th of the way to
	// each call's time. Not measured: chosen so that it follows a change of
	// service time within a few dozen calls, while one slow call moves it
	// by a sixteenth only.
	serviceEMAWeight = 16
	// pushbackJitterMin: a shed call's pushback is the moving average times
	// U(pushbackJitterMin, pushbackJitterMin+1). Not measured: a spread of
	// one service time keeps the shed callers from coming back together,
	// and a mean of 1 keeps their average return one service time away.
	pushbackJitterMin = 0.5
)

// shedPushbackFactor multiplies the pushback of a shed call by its
// criticality (indexed by Level.Index): a call below CRITICAL finds room
// again only once the running calls fall below its share of the limit,
// which takes longer than one slot freeing, and its return costs the
// overloaded server a refusal more. Not measured yet: set by that
// argument, to be tuned on the lab's mixed-criticality scenario.
var shedPushbackFactor = [criticality.NumLevels]float64{2, 1.5, 1, 1}
