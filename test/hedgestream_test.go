//go:build go1.25

package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// Hedged streams (gRFC A6 hedging until commit), end to end over bufconn
// inside a testing/synctest bubble: the server's arrival times are virtual
// and exact, and synctest.Wait lets the server record how every attempt
// ended (cancelled, for the losers) before the test reads the records.

// hedgeStreamFile hedges every method of the test service, marked
// idempotent (its streams have no idempotency_level).
func hedgeStreamFile(t *testing.T, maxAttempts int, delay time.Duration, codes string) *policy.Config {
	t.Helper()
	if codes == "" {
		codes = `"UNAVAILABLE"`
	}
	return parse(t, fmt.Sprintf(`{"methodConfig": [{
		"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
		"hedgingPolicy": {"maxAttempts": %d, "hedgingDelay": "%s", "nonFatalStatusCodes": [%s]}
	}]}`, maxAttempts, delay, codes))
}

type hedgeStreamBench struct {
	srv    *testserver.Server
	client testingv1.TestServiceClient
	hooks  hookLog
	ends   ends
}

func newHedgeStreamBench(t *testing.T, cfg *policy.Config, opts ...interceptor.Option) *hedgeStreamBench {
	t.Helper()
	b := &hedgeStreamBench{srv: testserver.New()}
	t.Cleanup(b.srv.Close)
	opts = append([]interceptor.Option{interceptor.WithConfig(cfg), interceptor.WithHook(b.hooks.hook), interceptor.WithCallHook(b.ends.hook)}, opts...)
	cc := b.srv.ClientConn(t, grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(opts...)), grpc.WithDisableRetry())
	b.client = testingv1.NewTestServiceClient(cc)
	return b
}

func allEqual(xs []int32, v int32) bool {
	for _, x := range xs {
		if x != v {
			return false
		}
	}
	return len(xs) > 0
}

// A slow first attempt loses to the hedge sent after the hedging delay, for
// each streaming kind: every message comes from the hedge, once, in order;
// the server sees the first attempt cancelled; the events, the call's end
// and its Report say one hedge won.
func TestHedgedStreamSlowFirstAttemptLoses(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newHedgeStreamBench(t, hedgeStreamFile(t, 3, 100*time.Millisecond, ""))
				var rep interceptor.Report
				start := time.Now()
				r := k.run(context.Background(), b.client, &testingv1.Script{Key: "k", AttemptDelays: durations(10*time.Second, 0)}, 3, interceptor.WithReport(&rep))
				if r.err != nil {
					t.Fatalf("stream: %v", r.err)
				}
				if took := time.Since(start); took != 100*time.Millisecond {
					t.Errorf("stream took %v, want 100ms (the hedge's start)", took)
				}
				if !slices.Equal(r.seqs, seqsTo(3)) || !allEqual(r.attempts, 2) {
					t.Errorf("seqs %v from attempts %v, want 1..3 from attempt 2", r.seqs, r.attempts)
				}
				synctest.Wait()
				recs := b.srv.Attempts("k")
				if len(recs) != 2 || !recs[0].Cancelled || recs[1].Code != codes.OK {
					t.Fatalf("server saw %+v, want 2 attempts: the first cancelled, the second OK", recs)
				}
				if g := gaps(recs); !equalDurations(g, []time.Duration{100 * time.Millisecond}) {
					t.Errorf("hedge sent after %v, want 100ms", g)
				}
				if got := previousAttempts(recs); got[0] != "" || got[1] != "1" {
					t.Errorf("grpc-previous-rpc-attempts = %q, want [\"\" \"1\"]", got)
				}
				if h := b.hooks.kinds(interceptor.EventHedge); len(h) != 1 || h[0].Attempt != 2 || h[0].Pause != 100*time.Millisecond {
					t.Errorf("hedge events = %+v, want one, attempt 2 after 100ms", h)
				}
				if won := b.hooks.kinds(interceptor.EventHedgeWon); len(won) != 1 || won[0].Attempt != 2 {
					t.Errorf("hedge-won events = %+v, want one for attempt 2", won)
				}
				want := interceptor.Report{Attempts: 2, Hedges: 1, Reason: policy.ReasonSuccess, Code: codes.OK, Target: testserver.BufnetTarget}
				if rep != want {
					t.Errorf("report %+v, want %+v", rep, want)
				}
				if ev, _ := b.ends.all(); len(ev) != 1 || ev[0].Hedges != 1 || !ev[0].Hedging {
					t.Errorf("end events %+v, want one with 1 hedge", ev)
				}
			})
		})
	}
}

