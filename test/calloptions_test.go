//go:build go1.25

package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// The per-call options of issue 18 (WithCodes, WithMaxAttempts under the
// cap) and the logger's fields, over real gRPC in a synctest bubble.

func TestWithCodes(t *testing.T) {
	// retryFile retries UNAVAILABLE, 4 attempts.
	inCode := policy.Policy{MaxAttempts: 3, Backoff: policy.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}}
	tests := []struct {
		name         string
		build        []interceptor.Option
		call         []grpc.CallOption
		code         codes.Code
		fail         int32
		wantAttempts int
		wantReason   policy.Reason
	}{
		{"per call: the listed code is retried", nil, []grpc.CallOption{interceptor.WithCodes(codes.Aborted)}, codes.Aborted, 10, 4, policy.ReasonAttempts},
		{"per call: the file's code no longer is", nil, []grpc.CallOption{interceptor.WithCodes(codes.Aborted)}, codes.Unavailable, 10, 1, policy.ReasonNotRetryable},
		{"per call: several codes", nil, []grpc.CallOption{interceptor.WithCodes(codes.Aborted, codes.Unavailable)}, codes.Unavailable, 2, 3, policy.ReasonSuccess},
		{"built in: the listed code is retried", []interceptor.Option{interceptor.WithCodes(codes.Internal)}, nil, codes.Internal, 10, 4, policy.ReasonAttempts},
		{"per call over built in", []interceptor.Option{interceptor.WithCodes(codes.Internal)}, []grpc.CallOption{interceptor.WithCodes(codes.Aborted)}, codes.Internal, 10, 1, policy.ReasonNotRetryable},
		{"empty list retries no code", nil, []grpc.CallOption{interceptor.WithCodes()}, codes.Unavailable, 10, 1, policy.ReasonNotRetryable},
		{"empty list: not the default codes either", nil, []grpc.CallOption{interceptor.WithCodes()}, codes.ResourceExhausted, 10, 1, policy.ReasonNotRetryable},
		{"OK alone retries no code", nil, []grpc.CallOption{interceptor.WithCodes(codes.OK)}, codes.Unavailable, 10, 1, policy.ReasonNotRetryable},
		{"OK is ignored beside others", nil, []grpc.CallOption{interceptor.WithCodes(codes.OK, codes.Unavailable)}, codes.Unavailable, 10, 4, policy.ReasonAttempts},
		{"OK: a success is not retried", nil, []grpc.CallOption{interceptor.WithCodes(codes.OK)}, codes.Unavailable, 0, 1, policy.ReasonSuccess},
		{"an unknown code is ignored", nil, []grpc.CallOption{interceptor.WithCodes(codes.Code(40), codes.Aborted)}, codes.Aborted, 10, 4, policy.ReasonAttempts},
		{"a server's DEADLINE_EXCEEDED, listed, is retried", nil, []grpc.CallOption{interceptor.WithCodes(codes.DeadlineExceeded)}, codes.DeadlineExceeded, 1, 2, policy.ReasonSuccess},
		{"policy in code", []interceptor.Option{interceptor.WithConfig(nil), interceptor.WithPolicy(inCode)}, []grpc.CallOption{interceptor.WithCodes(codes.FailedPrecondition)}, codes.FailedPrecondition, 10, 3, policy.ReasonAttempts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rep interceptor.Report
				opts := append([]interceptor.Option{interceptor.WithConfig(parse(t, retryFile))}, tt.build...)
				b := newBench(t, opts)
				call := append([]grpc.CallOption{interceptor.WithReport(&rep)}, tt.call...)
				err := b.get(context.Background(), &testingv1.Script{Key: "k", FailAttempts: tt.fail, Code: int32(tt.code)}, call...)
				if tt.wantReason == policy.ReasonSuccess && err != nil {
					t.Fatalf("err = %v, want success", err)
				}
				if n := len(b.attempts(t, "k")); n != tt.wantAttempts {
					t.Errorf("server saw %d attempts, want %d", n, tt.wantAttempts)
				}
				if rep.Reason != tt.wantReason {
					t.Errorf("reason = %v, want %v", rep.Reason, tt.wantReason)
				}
			})
		})
	}
}

