package test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
)

// headerRace is what the server of TestRealTimeHeadersMeetTimer saw of one
// call: the attempts that reached it, and whether the first was cancelled.
type headerRace struct {
	attempts       atomic.Int32
	firstSeen      atomic.Bool // a loaded machine can cut it off before it left
	firstCancelled atomic.Bool
	done           chan struct{} // closed as the first attempt's handler returns
}

// A unary attempt's response headers meet its per-attempt timer
// (stagger.DialOptions installs interceptor.HeaderWatch). Calls leave 2ms
// apart, in threes: the first attempt sends its headers at once, or around
// the timer's cut (rtFile's timer plus its pause), then its reply 150ms
// later; the third call is answered at once (so the timer does not take the
// server for slow for every attempt, and cuts). A retry answers at once.
// Headers that came before the cut commit the call: no retry goes and the
// first attempt's reply is the caller's; headers after it find the attempt
// cut off, and the retry's answer is the caller's. Either way the caller
// sees one attempt's header and reply, the Report counts up to it, and the
// server saw a retry only of a first attempt it saw cancelled (or never
// saw: a loaded machine can cut one off before it left). The path
// under test: a call whose headers came at once committed by them (without
// the watch, each is cut off and retried).
func TestRealTimeHeadersMeetTimer(t *testing.T) {
	var calls sync.Map // call id -> *headerRace
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
			return err
		}
		md, _ := metadata.FromIncomingContext(ss.Context())
		v, _ := calls.Load(md.Get("x-call")[0])
		r := v.(*headerRace)
		n := int(r.attempts.Add(1))
		if len(md.Get("grpc-previous-rpc-attempts")) > 0 {
			_ = ss.SendHeader(metadata.Pairs("x-attempt", md.Get("grpc-previous-rpc-attempts")[0]))
			return ss.SendMsg(&emptypb.Empty{})
		}
		r.firstSeen.Store(true)
		defer close(r.done)
		headerAt, _ := time.ParseDuration(md.Get("x-header-at")[0])
		replyAfter, _ := time.ParseDuration(md.Get("x-reply-after")[0])
		for _, d := range []time.Duration{headerAt, replyAfter} {
			select {
			case <-time.After(d):
			case <-ss.Context().Done():
				r.firstCancelled.Store(true)
				return status.FromContextError(ss.Context().Err()).Err()
			}
			if d == headerAt {
				_ = ss.SendHeader(metadata.Pairs("x-attempt", strconv.Itoa(n-1)))
			}
		}
		return ss.SendMsg(&emptypb.Empty{})
	}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), append(stagger.DialOptions(rtConfig(t, rtFile), interceptor.WithBudget(nil)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	const method = "/stagger.testing.v1.TestService/Get"
	const n = 51
	var healthy, raceCommitted, raceCut atomic.Int32
	for b := 0; b < rtMaxBatches && healthy.Load() < rtMinHealthy; b++ {
		spaced(n, 2*time.Millisecond, func(j int) {
			i := b*n + j
			headerAt, replyAfter := time.Duration(0), 150*time.Millisecond
			switch j % 3 {
			case 1:
				headerAt = rtPerAttempt + rtPause + time.Duration(j%41-20)*time.Millisecond
			case 2:
				replyAfter = 0
			}
			r := &headerRace{done: make(chan struct{})}
			calls.Store(strconv.Itoa(i), r)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "x-call", strconv.Itoa(i), "x-header-at", headerAt.String(), "x-reply-after", replyAfter.String())
			var rep interceptor.Report
			var header metadata.MD
			var finished atomic.Int32
			err := cc.Invoke(ctx, method, &emptypb.Empty{}, new(emptypb.Empty), interceptor.WithMaxAttempts(2), interceptor.WithReport(&rep),
				grpc.Header(&header), grpc.OnFinish(func(error) { finished.Add(1) }))
			firstSeen := r.firstSeen.Load()
			if firstSeen {
				select {
				case <-r.done:
				case <-ctx.Done():
				}
			}
			got := header.Get("x-attempt")
			if err != nil || len(got) != 1 || got[0] != strconv.Itoa(rep.Attempts-1) || finished.Load() != 1 {
				t.Errorf("call %d (headers after %v): %v, Report.Attempts %d, header x-attempt %v, OnFinish ran %d times; want OK with one attempt's answer, the Report counting to it",
					i, headerAt, err, rep.Attempts, got, finished.Load())
				return
			}
			switch seen, cut := int(r.attempts.Load()), r.firstCancelled.Load(); {
			case rep.Attempts == 1 && (seen != 1 || cut):
				t.Errorf("call %d (headers after %v): the first attempt's answer, but the server saw %d attempts, the first cancelled: %v", i, headerAt, seen, cut)
			case rep.Attempts == 2 && firstSeen && !cut:
				t.Errorf("call %d (headers after %v): the retry's answer, but the first attempt was not cancelled", i, headerAt)
			}
			switch {
			case j%3 == 0 && rep.Attempts == 1:
				healthy.Add(1)
			case j%3 == 1 && rep.Attempts == 1:
				raceCommitted.Add(1)
			case j%3 == 1:
				raceCut.Add(1)
			}
		})
	}
	if got := healthy.Load(); got < rtMinHealthy {
		t.Errorf("%d calls with headers at once were committed by them, want at least %d", got, rtMinHealthy)
	}
	t.Logf("headers around the cut: %d calls committed by them, %d cut off", raceCommitted.Load(), raceCut.Load())
}