// A fast first attempt commits before the hedging delay: no hedge is sent.
// Response headers alone commit (headers_first), before any message.
func TestHedgedStreamCommitsAtHeaders(t *testing.T) {
	for _, headersFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("headers first ", headersFirst), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newHedgeStreamBench(t, hedgeStreamFile(t, 3, 100*time.Millisecond, ""))
				delay := 50 * time.Millisecond
				if headersFirst {
					// Headers at once, messages after 500ms: committed at
					// once, so the slow attempt is not hedged.
					delay = 500 * time.Millisecond
				}
				start := time.Now()
				r := runListItems(context.Background(), b.client, &testingv1.Script{Key: "k", HeadersFirst: headersFirst, AttemptDelays: durations(delay, 0)}, 2)
				if r.err != nil || !slices.Equal(r.seqs, seqsTo(2)) || !allEqual(r.attempts, 1) {
					t.Fatalf("seqs %v from attempts %v, err %v; want 1..2 from attempt 1", r.seqs, r.attempts, r.err)
				}
				if took := time.Since(start); took != delay {
					t.Errorf("stream took %v, want %v", took, delay)
				}
				if n := len(b.srv.Attempts("k")); n != 1 {
					t.Errorf("server saw %d attempts, want 1", n)
				}
				if h := b.hooks.kinds(interceptor.EventHedge); len(h) != 0 {
					t.Errorf("hedges sent: %+v", h)
				}
			})
		})
	}
}

// Every hedge gets every message sent before the commit, in order: the
// messages sent before it started in its replay, the later ones as they are
// sent. Upload's failing attempts (UNAVAILABLE, non-fatal) read every
// message until the client closes; the third attempt answers what it read.
func TestHedgedStreamReplaysToEveryHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeStreamBench(t, hedgeStreamFile(t, 3, 100*time.Millisecond, ""))
		st, err := b.client.Upload(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		sc := &testingv1.Script{Key: "k", FailAttempts: 2}
		// Message 1 before any hedge, 2 between the first and the second
		// hedge, 3 after the second: attempts start at 0, 100ms and 200ms.
		send := func(seq int64) {
			m := &testingv1.UploadRequest{Seq: seq}
			if seq == 1 {
				m.Script = sc
			}
			if err := st.Send(m); err != nil {
				t.Fatalf("Send %d: %v", seq, err)
			}
		}
		send(1)
		time.Sleep(150 * time.Millisecond)
		send(2)
		time.Sleep(100 * time.Millisecond)
		send(3)
		time.Sleep(50 * time.Millisecond)
		resp, err := st.CloseAndRecv()
		if err != nil {
			t.Fatalf("CloseAndRecv: %v", err)
		}
		if got := resp.GetReceived(); !slices.Equal(got, seqsTo(3)) || resp.GetReply().GetAttempt() != 3 {
			t.Errorf("attempt %d received %v, want attempt 3 and 1..3", resp.GetReply().GetAttempt(), got)
		}
		synctest.Wait()
		recs := b.srv.Attempts("k")
		if len(recs) != 3 {
			t.Fatalf("server saw %d attempts, want 3", len(recs))
		}
		for i, r := range recs {
			if r.Received != 3 {
				t.Errorf("attempt %d read %d messages, want 3", i+1, r.Received)
			}
		}
		if g := gaps(recs); !equalDurations(g, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}) {
			t.Errorf("gaps %v, want 100ms, 100ms", g)
		}
	})
}

// A bidi stream: messages sent before the commit reach the winning hedge in
// its replay, the ones after go to it alone; the echoes are all its, in order.
func TestHedgedStreamBidiReplay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeStreamBench(t, hedgeStreamFile(t, 2, 100*time.Millisecond, ""))
		st, err := b.client.Chat(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		sc := &testingv1.Script{Key: "k", AttemptDelays: durations(10*time.Second, 0)}
		sent := make(chan error, 1)
		go func() {
			for seq := int64(1); seq <= 4; seq++ {
				m := &testingv1.ChatRequest{Seq: seq}
				if seq == 1 {
					m.Script = sc
				}
				if err := st.Send(m); err != nil {
					sent <- err
					return
				}
				time.Sleep(60 * time.Millisecond) // 1 and 2 before the hedge, 3 and 4 after
			}
			sent <- st.CloseSend()
		}()
		var seqs []int64
		var attempts []int32
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("Recv: %v", err)
			}
			seqs, attempts = append(seqs, m.GetReply().GetSeq()), append(attempts, m.GetReply().GetAttempt())
		}
		if err := <-sent; err != nil {
			t.Fatalf("Send: %v", err)
		}
		if !slices.Equal(seqs, seqsTo(4)) || !allEqual(attempts, 2) {
			t.Errorf("echoes %v from attempts %v, want 1..4 from attempt 2", seqs, attempts)
		}
		synctest.Wait()
		recs := b.srv.Attempts("k")
		if len(recs) != 2 || !recs[0].Cancelled || recs[1].Received != 4 || recs[1].Sent != 4 {
			t.Errorf("server saw %+v, want the first cancelled, the second reading and echoing 4", recs)
		}
	})
}