// The caller's own deadline and cancellation end the call whatever
// WithCodes lists.
func TestWithCodesNeverRetriesTheCallersEnd(t *testing.T) {
	both := interceptor.WithCodes(codes.DeadlineExceeded, codes.Canceled, codes.Unavailable)
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rep interceptor.Report
			b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile))})
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := b.get(ctx, &testingv1.Script{Key: "k", Delay: durationpb.New(time.Hour)}, both, interceptor.WithReport(&rep))
			if status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("err = %v, want DEADLINE_EXCEEDED", err)
			}
			if rep.Attempts != 1 || rep.Reason != policy.ReasonCaller {
				t.Errorf("report = %+v, want 1 attempt, reason caller", rep)
			}
		})
	})
	t.Run("cancel", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var rep interceptor.Report
			b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile))})
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Second, cancel)
			err := b.get(ctx, &testingv1.Script{Key: "k", Delay: durationpb.New(time.Hour)}, both, interceptor.WithReport(&rep))
			if status.Code(err) != codes.Canceled {
				t.Fatalf("err = %v, want CANCELED", err)
			}
			if rep.Attempts != 1 || rep.Reason != policy.ReasonCaller {
				t.Errorf("report = %+v, want 1 attempt, reason caller", rep)
			}
		})
	})
}

// On a hedged method WithCodes replaces the non-fatal codes.
func TestWithCodesHedging(t *testing.T) {
	tests := []struct {
		name      string
		codes     []codes.Code
		code      codes.Code
		wantErr   codes.Code
		wantCount int
	}{
		// Attempt 1 is slow, attempt 2 fails at once: a non-fatal code sends
		// attempt 3 at once, which succeeds; a fatal one ends the call.
		{"listed code is non-fatal", []codes.Code{codes.Aborted}, codes.Aborted, codes.OK, 3},
		{"the file's code is fatal", []codes.Code{codes.Aborted}, codes.Unavailable, codes.Unavailable, 2},
		{"empty list: every code is fatal", nil, codes.Unavailable, codes.Unavailable, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 3, 100*time.Millisecond, "")))
				start := time.Now()
				err := b.get(&testingv1.Script{Key: "k", FailAttempts: 2, Code: int32(tt.code), AttemptDelays: durations(10*time.Second, 0)},
					interceptor.WithCodes(tt.codes...))
				if status.Code(err) != tt.wantErr {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if took := time.Since(start); took != 100*time.Millisecond {
					t.Errorf("call took %v, want 100ms", took)
				}
				synctest.Wait()
				if n := len(b.srv.Attempts("k")); n != tt.wantCount {
					t.Errorf("server saw %d attempts, want %d", n, tt.wantCount)
				}
			})
		})
	}
}

func TestWithMaxAttemptsBoundedByTheCap(t *testing.T) {
	capped10, err := policy.ParseConfig([]byte(retryFile), policy.WithMaxAttemptsCap(10))
	if err != nil {
		t.Fatal(err)
	}
	short := policy.Policy{MaxAttempts: 3, Backoff: policy.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1}}
	long := short
	long.MaxAttempts = 10
	tests := []struct {
		name      string
		build     []interceptor.Option
		call      []grpc.CallOption
		want      int
		wantCap   int // the notice's bound; 0: no notice
		wantHedge bool
	}{
		{"file, default cap", []interceptor.Option{interceptor.WithConfig(parse(t, retryFile))}, []grpc.CallOption{interceptor.WithMaxAttempts(8)}, 5, 5, false},
		{"file, default cap, built in", []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), interceptor.WithMaxAttempts(8)}, nil, 5, 5, false},
		{"file, below the cap", []interceptor.Option{interceptor.WithConfig(parse(t, retryFile))}, []grpc.CallOption{interceptor.WithMaxAttempts(5)}, 5, 0, false},
		{"file parsed with a cap of 10", []interceptor.Option{interceptor.WithConfig(capped10)}, []grpc.CallOption{interceptor.WithMaxAttempts(8)}, 8, 0, false},
		{"file parsed with a cap of 10, above it", []interceptor.Option{interceptor.WithConfig(capped10)}, []grpc.CallOption{interceptor.WithMaxAttempts(12)}, 10, 10, false},
		{"no file: gRFC A6's cap", []interceptor.Option{interceptor.WithPolicy(short)}, []grpc.CallOption{interceptor.WithMaxAttempts(8)}, 5, 5, false},
		{"no file: a policy in code above the cap bounds it", []interceptor.Option{interceptor.WithPolicy(long)}, []grpc.CallOption{interceptor.WithMaxAttempts(8)}, 8, 0, false},
		{"no file: a policy in code above the cap, above it", []interceptor.Option{interceptor.WithPolicy(long)}, []grpc.CallOption{interceptor.WithMaxAttempts(12)}, 10, 10, false},
		{"hedging", []interceptor.Option{interceptor.WithConfig(hedgeConfig(t, 3, 10*time.Millisecond, ""))}, []grpc.CallOption{interceptor.WithMaxAttempts(8)}, 5, 5, true},
		{"hedging, lowered", []interceptor.Option{interceptor.WithConfig(hedgeConfig(t, 3, 10*time.Millisecond, ""))}, []grpc.CallOption{interceptor.WithMaxAttempts(2)}, 2, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				b := newBench(t, append(tt.build, interceptor.WithHook(h.hook)))
				for _, key := range []string{"a", "b"} {
					sc := &testingv1.Script{Key: key, FailAttempts: 100}
					if tt.wantHedge {
						sc = &testingv1.Script{Key: key, Delay: durationpb.New(time.Second)}
					}
					_ = b.get(context.Background(), sc, tt.call...)
					synctest.Wait()
					if n := len(b.attempts(t, key)); n != tt.want {
						t.Errorf("call %s: server saw %d attempts, want %d", key, n, tt.want)
					}
				}
				var notices []interceptor.Event
				for _, e := range h.all() {
					if e.Kind == interceptor.EventNotice {
						notices = append(notices, e)
					}
				}
				switch {
				case tt.wantCap == 0 && len(notices) > 0:
					t.Errorf("notices %+v, want none", notices)
				case tt.wantCap > 0 && len(notices) != 1:
					t.Errorf("notices %+v, want one for two calls", notices)
				case tt.wantCap > 0:
					if e := notices[0]; e.Reason != policy.ReasonAttempts || e.Attempt != tt.wantCap || e.Method != getMethod || e.Hedging != tt.wantHedge {
						t.Errorf("notice %+v, want reason attempts, Attempt %d, method %s, Hedging %v", e, tt.wantCap, getMethod, tt.wantHedge)
					}
				}
			})
		})
	}
}

