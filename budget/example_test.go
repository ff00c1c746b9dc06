package budget_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
)

// TestMain with goleak is in main_test.go: one test binary allows one.

// perCall is a user's own budget: at most Max retries in flight at once. It
// needs nothing from package budget but the exported types.
type perCall struct {
	Max      int
	mu       sync.Mutex
	inFlight int
	allowed  uint64
	refused  uint64
}

func (p *perCall) Record(a budget.Attempt) {
	if a.Number > 1 {
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
	}
}

func (p *perCall) Allow(budget.Request) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inFlight >= p.Max {
		p.refused++
		return false
	}
	p.inFlight++
	p.allowed++
	return true
}

func (p *perCall) State() budget.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return budget.State{Kind: "in-flight", Level: float64(p.Max - p.inFlight), Capacity: float64(p.Max),
		Allowed: p.allowed, Refused: p.refused, At: time.Now()}
}

// retryLoop stands for the interceptors: it only sees the interface, and a nil
// Budget means unlimited.
func retryLoop(b budget.Budget, fails int, maxAttempts int) (attempts int) {
	for n := 1; n <= maxAttempts; n++ {
		attempts++
		outcome := budget.Failure
		if n > fails {
			outcome = budget.Success
		}
		if b != nil {
			b.Record(budget.Attempt{Number: n, Outcome: outcome})
		}
		if outcome == budget.Success || n == maxAttempts {
			return attempts
		}
		if b != nil && !b.Allow(budget.Request{Number: n + 1}) {
			return attempts
		}
	}
	return attempts
}

func TestUserBudget(t *testing.T) {
	tests := []struct {
		name string
		b    budget.Budget
		want int
	}{
		{"nil is unlimited", nil, 3},
		{"user budget", &perCall{Max: 1}, 3},
		{"user budget refusing", &perCall{Max: 0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retryLoop(tt.b, 5, 3); got != tt.want {
				t.Fatalf("attempts = %d, want %d", got, tt.want)
			}
		})
	}
	p := &perCall{Max: 1}
	retryLoop(p, 1, 3) // fails once, the retry succeeds and returns its slot
	if s := p.State(); s.Level != 1 || s.Allowed != 1 {
		t.Fatalf("state = %+v", s)
	}
}

func ExampleNew_throttle() {
	// gRFC A6: retries stop once failures bring the tokens down to half.
	t, err := budget.New(budget.Settings{Kind: budget.KindThrottle, Throttle: budget.ThrottleSettings{MaxTokens: 4, TokenRatio: 0.5}})
	if err != nil {
		panic(err)
	}
	for i := 0; i < 3; i++ {
		t.Record(budget.Attempt{Number: 1, Outcome: budget.Failure})
		fmt.Printf("tokens %.1f, retry allowed: %v\n", t.State().Level, t.Allow(budget.Request{Number: 2}))
	}
	// Output:
	// tokens 3.0, retry allowed: true
	// tokens 2.0, retry allowed: false
	// tokens 1.0, retry allowed: false
}

func ExampleNew() {
	_, err := budget.New(budget.Settings{Kind: budget.KindThrottle, Throttle: budget.ThrottleSettings{TokenRatio: 0.1}})
	fmt.Println(err)
	b, err := budget.New(budget.Settings{Kind: budget.KindNone})
	fmt.Println(b == nil, err)
	// Output:
	// budget: MaxTokens: must be in (0, 1000], got 0
	// true <nil>
}
