package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/stagger-go/stagger/balancer/elsewhere"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/internal/gatetune"
	"github.com/stagger-go/stagger/policy"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

func displayNames(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		if n == "" {
			n = "{} (default)"
		}
		out[i] = n
	}
	return out
}

// codeNames lists s by the names a policy file uses (gRFC A6's).
func codeNames(s policy.CodeSet) []string {
	var out []string
	for _, c := range s.Codes() {
		out = append(out, policy.CodeName(c))
	}
	return out
}

// fmtDur prints d for a reader: rounded, and the largest Duration (where
// every figure of check saturates) as what it is.
func fmtDur(d time.Duration) string {
	switch {
	case d == math.MaxInt64:
		return "more than 292 years"
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}

func explainMethod(e policy.Entry, files *protoregistry.Files) checkMethod {
	m := e.Method
	out := checkMethod{Entry: e.Index, Names: displayNames(e.Names), Kind: "none", Idempotent: "not marked"}
	if m.Idempotent != nil {
		out.Idempotent = fmt.Sprint(*m.Idempotent)
	}
	out.Criticality, out.CriticalitySet = m.Criticality.Effective().String(), m.Criticality.Valid()
	if m.Timeout > 0 {
		out.Timeout = fmtDur(m.Timeout)
	}
	switch {
	case m.Retry != nil:
		p := m.Retry
		out.Kind = "retry"
		out.Ambiguous = "retried: the method is idempotent"
		if !entryIdempotent(e, files) {
			out.Ambiguous = "not retried (reason ambiguous): the method is not known to be idempotent, and the attempt may have run; calls with interceptor.WithIdempotencyKey are retried"
		}
		out.MaxAttempts = p.MaxAttempts
		out.Codes = codeNames(p.RetryableCodes)
		out.Backoff = &checkBackoff{Initial: fmtDur(p.Backoff.Initial), Max: fmtDur(p.Backoff.Max), Multiplier: p.Backoff.Multiplier, Jitter: p.Backoff.Jitter.String()}
		if p.PerAttemptRecvTimeout > 0 {
			out.PerAttemptRecvTimeout = fmtDur(p.PerAttemptRecvTimeout)
			out.HedgeOnPerTryTimeout = p.HedgeOnPerTryTimeout
		}
		table, worst := pauseTable(p.Backoff, p.MaxAttempts-1)
		for _, row := range table {
			cp := checkPause{Retry: row.retry, Min: fmtDur(row.q[0]), Median: fmtDur(row.q[1]), P99: fmtDur(row.q[2]), Max: fmtDur(row.q[3]), AtCap: row.atCap}
			if row.last != row.retry {
				cp.Last = row.last
			}
			if row.elided {
				cp.Median, cp.P99 = "-", "-"
			}
			out.Pauses = append(out.Pauses, cp)
		}
		note := "pauses only; each attempt's own time comes on top, bounded by the caller's deadline"
		if p.PerAttemptRecvTimeout > 0 {
			// The last attempt is never cut off: no retry can follow it.
			worst = satAdd(worst, satMul(p.PerAttemptRecvTimeout, int64(p.MaxAttempts-1)))
			note = "pauses plus every attempt but the last cut off by perAttemptRecvTimeout; the last runs on to its answer (longer while the server is slow for every attempt: the timer then waits further periods)"
		}
		if m.Timeout > 0 && worst > m.Timeout {
			worst = m.Timeout
			note += "; capped by the method's timeout"
		}
		out.WorstCase = fmtDur(worst)
		out.WorstCaseNote = note + "; server pushback can add up to " + fmtDur(policy.DefaultPushbackCeiling) + " per retry"
		out.Chain = chainNote(p.MaxAttempts, "attempts")
	case m.Hedging != nil:
		h := m.Hedging
		out.Kind = "hedging"
		out.MaxAttempts = h.MaxAttempts
		out.Codes = codeNames(h.NonFatalCodes)
		out.HedgingDelay = fmtDur(h.Delay)
		out.Adaptive = h.Adaptive
		out.WorstCase = fmtDur(satMul(h.Delay, int64(h.MaxAttempts-1)))
		out.WorstCaseNote = "until the last hedge is sent; hedges run at once, so this adds no waiting after a failure"
		out.Chain = chainNote(h.MaxAttempts, "hedges")
	}
	return out
}

// chainNote says what n attempts (or hedges) per layer make of a call
// chain A → B → C whose layers all retry alike.
func chainNote(n int, what string) string {
	// n is at most policy.MaxAttemptsCapLimit (1,000), so n³ fits an int64;
	// the figures are written out in full ("1,000,000", not "1e+06").
	pow := func(k int) string {
		v := int64(1)
		for i := 0; i < k; i++ {
			v *= int64(n)
		}
		return groupThousands(v)
	}
	return fmt.Sprintf("if the callers of this service retry too, %s multiply down the chain: a dependency that is down sees up to %s per user call at 2 layers, %s at 3; "+
		"install stagger's server side (package server: server.New()) on every server that is also a client: a layer whose calls gave up answers \"do not retry\" (gRFC A6's negative pushback), which stagger and grpc-go's built-in retry obey, so the dependency sees this layer's %d only; "+
		"with callers that ignore pushback (go-grpc-middleware), server.WithRetryAtOneLayer makes a request that arrives as a retry or hedge call down without retrying",
		what, pow(2), pow(3), n)
}

// groupThousands writes v >= 0 with a comma between groups of three digits.
func groupThousands(v int64) string {
	d := strconv.FormatInt(v, 10)
	var b strings.Builder
	for i, c := range d {
		if i > 0 && (len(d)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func methodWarnings(cfg *policy.Config, e policy.Entry, m checkMethod, files *protoregistry.Files) []string {
	var out []string
	where := fmt.Sprintf("methodConfig[%d]", e.Index)
	meth := e.Method
	if meth.Retry != nil && meth.Retry.Backoff.Jitter == policy.JitterDecorrelated {
		for _, p := range m.Pauses {
			if p.AtCap > 0 {
				out = append(out, fmt.Sprintf("%s.retryPolicy.jitter: decorrelated jitter bunches at maxBackoff (%s): %.0f%% of clients pause exactly that long before retry %d; FULL or EQUAL jitter spread past the cap",
					where, m.Backoff.Max, 100*p.AtCap, p.Retry))
				break
			}
		}
	}
	needsIdempotent := ""
	switch {
	case meth.Hedging != nil:
		needsIdempotent = "hedgingPolicy"
	case meth.Retry != nil && meth.Retry.PerAttemptRecvTimeout > 0:
		needsIdempotent = "retryPolicy.perAttemptRecvTimeout"
	}
	if needsIdempotent != "" && !entryIdempotent(e, files) {
		out = append(out, fmt.Sprintf("%s.%s: needs an idempotent method, and %s is not marked idempotent (set \"idempotent\": true or the proto option idempotency_level): stagger will not apply it",
			where, needsIdempotent, strings.Join(displayNames(e.Names), ", ")))
	}
	if meth.Hedging != nil {
		switch lb := cfg.LoadBalancingPolicy(); lb {
		case "", "pick_first":
			out = append(out, fmt.Sprintf("%s.hedgingPolicy: the load-balancing policy is pick_first, so every hedge goes to the same backend; use %s (package balancer/elsewhere: a call's hedges go to distinct backends) or round_robin for hedging to help", where, elsewhere.Name))
		case elsewhere.Name:
		default:
			out = append(out, fmt.Sprintf("%s.hedgingPolicy: the load-balancing policy %s may send two hedges of one call to the same backend; %s over it sends them to distinct ones", where, lb, elsewhere.Name))
		}
	}
	return out
}

// entryIdempotent: the file says so, or every name is a full method whose
// proto option says so (in files, or else in this binary's registry).
func entryIdempotent(e policy.Entry, files *protoregistry.Files) bool {
	if e.Method.Idempotent != nil {
		return *e.Method.Idempotent
	}
	if len(e.Names) == 0 {
		return false
	}
	for _, n := range e.Names {
		if n == "" || strings.HasSuffix(n, "/") {
			return false
		}
		if files == nil {
			if !policy.IdempotencyOf(n).Safe() {
				return false
			}
			continue
		}
		d, _ := files.FindDescriptorByName(protoreflect.FullName(strings.Replace(strings.TrimPrefix(n, "/"), "/", ".", 1)))
		md, ok := d.(protoreflect.MethodDescriptor)
		if !ok {
			return false
		}
		opts, _ := md.Options().(*descriptorpb.MethodOptions)
		if l := opts.GetIdempotencyLevel(); l != descriptorpb.MethodOptions_NO_SIDE_EFFECTS && l != descriptorpb.MethodOptions_IDEMPOTENT {
			return false
		}
	}
	return true
}

// packagelessNames warns, when names are not checked against protos, of
// services named without a package: gRPC names a service with its proto
// package, so "TestService" rarely matches anything.
func packagelessNames(cfg *policy.Config) []string {
	var out []string
	for _, e := range cfg.Entries() {
		for j, n := range e.Names {
			svc, _, _ := strings.Cut(strings.TrimPrefix(n, "/"), "/")
			if svc != "" && !strings.Contains(svc, ".") {
				out = append(out, fmt.Sprintf("methodConfig[%d].name[%d].service: %q has no package, but gRPC names a service with its proto package (\"pkg.v1.%s\"): unless the .proto file declares no package, this entry matches no call (-descriptor-set FILE checks names)",
					e.Index, j, svc, svc))
			}
		}
	}
	return out
}

// explainBreaker says what a circuit breaker and adaptive throttling with
// settings s do; nil when s is nil.
func explainBreaker(s *breaker.Settings) *checkBreaker {
	if s == nil {
		return nil
	}
	var set, how []string
	if !s.NoTrip {
		set = append(set, fmt.Sprintf("circuitBreaker: failureRatio %v, minimumThroughput %d, consecutiveFailures %d, samplingWindow %v, breakDuration %v, probeEvery %d, maxBreakDuration %v, scope %s",
			s.FailureRatio, s.MinimumThroughput, s.ConsecutiveFailures, s.SamplingWindow, s.BreakDuration, s.ProbeEvery, s.MaxBreakDuration, strings.ToUpper(s.Scope.String())))
		how = append(how, fmt.Sprintf("one breaker per %s; it opens when, over the last %v, at least %d first attempts were answered and %.0f%% or more of them failed (UNAVAILABLE, RESOURCE_EXHAUSTED, or cut off by perAttemptRecvTimeout), or, with fewer answers, when %d first attempts failed in a row (retries do not count: they repeat the calls that failed); "+
			"open, first attempts fail at once with UNAVAILABLE naming the breaker (reason breaker) and retries and hedges are refused (with a deferring budget a refused retry waits, within its deadline, for the breaker's probe); "+
			"after at least %v, and once the probe is one in %d first attempts asked since it opened (or after %v however few), one attempt goes as a probe (a new call's, or a waiting retry let go by the budget's gate): success closes it, failure opens it again with both doubled (the break up to %[8]v)",
			scopeWhat(s.Scope), s.SamplingWindow, s.MinimumThroughput, 100*s.FailureRatio, s.ConsecutiveFailures, s.BreakDuration, s.ProbeEvery, s.MaxBreakDuration))
	}
	if s.ThrottleK > 0 {
		set = append(set, fmt.Sprintf("adaptiveThrottling: k %v, window %v", s.ThrottleK, s.SamplingWindow))
		how = append(how, fmt.Sprintf("first attempts are rejected locally (reason throttled) with probability max(0, (requests - %v x accepts) / (requests + 1)) over the last %v, at most 0.8: the server sees at most about %vx the attempts it answers without failing, and at least a fifth of them and one a second, so that a recovered server gets its traffic back", s.ThrottleK, s.SamplingWindow, s.ThrottleK))
	}
	if !s.NoPacing {
		how = append(how, "waitForReady calls held while their connection fails to connect go, once it is ready, one at a time at the rate the server answered over the window (at least 1/s), not all at once")
	}
	return &checkBreaker{Settings: strings.Join(set, "; "), Explanation: strings.Join(how, ". ")}
}

func scopeWhat(s breaker.Scope) string {
	if s == breaker.ScopeTarget {
		return "target (every method of a connection target together)"
	}
	return "target and method"
}

// defers reports whether a budget of s defers the retries it refuses:
// whether budget.New puts it behind a Gate, a budget.Deferrer.
func defers(s budget.Settings) bool {
	b, err := budget.New(s)
	_, ok := b.(budget.Deferrer)
	return err == nil && ok
}

// explainDeferral says what a refused retry does under s (budget.Gate).
func explainDeferral(s budget.Settings) string {
	if s.Kind == budget.KindNone {
		return "no budget: nothing is refused (stagger.DialOptions installs the default budget, whose refused retries wait as a retryBudget's do)"
	}
	if !defers(s) {
		out := "a retry the budget refuses ends its call at once (reason budget)"
		if s.Kind == budget.KindThrottle {
			out += `, as gRFC A6 says; "defer": true makes refused retries wait for the server to come back instead`
		}
		return out
	}
	d := s.WithDefaults().Defer
	return fmt.Sprintf("a retry the budget refuses waits instead of failing (at most %d calls at once per backend, all its methods together, "+
		"and %d across the backends of the process's budget: each holds its goroutine and its request, a few KiB; "+
		"within the call's deadline, or %v for a call without one), "+
		"and goes, or its call ends with its last status (reason deferred), by the wait contract below (budget.Gate); "+
		`"defer": false ends refused calls at once`, d.MaxWaiting, waitingAll(s), d.MaxWait)
}

// explainPerBackend says what a budget of settings s keeps per backend
// (budget.Backends), its bounds and what they cost.
func explainPerBackend(s budget.Settings) string {
	bs, err := budget.NewBackends(s)
	if err != nil {
		return ""
	}
	l := bs.Limits()
	var out string
	if l.MethodsPerTarget > 0 {
		out = fmt.Sprintf("each backend (a target: the replicas behind one share it) has its own tokens, and each of its methods its own Gate over them, a KiB or two each; "+
			"at most %d targets and %d methods per target are kept", l.Targets, l.MethodsPerTarget)
	} else {
		out = fmt.Sprintf("each backend (a target: the replicas behind one share it) has its own tokens, a KiB or two; at most %d targets are kept", l.Targets)
	}
	out += fmt.Sprintf(" (past that, the least recently used are forgotten), and a key nobody called for %v is forgotten within a minute more: "+
		"its next call starts afresh; nothing a call waits on is forgotten", l.Idle)
	return out
}

// waitingAll is the bound of the calls waiting at once on all the
// backends of one budget of settings s (budget.Backends).
func waitingAll(s budget.Settings) int {
	bs, err := budget.NewBackends(s)
	if err != nil {
		return 0
	}
	return bs.Limits().Waiting
}

// gateRules is rules, the Gate's (gatetune), as the report lists them.
func gateRules(rules []gatetune.Rule) []checkRule {
	var out []checkRule
	for _, r := range rules {
		out = append(out, checkRule{Name: r.Name, Says: r.Says})
	}
	return out
}

// explainBudget works out the most attempts per call the budget lets
// through once a total outage has drained it (every attempt fails).
func explainBudget(s budget.Settings, maxAttempts int) *checkBudget {
	unbounded := float64(maxAttempts)
	switch s.Kind {
	case budget.KindThrottle:
		t := s.Throttle
		return &checkBudget{Kind: "throttle (retryThrottling, gRFC A6)",
			Settings:      fmt.Sprintf("maxTokens %v, tokenRatio %v", t.MaxTokens, t.TokenRatio),
			Amplification: 1, Burst: math.Ceil(t.MaxTokens / 2),
			Explanation: fmt.Sprintf("each failed attempt costs 1 token and retries stop at %v tokens or fewer: in an outage about %v retries go out, then only first attempts (1.0x); unthrottled the file allows %.0fx",
				t.MaxTokens/2, math.Ceil(t.MaxTokens/2), unbounded)}
	case budget.KindTokenBucket:
		t := s.WithDefaults().TokenBucket
		start := t.Capacity
		if t.Initial > 0 {
			start = t.Initial
		}
		burst := math.Floor(start / t.RetryCost)
		return &checkBudget{Kind: "token bucket (retryBudget.tokenBucket)",
			Settings:      fmt.Sprintf("capacity %v, retryCost %v, timeoutRetryCost %v, successReward %v", t.Capacity, t.RetryCost, t.TimeoutRetryCost, t.SuccessReward),
			Amplification: 1, Burst: burst,
			Explanation: fmt.Sprintf("in an outage the bucket (%v tokens) pays for %v, then refills only from first-try successes: 1.0x after that; unthrottled the file allows %.0fx",
				start, retriesWord(burst), unbounded)}
	case budget.KindRatio:
		r := s.WithDefaults().Ratio
		amp := math.Min(1+r.Percent/100, unbounded)
		return &checkBudget{Kind: "ratio (retryBudget.ratio)",
			Settings:      fmt.Sprintf("percent %v, window %v, minRetriesPerSecond %v", r.Percent, r.Window, r.MinRetriesPerSecond),
			Amplification: amp,
			Explanation: fmt.Sprintf("retries stay under %v%% of requests over %v, plus a floor of %v retries/s: at most %.2fx the offered load (more only when traffic is below %v requests/s)",
				r.Percent, r.Window, r.MinRetriesPerSecond, amp, r.MinRetriesPerSecond*100/r.Percent)}
	}
	return &checkBudget{Kind: "none", Settings: "no retryThrottling or retryBudget",
		Amplification: unbounded,
		Explanation:   fmt.Sprintf("unlimited: in an outage every call makes up to %.0f attempts (%.0fx load); stagger.DialOptions installs stagger's default budget, the bare interceptors do not", unbounded, unbounded)}
}

// retriesWord is "1 retry", "2 retries".
func retriesWord(n float64) string {
	if n == 1 {
		return "1 retry"
	}
	return fmt.Sprintf("%v retries", n)
}