// jsonLog is a real slog JSON handler behind logging.LoggerFunc, as a
// go-grpc-middleware user wires it.
type jsonLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (j *jsonLog) logger() logging.Logger {
	j.mu.Lock()
	defer j.mu.Unlock()
	sl := slog.New(slog.NewJSONHandler(&lockedWriter{j}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		sl.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

type lockedWriter struct{ j *jsonLog }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.j.mu.Lock()
	defer w.j.mu.Unlock()
	return w.j.buf.Write(p)
}

// lines decodes every line logged.
func (j *jsonLog) lines(t *testing.T) []map[string]any {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(j.buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestLoggerDurationsAreReadable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log jsonLog
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), interceptor.WithLogger(log.logger())})
		_ = b.get(context.Background(), &testingv1.Script{Key: "k", FailAttempts: 1, Pushback: []string{"1500"}})
		_ = b.get(context.Background(), &testingv1.Script{Key: "k2", FailAttempts: 2})
		var pauses []any
		for _, l := range log.lines(t) {
			if l["msg"] != "stagger: retrying" {
				continue
			}
			pauses = append(pauses, l["stagger.pause"])
			if l["stagger.event"] != "retry" {
				t.Errorf("retry line %v: stagger.event = %v, want retry", l, l["stagger.event"])
			}
			if _, ok := l["stagger.reason"]; ok {
				t.Errorf("retry line %v names a reason", l)
			}
		}
		// The pushback of 1.5s, then the file's backoff of 1s and 2s.
		if want := []any{"1.5s", "1s", "2s"}; len(pauses) != len(want) || pauses[0] != want[0] || pauses[1] != want[1] || pauses[2] != want[2] {
			t.Errorf("pauses logged = %#v, want %#v", pauses, want)
		}
	})
}

func TestLoggerHedgeEventsSayHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log jsonLog
		b := newHedgeBench(t, interceptor.WithConfig(hedgeConfig(t, 2, 50*time.Millisecond, "")), interceptor.WithLogger(log.logger()))
		if err := b.get(&testingv1.Script{Key: "k", AttemptDelays: durations(time.Second, 0)}); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range log.lines(t) {
			got = append(got, l["msg"].(string))
			if r, ok := l["stagger.reason"]; ok {
				t.Errorf("line %v: reason %v, want none", l, r)
			}
			switch l["msg"] {
			case "stagger: hedging":
				if l["stagger.event"] != "hedge" || l["stagger.pause"] != "50ms" || l["stagger.attempt"] != 2.0 {
					t.Errorf("hedge line %v, want stagger.event hedge, stagger.pause 50ms, attempt 2", l)
				}
			case "stagger: hedge won":
				if l["stagger.event"] != "hedge won" {
					t.Errorf("hedge-won line %v, want stagger.event \"hedge won\"", l)
				}
			}
		}
		if len(got) != 2 || got[0] != "stagger: hedging" || got[1] != "stagger: hedge won" {
			t.Errorf("logged %q, want a hedge then the hedge that won", got)
		}
	})
}