// A code not in nonFatalStatusCodes ends the call at once with it, and the
// other attempts are cancelled.
func TestHedgedStreamFatalCodeEndsAll(t *testing.T) {
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newHedgeStreamBench(t, hedgeStreamFile(t, 3, 100*time.Millisecond, ""))
				start := time.Now()
				r := k.run(context.Background(), b.client, &testingv1.Script{Key: "k", FailAttempts: 2, Code: int32(codes.InvalidArgument), AttemptDelays: durations(10*time.Second, 0)}, 2)
				if status.Code(r.err) != codes.InvalidArgument {
					t.Fatalf("err = %v, want InvalidArgument", r.err)
				}
				checkFatalSecond(t, r.err, start, b.srv, &b.hooks)
			})
		})
	}
}

// A non-fatal code sends the next hedge at once; when every attempt fails
// the call returns the last status.
func TestHedgedStreamNonFatal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeStreamBench(t, hedgeStreamFile(t, 3, time.Second, ""))
		r := runListItems(context.Background(), b.client, &testingv1.Script{Key: "healed", FailAttempts: 2, AttemptDelays: durations(50*time.Millisecond, 0)}, 2)
		if r.err != nil || !allEqual(r.attempts, 3) {
			t.Fatalf("err %v, attempts %v; want messages from attempt 3", r.err, r.attempts)
		}
		if g := gaps(b.srv.Attempts("healed")); !equalDurations(g, []time.Duration{50 * time.Millisecond, 0}) {
			t.Errorf("gaps = %v, want [50ms 0s]", g)
		}
		r = runListItems(context.Background(), b.client, &testingv1.Script{Key: "down", FailAttempts: 3, Message: "down"}, 2)
		if status.Code(r.err) != codes.Unavailable || status.Convert(r.err).Message() != "down" || interceptor.Attempts(r.err) != 3 {
			t.Errorf("err = %v (%d attempts), want UNAVAILABLE: down after 3", r.err, interceptor.Attempts(r.err))
		}
		if e := b.hooks.last(); e.Kind != interceptor.EventGiveUp || e.Reason != policy.ReasonAttempts || e.Attempt != 3 {
			t.Errorf("last event = %+v, want give up (attempts) on attempt 3", e)
		}
	})
}

// maxAttempts bounds the attempts, every hedgingDelay or all at once; the
// first wins (all are equally slow) and the others are cancelled.
func TestHedgedStreamMaxAttempts(t *testing.T) {
	for _, tt := range hedgeMaxAttemptsTests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newHedgeStreamBench(t, hedgeStreamFile(t, tt.file, tt.delay, ""))
				r := runChat(context.Background(), b.client, &testingv1.Script{Key: "k", Delay: durationpb.New(time.Second)}, 2)
				if r.err != nil || !slices.Equal(r.seqs, seqsTo(2)) {
					t.Fatalf("seqs %v, err %v", r.seqs, r.err)
				}
				synctest.Wait()
				recs := b.srv.Attempts("k")
				if len(recs) != tt.want {
					t.Fatalf("server saw %d attempts, want %d", len(recs), tt.want)
				}
				if g := gaps(recs); !equalDurations(g, tt.wantGaps) {
					t.Errorf("gaps = %v, want %v", g, tt.wantGaps)
				}
				if tt.delay == 0 {
					// All end at the same instant: the losers may finish
					// before their cancellation reaches the server.
					return
				}
				cancelled := 0
				for _, rec := range recs {
					if rec.Cancelled {
						cancelled++
					}
				}
				if cancelled != tt.want-1 {
					t.Errorf("%d attempts cancelled, want %d: %+v", cancelled, tt.want-1, recs)
				}
			})
		})
	}
}

