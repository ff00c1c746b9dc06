package policy

import (
	"math"
	"strconv"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

func FuzzParsePushback(f *testing.F) {
	for _, s := range []string{"0", "100", "-1", "+5", "-0", "2147483647", "2147483648", "-2147483648", "", " 1", "1.5", "0x10", "1_0", "abc", "\uff15"} {
		f.Add(s, "")
	}
	f.Add("1", "2")
	f.Fuzz(func(t *testing.T, v, second string) {
		md := metadata.MD{PushbackKey: {v}}
		if second != "" {
			md[PushbackKey] = append(md[PushbackKey], second)
		}
		d, res := ParsePushback(md)
		if d < 0 {
			t.Fatalf("ParsePushback(%q) = %v: negative", md[PushbackKey], d)
		}
		if res != PushbackValid && d != 0 {
			t.Fatalf("ParsePushback(%q) = %v, %v: a pause with no valid pushback", md[PushbackKey], d, res)
		}
		if second != "" {
			if res != PushbackInvalid {
				t.Fatalf("repeated pushback %q: %v, want invalid", md[PushbackKey], res)
			}
			return
		}
		// The reference: grpc-go's strconv.Atoi, not negative, within int32.
		n, err := strconv.Atoi(v)
		valid := err == nil && n >= 0 && n <= math.MaxInt32
		if valid != (res == PushbackValid) || (valid && d != time.Duration(n)*time.Millisecond) {
			t.Fatalf("ParsePushback(%q) = %v, %v; reference valid=%v n=%d", v, d, res, valid, n)
		}
	})
}

func FuzzDelay(f *testing.F) {
	f.Add(int64(100*time.Millisecond), int64(time.Second), 2.0, 0, 1, int64(0), 0.5)
	f.Add(int64(1), int64(math.MaxInt64), 1e308, 3, math.MaxInt, int64(math.MaxInt64), 0.999)
	f.Add(int64(-5), int64(-1), -2.0, 9, -3, int64(-7), -1.0)
	f.Fuzz(func(t *testing.T, initial, max int64, mult float64, jitter, retry int, prev int64, u float64) {
		b := Backoff{Initial: time.Duration(initial), Max: time.Duration(max), Multiplier: mult, Jitter: Jitter(jitter)}
		d := b.Delay(retry, time.Duration(prev), u)
		if d < 0 {
			t.Fatalf("%+v.Delay(%d, %d, %v) = %v: negative", b, retry, prev, u, d)
		}
		if b.Validate() != nil {
			return
		}
		// A valid backoff's pause is at most 1.2×Max (proportional jitter
		// after the cap), saturating at the largest Duration.
		limit := 1.2 * float64(b.Max)
		if b.Jitter == JitterDecorrelated {
			limit = float64(b.Max)
		}
		if float64(d) > limit+1 && d != math.MaxInt64 {
			t.Fatalf("%+v.Delay(%d, %d, %v) = %v above %v", b, retry, prev, u, d, time.Duration(limit))
		}
	})
}

// FuzzDecide: Decide with hostile metadata (any status code, up to 2^32-1;
// any pushback trailer, repeated or not; RetryInfo details of any bytes,
// one or two) never panics, never pauses a negative time, never retries
// past maxAttempts, a success, the caller's end or a committed attempt,
// and never pauses past the pushback ceiling, the backoff's bound, or the
// deadline.
func FuzzDecide(f *testing.F) {
	// google.rpc.RetryInfo{retry_delay: {seconds: 1}} and one whose
	// seconds are negative.
	oneSecond := []byte{0x0a, 0x02, 0x08, 0x01}
	negative := []byte{0x0a, 0x0b, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	f.Add(uint32(codes.Unavailable), "100", "", oneSecond, uint8(0), 1, 1, int64(0), int64(time.Second), 0.5)
	f.Add(uint32(codes.ResourceExhausted), "", "", oneSecond, uint8(1), 2, 1, int64(0), int64(0), 0.0)
	f.Add(uint32(codes.Unavailable), "-1", "5", negative, uint8(2), 3, 2, int64(time.Millisecond), int64(-1), 0.999)
	f.Add(uint32(math.MaxUint32), "2147483647", "", []byte{0xff, 0xff}, uint8(7), math.MaxInt, math.MinInt, int64(math.MaxInt64), int64(math.MaxInt64), 1.0)
	f.Add(uint32(codes.DeadlineExceeded), "1_0", "", []byte(nil), uint8(16), 0, 0, int64(math.MinInt64), int64(time.Hour), -1.0)
	policies := []Policy{
		{MaxAttempts: 3, Backoff: Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}},
		{MaxAttempts: 5, Backoff: Backoff{Initial: time.Millisecond, Max: time.Hour, Multiplier: 10, Jitter: JitterDecorrelated},
			RetryableCodes: NewCodeSet(codes.Unavailable, codes.Internal, codes.DeadlineExceeded), PushbackCeiling: time.Second},
		{MaxAttempts: 2, Backoff: Backoff{Initial: math.MaxInt64, Max: math.MaxInt64, Multiplier: 1e308, Jitter: JitterFull}},
	}
	f.Fuzz(func(t *testing.T, code uint32, pushback, pushback2 string, retryInfo []byte, flags uint8, number, retry int, prev, remaining int64, u float64) {
		p := &policies[int(flags>>5)%len(policies)]
		sp := &spb.Status{Code: int32(code), Message: "hostile"}
		if retryInfo != nil {
			for range 1 + int(flags>>4&1) {
				sp.Details = append(sp.Details, &anypb.Any{TypeUrl: "type.googleapis.com/google.rpc.RetryInfo", Value: retryInfo})
			}
		}
		a := &Attempt{Number: number, Err: status.FromProto(sp).Err(), Trailer: metadata.MD{},
			Committed: flags&1 != 0, TimedOut: flags&2 != 0, CallerDone: flags&4 != 0, Ambiguous: flags&8 != 0,
			Retry: retry, Prev: time.Duration(prev), Remaining: time.Duration(remaining), HasDeadline: remaining >= 0, U: u}
		if pushback != "" {
			a.Trailer[PushbackKey] = append(a.Trailer[PushbackKey], pushback)
			if pushback2 != "" {
				a.Trailer[PushbackKey] = append(a.Trailer[PushbackKey], pushback2)
			}
		}
		v := p.Decide(a)
		if v.Pause < 0 {
			t.Fatalf("Decide(%+v) = %+v: a negative pause", a, v)
		}
		if !v.Retry {
			if v.Pause != 0 || v.Pushback {
				t.Fatalf("Decide(%+v) = %+v: a pause without a retry", a, v)
			}
			return
		}
		switch {
		case a.Err == nil, a.CallerDone, a.Committed:
			t.Fatalf("Decide(%+v) = %+v: retries a success, the caller's end or a committed attempt", a, v)
		case a.Number >= p.MaxAttempts:
			t.Fatalf("Decide(%+v) = %+v: retries past maxAttempts %d", a, v, p.MaxAttempts)
		case a.HasDeadline && v.Pause >= a.Remaining:
			t.Fatalf("Decide(%+v) = %+v: pauses past the deadline", a, v)
		}
		ceiling := p.PushbackCeiling
		if ceiling <= 0 {
			ceiling = DefaultPushbackCeiling
		}
		limit := time.Duration(math.MaxInt64)
		if float64(p.Backoff.Max)*1.2 < float64(math.MaxInt64) {
			limit = time.Duration(float64(p.Backoff.Max) * 1.2)
		}
		if v.Pushback && v.Pause > ceiling || !v.Pushback && v.Pause > limit {
			t.Fatalf("Decide(%+v) = %+v: past the ceiling %v or the backoff's bound %v", a, v, ceiling, limit)
		}
	})
}
