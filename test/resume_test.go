//go:build go1.25

package test

import (
	"context"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The resumable stream tests: ListItems over bufconn against testserver,
// inside a testing/synctest bubble, its stream broken by scripted failures
// (fail_attempts attempts send messages_before_failure messages each, then
// fail) and resumed with start_after.

const listMethod = testingv1.TestService_ListItems_FullMethodName

// resumeList continues a ListItems stream after the last item received.
func resumeList(req *testingv1.ListItemsRequest, last *testingv1.ListItemsResponse) (*testingv1.ListItemsRequest, error) {
	next := proto.Clone(req).(*testingv1.ListItemsRequest)
	next.StartAfter = last.GetReply().GetSeq()
	return next, nil
}

// sentHeaders records, per attempt, the headers stagger sent: an interceptor
// placed after stagger sees each attempt.
type sentHeaders struct {
	mu       sync.Mutex
	previous []string
	resume   []string
}

func (h *sentHeaders) interceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	h.mu.Lock()
	h.previous = append(h.previous, strings.Join(md.Get("grpc-previous-rpc-attempts"), ","))
	h.resume = append(h.resume, strings.Join(md.Get(interceptor.ResumeHeader), ","))
	h.mu.Unlock()
	return streamer(ctx, desc, cc, method, opts...)
}

func (h *sentHeaders) get() (previous, resume []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.previous), slices.Clone(h.resume)
}

// newResumeBench is a server and a client whose stream interceptor is built
// from opts, with h (when not nil) after it.
func newResumeBench(t *testing.T, h *sentHeaders, opts ...interceptor.Option) (*testserver.Server, testingv1.TestServiceClient) {
	t.Helper()
	srv := testserver.New()
	t.Cleanup(srv.Close)
	chain := []grpc.StreamClientInterceptor{interceptor.StreamClientInterceptor(opts...)}
	if h != nil {
		chain = append(chain, h.interceptor)
	}
	cc := srv.ClientConn(t, grpc.WithChainStreamInterceptor(chain...), grpc.WithDisableRetry())
	return srv, testingv1.NewTestServiceClient(cc)
}

// listAll reads a ListItems stream of n items to its end.
func listAll(ctx context.Context, c testingv1.TestServiceClient, sc *testingv1.Script, n int, opts ...grpc.CallOption) streamResult {
	return runListItems(ctx, c, sc, n, opts...)
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestResumeExactlyOnce: a stream broken after its first message, at
// several points, is resumed after the last message received; the
// application sees every message once, in order. Each resume pauses the
// first backoff (the sequence restarts after a message), is reported as
// EventResume, and its attempt carries grpc-previous-rpc-attempts 1 and
// the resume number.
func TestResumeExactlyOnce(t *testing.T) {
	for _, tc := range []struct {
		name          string
		n, breaks, at int32
	}{
		{"once after the first message", 10, 1, 1},
		{"five times every 3 messages", 20, 5, 3},
		{"more breaks than maxAttempts", 20, 7, 2},
		{"every message", 6, 6, 1},
		{"before the last message", 10, 1, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				var sent sentHeaders
				var rep interceptor.Report
				srv, c := newResumeBench(t, &sent, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithHook(h.hook),
					interceptor.WithResume(listMethod, interceptor.TypedResume(resumeList)))
				start := time.Now()
				r := listAll(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: tc.breaks, MessagesBeforeFailure: tc.at}, int(tc.n), interceptor.WithReport(&rep))
				if r.err != nil {
					t.Fatalf("err = %v", r.err)
				}
				if !slices.Equal(r.seqs, seqsTo(int(tc.n))) {
					t.Fatalf("seqs = %v, want 1..%d once each, in order", r.seqs, tc.n)
				}
				breaks := int(tc.breaks)
				if got := len(srv.Attempts("k")); got != breaks+1 {
					t.Errorf("server saw %d attempts, want %d", got, breaks+1)
				}
				previous, resume := sent.get()
				wantResume := []string{""}
				for i := 1; i <= breaks; i++ {
					wantResume = append(wantResume, strconv.Itoa(i))
				}
				if want := append([]string{""}, repeat("1", breaks)...); !slices.Equal(previous, want) {
					t.Errorf("grpc-previous-rpc-attempts = %q, want %q", previous, want)
				}
				if !slices.Equal(resume, wantResume) {
					t.Errorf("%s = %q, want %q", interceptor.ResumeHeader, resume, wantResume)
				}
				events := h.all()
				if len(events) != breaks {
					t.Fatalf("%d events, want %d resumes: %+v", len(events), breaks, events)
				}
				for _, e := range events {
					if e.Kind != interceptor.EventResume || e.Attempt != 1 || e.Pause != time.Second || e.Code != codes.Unavailable {
						t.Errorf("event %+v, want resume after attempt 1, pause 1s, UNAVAILABLE", e)
					}
				}
				if took := time.Since(start); took != time.Duration(breaks)*time.Second {
					t.Errorf("call took %v, want %d × 1s", took, breaks)
				}
				if rep.Attempts != breaks+1 || rep.Retries != breaks || rep.Reason != policy.ReasonSuccess {
					t.Errorf("report = %+v, want %d attempts, %d retries, success", rep, breaks+1, breaks)
				}
			})
		})
	}
}