// Context commits the stream, as grpc-go's does: called before any attempt
// answered, it commits to the first and no hedge is sent.
func TestHedgedStreamContextCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeStreamBench(t, hedgeStreamFile(t, 3, 100*time.Millisecond, ""))
		st, err := b.client.ListItems(context.Background(), &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "k", ResponseCount: 1, AttemptDelays: durations(300*time.Millisecond, 0)}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := st.Context()
		m, err := st.Recv()
		if err != nil || m.GetReply().GetAttempt() != 1 {
			t.Fatalf("Recv: %v, %v; want attempt 1's message", m, err)
		}
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("Recv: %v, want io.EOF", err)
		}
		synctest.Wait()
		if n := len(b.srv.Attempts("k")); n != 1 {
			t.Errorf("server saw %d attempts, want 1", n)
		}
		if ctx.Err() == nil {
			// grpc-go's stream context ends with the stream.
			t.Log("stream context still live after the end")
		}
	})
}

// The caller cancelling ends every attempt: the server sees each cancelled.
func TestHedgedStreamCallerCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeStreamBench(t, hedgeStreamFile(t, 3, 100*time.Millisecond, ""))
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(150*time.Millisecond, cancel)
		r := runListItems(ctx, b.client, &testingv1.Script{Key: "k", Delay: durationpb.New(time.Second)}, 2)
		if status.Code(r.err) != codes.Canceled {
			t.Fatalf("err = %v, want Canceled", r.err)
		}
		synctest.Wait()
		recs := b.srv.Attempts("k")
		if len(recs) != 2 || !recs[0].Cancelled || !recs[1].Cancelled {
			t.Errorf("server saw %+v, want 2 attempts, both cancelled", recs)
		}
		if e := b.hooks.last(); e.Kind != interceptor.EventGiveUp || e.Reason != policy.ReasonCaller {
			t.Errorf("last event = %+v, want give up (caller)", e)
		}
	})
}

// Every hedge asks the budget; a refusal stops hedging and the attempts in
// flight go on. The losers count for nothing in the budget.
func TestHedgedStreamBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bud := &refusingBudget{allow: 1}
		b := newHedgeStreamBench(t, hedgeStreamFile(t, 5, 100*time.Millisecond, ""), interceptor.WithBudget(bud))
		r := runListItems(context.Background(), b.client, &testingv1.Script{Key: "k", AttemptDelays: durations(time.Second, 500*time.Millisecond)}, 1)
		if r.err != nil || !allEqual(r.attempts, 2) {
			t.Fatalf("err %v, attempts %v; want the hedge's message", r.err, r.attempts)
		}
		synctest.Wait()
		if n := len(b.srv.Attempts("k")); n != 2 {
			t.Errorf("server saw %d attempts, want 2", n)
		}
		bud.mu.Lock()
		defer bud.mu.Unlock()
		want := []budget2{{2, true}, {3, true}}
		var got []budget2
		for _, q := range bud.asked {
			got = append(got, budget2{q.Number, q.Hedge})
		}
		if !slices.Equal(got, want) {
			t.Errorf("budget asked %+v, want %+v", got, want)
		}
		if len(bud.recorded) != 2 {
			t.Errorf("budget recorded %+v, want 2 attempts", bud.recorded)
		}
		if stops := b.hooks.kinds(interceptor.EventHedgeStop); len(stops) != 1 || stops[0].Reason != policy.ReasonBudget {
			t.Errorf("hedge-stop events = %+v, want one, budget", stops)
		}
	})
}

type budget2 struct {
	n     int
	hedge bool
}

