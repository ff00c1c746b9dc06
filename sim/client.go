package sim

import (
	"fmt"
	"time"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Contender is one way of calling: a retry policy and a budget, each client
// process building its own budget from Budget.
type Contender struct {
	// Name is how tables call it.
	Name string
	// Policy decides retries through policy.Policy.Decide. MaxAttempts below
	// 2 means no retries.
	Policy policy.Policy
	// Budget is built once per client process with budget.New on the
	// simulation's clock; KindNone means no budget (unlimited).
	Budget budget.Settings
}

// SimBackoff is the backoff of the retrying contenders in the failure and
// outage models: gRFC A6's usual 0.1 s initial, 1 s cap, multiplier 2, with
// stagger's default jitter (PROPORTIONAL, U(0.8, 1.2)).
var SimBackoff = policy.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: policy.JitterProportional}

// RetryPolicy is the policy of the retrying contenders: UNAVAILABLE is
// retried, up to maxAttempts attempts (the first included), after SimBackoff.
func RetryPolicy(maxAttempts int) policy.Policy {
	return policy.Policy{MaxAttempts: maxAttempts, Backoff: SimBackoff, RetryableCodes: policy.NewCodeSet(codes.Unavailable)}
}

// Contenders returns the standard line-up: no retries; 3 retries (4
// attempts) without a budget; the same with each budget kind at its defaults
// (the throttle, which has none, at gRFC A6's usual maxTokens 10, tokenRatio
// 0.1); the same with stagger's default budget (budget.DefaultSettings);
// and, after them, extra (for instance stagger's default budget or a
// policy file's own behaviour).
func Contenders(extra ...Contender) []Contender {
	retry := RetryPolicy(4)
	cs := []Contender{
		{Name: "no-retry", Policy: RetryPolicy(1)},
		{Name: "retry-3", Policy: retry},
		{Name: "throttle", Policy: retry, Budget: budget.Settings{Kind: budget.KindThrottle, Throttle: budget.ThrottleSettings{MaxTokens: 10, TokenRatio: 0.1}}},
		{Name: "token-bucket", Policy: retry, Budget: budget.Settings{Kind: budget.KindTokenBucket}},
		{Name: "ratio", Policy: retry, Budget: budget.Settings{Kind: budget.KindRatio}},
		{Name: "default", Policy: retry, Budget: budget.DefaultSettings()},
	}
	return append(cs, extra...)
}

// errFailed is what a failing server answers.
var errFailed = status.Error(codes.Unavailable, "sim: server failed the attempt")

// errDeadline is what an attempt cut off by its call's deadline ends with.
var errDeadline = status.Error(codes.DeadlineExceeded, "sim: the call's deadline passed")

// callTotals counts what a run's calls did.
type callTotals struct {
	calls, attempts, successes int
}

// proc is one client process: a contender's policy and its own budget.
type proc struct {
	s      *Sim
	pol    *policy.Policy
	b      budget.Budget
	totals *callTotals
	// timeout is each call's deadline, counted from its start; 0 means none.
	timeout time.Duration
	// serve is asked, when an attempt reaches the server, whether it
	// succeeds.
	serve func() bool
	// done, when set, is told when a call that started at start ends.
	done func(start time.Duration)
}

func newProc(s *Sim, c *Contender, totals *callTotals, timeout time.Duration, serve func() bool) (*proc, error) {
	b, err := budget.New(c.Budget, budget.WithClock(s.Now))
	if err != nil {
		return nil, fmt.Errorf("sim: contender %q: %w", c.Name, err)
	}
	pol := c.Policy
	return &proc{s: s, pol: &pol, b: b, totals: totals, timeout: timeout, serve: serve}, nil
}

// call starts one call now, with the interceptor's order of steps: the
// attempt ends, Decide says whether to retry, the budget is told of the
// attempt, and asked for the retry only when Decide said yes.
//
// With a timeout, the call has a deadline, as a caller's context has one:
// Decide is told the time left (a pause that cannot end before the deadline
// is not taken), and when the deadline passes during an attempt the call
// fails then: the attempt is cancelled (Decide sees the caller done, so the
// budget is told nothing, as the interceptors tell it), and its answer,
// when it comes, is dropped. An attempt sent before the deadline still
// reaches the server. Without a timeout no deadline event is scheduled, so
// the runs are the same event for event as before deadlines existed.
func (p *proc) call() {
	p.totals.calls++
	start := p.s.now
	deadline := start + p.timeout
	var (
		ended     bool
		inAttempt int // the attempt in flight, 0 when none
	)
	finish := func(ok bool) {
		ended = true
		if ok {
			p.totals.successes++
		}
		if p.done != nil {
			p.done(start)
		}
	}
	if p.timeout > 0 {
		p.s.At(deadline, func() {
			if ended {
				return
			}
			if n := inAttempt; n > 0 {
				v := p.pol.Decide(&policy.Attempt{Number: n, Err: errDeadline, CallerDone: true, HasDeadline: true})
				if p.b != nil {
					p.b.Record(budget.Attempt{Number: n, Outcome: v.Record})
				}
			}
			finish(false)
		})
	}
	var attempt func(n int, prev time.Duration)
	attempt = func(n int, prev time.Duration) {
		if ended {
			return
		}
		p.totals.attempts++
		inAttempt = n
		p.s.After(hop(p.s), func() {
			ok := p.serve()
			p.s.After(hop(p.s), func() {
				if ended {
					return
				}
				inAttempt = 0
				var err error
				if !ok {
					err = errFailed
				}
				a := &policy.Attempt{Number: n, Err: err, Retry: n, Prev: prev, U: p.s.rng.Float64()}
				if p.timeout > 0 {
					a.HasDeadline, a.Remaining = true, deadline-p.s.now
				}
				v := p.pol.Decide(a)
				if p.b != nil {
					p.b.Record(budget.Attempt{Number: n, Outcome: v.Record})
				}
				if v.Retry && (p.b == nil || p.b.Allow(budget.Request{Number: n + 1})) {
					pause := v.Pause
					p.s.After(pause, func() { attempt(n+1, pause) })
					return
				}
				finish(ok)
			})
		})
	}
	attempt(1, p.pol.Backoff.Initial)
}

// poisson starts calls on p at the given rate (calls per second) from now
// until end.
func (p *proc) poisson(rate float64, end time.Duration) {
	if rate <= 0 {
		return
	}
	var next func()
	next = func() {
		p.call()
		p.schedule(rate, end, next)
	}
	p.schedule(rate, end, next)
}

func (p *proc) schedule(rate float64, end time.Duration, f func()) {
	gap := time.Duration(p.s.rng.ExpFloat64() / rate * float64(time.Second))
	if t := p.s.now + gap; t < end {
		p.s.At(t, f)
	}
}
