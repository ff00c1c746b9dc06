package policy_test

import (
	"fmt"
	"time"

	"github.com/stagger-go/stagger/policy"
)

// Delay is a pure function: the random number comes in as u, so the pauses
// of a whole retry sequence can be printed (or pinned in a test).
func ExampleBackoff_Delay() {
	b := policy.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: policy.JitterFull}
	for retry := 1; retry <= 5; retry++ {
		fmt.Println(retry, b.Delay(retry, 0, 0.5))
	}
	// Output:
	// 1 50ms
	// 2 100ms
	// 3 200ms
	// 4 400ms
	// 5 500ms
}

// Validate names each field with the policy file's key, and reports every
// violation at once.
func ExampleBackoff_Validate() {
	b := policy.Backoff{Max: time.Second, Multiplier: -2}
	fmt.Println(b.Validate())
	// Output:
	// policy: initialBackoff: must be > 0, got 0s
	// policy: backoffMultiplier: must be a finite number > 0, got -2
}