// TestResumeWithoutFunction: without a resume function (or with one for
// another method) a stream that fails after a message ends, as gRFC A6 says.
func TestResumeWithoutFunction(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []interceptor.Option
	}{
		{"none", nil},
		{"another method", []interceptor.Option{interceptor.WithResume(testingv1.TestService_Chat_FullMethodName, interceptor.TypedResume(resumeList))}},
		{"removed per call", []interceptor.Option{interceptor.WithResume(listMethod, interceptor.TypedResume(resumeList)), interceptor.WithResume(listMethod, nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				srv, c := newResumeBench(t, nil, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithHook(h.hook))
				var callOpts []grpc.CallOption
				for _, o := range tc.opts {
					callOpts = append(callOpts, o)
				}
				r := listAll(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 1, MessagesBeforeFailure: 2}, 5, callOpts...)
				if status.Code(r.err) != codes.Unavailable || !slices.Equal(r.seqs, []int64{1, 2}) {
					t.Fatalf("err = %v, seqs %v; want UNAVAILABLE after 1, 2", r.err, r.seqs)
				}
				if n := len(srv.Attempts("k")); n != 1 {
					t.Errorf("server saw %d attempts, want 1", n)
				}
				if e := h.last(); e.Kind != interceptor.EventGiveUp || e.Reason != policy.ReasonCommitted {
					t.Errorf("last event = %+v, want give up, reason committed", e)
				}
			})
		})
	}
}

// TestResumePerCall: WithResume given on one call makes that call
// resumable.
func TestResumePerCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := newResumeBench(t, nil, interceptor.WithConfig(parse(t, retryFile)))
		r := listAll(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 2, MessagesBeforeFailure: 2}, 5,
			interceptor.WithResume(listMethod, interceptor.TypedResume(resumeList)))
		if r.err != nil || !slices.Equal(r.seqs, seqsTo(5)) {
			t.Fatalf("err = %v, seqs %v; want 1..5", r.err, r.seqs)
		}
	})
}

