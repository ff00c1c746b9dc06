package policy

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stagger-go/stagger/budget"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

const ms = time.Millisecond

func TestParsePushback(t *testing.T) {
	// grpc-go (stream.go, shouldRetry): exactly one value, strconv.Atoi, not
	// negative; two or more values stop. gRFC A6 makes the value an int32.
	tests := []struct {
		name string
		md   metadata.MD
		want time.Duration
		res  PushbackResult
	}{
		{"no trailer", nil, 0, PushbackNone},
		{"other keys", metadata.Pairs("x", "1"), 0, PushbackNone},
		{"key with no value", metadata.MD{PushbackKey: {}}, 0, PushbackNone},
		{"zero", metadata.Pairs(PushbackKey, "0"), 0, PushbackValid},
		{"minus zero", metadata.Pairs(PushbackKey, "-0"), 0, PushbackValid},
		{"plus sign", metadata.Pairs(PushbackKey, "+5"), 5 * ms, PushbackValid},
		{"100ms", metadata.Pairs(PushbackKey, "100"), 100 * ms, PushbackValid},
		{"leading zeros", metadata.Pairs(PushbackKey, "007"), 7 * ms, PushbackValid},
		{"int32 max", metadata.Pairs(PushbackKey, "2147483647"), 2147483647 * ms, PushbackValid},
		{"above int32", metadata.Pairs(PushbackKey, "2147483648"), 0, PushbackInvalid},
		{"huge", metadata.Pairs(PushbackKey, "99999999999999999999999"), 0, PushbackInvalid},
		{"negative", metadata.Pairs(PushbackKey, "-1"), 0, PushbackInvalid},
		{"int32 min", metadata.Pairs(PushbackKey, "-2147483648"), 0, PushbackInvalid},
		{"empty", metadata.Pairs(PushbackKey, ""), 0, PushbackInvalid},
		{"letters", metadata.Pairs(PushbackKey, "abc"), 0, PushbackInvalid},
		{"leading space", metadata.Pairs(PushbackKey, " 5"), 0, PushbackInvalid},
		{"trailing space", metadata.Pairs(PushbackKey, "5 "), 0, PushbackInvalid},
		{"fraction", metadata.Pairs(PushbackKey, "1.5"), 0, PushbackInvalid},
		{"hex", metadata.Pairs(PushbackKey, "0x10"), 0, PushbackInvalid},
		{"underscore", metadata.Pairs(PushbackKey, "1_000"), 0, PushbackInvalid},
		{"unit", metadata.Pairs(PushbackKey, "5ms"), 0, PushbackInvalid},
		{"full-width digit", metadata.Pairs(PushbackKey, "\uff15"), 0, PushbackInvalid},
		{"repeated", metadata.Pairs(PushbackKey, "1", PushbackKey, "2"), 0, PushbackInvalid},
		{"repeated same", metadata.Pairs(PushbackKey, "1", PushbackKey, "1"), 0, PushbackInvalid},
		{"upper-case key, as metadata.Pairs lower-cases", metadata.Pairs("Grpc-Retry-Pushback-Ms", "3"), 3 * ms, PushbackValid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, res := ParsePushback(tt.md)
			if d != tt.want || res != tt.res {
				t.Errorf("ParsePushback(%v) = %v, %v; want %v, %v", tt.md, d, res, tt.want, tt.res)
			}
		})
	}
}

// decideRetryInfo returns an error of code c carrying the given details.
func decideWithDetails(c codes.Code, details ...*errdetails.RetryInfo) error {
	st := status.New(c, "with details")
	for _, d := range details {
		var err error
		if st, err = st.WithDetails(d); err != nil {
			panic(err)
		}
	}
	return st.Err()
}

func decideRetryInfo(d time.Duration) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(d)}
}