// A message that overflows the replay buffer commits the stream to the
// oldest attempt open: no hedge follows, though the first attempt is slow.
func TestHedgedStreamOverflowCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeStreamBench(t, hedgeStreamFile(t, 3, 100*time.Millisecond, ""), interceptor.WithReplayBufferSize(64))
		st, err := b.client.Upload(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := st.Send(&testingv1.UploadRequest{Seq: 1, Script: &testingv1.Script{Key: "k", AttemptDelays: durations(300*time.Millisecond, 0)}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		if err := st.Send(&testingv1.UploadRequest{Seq: 2, Payload: make([]byte, 100)}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.CloseAndRecv()
		if err != nil {
			t.Fatalf("CloseAndRecv: %v", err)
		}
		if resp.GetReply().GetAttempt() != 1 || !slices.Equal(resp.GetReceived(), seqsTo(2)) || time.Since(start) != 300*time.Millisecond {
			t.Errorf("attempt %d received %v after %v, want attempt 1, 1..2, after 300ms", resp.GetReply().GetAttempt(), resp.GetReceived(), time.Since(start))
		}
		if n := len(b.srv.Attempts("k")); n != 1 {
			t.Errorf("server saw %d attempts, want 1", n)
		}
	})
}

// Pushback before the commit: a valid one delays the next hedge by that
// much, a negative one stops hedging.
func TestHedgedStreamPushback(t *testing.T) {
	tests := []struct {
		name      string
		pushback  string
		wantCode  codes.Code
		wantGaps  []time.Duration
		wantCount int
	}{
		{"valid pushback delays the next hedge", "300", codes.OK, []time.Duration{300 * time.Millisecond}, 2},
		{"negative pushback stops hedging", "-1", codes.Unavailable, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newHedgeStreamBench(t, hedgeStreamFile(t, 3, time.Second, ""))
				r := runListItems(context.Background(), b.client, &testingv1.Script{Key: "k", FailAttempts: 1, Pushback: []string{tt.pushback}}, 1)
				if status.Code(r.err) != tt.wantCode {
					t.Fatalf("err = %v, want %v", r.err, tt.wantCode)
				}
				recs := b.srv.Attempts("k")
				if len(recs) != tt.wantCount {
					t.Fatalf("server saw %d attempts, want %d", len(recs), tt.wantCount)
				}
				if g := gaps(recs); !equalDurations(g, tt.wantGaps) {
					t.Errorf("gaps = %v, want %v", g, tt.wantGaps)
				}
				if tt.wantCode != codes.OK {
					if e := b.hooks.last(); e.Kind != interceptor.EventGiveUp || e.Reason != policy.ReasonPushback {
						t.Errorf("last event = %+v, want give up (pushback)", e)
					}
				}
			})
		})
	}
}

// streamAttemptEcho is a server stream interceptor that puts each attempt's
// number, as the client numbered it, in a response header (sent with the
// first message) and a trailer.
func streamAttemptEcho(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	n := 1
	if md, ok := metadata.FromIncomingContext(ss.Context()); ok {
		if v := md.Get("grpc-previous-rpc-attempts"); len(v) == 1 {
			p, _ := strconv.Atoi(v[0])
			n = p + 1
		}
	}
	s := strconv.Itoa(n)
	_ = ss.SetHeader(metadata.Pairs("x-attempt", s))
	ss.SetTrailer(metadata.Pairs("x-attempt-trailer", s))
	return handler(srv, ss)
}

// The caller's grpc.Header, Trailer and Peer options get the winner's, and
// its OnFinish runs once; the stream's Header and Trailer are the winner's.
func TestHedgedStreamCallerOptionsGetTheWinners(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testserver.New(testserver.WithServerOptions(grpc.ChainStreamInterceptor(streamAttemptEcho)))
		t.Cleanup(srv.Close)
		cc := srv.ClientConn(t, grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(
			interceptor.WithConfig(hedgeStreamFile(t, 2, 100*time.Millisecond, "")))), grpc.WithDisableRetry())
		client := testingv1.NewTestServiceClient(cc)
		var header, trailer metadata.MD
		var p peer.Peer
		var finished []error
		st, err := client.ListItems(context.Background(), &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "k", ResponseCount: 2, AttemptDelays: durations(10*time.Second, 0)}},
			grpc.Header(&header), grpc.Trailer(&trailer), grpc.Peer(&p), grpc.OnFinish(func(err error) { finished = append(finished, err) }))
		if err != nil {
			t.Fatal(err)
		}
		if md, err := st.Header(); err != nil || !slices.Equal(md.Get("x-attempt"), []string{"2"}) {
			t.Errorf("Header() = %v, %v; want x-attempt 2", md, err)
		}
		for {
			if _, err := st.Recv(); err != nil {
				if err != io.EOF {
					t.Fatalf("Recv: %v", err)
				}
				break
			}
		}
		if got := st.Trailer().Get("x-attempt-trailer"); !slices.Equal(got, []string{"2"}) {
			t.Errorf("Trailer() x-attempt-trailer = %q, want [2]", got)
		}
		if got := header.Get("x-attempt"); !slices.Equal(got, []string{"2"}) {
			t.Errorf("grpc.Header x-attempt = %q, want the winner's [2]", got)
		}
		if got := trailer.Get("x-attempt-trailer"); !slices.Equal(got, []string{"2"}) {
			t.Errorf("grpc.Trailer x-attempt-trailer = %q, want the winner's [2]", got)
		}
		if p.Addr == nil {
			t.Error("peer not set")
		}
		if len(finished) != 1 || finished[0] != nil {
			t.Errorf("OnFinish ran with %v, want once with nil", finished)
		}
	})
}