// TestResumeFunctionFails: a resume function that says the stream cannot
// resume ends the call with the stream's own error; one that fails, panics,
// returns nothing or gets messages of other types ends it with INTERNAL
// naming the method, its error reachable with errors.Is, and never hangs.
func TestResumeFunctionFails(t *testing.T) {
	errMine := errors.New("no cursor in the last message")
	for _, tc := range []struct {
		name     string
		fn       interceptor.ResumeFunc
		code     codes.Code
		contains string
		is       error
	}{
		{"cannot resume", func(req, last proto.Message) (proto.Message, error) {
			return nil, interceptor.ErrCannotResume
		}, codes.Unavailable, "scripted failure", nil},
		{"cannot resume, wrapped", func(req, last proto.Message) (proto.Message, error) {
			return nil, errors.Join(errMine, interceptor.ErrCannotResume)
		}, codes.Unavailable, "scripted failure", nil},
		{"error", func(req, last proto.Message) (proto.Message, error) {
			return nil, errMine
		}, codes.Internal, "no cursor in the last message", errMine},
		{"panic", func(req, last proto.Message) (proto.Message, error) {
			panic("index out of range")
		}, codes.Internal, "panic: index out of range", nil},
		{"no request", func(req, last proto.Message) (proto.Message, error) {
			return nil, nil
		}, codes.Internal, "returned no request", nil},
		{"typed nil request", interceptor.TypedResume(func(*testingv1.ListItemsRequest, *testingv1.ListItemsResponse) (*testingv1.ListItemsRequest, error) {
			return nil, nil
		}), codes.Internal, "returned no request", nil},
		{"wrong types", interceptor.TypedResume(func(*testingv1.GetRequest, *testingv1.GetResponse) (*testingv1.GetRequest, error) {
			return nil, nil
		}), codes.Internal, "*testingv1.GetRequest", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var h hookLog
				srv, c := newResumeBench(t, nil, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithHook(h.hook),
					interceptor.WithResume(listMethod, tc.fn))
				r := listAll(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 1, MessagesBeforeFailure: 2}, 5)
				if status.Code(r.err) != tc.code || !strings.Contains(status.Convert(r.err).Message(), tc.contains) {
					t.Fatalf("err = %v, want %v containing %q", r.err, tc.code, tc.contains)
				}
				if !slices.Equal(r.seqs, []int64{1, 2}) {
					t.Errorf("seqs = %v, want 1, 2", r.seqs)
				}
				if tc.code == codes.Internal {
					var re *interceptor.ResumeError
					if !errors.As(r.err, &re) || re.Method != listMethod || status.Code(re.StreamErr) != codes.Unavailable {
						t.Errorf("err = %#v, want a *ResumeError for %s from UNAVAILABLE", r.err, listMethod)
					}
					if !strings.Contains(r.err.Error(), listMethod) {
						t.Errorf("err = %q, want it to name %s", r.err, listMethod)
					}
				}
				if tc.is != nil && !errors.Is(r.err, tc.is) {
					t.Errorf("errors.Is(%v, the function's error) = false", r.err)
				}
				if n := len(srv.Attempts("k")); n != 1 {
					t.Errorf("server saw %d attempts, want 1", n)
				}
				if n := interceptor.Attempts(r.err); n != 1 {
					t.Errorf("Attempts(err) = %d, want 1", n)
				}
				if e := h.last(); e.Kind != interceptor.EventGiveUp || e.Reason != policy.ReasonCommitted {
					t.Errorf("last event = %+v, want give up, reason committed", e)
				}
			})
		})
	}
}

// TestResumeNotRetryable: a failure the policy does not retry ends a
// resumable stream, without calling the resume function.
func TestResumeNotRetryable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		called := false
		_, c := newResumeBench(t, nil, interceptor.WithConfig(parse(t, retryFile)),
			interceptor.WithResume(listMethod, func(req, last proto.Message) (proto.Message, error) {
				called = true
				return req, nil
			}))
		r := listAll(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 1, MessagesBeforeFailure: 2, Code: int32(codes.InvalidArgument)}, 5)
		if status.Code(r.err) != codes.InvalidArgument || !slices.Equal(r.seqs, []int64{1, 2}) {
			t.Fatalf("err = %v, seqs %v; want INVALID_ARGUMENT after 1, 2", r.err, r.seqs)
		}
		if reasonOf(r.err) != policy.ReasonNotRetryable.String() {
			t.Errorf("reason %q, want not retryable", reasonOf(r.err))
		}
		if called {
			t.Error("the resume function was called for a failure not retried")
		}
	})
}

// TestResumeDeadline: resumes stop when the next pause would outlast the
// caller's deadline.
func TestResumeDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := newResumeBench(t, nil, interceptor.WithConfig(parse(t, retryFile)),
			interceptor.WithResume(listMethod, interceptor.TypedResume(resumeList)))
		ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
		defer cancel()
		start := time.Now()
		r := listAll(ctx, c, &testingv1.Script{Key: "k", FailAttempts: 5, MessagesBeforeFailure: 2}, 20)
		if status.Code(r.err) != codes.Unavailable || reasonOf(r.err) != policy.ReasonDeadline.String() {
			t.Fatalf("err = %v (reason %q), want UNAVAILABLE, reason deadline", r.err, reasonOf(r.err))
		}
		if !slices.Equal(r.seqs, seqsTo(6)) {
			t.Errorf("seqs = %v, want 1..6 (two resumes at 1s and 2s)", r.seqs)
		}
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("call took %v, want 2s", took)
		}
	})
}

