package interceptor

import (
	"sync"
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
)

// A method's cached budget follows its set: once the set forgets the
// target (idle), the next call gets the set's new budget, not the old one
// the cache held, and the cache serves the new one after.
func TestMethodBudgetCacheFollowsForgetting(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	bs, err := budget.NewBackends(budget.DefaultSettings(), budget.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	var mi methodInfo
	const target, method = "dns:///a.test:443", "/a.S/M"
	first := mi.budget(bs, nil, target, method)
	if again := mi.budget(bs, nil, target, method); again != first {
		t.Fatal("the cache returned another budget with nothing forgotten")
	}
	mu.Lock()
	now = now.Add(10 * time.Second) // an epoch lasts at least 6 s
	mu.Unlock()
	bs.States() // a metrics read: the set times the use
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	bs.States() // forgets the idle target
	fresh := mi.budget(bs, nil, target, method)
	if fresh == first {
		t.Fatal("after the set forgot the target, the cache still returned its old budget")
	}
	if got := bs.Get(target, method); got != fresh {
		t.Fatal("the cache's budget is not the set's")
	}
	if again := mi.budget(bs, nil, target, method); again != fresh {
		t.Fatal("the cache did not keep the new budget")
	}
}
