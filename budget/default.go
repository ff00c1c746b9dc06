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
func Default() Budget { return defaultBudget() }