// TestResumeCounting: maxAttempts bounds the failures in a row since the
// last message delivered: a resumed attempt that delivers restarts the
// count; grpc-previous-rpc-attempts counts since that message; the budget
// is asked once per resume; Attempts(err) and the report count them all.
func TestResumeCounting(t *testing.T) {
	t.Run("failures in a row", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var h hookLog
			var sent sentHeaders
			var srv *testserver.Server
			hook := func(e interceptor.Event) {
				h.hook(e)
				if e.Kind == interceptor.EventResume && e.Attempt == 1 && len(h.all()) == 2 {
					srv.SetOutage(true) // after the second resume's pause: the next attempts fail at once
				}
			}
			var rep interceptor.Report
			srv, c := newResumeBench(t, &sent, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithHook(hook),
				interceptor.WithResume(listMethod, interceptor.TypedResume(resumeList)))
			r := listAll(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 5, MessagesBeforeFailure: 2}, 20, interceptor.WithReport(&rep))
			if status.Code(r.err) != codes.Unavailable || reasonOf(r.err) != policy.ReasonAttempts.String() {
				t.Fatalf("err = %v (reason %q), want UNAVAILABLE, reason attempts", r.err, reasonOf(r.err))
			}
			if !slices.Equal(r.seqs, seqsTo(4)) {
				t.Errorf("seqs = %v, want 1..4", r.seqs)
			}
			// Attempts: 1 (2 messages), 2 (resume 1, 2 messages), 3, 4, 5
			// (resume 2, then two retries, failed before a message).
			previous, resume := sent.get()
			if want := []string{"", "1", "1", "2", "3"}; !slices.Equal(previous, want) {
				t.Errorf("grpc-previous-rpc-attempts = %q, want %q", previous, want)
			}
			if want := []string{"", "1", "2", "2", "2"}; !slices.Equal(resume, want) {
				t.Errorf("%s = %q, want %q", interceptor.ResumeHeader, resume, want)
			}
			var kinds []string
			for _, e := range h.all() {
				kinds = append(kinds, e.Kind.String())
			}
			if want := []string{"resume", "resume", "retry", "retry", "give up"}; !slices.Equal(kinds, want) {
				t.Errorf("events = %q, want %q", kinds, want)
			}
			if n := interceptor.Attempts(r.err); n != 5 || rep.Attempts != 5 || rep.Retries != 4 {
				t.Errorf("Attempts(err) = %d, report %+v; want 5 attempts, 4 retries", n, rep)
			}
		})
	})
	t.Run("budget", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := &resumeBudget{allow: 2}
			_, c := newResumeBench(t, nil, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithBudget(b),
				interceptor.WithResume(listMethod, interceptor.TypedResume(resumeList)))
			r := listAll(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 5, MessagesBeforeFailure: 2}, 20)
			if status.Code(r.err) != codes.Unavailable || reasonOf(r.err) != policy.ReasonBudget.String() {
				t.Fatalf("err = %v (reason %q), want UNAVAILABLE, reason budget", r.err, reasonOf(r.err))
			}
			if !slices.Equal(r.seqs, seqsTo(6)) {
				t.Errorf("seqs = %v, want 1..6", r.seqs)
			}
			if b.asked != 3 || b.failures != 3 {
				t.Errorf("budget asked %d times and heard %d failures, want 3 and 3 (two resumes allowed, the third refused)", b.asked, b.failures)
			}
		})
	})
	t.Run("deferred by the budget", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var h hookLog
			_, c := newResumeBench(t, nil, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithBudget(&waitingBudget{}), interceptor.WithHook(h.hook),
				interceptor.WithResume(listMethod, interceptor.TypedResume(resumeList)))
			r := listAll(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 1, MessagesBeforeFailure: 2}, 5)
			if r.err != nil || !slices.Equal(r.seqs, seqsTo(5)) {
				t.Fatalf("err = %v, seqs %v; want 1..5", r.err, r.seqs)
			}
			var kinds []string
			for _, e := range h.all() {
				kinds = append(kinds, e.Kind.String())
			}
			if want := []string{"deferred", "resume"}; !slices.Equal(kinds, want) {
				t.Errorf("events = %q, want %q", kinds, want)
			}
		})
	})
}

// waitingBudget refuses every retry at first and admits it at once when
// asked to wait (a budget.Deferrer).
type waitingBudget struct{ resumeBudget }

func (b *waitingBudget) Wait(context.Context, budget.Request, time.Duration) (budget.Admission, error) {
	return budget.AdmitBudget, nil
}