func TestRetryInfoDelay(t *testing.T) {
	tests := []struct {
		name string
		st   *status.Status
		want time.Duration
		res  PushbackResult
	}{
		{"nil status", nil, 0, PushbackNone},
		{"no details", status.New(codes.Unavailable, "x"), 0, PushbackNone},
		{"2s", status.Convert(decideWithDetails(codes.Unavailable, decideRetryInfo(2*time.Second))), 2 * time.Second, PushbackValid},
		{"zero", status.Convert(decideWithDetails(codes.Unavailable, decideRetryInfo(0))), 0, PushbackValid},
		{"negative", status.Convert(decideWithDetails(codes.Unavailable, decideRetryInfo(-time.Second))), 0, PushbackInvalid},
		{"malformed duration", status.Convert(decideWithDetails(codes.Unavailable, &errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: 1, Nanos: -1}})), 0, PushbackInvalid},
		{"no delay", status.Convert(decideWithDetails(codes.Unavailable, &errdetails.RetryInfo{})), 0, PushbackNone},
		{"two", status.Convert(decideWithDetails(codes.Unavailable, decideRetryInfo(time.Second), decideRetryInfo(time.Second))), 0, PushbackInvalid},
		{"other detail only", decideOtherDetail(), 0, PushbackNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, res := RetryInfoDelay(tt.st)
			if d != tt.want || res != tt.res {
				t.Errorf("RetryInfoDelay = %v, %v; want %v, %v", d, res, tt.want, tt.res)
			}
		})
	}
}

func decideOtherDetail() *status.Status {
	st, err := status.New(codes.Unavailable, "x").WithDetails(&errdetails.ErrorInfo{Reason: "r"})
	if err != nil {
		panic(err)
	}
	return st
}

func TestIsLocalResourceExhausted(t *testing.T) {
	tests := []struct {
		msg  string
		c    codes.Code
		want bool
	}{
		// grpc-go v1.64's own messages (rpc_util.go, stream.go, server.go).
		{"trying to send message larger than max (5 vs. 4)", codes.ResourceExhausted, true},
		{"grpc: trying to send message larger than max (5 vs. 4)", codes.ResourceExhausted, true},
		{"grpc: received message larger than max (5 vs. 4)", codes.ResourceExhausted, true},
		{"grpc: received message larger than max length allowed on current machine (5 vs. 4)", codes.ResourceExhausted, true},
		{"grpc: received message after decompression larger than max (5 vs. 4)", codes.ResourceExhausted, true},
		{"grpc: message too large (5 bytes)", codes.ResourceExhausted, true},
		// A server out of quota.
		{"quota exceeded", codes.ResourceExhausted, false},
		{"stream terminated by RST_STREAM with error code: ENHANCE_YOUR_CALM", codes.ResourceExhausted, false},
		{"grpc: received message larger than max (5 vs. 4)", codes.Unavailable, false},
	}
	for _, tt := range tests {
		if got := IsLocalResourceExhausted(status.New(tt.c, tt.msg)); got != tt.want {
			t.Errorf("IsLocalResourceExhausted(%v, %q) = %v, want %v", tt.c, tt.msg, got, tt.want)
		}
	}
	if IsLocalResourceExhausted(nil) {
		t.Error("IsLocalResourceExhausted(nil) = true")
	}
}

// decideNilStatus is an error whose GRPCStatus is nil; status.FromError
// calls it Unknown.
type decideNilStatus struct{}

func (decideNilStatus) Error() string              { return "nil status" }
func (decideNilStatus) GRPCStatus() *status.Status { return nil }