// TestHedgeMemoryIndependentOfMaxAttempts: a hedged call whose policy allows
// 1,000 attempts (policy.MaxAttemptsCapLimit), won by its first, allocates
// what one allowing three does (it used to allocate a results slot per
// allowed attempt: 40 KB here, 40 MB at 10^6 before the cap was bounded).
func TestHedgeMemoryIndependentOfMaxAttempts(t *testing.T) {
	bench := func(maxAttempts int) *hedgeBench {
		cfg, err := policy.ParseConfig([]byte(fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
			"hedgingPolicy": {"maxAttempts": %d, "hedgingDelay": "3600s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`, maxAttempts)),
			policy.WithMaxAttemptsCap(maxAttempts))
		if err != nil {
			t.Fatal(err)
		}
		b := newHedgeBench(t, interceptor.WithConfig(cfg))
		if err := b.get(&testingv1.Script{}); err != nil { // warm up: connection, caches
			t.Fatal(err)
		}
		return b
	}
	round := func(b *hedgeBench) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		const calls = 100
		for i := 0; i < calls; i++ {
			if err := b.get(&testingv1.Script{}); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / calls
	}
	// The least of eight rounds each, the two kinds in turn: whatever else
	// the process allocates meanwhile (grpc's transports, the race
	// detector's bookkeeping, which drifts over a run) only adds to a
	// round, never takes from it, and drift reaches both kinds alike.
	fewBench, manyBench := bench(3), bench(policy.MaxAttemptsCapLimit)
	few, many := uint64(math.MaxUint64), uint64(math.MaxUint64)
	for r := 0; r < 8; r++ {
		few = min(few, round(fewBench))
		many = min(many, round(manyBench))
	}
	t.Logf("bytes per hedged call: %d with 3 attempts allowed, %d with %d", few, many, policy.MaxAttemptsCapLimit)
	// A call over bufconn costs some 16 KB (30 to 60 KB under the race
	// detector, which varies from run to run by 20 KB), grpc's share
	// included. The results slots of 1,000 attempts took 40 KB more: the
	// margin sits between the noise and that.
	if many > few+30<<10 {
		t.Errorf("a hedged call allowing %d attempts allocated %d bytes, one allowing 3 %d: want the same, within 30 KB", policy.MaxAttemptsCapLimit, many, few)
	}
}

// The stream interceptor takes the same per-call options.
func TestStreamPerCallCodesAndMaxAttempts(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, c := newStreamBench(t, interceptor.WithConfig(parse(t, retryFile)))
				r := k.run(context.Background(), c, &testingv1.Script{Key: "codes", FailAttempts: 2, Code: int32(codes.Aborted)}, 3,
					interceptor.WithCodes(codes.Aborted))
				if r.err != nil {
					t.Errorf("WithCodes(Aborted): err = %v, want success", r.err)
				}
				if n := len(srv.Attempts("codes")); n != 3 {
					t.Errorf("WithCodes(Aborted): server saw %d attempts, want 3", n)
				}
				r = k.run(context.Background(), c, &testingv1.Script{Key: "max", FailAttempts: 100}, 3, interceptor.WithMaxAttempts(8))
				if status.Code(r.err) != codes.Unavailable {
					t.Errorf("WithMaxAttempts(8): err = %v, want UNAVAILABLE", r.err)
				}
				if n := len(srv.Attempts("max")); n != 5 {
					t.Errorf("WithMaxAttempts(8): server saw %d attempts, want 5 (the cap)", n)
				}
			})
		})
	}
}

