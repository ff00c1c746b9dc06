package sim

import (
	"fmt"
	"time"

	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
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
	// Breaker, when set, is a circuit breaker (breaker.Breaker) per client
	// process, asked as the interceptors ask it: before a first attempt
	// (refused: the call fails at once, no attempt sent), and before a
	// retry, ahead of the budget (a retry it refuses waits in the gate,
	// which asks the breaker again, or ends the call without one).
	Breaker *breaker.Settings
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
// that with a circuit breaker of the default settings ("breaker"); and,
// after them, extra (for instance stagger's default budget or a
// policy file's own behaviour). It is the line-up of every model that
// compares contenders (FailRate, Partial, Outage) and of `stagger sim`'s
// -contenders, so a strategy added here runs in all of them.
func Contenders(extra ...Contender) []Contender {
	retry := RetryPolicy(4)
	cs := []Contender{
		{Name: "no-retry", Policy: RetryPolicy(1)},
		{Name: "retry-3", Policy: retry},
		{Name: "throttle", Policy: retry, Budget: budget.Settings{Kind: budget.KindThrottle, Throttle: budget.ThrottleSettings{MaxTokens: 10, TokenRatio: 0.1}}},
		{Name: "token-bucket", Policy: retry, Budget: budget.Settings{Kind: budget.KindTokenBucket}},
		{Name: "ratio", Policy: retry, Budget: budget.Settings{Kind: budget.KindRatio}},
		{Name: "default", Policy: retry, Budget: budget.DefaultSettings()},
		{Name: "breaker", Policy: retry, Budget: budget.DefaultSettings(), Breaker: &breaker.Settings{}},
	}
	return append(cs, extra...)
}

// errFailed is what a failing server answers.
var errFailed = status.Error(codes.Unavailable, "sim: server failed the attempt")

// errRefused is what a server with no room answers (the fleet model's).
var errRefused = status.Error(codes.ResourceExhausted, "sim: server refused the attempt: no worker free")

// errDeadline is what an attempt cut off by its call's deadline ends with.
var errDeadline = status.Error(codes.DeadlineExceeded, "sim: the call's deadline passed")

// callTotals counts what a run's calls did.
type callTotals struct {
	calls, attempts, successes int
}

// waiter is one call's deferred retry on its process's gate.
type waiter struct {
	w *budget.Waiter
	// admit sends the retry with the admission the gate granted; giveUp
	// ends the call when the gate ended the wait, with the gate's error.
	admit  func(budget.Admission)
	giveUp func(error)
	// gone: admitted or given up; dropped from proc.waiters.
	gone bool
}

// proc is one client process: a contender's policy and its own budget.
type proc struct {
	s      *Sim
	pol    *policy.Policy
	b      budget.Budget
	br     *breaker.Breaker
	totals *callTotals
	// gate is b when its refused retries wait (nil otherwise), waiters
	// its deferred retries, in the order they entered.
	gate    *budget.Gate
	waiters []*waiter
	// wake is the time of the gate's pending run (-1: none).
	wake time.Duration
	// timeout is each call's deadline, counted from its start; 0 means none.
	timeout time.Duration
	// serve is asked, when an attempt reaches the server, whether it
	// succeeds, with the key of the attempt's call.
	serve func(key float64) bool
	// key, when set, draws each call's key when the call starts: all its
	// attempts share it. Without it every key is 0.
	key func() float64
	// done, when set, is told when a call that started at start ends:
	// whether it succeeded, and if not why (failReason).
	done func(start time.Duration, ok bool, why string)
	// answer, when set, is the server instead of serve: given the start
	// of the attempt's call and the attempt's number, when it reaches
	// the server, how long the server takes to answer, its load report
	// (budget.Attempt.Load) and the attempt's error (nil: served) (the
	// fleet model).
	answer func(start time.Duration, n int) (time.Duration, budget.Load, error)
	// net, when set, draws a one-way hop instead of hop.
	net func() time.Duration
	// facts: tell the budget what the interceptors tell it besides the
	// outcome (the fleet model): how long an admitted retry took
	// (Attempt.Took), the call's waits so far (Request.Waited), and the
	// latest served retry's time within five seconds (Request.Took). The
	// older models leave them zero, so that their figures stay as they
	// were measured.
	facts bool
	// tookAt and took are the latest served retry's end and time (facts).
	tookAt, took time.Duration
	// waited, when set, is told how long each wait in the gate took, its
	// pause included, when the gate decided it.
	waited func(time.Duration)
}

func newProc(s *Sim, c *Contender, totals *callTotals, timeout time.Duration, serve func(key float64) bool) (*proc, error) {
	b, err := budget.New(c.Budget, budget.WithClock(s.Now), budget.WithRandom(s.rng.Float64))
	if err != nil {
		return nil, fmt.Errorf("sim: contender %q: %w", c.Name, err)
	}
	pol := c.Policy
	p := &proc{s: s, pol: &pol, b: b, totals: totals, timeout: timeout, serve: serve, wake: -1}
	if c.Breaker != nil {
		if p.br, err = breaker.New("sim", *c.Breaker, nil, breaker.WithClock(s.Now), breaker.WithRandom(s.rng.Float64)); err != nil {
			return nil, fmt.Errorf("sim: contender %q: %w", c.Name, err)
		}
	}
	if g, ok := b.(*budget.Gate); ok {
		p.gate = g
	}
	return p, nil
}

// record tells the breaker (first, as the interceptors do) and the budget
// how an attempt ended; the gate's grant loop ran on it.
func (p *proc) record(a budget.Attempt, br budget.Outcome) {
	if p.br != nil {
		p.br.Record(br, a.Number == 1, criticality.Unset, nil)
	}
	if p.b == nil {
		return
	}
	p.b.Record(a)
	p.runGate()
}

// runGate runs the gate's grant loop at now (as its timer does on the real
// clock), takes the verdicts it sent, in the order the waiters entered,
// and schedules its next run at the time it asks for.
func (p *proc) runGate() {
	if p.gate == nil {
		return
	}
	for {
		next := p.gate.Tick()
		if !p.takeVerdicts() {
			p.wakeAt(next)
			return
		}
	}
}

// takeVerdicts takes the verdict of every waiter the gate decided:
// admitted, its retry is sent; ended, its call ends; refused by its
// guard, it waits again. It reports whether it took any.
func (p *proc) takeVerdicts() bool {
	took := false
	for _, w := range p.waiters {
		if w.gone {
			continue
		}
		select {
		case <-w.w.Ready():
		default:
			continue
		}
		took = true
		switch a, err := w.w.Take(); {
		case a != budget.AdmitNone:
			w.gone = true
			w.admit(a)
		case err != nil:
			w.gone = true
			w.giveUp(err)
		}
	}
	live := p.waiters[:0]
	for _, w := range p.waiters {
		if !w.gone {
			live = append(live, w)
		}
	}
	clear(p.waiters[len(live):])
	p.waiters = live
	return took
}

// wakeAt schedules the gate's next run at next (zero: none), unless one
// is pending sooner: a run superseded does nothing, and every run
// schedules the next.
func (p *proc) wakeAt(next time.Time) {
	if next.IsZero() {
		return
	}
	t := max(next.Sub(Epoch), p.s.now)
	if p.wake >= p.s.now && p.wake <= t {
		return
	}
	p.wake = t
	p.s.At(t, func() {
		if p.wake == t {
			p.wake = -1
			p.runGate()
		}
	})
}

// enter defers a retry the budget refused, as the interceptors' Wait does
// on the real clock: the gate's grant loop decides it, now, after every
// Record on the budget and at the times it asks for; admitted, admit
// sends the retry. The gate ends the wait (at the call's deadline, limit
// and a millisecond, or without one its MaxWait less r.Waited; or by its
// rules), and giveUp ends the call. It returns the gate's error when the
// gate turned the retry away (budget.ErrTooManyWaiting,
// budget.ErrOutageLasting): the call ends as refused.
func (p *proc) enter(r budget.Request, pause time.Duration, limit time.Duration, admit func(budget.Admission), giveUp func(error)) error {
	var deadline time.Time
	if limit >= 0 {
		deadline = Epoch.Add(limit + time.Millisecond)
	}
	bw, err := p.gate.Enter(r, pause, deadline)
	if err != nil {
		return err
	}
	p.waiters = append(p.waiters, &waiter{w: bw, admit: admit, giveUp: giveUp})
	p.runGate()
	return nil
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
	id := uint64(p.totals.calls) // the call's, for the gate (budget.Request.Call)
	start := p.s.now
	var key float64
	if p.key != nil {
		key = p.key()
	}
	deadline := start + p.timeout
	var (
		ended     bool
		inAttempt int              // the attempt in flight, 0 when none
		admission budget.Admission // how the attempt in flight was let go
		inGate    time.Duration    // the call's waits in the gate so far (facts)
	)
	// finish ends the call once: the gate may end a wait at the very
	// instant of the call's deadline event, and whichever runs second
	// finds the call ended.
	finish := func(ok bool, why string) {
		if ended {
			return
		}
		ended = true
		if ok {
			p.totals.successes++
		}
		if p.done != nil {
			p.done(start, ok, why)
		}
	}
	if p.timeout > 0 {
		p.s.At(deadline, func() {
			if ended {
				return
			}
			if n := inAttempt; n > 0 {
				v := p.pol.Decide(&policy.Attempt{Number: n, Err: errDeadline, CallerDone: true, HasDeadline: true})
				p.record(budget.Attempt{Number: n, Call: id, Outcome: v.Record, Admission: admission}, budget.Other)
			}
			finish(false, "deadline")
		})
	}
	// limit is when a deferred retry gives up: a millisecond before the
	// deadline, or (-1) the gate's MaxWait after it entered.
	limit := time.Duration(-1)
	if p.timeout > 0 {
		limit = deadline - time.Millisecond
	}
	var attempt func(n int, prev time.Duration, adm budget.Admission)
	attempt = func(n int, prev time.Duration, adm budget.Admission) {
		if ended {
			return
		}
		p.totals.attempts++
		inAttempt, admission = n, adm
		sent := p.s.now
		p.s.After(p.hop(), func() {
			var (
				err     error
				service time.Duration
				load    budget.Load
			)
			if p.answer != nil {
				service, load, err = p.answer(start, n)
			} else if !p.serve(key) {
				err = errFailed
			}
			ok := err == nil
			p.s.After(service+p.hop(), func() {
				if ended {
					return
				}
				inAttempt = 0
				a := &policy.Attempt{Number: n, Err: err, Retry: n, Prev: prev, U: p.s.rng.Float64()}
				if p.timeout > 0 {
					a.HasDeadline, a.Remaining = true, deadline-p.s.now
				}
				v := p.pol.Decide(a)
				brOut := budget.Success
				if !ok {
					brOut = budget.Failure
				}
				// The interceptors' sign of overload: a refusal the server sent.
				rec := budget.Attempt{Number: n, Call: id, Outcome: v.Record, Admission: adm, Final: !v.Retry, Overload: status.Code(err) == codes.ResourceExhausted, Load: load}
				if p.facts && n > 1 {
					took := p.s.now - sent
					if adm != budget.AdmitNone {
						rec.Took = took
					}
					if ok {
						p.tookAt, p.took = p.s.now, took
					}
				}
				p.record(rec, brOut)
				if !v.Retry {
					finish(ok, failReason(err, v.Reason))
					return
				}
				pause := v.Pause
				r := budget.Request{Number: n + 1, Call: id, Last: n+1 >= p.pol.MaxAttempts}
				if p.facts {
					r.Waited = inGate
				}
				if p.br != nil {
					r.Guard = p.br.Guard(criticality.Unset, nil)
				}
				brOK := p.br == nil || p.br.Closed()
				if !brOK && p.gate == nil {
					brOK, _ = p.br.AllowRetry(criticality.Unset, nil)
				}
				if brOK && (p.b == nil || p.b.Allow(r)) {
					p.s.After(pause, func() { attempt(n+1, pause, budget.AdmitNone) })
					return
				}
				if p.facts && p.s.now-p.tookAt <= paceFresh && p.tookAt > 0 {
					r.Took = p.took
				}
				if p.gate == nil {
					finish(false, "budget")
					return
				}
				entered := p.s.now
				if err := p.enter(r, pause, limit,
					func(a budget.Admission) {
						inGate += p.s.now - entered
						p.tellWaited(entered)
						attempt(n+1, pause, a)
					},
					func(err error) {
						p.tellWaited(entered)
						finish(false, "deferred/"+budget.WaitRule(err))
					}); err != nil {
					finish(false, "turned-away/"+budget.WaitRule(err))
				}
			})
		})
	}
	if p.br != nil && p.br.Admit(criticality.Unset, nil) != nil {
		// Open (or throttled): the call fails at once, nothing sent.
		finish(false, "breaker")
		return
	}
	attempt(1, p.pol.Backoff.Initial, budget.AdmitNone)
}

// tellWaited tells waited, if set, of a wait that began at entered and
// ends now.
func (p *proc) tellWaited(entered time.Duration) {
	if p.waited != nil {
		p.waited(p.s.now - entered)
	}
}

// paceFresh is how long the interceptors go on telling the Gate the
// latest served retry's time (Request.Took): their pace's freshness.
const paceFresh = 5 * time.Second

// hop draws a one-way hop: net's, or the package's hop.
func (p *proc) hop() time.Duration {
	if p.net != nil {
		return p.net()
	}
	return hop(p.s)
}

// failReason is why a call whose last attempt ended with err and whose
// policy said reason did not retry: the policy's reason and the code.
func failReason(err error, reason policy.Reason) string {
	if err == nil {
		return ""
	}
	return reason.String() + "/" + status.Code(err).String()
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
