package lab

import (
	"math"
	"testing"
	"time"
)

func TestFlightPeaks(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	var l flightLog
	// Calls [0, 10), [5, 15), [10, 20): at most 2 at once (half-open).
	l.add(flightCall, at(0), 1)
	l.add(flightCall, at(10), -1)
	l.add(flightCall, at(5), 1)
	l.add(flightCall, at(15), -1)
	l.add(flightCall, at(10), 1)
	l.add(flightCall, at(20), -1)
	// Waits of no length count for nothing, whatever their number.
	for i := 0; i < 5; i++ {
		l.add(flightWaiting, at(3), 1)
		l.add(flightWaiting, at(3), -1)
	}
	l.add(flightWaiting, at(4), 1)
	l.add(flightWaiting, at(6), -1)
	got := l.peaks()
	if got[flightCall] != 2 || got[flightWaiting] != 1 || got[flightAttempt] != 0 {
		t.Errorf("peaks = %v, want calls 2, attempts 0, waiting 1", got)
	}
}

func TestFlightMean(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	var l flightLog
	// Calls [0, 40), [10, 20), [30, 100); an attempt [0, 100) of another
	// kind, which the mean of calls ignores.
	l.add(flightCall, at(0), 1)
	l.add(flightCall, at(40), -1)
	l.add(flightCall, at(10), 1)
	l.add(flightCall, at(20), -1)
	l.add(flightCall, at(30), 1)
	l.add(flightCall, at(100), -1)
	l.add(flightAttempt, at(0), 1)
	l.add(flightAttempt, at(100), -1)
	for _, tc := range []struct {
		from, to int
		want     float64
	}{
		{0, 40, (40 + 10 + 10) / 40.0},
		{5, 15, (10 + 5) / 10.0},
		{40, 100, 1},
		{100, 200, 0},
		{50, 50, 0}, // an empty span
	} {
		if got := l.mean(flightCall, at(tc.from), at(tc.to)); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("mean over [%d, %d) ms = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

func TestLabelCounts(t *testing.T) {
	profile := `goroutine profile: total 9
4 @ 0x47d9ee 0x4159ae
# labels: {"other":"x", "stagger-lab-contender":"7/naive"}
#	0x4dda78	main.main.func1.1+0x18	/tmp/gp/main.go:17

3 @ 0x47d9ee 0x4159ae 0x4154f2
# labels: {"stagger-lab-contender":"7/grpc-go"}
#	0x4dda78	main.main.func1.1+0x18	/tmp/gp/main.go:17

2 @ 0x47d9ee
#	0x4dda78	main.main+0x18	/tmp/gp/main.go:9

1 @ 0x47d9ee
# labels: {"stagger-lab-contender":"7/naive"}
`
	got := labelCounts([]byte(profile), goroutineLabel)
	if len(got) != 2 || got["7/naive"] != 5 || got["7/grpc-go"] != 3 {
		t.Errorf("labelCounts = %v, want 7/naive 5, 7/grpc-go 3", got)
	}
}
