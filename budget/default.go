package budget

// DefaultSettings describes stagger's default budget, the one
// DefaultBackends keeps per backend: a token bucket with the AWS SDKs'
// costs and reward that starts nearly empty and holds at most 100 tokens.
// One budget of these settings for every backend of the process is an
// explicit choice: build it with New(DefaultSettings()) and give it to
// interceptor.WithBudget.
//
// Capacity 100, starting at 9, retry cost 5, timeout retry cost 10, success
// reward 1. At p = 1 nothing refills it, so a process makes
// Initial/RetryCost = 1 retry and then none; at p = 0.1 successful retries
// are refunded and first-try successes add 1, so it stays nearly full.
// Starting at 9 rather than 10 keeps a fresh process to one retry while
// everything fails, yet one success buys the second. Capacity 100 (20
// retries) bounds the burst a process sends when a healthy server goes
// down, a fifth of the AWS SDKs' 500.
//
// Measured with the random-failures model (M. Brooker, 2022; storm_test.go):
// amplification near 1.0 at p = 1, success near 100 % at p = 0.1, from 10
// to 1000 processes (BENCHMARKS.md, "Figures behind the code's choices").
// New (and so DefaultBackends) wraps it in a
// Gate: a retry it refuses waits and goes later, after its pause while
// retries heal, or as a probe, as its call's last chance or as a paced
// release in an outage (see Gate), so a process making only a few calls
// still gets every attempt its policy allows from a flaky server;
// `stagger sim failrate` measures it with deferral (BENCHMARKS.md,
// "Figures behind the code's choices").
func DefaultSettings() Settings {
	return Settings{Kind: KindTokenBucket, TokenBucket: TokenBucketSettings{
		Capacity:         100,
		Initial:          9,
		RetryCost:        5,
		TimeoutRetryCost: 10,
		SuccessReward:    1,
	}}
}
