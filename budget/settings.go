package budget

import "time"

// ThrottleSettings configure the gRFC A6 throttle (a policy file's
// retryThrottling).
type ThrottleSettings struct {
	// MaxTokens is in (0, 1000]. Tokens start at MaxTokens.
	MaxTokens float64
	// TokenRatio (> 0, kept to 3 decimals) is added per successful call.
	TokenRatio float64
}

// TokenBucketSettings configure a token bucket in the AWS SDKs' standard mode.
// A zero field takes the default written beside it.
type TokenBucketSettings struct {
	// Capacity is the most tokens the bucket holds, and where it starts
	// unless Initial is set. Default 500.
	Capacity float64
	// RetryCost is what a retry takes. Default 5.
	RetryCost float64
	// TimeoutRetryCost is what a retry after a per-attempt timeout takes.
	// Default 10.
	TimeoutRetryCost float64
	// SuccessReward is added when a call succeeds on its first attempt.
	// Default 1.
	SuccessReward float64
}

// RatioSettings configure a ratio budget: retries are kept under Percent of
// the requests of the last Window, with a floor of MinRetriesPerSecond.
// A zero field takes the default written beside it.
type RatioSettings struct {
	// Percent of requests that may be retries, in (0, 100]. Default 10.
	Percent float64
	// Window over which requests and retries are counted. Default 10s.
	Window time.Duration
	// MinRetriesPerSecond is a floor so that a quiet client can still retry.
	// Default: see DefaultRatioSettings.
	MinRetriesPerSecond float64
}

// Kind names a budget kind.
type Kind uint8

const (
	// KindNone: no budget (unlimited).
	KindNone Kind = iota
	// KindThrottle: the gRFC A6 throttle.
	KindThrottle
	// KindTokenBucket: the AWS SDK standard-mode token bucket.
	KindTokenBucket
	// KindRatio: retries as a share of requests over a sliding window.
	KindRatio
)

// Settings is a budget as a policy file declares it: Kind says which of the
// other fields applies. It is comparable with ==, so a reload can tell whether
// the budget changed and keep the old one's state when it did not.
type Settings struct {
	Kind        Kind
	Throttle    ThrottleSettings
	TokenBucket TokenBucketSettings
	Ratio       RatioSettings
}
