package policy

import (
	"math"
	"testing"
	"time"
)

// justBelowOne is the largest float64 below 1: the largest u a source of
// [0, 1) returns.
var justBelowOne = math.Nextafter(1, 0)

func TestDelayExact(t *testing.T) {
	base := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}
	with := func(j Jitter) Backoff { b := base; b.Jitter = j; return b }
	huge := Backoff{Initial: time.Second, Max: math.MaxInt64, Multiplier: 10}
	tests := []struct {
		name  string
		b     Backoff
		retry int
		prev  time.Duration
		u     float64
		want  time.Duration
	}{
		// Proportional: term × (0.8 + 0.4u).
		{"proportional first u=0.5", base, 1, 0, 0.5, 100 * time.Millisecond},
		{"proportional first u=0", base, 1, 0, 0, 80 * time.Millisecond},
		{"proportional first u=0.25", base, 1, 0, 0.25, 90 * time.Millisecond},
		{"proportional third u=0", base, 3, 0, 0, 320 * time.Millisecond},
		{"proportional third u<1", base, 3, 0, justBelowOne, 480 * time.Millisecond},
		{"proportional capped u=0.5", base, 5, 0, 0.5, time.Second},
		{"proportional capped u=0: jitter after the cap", base, 5, 0, 0, 800 * time.Millisecond},
		{"proportional capped u<1: jitter after the cap", base, 5, 0, justBelowOne, 1200 * time.Millisecond},
		{"proportional u=1 clamped below 1", base, 5, 0, 1, 1200 * time.Millisecond},
		{"proportional u=7 clamped below 1", base, 1, 0, 7, 120 * time.Millisecond},
		{"proportional NaN u is 0", base, 1, 0, math.NaN(), 80 * time.Millisecond},
		{"proportional negative u is 0", base, 1, 0, -0.5, 80 * time.Millisecond},
		{"proportional retry 0 is retry 1", base, 0, 0, 0.5, 100 * time.Millisecond},
		{"proportional retry -9 is retry 1", base, -9, 0, 0.5, 100 * time.Millisecond},
		{"proportional retry 17 uses Pow", base, 17, 0, 0.5, time.Second},
		{"proportional huge retry saturates", base, math.MaxInt, 0, 0.5, time.Second},
		{"proportional huge multiplier saturates", Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 1e308}, 3, 0, 0.5, time.Second},
		{"proportional infinite multiplier saturates", Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: math.Inf(1)}, 2, 0, 0.5, time.Second},
		{"proportional multiplier 1 stays", Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 1}, 9, 0, 0.5, 100 * time.Millisecond},
		{"proportional multiplier 0.5 shrinks", Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 0.5}, 3, 0, 0.5, 25 * time.Millisecond},
		{"proportional multiplier 0.5 huge retry is 0", Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 0.5}, math.MaxInt, 0, 0.5, 0},
		{"proportional max below initial caps", Backoff{Initial: time.Second, Max: 100 * time.Millisecond, Multiplier: 2}, 1, 0, 0.5, 100 * time.Millisecond},
		{"proportional near MaxInt64 saturates, no wrap", huge, 100, 0, justBelowOne, math.MaxInt64},
		{"proportional multiplier 1.6 as grpc-go", Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 1.6}, 4, 0, 0.5, 4096 * time.Millisecond},

		// Full: u × term.
		{"full u=0", with(JitterFull), 2, 0, 0, 0},
		{"full u=0.25", with(JitterFull), 2, 0, 0.25, 50 * time.Millisecond},
		{"full u<1", with(JitterFull), 2, 0, justBelowOne, 199999999},
		{"full capped u=0.5", with(JitterFull), 30, 0, 0.5, 500 * time.Millisecond},
		{"full NaN u", with(JitterFull), 2, 0, math.NaN(), 0},
		{"full huge saturates", Backoff{Initial: time.Second, Max: math.MaxInt64, Multiplier: 10, Jitter: JitterFull}, 100, 0, justBelowOne, math.MaxInt64 - 1023},

		// Equal: term/2 + u × term/2.
		{"equal u=0", with(JitterEqual), 2, 0, 0, 100 * time.Millisecond},
		{"equal u=0.5", with(JitterEqual), 2, 0, 0.5, 150 * time.Millisecond},
		// Rounding reaches the top of the range: 1e8 + (1−2⁻⁵³)×1e8 rounds to 2e8.
		{"equal u<1 rounds to term", with(JitterEqual), 2, 0, justBelowOne, 200 * time.Millisecond},
		{"equal capped u=0", with(JitterEqual), 9, 0, 0, 500 * time.Millisecond},

		// None: term.
		{"none first", with(JitterNone), 1, 0, 0.9, 100 * time.Millisecond},
		{"none fourth", with(JitterNone), 4, 0, 0.1, 800 * time.Millisecond},
		{"none capped", with(JitterNone), 5, 0, 0.1, time.Second},
		{"none huge Max saturates", Backoff{Initial: time.Second, Max: math.MaxInt64, Multiplier: 10, Jitter: JitterNone}, 100, 0, 0, math.MaxInt64},

		// Decorrelated: min(Max, Initial + u × (3×prev − Initial)).
		{"decorrelated prev=Initial u=0", with(JitterDecorrelated), 1, 100 * time.Millisecond, 0, 100 * time.Millisecond},
		{"decorrelated prev=Initial u=0.5", with(JitterDecorrelated), 1, 100 * time.Millisecond, 0.5, 200 * time.Millisecond},
		{"decorrelated prev=200ms u=0.5", with(JitterDecorrelated), 2, 200 * time.Millisecond, 0.5, 350 * time.Millisecond},
		{"decorrelated retry number ignored", with(JitterDecorrelated), 7, 200 * time.Millisecond, 0.5, 350 * time.Millisecond},
		{"decorrelated prev=500ms u=0.5", with(JitterDecorrelated), 3, 500 * time.Millisecond, 0.5, 800 * time.Millisecond},
		{"decorrelated bunches at Max", with(JitterDecorrelated), 3, 500 * time.Millisecond, 0.9, time.Second},
		{"decorrelated prev=0 is Initial", with(JitterDecorrelated), 1, 0, 0.5, 100 * time.Millisecond},
		{"decorrelated negative prev is Initial", with(JitterDecorrelated), 1, -time.Hour, 0.5, 100 * time.Millisecond},
		{"decorrelated huge prev is Max", with(JitterDecorrelated), 1, math.MaxInt64, 0.5, time.Second},
		{"decorrelated NaN u", with(JitterDecorrelated), 2, 200 * time.Millisecond, math.NaN(), 100 * time.Millisecond},

		// Invalid backoffs (rejected by Validate) still never panic or go negative.
		{"zero backoff", Backoff{}, 3, 0, 0.5, 0},
		{"negative initial", Backoff{Initial: -time.Second, Max: time.Second, Multiplier: 2}, 3, 0, 0.5, 0},
		{"negative max decorrelated", Backoff{Initial: time.Second, Max: -time.Second, Multiplier: 2, Jitter: JitterDecorrelated}, 1, time.Second, 0.5, 0},
		{"NaN multiplier", Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: math.NaN()}, 3, 0, 0.5, 100 * time.Millisecond},
		{"negative multiplier", Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: -2}, 3, 0, 0.5, 100 * time.Millisecond},
		{"unknown jitter is proportional", Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 99}, 1, 0, 0, 80 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.Delay(tt.retry, tt.prev, tt.u); got != tt.want {
				t.Errorf("%+v.Delay(%d, %v, %v) = %v (%d), want %v (%d)", tt.b, tt.retry, tt.prev, tt.u, got, int64(got), tt.want, int64(tt.want))
			}
		})
	}
}

