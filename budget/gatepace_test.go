package budget

import (
	"math"
	"time"
)

// credits is how many releases the pacer would let go at now, at most one
// (the tests' view of its cell); set makes them c.
func (p *pacer) credits(now time.Time) float64 {
	return math.Min(1-float64(p.next.Sub(now))/float64(p.every), 1)
}

func (p *pacer) set(now time.Time, c float64) { *p = p.releasedAt(now, c) }
