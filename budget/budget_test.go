package budget

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// step is one scripted operation on a budget at t0+At: Record n times, or
// Allow once and expect Want. Level is the budget's level after the step.
type step struct {
	At     time.Duration
	Record *Attempt
	N      int // times to Record; 0 means 1
	Allow  *Request
	Want   bool
	Level  float64
}

// play runs steps on b, whose clock is clk.
func play(t *testing.T, b Budget, clk *manualClock, steps []step) {
	t.Helper()
	for i, s := range steps {
		clk.set(t0.Add(s.At))
		switch {
		case s.Record != nil:
			for range max(1, s.N) {
				b.Record(*s.Record)
			}
		case s.Allow != nil:
			if got := b.Allow(*s.Allow); got != s.Want {
				t.Fatalf("step %d: Allow(%+v) = %v, want %v (state %+v)", i, *s.Allow, got, s.Want, b.State())
			}
		}
		if got := b.State().Level; math.Abs(got-s.Level) > 1e-9 {
			t.Fatalf("step %d: level = %v, want %v", i, got, s.Level)
		}
	}
}

func rec(n, number int, o Outcome) step {
	return step{Record: &Attempt{Number: number, Outcome: o}, N: n}
}

// TestThrottleA6 replays gRFC A6 retryThrottling by hand with maxTokens 10
// and tokenRatio 0.1239, which A6 keeps as 0.123. Retries are allowed while
// tokens > 5.
func TestThrottleA6(t *testing.T) {
	clk := &manualClock{now: t0}
	b, err := newThrottle(ThrottleSettings{MaxTokens: 10, TokenRatio: 0.1239}, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	retry := &Request{Number: 2}
	steps := []step{
		{Allow: retry, Want: true, Level: 10},                               // starts full; Allow spends nothing
		withLevel(rec(4, 1, Failure), 6),                                    // 10 - 4
		{Allow: retry, Want: true, Level: 6},                                // 6 > 5
		withLevel(rec(1, 3, Failure), 5),                                    // the last attempt of a call counts too
		{Allow: retry, Want: false, Level: 5},                               // 5 is not > 5
		withLevel(rec(1, 2, Success), 5.123),                                // a successful retry is a successful RPC: +0.123
		{Allow: &Request{Number: 2, Hedge: true}, Want: true, Level: 5.123}, // hedges pass the same test
		withLevel(rec(3, 1, Other), 5.123),                                  // non-retryable codes say nothing
		withLevel(rec(6, 1, Failure), 0),                                    // 5.123 - 6 clamps at 0
		withLevel(rec(40, 1, Success), 4.92),                                // 40 × 0.123
		{Allow: retry, Want: false, Level: 4.92},
		withLevel(rec(1, 1, Success), 5.043),
		{Allow: retry, Want: true, Level: 5.043},
		withLevel(rec(100, 1, Success), 10), // clamps at maxTokens
	}
	play(t, b, clk, steps)
	clk.set(t0)
	s := b.State()
	if want := (State{Kind: "throttle", Level: 10, Capacity: 10, Allowed: 4, Refused: 2, At: t0}); s != want {
		t.Fatalf("state = %+v, want %+v", s, want)
	}
}

func withLevel(s step, level float64) step { s.Level = level; return s }

func TestTokenBucketScript(t *testing.T) {
	clk := &manualClock{now: t0}
	b, err := newTokenBucket(TokenBucketSettings{Capacity: 20, Initial: 12, RetryCost: 5, TimeoutRetryCost: 10, SuccessReward: 1}, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	retry := &Request{Number: 2}
	afterTimeout := &Request{Number: 2, AfterTimeout: true}
	steps := []step{
		{Allow: retry, Want: true, Level: 7},         // 12 - 5
		{Allow: afterTimeout, Want: false, Level: 7}, // 7 < 10: refused, nothing taken
		{Allow: retry, Want: true, Level: 2},
		{Allow: retry, Want: false, Level: 2},
		withLevel(rec(3, 1, Failure), 2),                                                       // failures take nothing
		withLevel(step{Record: &Attempt{Number: 2, Outcome: Success}}, 7),                      // refund 5
		withLevel(step{Record: &Attempt{Number: 3, Outcome: Failure}}, 7),                      // a failed retry keeps its cost
		withLevel(step{Record: &Attempt{Number: 2, Outcome: Success, AfterTimeout: true}}, 17), // refund 10
		withLevel(rec(5, 1, Success), 20),                                                      // +1 each, capped at 20
		{Allow: afterTimeout, Want: true, Level: 10},
		withLevel(rec(2, 1, Other), 10),
		{Allow: &Request{Number: 2, Hedge: true}, Want: true, Level: 5},                 // a hedge costs a retry
		withLevel(step{Record: &Attempt{Number: 2, Outcome: Success, Hedge: true}}, 10), // and is refunded like one
	}
	play(t, b, clk, steps)
	clk.set(t0)
	if s := b.State(); s.Allowed != 4 || s.Refused != 2 || s.Capacity != 20 || s.Kind != "token-bucket" {
		t.Fatalf("state = %+v", s)
	}
}

func TestTokenBucketDefaultsAWS(t *testing.T) {
	b, err := newTokenBucket(TokenBucketSettings{})
	if err != nil {
		t.Fatal(err)
	}
	// 500 tokens at 5 a retry: exactly 100 retries while nothing succeeds.
	n := 0
	for b.Allow(Request{Number: 2}) {
		n++
	}
	if n != 100 {
		t.Fatalf("a full AWS bucket allowed %d retries, want 100", n)
	}
}

func TestRatioScript(t *testing.T) {
	clk := &manualClock{now: t0}
	// 10% of requests, floor 0.2/s over 10 s = 2 retries per window; the
	// window moves 1 s at a time.
	b, err := newRatio(RatioSettings{Percent: 10, Window: 10 * time.Second, MinRetriesPerSecond: 0.2}, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	retry := &Request{Number: 2}
	sec := time.Second
	steps := []step{
		{Allow: retry, Want: true, Level: 1}, // the floor: 2 per window
		{Allow: &Request{Number: 2, Hedge: true}, Want: true, Level: 0},
		{Allow: retry, Want: false, Level: 0},
		{At: sec / 2, Record: &Attempt{Number: 1, Outcome: Failure}, N: 30, Level: 1}, // 10% of 30 = 3
		{At: sec / 2, Record: &Attempt{Number: 2, Outcome: Failure}, N: 30, Level: 1}, // retries are not requests
		{At: sec / 2, Allow: retry, Want: true, Level: 0},
		{At: 9*sec + 900*time.Millisecond, Allow: retry, Want: false, Level: 0}, // still inside the window
		{At: 5 * sec, Record: &Attempt{Number: 1, Outcome: Success}, N: 0, Level: 0},
		{At: 10 * sec, Allow: retry, Want: true, Level: 1}, // second 0 left: 1 request, floor 2
		{At: 25 * sec, Level: 2},                           // the whole window left
		{At: 24 * sec, Allow: retry, Want: true, Level: 1}, // a clock going back stays put
	}
	play(t, b, clk, steps)
	clk.set(t0.Add(25 * time.Second))
	if s := b.State(); s.Allowed != 5 || s.Refused != 2 || s.Capacity != 2 || s.Kind != "ratio" {
		t.Fatalf("state = %+v", s)
	}
}

func TestRatioNoFloor(t *testing.T) {
	clk := &manualClock{now: t0}
	b, err := newRatio(RatioSettings{Percent: 50, MinRetriesPerSecond: -1}, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	play(t, b, clk, []step{
		{Allow: &Request{Number: 2}, Want: false, Level: 0},
		{Record: &Attempt{Number: 1, Outcome: Failure}, N: 3, Level: 1}, // 50% of 3 = 1.5
		{Allow: &Request{Number: 2}, Want: true, Level: 0},
		{Allow: &Request{Number: 2}, Want: false, Level: 0},
	})
}

func TestValidation(t *testing.T) {
	tests := []struct {
		name string
		s    Settings
		want string
	}{
		{"throttle zero", Settings{Kind: KindThrottle, Throttle: ThrottleSettings{TokenRatio: 1}}, "budget: MaxTokens: must be in (0, 1000], got 0"},
		{"throttle big", Settings{Kind: KindThrottle, Throttle: ThrottleSettings{MaxTokens: 1001, TokenRatio: 1}}, "budget: MaxTokens: must be in (0, 1000], got 1001"},
		{"throttle NaN", Settings{Kind: KindThrottle, Throttle: ThrottleSettings{MaxTokens: math.NaN(), TokenRatio: 1}}, "budget: MaxTokens: must be in (0, 1000], got NaN"},
		{"throttle ratio", Settings{Kind: KindThrottle, Throttle: ThrottleSettings{MaxTokens: 10, TokenRatio: -1}}, "budget: TokenRatio: must be a finite number > 0, got -1"},
		{"throttle ratio inf", Settings{Kind: KindThrottle, Throttle: ThrottleSettings{MaxTokens: 10, TokenRatio: math.Inf(1)}}, "budget: TokenRatio: must be a finite number > 0, got +Inf"},
		{"throttle ratio tiny", Settings{Kind: KindThrottle, Throttle: ThrottleSettings{MaxTokens: 10, TokenRatio: 0.0004}}, "budget: TokenRatio: must be at least 0.001 (3 decimals are kept), got 0.0004"},
		{"bucket capacity", Settings{Kind: KindTokenBucket, TokenBucket: TokenBucketSettings{Capacity: -1}}, "budget: Capacity: must be in [0.001, 1e9], got -1"},
		{"bucket cost above capacity", Settings{Kind: KindTokenBucket, TokenBucket: TokenBucketSettings{Capacity: 8}}, "budget: TimeoutRetryCost: must be in (0, capacity 8] and at least 0.001, got 10"},
		{"bucket retry cost", Settings{Kind: KindTokenBucket, TokenBucket: TokenBucketSettings{RetryCost: -5}}, "budget: RetryCost: must be in (0, capacity 500] and at least 0.001, got -5"},
		{"bucket reward", Settings{Kind: KindTokenBucket, TokenBucket: TokenBucketSettings{SuccessReward: math.NaN()}}, "budget: SuccessReward: must be in (0, capacity 500] and at least 0.001, got NaN"},
		{"bucket initial", Settings{Kind: KindTokenBucket, TokenBucket: TokenBucketSettings{Initial: 501}}, "budget: Initial: must be in (0, capacity 500] and at least 0.001, got 501"},
		{"ratio percent", Settings{Kind: KindRatio, Ratio: RatioSettings{Percent: 101}}, "budget: Percent: must be in (0, 100], got 101"},
		{"ratio window", Settings{Kind: KindRatio, Ratio: RatioSettings{Window: -time.Second}}, "budget: Window: must be in [10ms, 1h], got -1s"},
		{"ratio floor", Settings{Kind: KindRatio, Ratio: RatioSettings{MinRetriesPerSecond: math.NaN()}}, "budget: MinRetriesPerSecond: must be at most 1e6 (negative: no floor), got NaN"},
		{"kind", Settings{Kind: 9}, "budget: Kind: must be none, throttle, token-bucket or ratio, got Kind(9)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.s)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("New error = %v, want %q", err, tt.want)
			}
			if b != nil {
				t.Fatalf("New returned a non-nil Budget %#v with an error", b)
			}
			var se *SettingsError
			if !errors.As(err, &se) || se.Field == "" {
				t.Fatalf("error %T is not a *SettingsError naming a field", err)
			}
			if err2 := tt.s.Validate(); err2 == nil || err2.Error() != tt.want {
				t.Fatalf("Validate = %v, want %q", err2, tt.want)
			}
		})
	}
}

func TestNewKinds(t *testing.T) {
	tests := []struct {
		s    Settings
		kind string
	}{
		{Settings{Kind: KindThrottle, Throttle: ThrottleSettings{MaxTokens: 10, TokenRatio: 0.1}}, "throttle"},
		{Settings{Kind: KindTokenBucket}, "token-bucket"},
		{Settings{Kind: KindRatio}, "ratio"},
	}
	for _, tt := range tests {
		b, err := New(tt.s, WithClock(func() time.Time { return t0 }))
		if err != nil {
			t.Fatal(err)
		}
		if s := b.State(); s.Kind != tt.kind || !s.At.Equal(t0) {
			t.Fatalf("New(%v).State() = %+v, want kind %q at %v", tt.s.Kind, s, tt.kind, t0)
		}
		if tt.s.Kind.String() != tt.kind {
			t.Fatalf("Kind.String() = %q, want %q", tt.s.Kind.String(), tt.kind)
		}
	}
	b, err := New(Settings{})
	if b != nil || err != nil {
		t.Fatalf("New(KindNone) = %v, %v; want nil, nil (unlimited)", b, err)
	}
}

func TestSettingsWithDefaults(t *testing.T) {
	tests := []struct {
		name string
		s    Settings
		want Settings
	}{
		{"zero", Settings{}, Settings{
			TokenBucket: TokenBucketSettings{Capacity: 500, Initial: 500, RetryCost: 5, TimeoutRetryCost: 10, SuccessReward: 1},
			Ratio:       RatioSettings{Percent: 10, Window: 10 * time.Second, MinRetriesPerSecond: 0.1},
			Defer:       DeferSettings{MaxWaiting: 1024, MaxWait: 10 * time.Second},
		}},
		{"set fields kept, no floor as 0, initial follows capacity", Settings{
			Kind:        KindRatio,
			Throttle:    ThrottleSettings{MaxTokens: 10},
			TokenBucket: TokenBucketSettings{Capacity: 50, RetryCost: 2},
			Ratio:       RatioSettings{Percent: 20, MinRetriesPerSecond: -1},
			Defer:       DeferSettings{Mode: DeferOff, MaxWait: time.Second},
		}, Settings{
			Kind:        KindRatio,
			Throttle:    ThrottleSettings{MaxTokens: 10},
			TokenBucket: TokenBucketSettings{Capacity: 50, Initial: 50, RetryCost: 2, TimeoutRetryCost: 10, SuccessReward: 1},
			Ratio:       RatioSettings{Percent: 20, Window: 10 * time.Second},
			Defer:       DeferSettings{Mode: DeferOff, MaxWaiting: 1024, MaxWait: time.Second},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.WithDefaults(); got != tt.want {
				t.Fatalf("WithDefaults() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDefault(t *testing.T) {
	if first, again := DefaultBackends(), DefaultBackends(); first != again {
		t.Fatal("DefaultBackends returned two sets; want one per process")
	}
	if err := DefaultSettings().Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := New(DefaultSettings(), WithClock(func() time.Time { return t0 }))
	if err != nil {
		t.Fatal(err)
	}
	if s := b.State(); s.Kind != DefaultSettings().Kind.String() || s.Level != 9 || s.Capacity != 100 {
		t.Fatalf("New(DefaultSettings()).State() = %+v", s)
	}
	// Nearly empty at start: while everything fails a fresh process gets one
	// retry, then waits for a success.
	if !b.Allow(Request{Number: 2}) || b.Allow(Request{Number: 2}) {
		t.Fatal("a fresh default budget should allow exactly one retry")
	}
	b.Record(Attempt{Number: 1, Outcome: Success})
	if !b.Allow(Request{Number: 2}) {
		t.Fatal("one success should buy the second retry")
	}
}

// TestConcurrentInvariants hammers each budget from many goroutines (run with
// -race) while another goroutine checks the level stays in [0, Capacity].
func TestConcurrentInvariants(t *testing.T) {
	tests := []struct {
		name string
		s    Settings
	}{
		{"throttle", Settings{Kind: KindThrottle, Throttle: ThrottleSettings{MaxTokens: 10, TokenRatio: 0.5}}},
		{"token-bucket", Settings{Kind: KindTokenBucket, TokenBucket: TokenBucketSettings{Capacity: 50}}},
		{"ratio", Settings{Kind: KindRatio, Ratio: RatioSettings{Percent: 10, MinRetriesPerSecond: 0.5}}},
	}
	const workers, ops = 8, 2000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.s, WithClock(func() time.Time { return t0 })) // one window: the ratio's counts only grow
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			done := make(chan struct{})
			var watchErr error
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				for {
					select {
					case <-done:
						return
					default:
					}
					if s := b.State(); s.Level < 0 || s.Level > s.Capacity {
						watchErr = errors.New("level out of [0, capacity]")
						return
					}
				}
			}()
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range ops {
						// A deterministic mix per worker: mostly failures.
						switch (i + w) % 4 {
						case 0:
							b.Record(Attempt{Number: 1, Outcome: Success})
						case 1, 2:
							b.Record(Attempt{Number: 1, Outcome: Failure})
						case 3:
							if b.Allow(Request{Number: 2}) {
								b.Record(Attempt{Number: 2, Outcome: Failure})
							}
						}
					}
				}()
			}
			wg.Wait()
			close(done)
			<-watched
			if watchErr != nil {
				t.Fatal(watchErr)
			}
			s := b.State()
			if s.Allowed+s.Refused != workers*ops/4 {
				t.Fatalf("allowed %d + refused %d, want %d Allow calls", s.Allowed, s.Refused, workers*ops/4)
			}
			if tt.name == "ratio" {
				requests := uint64(workers * ops * 3 / 4)
				if limit := math.Max(0.1*float64(requests), 0.5*10); float64(s.Allowed) > limit {
					t.Fatalf("ratio allowed %d retries for %d requests, limit %v", s.Allowed, requests, limit)
				}
			}
		})
	}
}

// TestConcurrentExactSpend: goroutines racing for a bucket's last tokens get
// exactly what it holds, no more (a lost compare-and-swap would overspend).
func TestConcurrentExactSpend(t *testing.T) {
	b, err := newTokenBucket(TokenBucketSettings{Capacity: 500})
	if err != nil {
		t.Fatal(err)
	}
	th, err := newThrottle(ThrottleSettings{MaxTokens: 1000, TokenRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Allow(Request{Number: 2})
				th.Record(Attempt{Number: 1, Outcome: Failure})
			}
		}()
	}
	wg.Wait()
	if s := b.State(); s.Allowed != 100 || s.Level != 0 {
		t.Fatalf("bucket: allowed %d, level %v; want 100 and 0", s.Allowed, s.Level)
	}
	if s := th.State(); s.Level != 200 {
		t.Fatalf("throttle: level %v after 800 failures from 1000, want 200", s.Level)
	}
}