// TestDelayMatchesGRPCGoTerm checks the term against grpc-go's arithmetic,
// initial × Pow(multiplier, n−1) capped at max, for the retry numbers a
// policy file allows, so a plain A6 file pauses as grpc-go does.
func TestDelayMatchesGRPCGoTerm(t *testing.T) {
	for _, b := range []Backoff{
		{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 1.6, Jitter: JitterNone},
		{Initial: 7 * time.Millisecond, Max: time.Hour, Multiplier: 1.3, Jitter: JitterNone},
		{Initial: 333 * time.Microsecond, Max: time.Minute, Multiplier: 3.7, Jitter: JitterNone},
		{Initial: time.Second, Max: time.Minute, Multiplier: 0.7, Jitter: JitterNone},
		{Initial: 3 * time.Second, Max: time.Second, Multiplier: 1.5, Jitter: JitterNone},
	} {
		backoffCheckGRPCGoTerm(t, b)
	}
	// A seeded sweep of the values a policy file may hold.
	r := NewSeededRandom(7)
	for i := 0; i < 2000; i++ {
		backoffCheckGRPCGoTerm(t, Backoff{
			Initial:    time.Duration(1 + r()*float64(10*time.Second)),
			Max:        time.Duration(1 + r()*float64(time.Hour)),
			Multiplier: 1 + r()*r()*20,
			Jitter:     JitterNone,
		})
	}
}

// backoffCheckGRPCGoTerm compares Delay with grpc-go's arithmetic (stream.go,
// v1.69 on): cur = min(initial × Pow(mult, n−1), max); for proportional
// jitter cur *= 0.8 + 0.4u; the pause is time.Duration(int64(cur)).
func backoffCheckGRPCGoTerm(t *testing.T, b Backoff) {
	t.Helper()
	for n := 1; n <= 40; n++ {
		term := float64(b.Initial) * math.Pow(b.Multiplier, float64(n-1))
		if term > float64(b.Max) {
			term = float64(b.Max)
		}
		none, prop := b, b
		none.Jitter, prop.Jitter = JitterNone, JitterProportional
		if got := none.Delay(n, b.Initial, 0.5); got != time.Duration(int64(term)) {
			t.Errorf("%+v.Delay(%d) = %d, grpc-go's term %d", none, n, got, int64(term))
		}
		for _, u := range []float64{0, 0.3, 0.77, justBelowOne} {
			want := time.Duration(int64(term * (0.8 + 0.4*u)))
			if got := prop.Delay(n, b.Initial, u); got != want {
				t.Errorf("%+v.Delay(%d, u=%v) = %d, grpc-go's pause %d", prop, n, u, got, want)
			}
		}
	}
}

func TestJitterString(t *testing.T) {
	tests := []struct {
		j    Jitter
		want string
	}{
		{JitterProportional, "PROPORTIONAL"}, {JitterFull, "FULL"}, {JitterEqual, "EQUAL"},
		{JitterDecorrelated, "DECORRELATED"}, {JitterNone, "NONE"}, {Jitter(9), "Jitter(9)"}, {Jitter(-1), "Jitter(-1)"},
	}
	for _, tt := range tests {
		if got := tt.j.String(); got != tt.want {
			t.Errorf("Jitter(%d).String() = %q, want %q", int(tt.j), got, tt.want)
		}
	}
}
