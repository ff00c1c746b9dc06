package budget

import "sync"

// DefaultSettings describes stagger's default budget: a token bucket with the
// AWS SDKs' costs and reward that starts nearly empty and holds at most 100
// tokens (see Default for why).
func DefaultSettings() Settings {
	return Settings{Kind: KindTokenBucket, TokenBucket: TokenBucketSettings{
		Capacity:         100,
		Initial:          9,
		RetryCost:        5,
		TimeoutRetryCost: 10,
		SuccessReward:    1,
	}}
}

var defaultBudget = sync.OnceValue(func() Budget {
	b, err := New(DefaultSettings())
	if err != nil {
		panic("budget: default settings are invalid: " + err.Error())
	}
	return b
})

// Default returns stagger's default budget, the one stagger.DialOptions
// installs when a policy file declares none. There is one per process, built
// on first use and shared by every caller, on the real clock.
//
// It is a token bucket (DefaultSettings): capacity 100, starting at 9,
// retry cost 5, timeout retry cost 10, success reward 1. At p = 1 nothing
// refills it, so a process makes Initial/RetryCost = 1 retry and then
// none; at p = 0.1 successful retries are refunded and first-try successes
// add 1, so it stays nearly full. Starting at 9 rather than 10 keeps a
// fresh process to one retry while everything fails, yet one success buys
// the second. Capacity 100 (20 retries) bounds the burst a process sends
// when a healthy server goes down, a fifth of the AWS SDKs' 500.
//
// Measured with the random-failures model (M. Brooker, 2022; storm_test.go:
// 1000 calls/s split across N processes for 10 s, 3 attempts, seeds 1-6,
// attempt latency 0 and 20 ms), warm-up included:
//
//	processes  amplification at p=1  success at p=0.1
//	10         1.001                 99.85-99.92%
//	100        1.010                 99.83-99.92%
//	1000       1.099-1.101           99.64-99.84%
//
// These are the bucket's own Allow. New (and so Default) wraps it in a
// Gate: a retry it refuses waits and goes later, as a probe, as its call's
// last chance or as a paced release (see Gate), so
// a process making only a few calls still gets every attempt its policy
// allows. With deferral, `stagger sim failrate` measures amplification at
// p = 1 of 1.003 (10 processes), 1.031 (100) and 1.48 (1000: a process
// making about ten calls in the run spends its first failing call's
// attempts at its backoff's pace, as gRFC A6 says a quiet process does,
// and its waiting calls probe again once the run's calls stop), and
// success at p = 0.1 and 0.2 of 99.78-99.99 % (BENCHMARKS.md).
func Default() Budget { return defaultBudget() }
