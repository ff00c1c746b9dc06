package policy

import (
	"math"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
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