func TestDecide(t *testing.T) {
	var (
		unavailable = status.Error(codes.Unavailable, "down")
		internal    = status.Error(codes.Internal, "bug")
		exhausted   = status.Error(codes.ResourceExhausted, "quota")
		deadline    = status.Error(codes.DeadlineExceeded, "slow")
		localSend   = status.Error(codes.ResourceExhausted, "trying to send message larger than max (5 vs. 4)")
		localRecv   = status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5 vs. 4)")
		plain       = errors.New("not a status")
		wrapped     = fmt.Errorf("wrapped: %w", unavailable)
	)
	listed := Policy{
		MaxAttempts:    4,
		Backoff:        Backoff{Initial: 100 * ms, Max: time.Second, Multiplier: 2, Jitter: JitterNone},
		RetryableCodes: NewCodeSet(codes.Unavailable, codes.ResourceExhausted),
	}
	onlyUnavailable := listed
	onlyUnavailable.RetryableCodes = NewCodeSet(codes.Unavailable)
	defaults := listed
	defaults.RetryableCodes = 0
	ceiling1s := listed
	ceiling1s.PushbackCeiling = time.Second
	decorrelated := listed
	decorrelated.Backoff.Jitter = JitterDecorrelated
	retryInternal := listed
	retryInternal.Predicate = func(err error) (bool, bool) {
		if status.Code(err) == codes.Internal {
			return true, true
		}
		return false, false
	}
	refuseAll := listed
	refuseAll.Predicate = func(error) (bool, bool) { return false, true }
	pushback := func(v ...string) metadata.MD { return metadata.MD{PushbackKey: v} }
	withInfo := func(c codes.Code, d time.Duration) error { return decideWithDetails(c, decideRetryInfo(d)) }

	retry := func(d time.Duration) Verdict { return Verdict{Retry: true, Pause: d, Record: budget.Failure} }
	pushed := func(d time.Duration) Verdict {
		return Verdict{Retry: true, Pause: d, Pushback: true, Record: budget.Failure}
	}
	stop := func(r Reason, o budget.Outcome) Verdict { return Verdict{Reason: r, Record: o} }

	tests := []struct {
		name string
		p    Policy
		a    Attempt // Number 1, Retry 1, Prev Initial, U 0.5 unless set
		want Verdict
	}{
		// 1. Success, whatever else is true.
		{"success", listed, Attempt{}, stop(ReasonSuccess, budget.Success)},
		{"success though the caller is done", listed, Attempt{CallerDone: true, Number: 9}, stop(ReasonSuccess, budget.Success)},

		// 2. The caller's own end comes before everything else.
		{"caller done", listed, Attempt{Err: unavailable, CallerDone: true}, stop(ReasonCaller, budget.Other)},
		{"caller done before invalid pushback", listed, Attempt{Err: unavailable, CallerDone: true, Trailer: pushback("-1")}, stop(ReasonCaller, budget.Other)},
		{"caller done before timed out", listed, Attempt{Err: deadline, CallerDone: true, TimedOut: true}, stop(ReasonCaller, budget.Other)},
		{"caller done, predicate cannot retry", retryInternal, Attempt{Err: internal, CallerDone: true}, stop(ReasonCaller, budget.Other)},

		// 3. Committed.
		{"committed", listed, Attempt{Err: unavailable, Committed: true}, stop(ReasonCommitted, budget.Other)},
		{"committed before invalid pushback", listed, Attempt{Err: unavailable, Committed: true, Trailer: pushback("x")}, stop(ReasonCommitted, budget.Other)},
		{"committed, predicate cannot retry", retryInternal, Attempt{Err: internal, Committed: true}, stop(ReasonCommitted, budget.Other)},

		// 4. Invalid pushback stops and counts, even before the code (grpc-go).
		{"pushback negative", listed, Attempt{Err: unavailable, Trailer: pushback("-1")}, stop(ReasonPushback, budget.Failure)},
		{"pushback malformed", listed, Attempt{Err: unavailable, Trailer: pushback("soon")}, stop(ReasonPushback, budget.Failure)},
		{"pushback repeated", listed, Attempt{Err: unavailable, Trailer: pushback("10", "10")}, stop(ReasonPushback, budget.Failure)},
		{"pushback out of int32", listed, Attempt{Err: unavailable, Trailer: pushback("4294967296")}, stop(ReasonPushback, budget.Failure)},
		{"pushback invalid on a code not retried still counts", listed, Attempt{Err: internal, Trailer: pushback("-5")}, stop(ReasonPushback, budget.Failure)},
		{"pushback invalid on the last attempt", listed, Attempt{Err: unavailable, Number: 4, Trailer: pushback("x")}, stop(ReasonPushback, budget.Failure)},
		{"pushback invalid beats a timed-out attempt", listed, Attempt{Err: deadline, TimedOut: true, Trailer: pushback("x")}, stop(ReasonPushback, budget.Failure)},
		{"pushback invalid beats the predicate", retryInternal, Attempt{Err: internal, Trailer: pushback("x")}, stop(ReasonPushback, budget.Failure)},

		// 5. Ambiguous: a failure the codes would retry is not; one they
		// would not stays "not retryable"; the caller and commit come first.
		{"ambiguous", listed, Attempt{Err: unavailable, Ambiguous: true}, stop(ReasonAmbiguous, budget.Failure)},
		{"ambiguous, code not retried", listed, Attempt{Err: internal, Ambiguous: true}, stop(ReasonNotRetryable, budget.Other)},
		{"ambiguous, predicate retries", retryInternal, Attempt{Err: internal, Ambiguous: true}, stop(ReasonAmbiguous, budget.Failure)},
		{"ambiguous, caller done", listed, Attempt{Err: unavailable, Ambiguous: true, CallerDone: true}, stop(ReasonCaller, budget.Other)},
		{"ambiguous before attempts", listed, Attempt{Err: unavailable, Ambiguous: true, Number: 4}, stop(ReasonAmbiguous, budget.Failure)},
		{"ambiguous, invalid pushback first", listed, Attempt{Err: unavailable, Ambiguous: true, Trailer: pushback("x")}, stop(ReasonPushback, budget.Failure)},
		{"ambiguous, valid pushback does not retry", listed, Attempt{Err: unavailable, Ambiguous: true, Trailer: pushback("10")}, stop(ReasonAmbiguous, budget.Failure)},

		// 6/7. Valid pushback: exactly that pause, the sequence restarts.
		{"pushback valid", listed, Attempt{Err: unavailable, Trailer: pushback("250")}, pushed(250 * ms)},
		{"pushback zero", listed, Attempt{Err: unavailable, Trailer: pushback("0")}, pushed(0)},
		{"pushback replaces a later backoff", listed, Attempt{Err: unavailable, Number: 3, Retry: 3, Prev: 200 * ms, Trailer: pushback("7")}, pushed(7 * ms)},
		{"pushback valid does not make a code retryable", listed, Attempt{Err: internal, Trailer: pushback("250")}, stop(ReasonNotRetryable, budget.Other)},
		{"pushback valid on the last attempt", listed, Attempt{Err: unavailable, Number: 4, Trailer: pushback("250")}, stop(ReasonAttempts, budget.Failure)},
		{"pushback at the default ceiling", listed, Attempt{Err: unavailable, Trailer: pushback("300000")}, pushed(5 * time.Minute)},
		{"pushback above the default ceiling", listed, Attempt{Err: unavailable, Trailer: pushback("300001")}, stop(ReasonPushback, budget.Failure)},
		{"pushback int32 max above the ceiling", listed, Attempt{Err: unavailable, Trailer: pushback("2147483647")}, stop(ReasonPushback, budget.Failure)},
		{"pushback at a set ceiling", ceiling1s, Attempt{Err: unavailable, Trailer: pushback("1000")}, pushed(time.Second)},
		{"pushback above a set ceiling", ceiling1s, Attempt{Err: unavailable, Trailer: pushback("1001")}, stop(ReasonPushback, budget.Failure)},

		// RetryInfo: used only when there is no trailer.
		{"retry info", listed, Attempt{Err: withInfo(codes.Unavailable, 2*time.Second)}, pushed(2 * time.Second)},
		{"retry info, trailer wins", listed, Attempt{Err: withInfo(codes.Unavailable, 2*time.Second), Trailer: pushback("10")}, pushed(10 * ms)},
		{"retry info, invalid trailer stops", listed, Attempt{Err: withInfo(codes.Unavailable, 2*time.Second), Trailer: pushback("x")}, stop(ReasonPushback, budget.Failure)},
		{"retry info negative", listed, Attempt{Err: withInfo(codes.Unavailable, -time.Second)}, stop(ReasonPushback, budget.Failure)},
		{"retry info twice", listed, Attempt{Err: decideWithDetails(codes.Unavailable, decideRetryInfo(ms), decideRetryInfo(ms))}, stop(ReasonPushback, budget.Failure)},
		{"retry info without delay: backoff", listed, Attempt{Err: decideWithDetails(codes.Unavailable, &errdetails.RetryInfo{})}, retry(100 * ms)},
		{"retry info on a code not retried", listed, Attempt{Err: withInfo(codes.Internal, time.Second)}, stop(ReasonNotRetryable, budget.Other)},
		{"retry info negative on a code not retried", listed, Attempt{Err: withInfo(codes.Internal, -time.Second)}, stop(ReasonNotRetryable, budget.Other)},
		{"retry info above the ceiling", ceiling1s, Attempt{Err: withInfo(codes.Unavailable, 2*time.Second)}, stop(ReasonPushback, budget.Failure)},
		{"retry info on the last attempt", listed, Attempt{Err: withInfo(codes.Unavailable, time.Second), Number: 4}, stop(ReasonAttempts, budget.Failure)},

		// 5. Codes as listed.
		{"listed code", listed, Attempt{Err: unavailable}, retry(100 * ms)},
		{"listed resource exhausted", listed, Attempt{Err: exhausted}, retry(100 * ms)},
		{"unlisted code", listed, Attempt{Err: internal}, stop(ReasonNotRetryable, budget.Other)},
		{"unlisted resource exhausted", onlyUnavailable, Attempt{Err: exhausted}, stop(ReasonNotRetryable, budget.Other)},
		{"unlisted deadline exceeded", listed, Attempt{Err: deadline}, stop(ReasonNotRetryable, budget.Other)},
		{"local send limit never retried though listed", listed, Attempt{Err: localSend}, stop(ReasonNotRetryable, budget.Other)},
		{"local receive limit never retried though listed", listed, Attempt{Err: localRecv}, stop(ReasonNotRetryable, budget.Other)},
		{"error without a status is Unknown", listed, Attempt{Err: plain}, stop(ReasonNotRetryable, budget.Other)},
		{"nil GRPCStatus is Unknown", defaults, Attempt{Err: decideNilStatus{}}, stop(ReasonNotRetryable, budget.Other)},
		{"wrapped status", listed, Attempt{Err: wrapped}, retry(100 * ms)},

		// 5. stagger's default decisions.
		{"default unavailable", defaults, Attempt{Err: unavailable}, retry(100 * ms)},
		{"default server resource exhausted", defaults, Attempt{Err: exhausted}, retry(100 * ms)},
		{"default local resource exhausted", defaults, Attempt{Err: localSend}, stop(ReasonNotRetryable, budget.Other)},
		{"default deadline exceeded not ours", defaults, Attempt{Err: deadline}, stop(ReasonNotRetryable, budget.Other)},
		{"default internal", defaults, Attempt{Err: internal}, stop(ReasonNotRetryable, budget.Other)},
		{"default aborted", defaults, Attempt{Err: status.Error(codes.Aborted, "")}, stop(ReasonNotRetryable, budget.Other)},

		// 5. Cut off by stagger's own timer: retried whatever the codes.
		{"timed out, default", defaults, Attempt{Err: deadline, TimedOut: true}, retry(100 * ms)},
		{"timed out, code not listed", onlyUnavailable, Attempt{Err: deadline, TimedOut: true}, retry(100 * ms)},
		{"timed out, any code", listed, Attempt{Err: internal, TimedOut: true}, retry(100 * ms)},
		{"timed out, predicate not asked", refuseAll, Attempt{Err: deadline, TimedOut: true}, retry(100 * ms)},
		{"timed out on the last attempt", listed, Attempt{Err: deadline, TimedOut: true, Number: 4}, stop(ReasonAttempts, budget.Failure)},

		// 5. The predicate.
		{"predicate retries what codes refuse", retryInternal, Attempt{Err: internal}, retry(100 * ms)},
		{"predicate undecided: codes", retryInternal, Attempt{Err: unavailable}, retry(100 * ms)},
		{"predicate undecided: codes refuse", retryInternal, Attempt{Err: deadline}, stop(ReasonNotRetryable, budget.Other)},
		{"predicate refuses what codes retry", refuseAll, Attempt{Err: unavailable}, stop(ReasonNotRetryable, budget.Other)},
		{"predicate cannot pass maxAttempts", retryInternal, Attempt{Err: internal, Number: 4}, stop(ReasonAttempts, budget.Failure)},
		{"predicate cannot retry a local limit", Policy{MaxAttempts: 4, Backoff: listed.Backoff, Predicate: func(error) (bool, bool) { return true, true }}, Attempt{Err: localSend}, stop(ReasonNotRetryable, budget.Other)},

		// 6. maxAttempts (counting the first attempt).
		{"attempt 3 of 4", listed, Attempt{Err: unavailable, Number: 3, Retry: 3, Prev: 200 * ms}, retry(400 * ms)},
		{"attempt 4 of 4", listed, Attempt{Err: unavailable, Number: 4, Retry: 4}, stop(ReasonAttempts, budget.Failure)},
		{"beyond the last attempt", listed, Attempt{Err: unavailable, Number: 7}, stop(ReasonAttempts, budget.Failure)},
		{"maxAttempts 1 never retries", Policy{MaxAttempts: 1, Backoff: listed.Backoff}, Attempt{Err: unavailable}, stop(ReasonAttempts, budget.Failure)},
		{"maxAttempts 0 never retries", Policy{Backoff: listed.Backoff}, Attempt{Err: unavailable}, stop(ReasonAttempts, budget.Failure)},

		// 7. The backoff sequence.
		{"retry 0 is retry 1", listed, Attempt{Err: unavailable, Retry: -1}, retry(100 * ms)},
		{"retry 3", listed, Attempt{Err: unavailable, Number: 2, Retry: 3}, retry(400 * ms)},
		{"capped", listed, Attempt{Err: unavailable, Number: 2, Retry: 30}, retry(time.Second)},
		{"decorrelated uses prev", decorrelated, Attempt{Err: unavailable, Number: 2, Retry: 2, Prev: 200 * ms}, retry(350 * ms)},
		{"decorrelated first retry ignores prev", decorrelated, Attempt{Err: unavailable, Retry: 1, Prev: 900 * ms}, retry(200 * ms)},
		{"decorrelated prev 0 is Initial", decorrelated, Attempt{Err: unavailable, Number: 2, Retry: 2, Prev: -1}, retry(200 * ms)},

		// 8. The caller's deadline.
		{"pause ends before the deadline", listed, Attempt{Err: unavailable, HasDeadline: true, Remaining: 101 * ms}, retry(100 * ms)},
		{"pause ends at the deadline", listed, Attempt{Err: unavailable, HasDeadline: true, Remaining: 100 * ms}, stop(ReasonDeadline, budget.Failure)},
		{"pause ends after the deadline", listed, Attempt{Err: unavailable, HasDeadline: true, Remaining: 50 * ms}, stop(ReasonDeadline, budget.Failure)},
		{"deadline passed", listed, Attempt{Err: unavailable, HasDeadline: true, Remaining: -ms}, stop(ReasonDeadline, budget.Failure)},
		{"remaining ignored without a deadline", listed, Attempt{Err: unavailable, Remaining: 0}, retry(100 * ms)},
		{"pushback past the deadline", listed, Attempt{Err: unavailable, HasDeadline: true, Remaining: 200 * ms, Trailer: pushback("250")}, stop(ReasonDeadline, budget.Failure)},
		{"pushback before the deadline", listed, Attempt{Err: unavailable, HasDeadline: true, Remaining: 300 * ms, Trailer: pushback("250")}, pushed(250 * ms)},
		{"no attempts left before deadline", listed, Attempt{Err: unavailable, Number: 4, HasDeadline: true, Remaining: ms}, stop(ReasonAttempts, budget.Failure)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.a
			if a.Number == 0 {
				a.Number = 1
			}
			if a.Retry == 0 {
				a.Retry = 1
			}
			if a.Prev == 0 {
				a.Prev = tt.p.Backoff.Initial
			}
			if a.U == 0 {
				a.U = 0.5
			}
			if got := tt.p.Decide(&a); got != tt.want {
				t.Errorf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecidePredicateSeesTheError(t *testing.T) {
	want := fmt.Errorf("app: %w", status.Error(codes.Internal, "x"))
	var got error
	p := Policy{MaxAttempts: 2, Backoff: validBackoff, Predicate: func(err error) (bool, bool) { got = err; return false, false }}
	p.Decide(&Attempt{Number: 1, Err: want})
	if got != want {
		t.Errorf("predicate got %v, want the attempt's own error", got)
	}
}

// TestDecideBackoffSequence drives Decide as an interceptor does, through a
// pushback: the retry after a pushback is retry 1 of a new sequence (gRFC A6:
// n counts from the last pushback).
func TestDecideBackoffSequence(t *testing.T) {
	p := Policy{
		MaxAttempts:    10,
		Backoff:        Backoff{Initial: 100 * ms, Max: 10 * time.Second, Multiplier: 2, Jitter: JitterNone},
		RetryableCodes: NewCodeSet(codes.Unavailable),
	}
	trailers := []metadata.MD{nil, nil, metadata.Pairs(PushbackKey, "50"), nil, nil, nil}
	want := []time.Duration{100 * ms, 200 * ms, 50 * ms, 100 * ms, 200 * ms, 400 * ms}
	retry, prev := 1, p.Backoff.Initial
	for i, md := range trailers {
		v := p.Decide(&Attempt{Number: i + 1, Err: status.Error(codes.Unavailable, ""), Trailer: md, Retry: retry, Prev: prev, U: 0.5})
		if !v.Retry || v.Pause != want[i] {
			t.Fatalf("attempt %d: %+v, want a retry after %v", i+1, v, want[i])
		}
		retry, prev = p.NextBackoff(&Attempt{Retry: retry, Prev: prev}, v)
	}
}

func TestNextBackoff(t *testing.T) {
	p := &Policy{Backoff: validBackoff}
	tests := []struct {
		name  string
		a     Attempt
		v     Verdict
		retry int
		prev  time.Duration
	}{
		{"advances", Attempt{Retry: 2}, Verdict{Retry: true, Pause: 300 * ms}, 3, 300 * ms},
		{"retry 0 counts as 1", Attempt{}, Verdict{Retry: true, Pause: 90 * ms}, 2, 90 * ms},
		{"restarts after pushback", Attempt{Retry: 4}, Verdict{Retry: true, Pause: 5 * time.Second, Pushback: true}, 1, validBackoff.Initial},
		{"saturates", Attempt{Retry: math.MaxInt}, Verdict{Retry: true, Pause: time.Second}, math.MaxInt, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, prev := p.NextBackoff(&tt.a, tt.v)
			if r != tt.retry || prev != tt.prev {
				t.Errorf("NextBackoff = %d, %v; want %d, %v", r, prev, tt.retry, tt.prev)
			}
		})
	}
}

// TestDecideConcurrent shares one Policy between goroutines, as the
// interceptors do; run with -race.
func TestDecideConcurrent(t *testing.T) {
	p := &Policy{MaxAttempts: 5, Backoff: validBackoff}
	err := status.Error(codes.Unavailable, "down")
	done := make(chan bool)
	for w := 0; w < 8; w++ {
		go func() {
			ok := true
			r := NewSeededRandom(uint64(w))
			for i := 0; i < 500; i++ {
				v := p.Decide(&Attempt{Number: 1, Err: err, Retry: 1, U: r()})
				ok = ok && v.Retry && v.Pause >= 80*ms && v.Pause <= 120*ms
			}
			done <- ok
		}()
	}
	for w := 0; w < 8; w++ {
		if !<-done {
			t.Error("a goroutine saw a wrong verdict")
		}
	}
}