// BenchmarkHedgedStreamCall measures one whole ListItems call of 5 messages
// whose first attempt answers at once: grpc alone, stagger retrying, and
// stagger hedging (no hedge leaves: the first attempt commits long before
// the delay). The hedged stream's cost is its goroutines (the driver and
// the attempt's watcher) and its bookkeeping.
func BenchmarkHedgedStreamCall(b *testing.B) {
	retry := `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	hedge := `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
		"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "10s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`
	for _, bc := range []struct{ name, file string }{{"none", ""}, {"retry", retry}, {"hedge", hedge}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := testserver.New()
			defer srv.Close()
			var dial []grpc.DialOption
			if bc.file != "" {
				cfg, err := policy.ParseConfig([]byte(bc.file))
				if err != nil {
					b.Fatal(err)
				}
				dial = append(dial, grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(interceptor.WithConfig(cfg))))
			}
			cc := srv.ClientConn(b, append(dial, grpc.WithDisableRetry())...)
			client := testingv1.NewTestServiceClient(cc)
			req := &testingv1.ListItemsRequest{Script: &testingv1.Script{ResponseCount: 5}}
			var resp testingv1.ListItemsResponse
			b.ReportAllocs()
			for b.Loop() {
				st, err := client.ListItems(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if err := st.RecvMsg(&resp); err != nil {
						if err != io.EOF {
							b.Fatal(err)
						}
						break
					}
				}
			}
		})
	}
}

// A hedge that could not leave before the caller's deadline is not sent:
// the stream returns the real status at once.
func TestHedgedStreamDeadlineAware(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newHedgeStreamBench(t, hedgeStreamFile(t, 3, time.Second, ""))
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		r := runListItems(ctx, b.client, &testingv1.Script{Key: "k", FailAttempts: 1, Pushback: []string{"600"}}, 1)
		if status.Code(r.err) != codes.Unavailable || time.Since(start) != 0 {
			t.Errorf("err = %v after %v, want UNAVAILABLE at once", r.err, time.Since(start))
		}
		if e := b.hooks.last(); e.Kind != interceptor.EventGiveUp || e.Reason != policy.ReasonDeadline {
			t.Errorf("last event = %+v, want give up (deadline)", e)
		}
	})
}

// TestHedgedStreamAbandonedSettles: a caller that cancels a hedged stream
// after it committed, without reading it to its end, still settles every
// admission the stream took: the budget hears the winner's attempt as it
// heard the loser's (STYLE's rule that every admission is settled), and the
// call ends (EventEnd, reason caller).
func TestHedgedStreamAbandonedSettles(t *testing.T) {
	for _, abandon := range []string{"cancel", "deadline"} {
		t.Run(abandon, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bud := &refusingBudget{allow: 10}
				b := newHedgeStreamBench(t, hedgeStreamFile(t, 2, 100*time.Millisecond, ""), interceptor.WithBudget(bud))
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if abandon == "deadline" {
					ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
					defer cancel()
				}
				// The first attempt answers after 1s, the hedge at once: the
				// hedge wins, and the caller reads one of its 3 messages.
				st, err := b.client.ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{
					Key: "k", AttemptDelays: durations(time.Second, 0), ResponseCount: 3,
				}})
				if err != nil {
					t.Fatalf("ListItems: %v", err)
				}
				if _, err := st.Recv(); err != nil {
					t.Fatalf("Recv: %v", err)
				}
				// Abandoned: no more reads, no CloseSend.
				if abandon == "cancel" {
					cancel()
				}
				time.Sleep(5 * time.Second)
				synctest.Wait()
				bud.mu.Lock()
				recorded := slices.Clone(bud.recorded)
				bud.mu.Unlock()
				if len(recorded) != 2 {
					t.Errorf("budget recorded %+v, want 2 attempts (the loser and the abandoned winner)", recorded)
				}
				evs, _ := b.ends.all()
				if len(evs) != 1 || evs[0].Reason != policy.ReasonCaller {
					t.Errorf("end events %+v, want one, reason caller", evs)
				}
			})
		})
	}
}
