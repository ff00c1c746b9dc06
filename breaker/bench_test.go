package breaker

import (
	"testing"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
)

// A call's first attempt through a closed breaker, as the interceptors
// drive it: Admit, then Record of its success; a retry's AllowRetry and
// Record too. Without throttling, and with it (far from rejecting).
func BenchmarkBreakerClosed(b *testing.B) {
	for _, c := range []struct {
		name string
		s    Settings
	}{{"trip", Settings{}}, {"throttle", Settings{ThrottleK: 2}}} {
		b.Run(c.name, func(b *testing.B) {
			br, err := New("bench", c.s, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if br.Admit(criticality.Unset, nil) != nil {
					b.Fatal("refused")
				}
				br.Record(budget.Success, true, criticality.Unset, nil)
				if ok, _ := br.AllowRetry(criticality.Unset, nil); !ok {
					b.Fatal("refused")
				}
				br.Record(budget.Success, false, criticality.Unset, nil)
			}
		})
	}
}