// resumeBudget allows the first allow retries and counts what it hears.
type resumeBudget struct {
	mu                     sync.Mutex
	allow, asked, failures int
}

func (b *resumeBudget) Record(a budget.Attempt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.Outcome == budget.Failure {
		b.failures++
	}
}

func (b *resumeBudget) Allow(budget.Request) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked++
	return b.asked <= b.allow
}

func (b *resumeBudget) State() budget.State { return budget.State{Kind: "resume"} }

// TestResumeAfterHeadersOnly: a resumed attempt that sends response headers
// and fails before its first message is resumed with the same request.
func TestResumeAfterHeadersOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls int
		srv, c := newResumeBench(t, nil, interceptor.WithConfig(parse(t, retryFile)),
			interceptor.WithResume(listMethod, interceptor.TypedResume(func(req *testingv1.ListItemsRequest, last *testingv1.ListItemsResponse) (*testingv1.ListItemsRequest, error) {
				calls++
				return resumeList(req, last)
			})))
		// Every attempt sends headers first; the failing ones send 2
		// messages at most, and the list has 3: attempt 2 sends item 3 and
		// fails, attempt 3 sends headers and fails, attempt 4 ends the list.
		r := listAll(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 3, MessagesBeforeFailure: 2, HeadersFirst: true}, 3)
		if r.err != nil || !slices.Equal(r.seqs, seqsTo(3)) {
			t.Fatalf("err = %v, seqs %v; want 1..3", r.err, r.seqs)
		}
		if calls != 2 {
			t.Errorf("resume function called %d times, want 2 (the headers-only attempt's request is sent again)", calls)
		}
		if n := len(srv.Attempts("k")); n != 4 {
			t.Errorf("server saw %d attempts, want 4", n)
		}
	})
}

// TestResumeContextCommits: a stream whose Context the application took is
// not resumed: a later attempt would cancel the context it holds.
func TestResumeContextCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := newResumeBench(t, nil, interceptor.WithConfig(parse(t, retryFile)),
			interceptor.WithResume(listMethod, interceptor.TypedResume(resumeList)))
		st, err := c.ListItems(context.Background(), &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 1, MessagesBeforeFailure: 2, ResponseCount: 5}})
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Context()
		var seqs []int64
		for {
			m, err := st.Recv()
			if err != nil {
				if status.Code(err) != codes.Unavailable {
					t.Errorf("err = %v, want UNAVAILABLE", err)
				}
				break
			}
			seqs = append(seqs, m.GetReply().GetSeq())
		}
		if !slices.Equal(seqs, []int64{1, 2}) {
			t.Errorf("seqs = %v, want 1, 2", seqs)
		}
	})
}

// TestResumeOnlyServerStreams: a resume function registered for a bidi or
// client stream changes nothing.
func TestResumeOnlyServerStreams(t *testing.T) {
	for _, k := range streamKinds[1:] {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				called := false
				fn := func(req, last proto.Message) (proto.Message, error) { called = true; return req, nil }
				srv, c := newResumeBench(t, nil, interceptor.WithConfig(parse(t, retryFile)), interceptor.WithResume(k.method, fn))
				r := k.run(context.Background(), c, &testingv1.Script{Key: "k", FailAttempts: 1, HeadersFirst: true}, 3)
				if status.Code(r.err) != codes.Unavailable {
					t.Fatalf("err = %v, want UNAVAILABLE", r.err)
				}
				if n := len(srv.Attempts("k")); n != 1 || called {
					t.Errorf("server saw %d attempts, resume function called %v; want 1, false", n, called)
				}
			})
		})
	}
}

