package budget

import (
	"time"
)

// tokenBucket is the AWS SDKs' standard-mode retry quota. The bucket holds at
// most Capacity tokens and starts at Initial (full unless set). A retry or a
// hedge must pay RetryCost up front, TimeoutRetryCost when it follows an
// attempt cut off by the per-attempt timer; Allow refuses when the bucket
// holds less. A retry that succeeds gets its cost back; a call that succeeds
// on its first attempt adds SuccessReward. Failures take nothing by
// themselves: what they cost is the retries they ask for.
//
// So while the server fails everything, a bucket pays for Initial/RetryCost
// retries and then stops until something succeeds; while it fails a few
// attempts, the refunds and rewards keep the bucket nearly full.
//
// New builds one for KindTokenBucket. It is safe for concurrent use; its
// operations are lock-free.
type tokenBucket struct {
	tokenCounts
	capacity    int64
	cost        int64
	timeoutCost int64
	reward      int64
	// floors are what a retry of each level must leave, in thousandths
	// (see Request.Criticality).
	floors [4]int64
	now    func() time.Time
}

// newTokenBucket returns a bucket holding s.Initial tokens, or a
// *SettingsError when s breaks a rule. Zero fields take their defaults
// (Settings.WithDefaults).
func newTokenBucket(s TokenBucketSettings, opts ...Option) (*tokenBucket, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	s = s.withDefaults()
	o := buildOptions(opts)
	b := &tokenBucket{
		capacity:    toMilli(s.Capacity),
		cost:        toMilli(s.RetryCost),
		timeoutCost: toMilli(s.TimeoutRetryCost),
		reward:      toMilli(s.SuccessReward),
		now:         o.Now,
	}
	b.floors = reserveFloors(b.capacity)
	b.tokens.Store(min(b.capacity, toMilli(s.Initial)))
	return b, nil
}

// Record adds SuccessReward for a first attempt that succeeded and refunds
// the cost of a later attempt (a retry or a hedge) that succeeded, never
// above Capacity. A retry a Gate let go without the bucket's payment (a
// probe, a release, a last chance) was not paid for: its success adds
// SuccessReward, like a first attempt's. Failures and Other change nothing.
// It does not read the clock: the tokens do not depend on time.
func (b *tokenBucket) Record(a Attempt) {
	if a.Outcome != Success {
		return
	}
	add := b.reward
	if a.Number > 1 && (a.Admission == AdmitNone || a.Admission == AdmitBudget) {
		add = b.cost
		if a.AfterTimeout {
			add = b.timeoutCost
		}
	}
	addClamped(&b.tokens, add, b.capacity)
}

// Allow takes the request's cost from the bucket, or refuses and takes
// nothing when the bucket holds less than the cost plus the reserve the
// request's criticality leaves (Request.Criticality: none for CRITICAL; a
// CRITICAL_PLUS retry may take the bucket below 0, into a debt that
// successes pay back before any other retry is allowed).
func (b *tokenBucket) Allow(r Request) bool {
	cost := b.cost
	if r.AfterTimeout {
		cost = b.timeoutCost
	}
	floor := b.floors[r.Criticality.Index()]
	for {
		old := b.tokens.Load()
		if old-cost < floor {
			b.refused.Add(1)
			return false
		}
		if b.tokens.CompareAndSwap(old, old-cost) {
			b.allowed.Add(1)
			return true
		}
	}
}

// State reports the tokens (Level) out of Capacity, stamped with the
// budget's clock. Level is below 0 while CRITICAL_PLUS retries are in debt.
func (b *tokenBucket) State() State {
	return b.snapshot(kindTokenBucket, b.capacity, b.now())
}

// refund gives back what Allow took for r, when the retry was never sent
// (a Gate's waiter whose caller left while the bucket was asked).
func (b *tokenBucket) refund(r Request) {
	cost := b.cost
	if r.AfterTimeout {
		cost = b.timeoutCost
	}
	addClamped(&b.tokens, cost, b.capacity)
}
