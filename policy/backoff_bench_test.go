package policy

import (
	"testing"
	"time"
)

// backoffSink keeps the compiler from dropping Delay.
var backoffSink time.Duration

func BenchmarkDelay(b *testing.B) {
	for j := JitterProportional; j <= JitterNone; j++ {
		bo := Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 1.6, Jitter: j}
		b.Run(j.String(), func(b *testing.B) {
			b.ReportAllocs()
			prev := bo.Initial
			for i := 0; i < b.N; i++ {
				// Retries 1..5, as a capped policy file allows, and a u that
				// changes so nothing is constant-folded.
				d := bo.Delay(i%5+1, prev, float64(i&1023)/1024)
				if bo.Jitter == JitterDecorrelated {
					prev = d
				}
				backoffSink = d
			}
		})
	}
}
