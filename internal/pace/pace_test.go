package pace

import (
	"testing"
	"time"

	"github.com/stagger-go/stagger/criticality"
)

func TestPaceSlowForAll(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	const perAttempt = 100 * time.Millisecond // a later send counts once 25 ms old
	for _, tc := range []struct {
		name     string
		sent     []int // ms after t0, besides the attempt itself at 0
		answered []int // starts of attempts served
		now      int
		want     bool
	}{
		{"quiet: nothing sent after it", nil, nil, 110, false},
		{"sent after it, unanswered, old enough", []int{20}, nil, 110, true},
		{"sent after it, too recently to tell", []int{90}, nil, 110, false},
		{"sent before it only", []int{-50}, []int{-80}, 110, false},
		{"one sent after it was served: this one is lost", []int{20, 40}, []int{40}, 110, false},
		{"answered ones sent before it say nothing", []int{20}, []int{-10}, 110, true},
		{"a burst after an old enough send: the old one counts", []int{20, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105}, nil, 110, true},
		{"sends older than the ring keeps: the latest count", []int{10, 20, 30, 40, 50, 60, 70, 80, 100, 150, 200, 250, 300}, nil, 310, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Evidence
			p.Send(ms(0), perAttempt)
			for _, s := range tc.sent {
				p.Send(ms(s), perAttempt)
			}
			for _, a := range tc.answered {
				p.Answer(ms(a), 0, 0)
			}
			if got := p.SlowForAll(ms(0), ms(tc.now), perAttempt); got != tc.want {
				t.Errorf("slowForAll = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPaceSendOrder: the slow-for-all rule reads what was sent, not the
// order the senders' goroutines stored it in. A sender reads its clock,
// then stores; on a loaded machine another may store between the two.
// Every order of the same sends must give the same verdict (the attempt
// asked about left at 0 ms; a slice is 12.5 ms, the ring 200 ms).
func TestPaceSendOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	const perAttempt = 100 * time.Millisecond
	for _, tc := range []struct {
		name  string
		sends []float64 // ms after t0, the attempt's own 0 among them
		now   float64
		want  bool
	}{
		// Two sends in one slice: the later, after the attempt, is the
		// evidence, whichever stored last.
		{"the attempt and a later send share a slice", []float64{0, 5}, 110, true},
		// A send a ring's turn before the later one shares its slot.
		{"a send a ring's turn older shares the slot", []float64{-195, 5}, 110, true},
		{"nothing after the attempt", []float64{-195, -5, 0}, 110, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, order := range permutations(len(tc.sends)) {
				var p Evidence
				for _, i := range order {
					p.Send(ms(tc.sends[i]), perAttempt)
				}
				if got := p.SlowForAll(ms(0), ms(tc.now), perAttempt); got != tc.want {
					t.Errorf("stored in order %v: slowForAll = %v, want %v", order, got, tc.want)
				}
			}
		})
	}
}

// permutations returns every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, rest := range permutations(n - 1) {
		for i := 0; i <= len(rest); i++ {
			p := append(append(append([]int{}, rest[:i]...), n-1), rest[i:]...)
			out = append(out, p)
		}
	}
	return out
}

func TestPaceScout(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const per = 100 * time.Millisecond
	var p Evidence
	// The first at once; then after gaps of 100ms, 200ms, 400ms...
	steps := []struct {
		at   time.Duration
		want bool
	}{
		{0, true}, {50 * time.Millisecond, false}, {100 * time.Millisecond, true},
		{250 * time.Millisecond, false}, {300 * time.Millisecond, true},
		{650 * time.Millisecond, false}, {700 * time.Millisecond, true},
	}
	for _, s := range steps {
		if got := p.Scout(t0.Add(s.at), per); got != s.want {
			t.Fatalf("scout at %v = %v, want %v", s.at, got, s.want)
		}
	}
	// An attempt sent after the latest scout was served: the gap
	// starts again at one timeout.
	p.Answer(t0.Add(710*time.Millisecond), 0, 0)
	if p.Scout(t0.Add(790*time.Millisecond), per) || !p.Scout(t0.Add(800*time.Millisecond), per) {
		t.Fatal("after a service, want the next scout one timeout after the last")
	}
	// One sent before it says nothing.
	p.Answer(t0.Add(790*time.Millisecond), 0, 0)
	if p.Scout(t0.Add(900*time.Millisecond), per) {
		t.Fatal("an answer to an attempt older than the scout reset the gap")
	}
	// The gap is bounded.
	var q Evidence
	at := t0
	for range 20 {
		for !q.Scout(at, per) {
			at = at.Add(per)
		}
	}
	if gap := time.Duration(q.scoutGap.Load()); gap != scoutGapMax*per {
		t.Fatalf("gap after 20 scouts %v, want %v", gap, scoutGapMax*per)
	}
}

// latency is the latest served attempt's duration while it is fresh, per
// criticality.
func TestPaceLatency(t *testing.T) {
	t0 := time.Unix(1000, 0)
	crit, shed := criticality.Critical.Index(), criticality.Sheddable.Index()
	var p Evidence
	if got := p.Latency(t0, crit); got != 0 {
		t.Fatalf("latency with nothing served = %v, want 0", got)
	}
	p.Answer(t0, 300*time.Millisecond, crit)
	p.Answer(t0.Add(-time.Second), 50*time.Millisecond, crit) // the latest served counts, whenever it left
	p.Answer(t0, 900*time.Millisecond, shed)
	if got := p.Latency(t0.Add(time.Second), crit); got != 50*time.Millisecond {
		t.Fatalf("CRITICAL latency = %v, want the latest served's 50ms", got)
	}
	if got := p.Latency(t0.Add(time.Second), shed); got != 900*time.Millisecond {
		t.Fatalf("SHEDDABLE latency = %v, want its own 900ms", got)
	}
	if got := p.Latency(t0.Add(-950*time.Millisecond+paceFresh+time.Millisecond), crit); got != 0 {
		t.Fatalf("latency past paceFresh = %v, want 0", got)
	}
}

// TestPaceStraggler: an attempt sent at 0 ms whose timer (100 ms) fired is
// a straggler when an attempt sent after it was served; or when nothing
// was sent after it and the latest attempt served, sent after the latest
// earlier one whose timer fired, took under half the timeout.
func TestPaceStraggler(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	const perAttempt = 100 * time.Millisecond
	tests := []struct {
		name      string
		served    []int // starts (ms) of attempts served, each taking took
		took      time.Duration
		sent      []int // starts (ms) of attempts sent
		prevFired int   // ms; 0: none
		want      bool
	}{
		{"a newer attempt served", []int{10}, 40 * time.Millisecond, []int{0, 10}, 0, true},
		{"a newer attempt served, slowly", []int{10}, 90 * time.Millisecond, []int{0, 10}, 0, true},
		{"a newer attempt unserved", []int{-200}, 0, []int{-200, 0, 10}, 0, false},
		{"quiet, nothing served", nil, 0, []int{0}, 0, false},
		{"quiet, served fast before", []int{-200}, 5 * time.Millisecond, []int{-200, 0}, 0, true},
		{"quiet, served in half the timeout", []int{-200}, 50 * time.Millisecond, []int{-200, 0}, 0, false},
		{"quiet, served fast before an earlier timeout", []int{-400}, 0, []int{-400, -200, 0}, -200, false},
		{"quiet, served fast since an earlier timeout", []int{-100}, 0, []int{-200, -100, 0}, -200, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Evidence{}
			for _, s := range tt.sent {
				p.Send(ms(s), perAttempt)
			}
			for _, s := range tt.served {
				p.Answer(ms(s), tt.took, 0)
			}
			prev := int64(0)
			if tt.prevFired != 0 {
				prev = ms(tt.prevFired).UnixNano()
			}
			if got := p.Straggler(ms(0), ms(100), perAttempt, 0, prev); got != tt.want {
				t.Errorf("straggler = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPaceUnfire: Unfire takes back a fire, unless a later start fired
// since.
func TestPaceUnfire(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &Evidence{}
	p.Fire(t0)
	prev := p.Fire(t0.Add(time.Second))
	p.Unfire(t0.Add(time.Second), prev)
	if got := p.Fire(t0.Add(3 * time.Second)); got != t0.UnixNano() {
		t.Fatalf("after Unfire, the latest fire: %d; want the one before, %d", got, t0.UnixNano())
	}
	prev = p.Fire(t0.Add(4 * time.Second))
	p.Fire(t0.Add(5 * time.Second))
	p.Unfire(t0.Add(4*time.Second), prev)
	if got := p.Fire(t0.Add(6 * time.Second)); got != t0.Add(5*time.Second).UnixNano() {
		t.Fatalf("Unfire took back a later fire: the latest is %d; want %d", got, t0.Add(5*time.Second).UnixNano())
	}
}
