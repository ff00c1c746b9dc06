//go:build go1.25

package test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// slogLine is one record a slogLines handler kept.
type slogLine struct {
	at    time.Time
	level slog.Level
	msg   string
	attrs map[string]slog.Value
}

// slogLines is a slog.Handler that keeps every record, at every level.
type slogLines struct {
	mu    sync.Mutex
	lines []slogLine
}

func (h *slogLines) Enabled(context.Context, slog.Level) bool { return true }
func (h *slogLines) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *slogLines) WithGroup(string) slog.Handler            { return h }
func (h *slogLines) Handle(_ context.Context, r slog.Record) error {
	l := slogLine{at: r.Time, level: r.Level, msg: r.Message, attrs: map[string]slog.Value{}}
	r.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = a.Value
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, l)
	return nil
}

func (h *slogLines) all() []slogLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slogLine(nil), h.lines...)
}

// slogLogger is go-grpc-middleware's slog adapter: the logger
// interceptor.WithLogger takes, writing to l.
func slogLogger(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

// One 10 s outage at 400 calls/s, with stagger's defaults (DialOptions, the
// default budget) and a slog logger: at most one warn line per backend per
// 10 s, whose counts add up to every call that ended for want of a retry
// the budget refused; every call's own line at debug level; every message
// a constant (no line's message names a target, a method or a number).
func TestOutageLogsOneWarnLinePerBackendPerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &slogLines{}
		srv := testserver.New()
		defer srv.Close()
		// The default budget, one of its own (the process's is shared by
		// the package's tests).
		bs, err := budget.NewBackends(budget.DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		ended := map[policy.Reason]int{}
		cc, err := srv.Dial(stagger.DialOptions(parse(t, retryFile),
			interceptor.WithDefaultBudgets(bs),
			interceptor.WithLogger(slogLogger(slog.New(rec))),
			interceptor.WithCallHook(func(_ context.Context, e interceptor.Event) {
				if e.Kind == interceptor.EventEnd {
					mu.Lock()
					ended[e.Reason]++
					mu.Unlock()
				}
			}))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		client := testingv1.NewTestServiceClient(cc)

		start := time.Now()
		const rate, run = 400, 16 * time.Second
		var wg sync.WaitGroup
		for i := 0; time.Since(start) < run; i++ {
			switch since := time.Since(start); {
			case since >= 2*time.Second && since < 12*time.Second:
				srv.SetOutage(true)
			default:
				srv.SetOutage(false)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_, _ = client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: fmt.Sprint("c", i)}})
			}()
			time.Sleep(time.Second / rate)
		}
		wg.Wait()
		time.Sleep(time.Minute) // the summary's last interval ends
		synctest.Wait()

		lines := rec.all()
		refused := ended[policy.ReasonBudget] + ended[policy.ReasonDeferred] + ended[policy.ReasonOutage]
		if refused < 100 {
			t.Fatalf("only %d calls ended for want of a retry (%v): the outage did not test the summary", refused, ended)
		}
		lastWarn := map[string]time.Time{}
		counted, warns := 0, 0
		msgs := map[string]int{}
		for _, l := range lines {
			msgs[l.msg]++
			if _, perCall := l.attrs["stagger.event"]; perCall && l.level != slog.LevelDebug {
				t.Errorf("a call's line at %v: %s %v", l.level, l.msg, l.attrs)
			}
			if l.level < slog.LevelWarn {
				continue
			}
			warns++
			target := l.attrs["grpc.target"].String()
			if prev, ok := lastWarn[target]; ok && l.at.Sub(prev) < 10*time.Second {
				t.Errorf("backend %q: warn lines %v apart (at %v and %v), want at most one per 10s", target, l.at.Sub(prev), prev.Sub(start), l.at.Sub(start))
			}
			lastWarn[target] = l.at
			for _, k := range []string{"stagger.budget_refused", "stagger.wait_ended", "stagger.outage"} {
				counted += int(l.attrs[k].Int64())
			}
		}
		if counted != refused {
			t.Errorf("the warn lines count %d calls that ended for want of a retry; %d did (%v)", counted, refused, ended)
		}
		if len(msgs) > 8 {
			t.Errorf("%d distinct messages, want a handful of constants: %v", len(msgs), msgs)
		}
		for m := range msgs {
			if strings.ContainsAny(m, "0123456789") || strings.Contains(m, "bufnet") || strings.Contains(m, "TestService") {
				t.Errorf("message %q carries a value; values go in attributes", m)
			}
		}
		t.Logf("%d calls, %v; %d lines, %d at warn; messages %v", int(run.Seconds())*rate, ended, len(lines), warns, msgs)
	})
}
