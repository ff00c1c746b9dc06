//go:build go1.25

package test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// refusingSend is a grpc stream below stagger whose SendMsg holds the
// message until the attempt's context ends, then refuses it with an error
// other than io.EOF, as grpc does for a message it cannot send.
type refusingSend struct{ grpc.ClientStream }

func (r refusingSend) SendMsg(any) error {
	<-r.Context().Done()
	return status.Error(codes.Internal, "test: message refused")
}

// TestStreamTimerCutDuringReplay: a client stream's attempt 1 fails, and
// attempt 2's replay hangs until its per-attempt timer (perAttemptFile:
// 1s, then a 100ms pause as grace) admits the retry and cuts it off, then
// fails as grpc refuses the message. The attempt was cut off, as any other
// end of an attempt would say: its retry goes with the timer's admission,
// which attempt 3's Record settles, and the call succeeds. Before, that end
// of an attempt never handed the timer's verdict to the call: the call
// ended INTERNAL and the admission was never given back.
func TestStreamTimerCutDuringReplay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &admitCounter{}
		srv := testserver.New()
		t.Cleanup(srv.Close)
		var opened atomic.Int32
		refuseSecond := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err == nil && opened.Add(1) == 2 {
				cs = refusingSend{cs}
			}
			return cs, err
		}
		cc := srv.ClientConn(t, grpc.WithChainStreamInterceptor(
			interceptor.StreamClientInterceptor(interceptor.WithConfig(parse(t, perAttemptFile)), interceptor.WithBudget(b)),
			refuseSecond), grpc.WithDisableRetry())
		r := runUpload(context.Background(), testingv1.NewTestServiceClient(cc),
			&testingv1.Script{Key: "k", FailAttempts: 1, MessagesBeforeFailure: 1}, 1, interceptor.Idempotent())
		synctest.Wait()
		if r.err != nil {
			t.Errorf("call: %v, want OK: attempt 2 was cut off, its retry admitted", r.err)
		}
		if n := opened.Load(); n != 3 {
			t.Errorf("%d attempts opened, want 3", n)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.admits != 1 || len(b.settled) != 1 || b.settled[0].Number != 3 {
			t.Errorf("the budget gave %d admissions and was told back %+v; want the timer's one admission settled by attempt 3", b.admits, b.settled)
		}
	})
}