// WithCodes() leaves the rules other than the codes as they were: a
// predicate decides what it decides, and an attempt the per-attempt timer
// cut off is retried.
func TestWithCodesEmptyKeepsPredicateAndTimer(t *testing.T) {
	tryAgain := interceptor.WithPredicate(func(err error) (retry, decided bool) {
		if strings.Contains(status.Convert(err).Message(), "try again") {
			return true, true
		}
		return false, false
	})
	t.Run("predicate", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), tryAgain})
			_ = b.get(context.Background(), &testingv1.Script{Key: "decided", FailAttempts: 2, Code: int32(codes.Internal), Message: "try again"}, interceptor.WithCodes())
			if n := len(b.attempts(t, "decided")); n != 3 {
				t.Errorf("error the predicate retries: %d attempts, want 3", n)
			}
			_ = b.get(context.Background(), &testingv1.Script{Key: "left", FailAttempts: 2}, interceptor.WithCodes())
			if n := len(b.attempts(t, "left")); n != 1 {
				t.Errorf("error left to the codes: %d attempts, want 1", n)
			}
		})
	})
	t.Run("per-attempt timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			file := strings.Replace(retryFile, `"jitter": "NONE"`, `"jitter": "NONE", "perAttemptRecvTimeout": "0.1s"`, 1)
			b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, file))})
			// Longer than the timeout and the retry's pause (1s), through
			// which the attempt runs on.
			err := b.get(context.Background(), &testingv1.Script{Key: "k", AttemptDelays: durations(3 * time.Second)}, interceptor.WithCodes())
			if err != nil {
				t.Fatalf("err = %v, want success on attempt 2", err)
			}
			if n := len(b.attempts(t, "k")); n != 2 {
				t.Errorf("%d attempts, want 2", n)
			}
		})
	})
}

func TestLoggerSaysWithMaxAttemptsCappedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log jsonLog
		b := newBench(t, []interceptor.Option{interceptor.WithConfig(parse(t, retryFile)), interceptor.WithLogger(log.logger())})
		for _, key := range []string{"a", "b"} {
			_ = b.get(context.Background(), &testingv1.Script{Key: key, FailAttempts: 100}, interceptor.WithMaxAttempts(8))
		}
		var notices []map[string]any
		for _, l := range log.lines(t) {
			if l["stagger.event"] == "notice" {
				notices = append(notices, l)
			}
		}
		if len(notices) != 1 {
			t.Fatalf("notices %v, want one for two calls", notices)
		}
		l := notices[0]
		if l["level"] != "WARN" || l["msg"] != "stagger: WithMaxAttempts above the cap: lowered to the cap (stagger.attempt)" || l["stagger.attempt"] != 5.0 ||
			l["stagger.reason"] != "attempts" || l["grpc.method"] != getMethod {
			t.Errorf("notice %v, want a warning that WithMaxAttempts was capped at 5, reason attempts", l)
		}
	})
}

// A valid file with a mistake in it (a misspelt key, a service the program
// does not link) fails silently unless someone says so: the logger gets the
// parse's warnings once per file, when a call first follows it, and again
// for a reloaded file.
func TestLoggerSaysFileWarningsOncePerFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log jsonLog
		file := func(svc string) *policy.Config {
			return parse(t, `{"methodConfig": [{"name": [{"service": "`+svc+`"}],
				"retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1,
				"retryableStatusCodes": ["UNAVAILABLE"], "jiter": "FULL"}}]}`)
		}
		src := policy.NewSource(file("stagger.testing.v1.TestService"))
		b := newBench(t, []interceptor.Option{interceptor.WithConfigSource(src), interceptor.WithLogger(log.logger())})
		warnings := func() (n int, msgs []string) {
			for _, l := range log.lines(t) {
				if m, _ := l["msg"].(string); m == "stagger: policy file warning (stagger.warning)" {
					n++
					msgs = append(msgs, fmt.Sprint(l["stagger.field"], " ", l["stagger.warning"]))
				}
			}
			return n, msgs
		}
		for range 3 {
			_ = b.get(context.Background(), &testingv1.Script{})
		}
		if n, msgs := warnings(); n != 1 || !strings.Contains(msgs[0], `jiter`) || !strings.Contains(msgs[0], `did you mean "jitter"`) {
			t.Fatalf("after 3 calls on one file: %d warning lines %q, want 1 naming jiter and jitter", n, msgs)
		}
		if err := src.Update(file("TestService")); err != nil {
			t.Fatal(err)
		}
		_ = b.get(context.Background(), &testingv1.Script{})
		_ = b.get(context.Background(), &testingv1.Script{})
		n, msgs := warnings()
		if n != 3 || !strings.Contains(strings.Join(msgs, "\n"), "stagger.testing.v1.TestService") {
			t.Fatalf("after a reload: %d warning lines %q, want 3 (jiter again, and the service without its package with the registered name)", n, msgs)
		}
	})
}