// TestResumeAfterConnectionDrop: a stream whose connection the server drops
// mid-way (no status from the server: ambiguous for a method not known to
// be idempotent) is resumed, since a resume function says the request may
// be sent again; without one it ends, committed.
func TestResumeAfterConnectionDrop(t *testing.T) {
	for _, resumable := range []bool{true, false} {
		t.Run(map[bool]string{true: "resumable", false: "not resumable"}[resumable], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []interceptor.Option{interceptor.WithConfig(parse(t, retryFile))}
				if resumable {
					opts = append(opts, interceptor.WithResume(listMethod, interceptor.TypedResume(resumeList)))
				}
				srv, c := newResumeBench(t, nil, opts...)
				r := listAll(context.Background(), c, &testingv1.Script{Key: "k", ResetAttempts: 2, MessagesBeforeFailure: 3}, 10)
				recs := srv.Attempts("k")
				if !resumable {
					if status.Code(r.err) != codes.Unavailable || len(recs) != 1 || !slices.Equal(r.seqs, seqsTo(len(r.seqs))) {
						t.Errorf("err = %v, seqs %v, %d attempts; want UNAVAILABLE after 1 attempt", r.err, r.seqs, len(recs))
					}
					return
				}
				if r.err != nil || !slices.Equal(r.seqs, seqsTo(10)) {
					t.Fatalf("err = %v, seqs %v; want 1..10 once each", r.err, r.seqs)
				}
				if len(recs) != 3 || !recs[0].Reset || !recs[1].Reset {
					t.Errorf("records %+v, want two resets, then the rest", recs)
				}
			})
		})
	}
}

// resumeBenchOpts: the stream interceptor with ListItems resumable and
// retries without a pause (full jitter drawn at 0), so that a broken stream
// costs only its reopening.
func resumeBenchOpts() []interceptor.Option {
	return []interceptor.Option{
		interceptor.WithPolicy(policy.Policy{MaxAttempts: 3, Backoff: policy.Backoff{Initial: 1, Max: 1, Multiplier: 1, Jitter: policy.JitterFull}}),
		interceptor.WithRandom(func() float64 { return 0 }),
		interceptor.WithResume(listMethod, interceptor.TypedResume(resumeList)),
	}
}

// BenchmarkResume reads a 100,000-message ListItems stream, unbroken,
// broken 5 times (every 16,667 messages) and 500 times (every 200), resumed
// without a pause: the cost of the resumes beside the stream's (500 breaks
// make one resume's cost measurable above the noise). Each op is a whole stream; the
// messages are checked to be 1..100,000, once each, in order. cpu-ns/msg is
// the CPU time the process (client and server) spent per message, steadier
// than the wall time on a shared machine.
func BenchmarkResume(b *testing.B) {
	const items = 100000
	for _, bc := range []struct {
		name   string
		breaks int32
	}{{"case=unbroken", 0}, {"case=broken5", 5}, {"case=broken500", 500}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := testserver.New()
			defer srv.Close()
			cc := srv.ClientConn(b, grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(resumeBenchOpts()...)), grpc.WithDisableRetry())
			client := testingv1.NewTestServiceClient(cc)
			ctx := context.Background()
			b.ReportAllocs()
			cpu0, cpuOK := processCPU()
			i := 0
			for b.Loop() {
				i++
				sc := &testingv1.Script{Key: strconv.Itoa(i), ResponseCount: items, FailAttempts: bc.breaks, MessagesBeforeFailure: items/(bc.breaks+1) + 1}
				st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: sc})
				if err != nil {
					b.Fatal(err)
				}
				var want int64 = 1
				for {
					m, err := st.Recv()
					if err != nil {
						if !errors.Is(err, io.EOF) {
							b.Fatal(err)
						}
						break
					}
					if m.GetReply().GetSeq() != want {
						b.Fatalf("message %d has seq %d", want, m.GetReply().GetSeq())
					}
					want++
				}
				if want != items+1 {
					b.Fatalf("read %d messages, want %d", want-1, items)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/items, "ns/msg")
			if cpu1, ok := processCPU(); ok && cpuOK {
				// Client and server run in this process: the CPU both spent.
				b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N)/items, "cpu-ns/msg")
			}
		})
	}
}

// BenchmarkResumeMessage: one Recv on a committed server stream, without
// stagger and resumable with stagger: the per-message cost of resumability
// (-benchmem: stagger adds no allocation).
func BenchmarkResumeMessage(b *testing.B) {
	for _, bc := range []struct {
		name string
		dial []grpc.DialOption
	}{
		{"stream=none", nil},
		{"stream=resumable", []grpc.DialOption{grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(resumeBenchOpts()...))}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := testserver.New()
			defer srv.Close()
			cc := srv.ClientConn(b, append(bc.dial, grpc.WithDisableRetry())...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := testingv1.NewTestServiceClient(cc).ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{ResponseCount: math.MaxInt32}})
			if err != nil {
				b.Fatal(err)
			}
			var resp testingv1.ListItemsResponse
			if err := st.RecvMsg(&resp); err != nil { // commits
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := st.RecvMsg(&resp); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cancel()
		})
	}
}
