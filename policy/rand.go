package policy

import (
	"math/rand/v2"
	"sync"
)

// Random returns numbers uniform in [0, 1): the u of Backoff.Delay and
// Attempt.U. The interceptors and the simulator draw from one; tests pin it.
//
// The nil Random is the default source: math/rand/v2's top-level generator,
// which is safe for concurrent use and takes no lock (each goroutine's
// thread draws from its own state), so the retry hot path of many calls does
// not contend on it. A non-nil Random must be safe for concurrent use if it
// is shared between calls.
type Random func() float64

// Float64 draws one number from r, or from the default source when r is nil.
func (r Random) Float64() float64 {
	if r == nil {
		return rand.Float64()
	}
	return r()
}

// NewSeededRandom returns a deterministic Random: the same seed gives the
// same sequence, for tests and the simulator. It is safe for concurrent use,
// through a mutex; that is fine for tests and a single-threaded simulator,
// not for a busy process (use the nil Random there). Concurrent callers each
// get numbers of the one sequence, in an order the scheduler decides.
func NewSeededRandom(seed uint64) Random {
	var mu sync.Mutex
	// The second PCG word is a fixed odd constant so seeds 0, 1, 2, ... give
	// unrelated streams without the caller choosing two numbers.
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	return func() float64 {
		mu.Lock()
		u := r.Float64()
		mu.Unlock()
		return u
	}
}
