package interceptor_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The replay bound holds while no attempt is live: a bidi stream whose
// first attempt failed waits out a 2 s pushback on its reader's goroutine
// while another sends 256 messages of 64 KiB against a 1 MiB bound. The
// sender is held, as flow control would hold it, once the buffer is past
// the bound by one message (before: SendMsg returned at once and the
// buffer took all 16.8 MB); when the next attempt goes live the stream
// commits to it and every message arrives, once, in order.
func TestReplayBoundHoldsInPause(t *testing.T) {
	noLeakAfter(t)
	srv := testserver.New()
	defer srv.Close()
	const bound, msgs, size = 1 << 20, 256, 64 << 10
	retried := make(chan struct{}, 1)
	client := fencedClient(t, srv, interceptor.WithConfig(mustParse(fenceRetryFile)), interceptor.WithReplayBufferSize(bound),
		interceptor.WithHook(func(e interceptor.Event) {
			if e.Kind == interceptor.EventRetry {
				retried <- struct{}{}
			}
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := client.Chat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sc := &testingv1.Script{Key: "chat", FailAttempts: 1, Pushback: []string{"2000"}}
	if err := st.Send(&testingv1.ChatRequest{Script: sc}); err != nil {
		t.Fatal(err)
	}
	echoes := make(chan []int64, 1)
	go func() {
		var seqs []int64
		for {
			m, err := st.Recv()
			if err != nil {
				if err != io.EOF {
					t.Errorf("Recv: %v", err)
				}
				echoes <- seqs
				return
			}
			seqs = append(seqs, m.GetReply().GetSeq())
		}
	}()
	<-retried // the reader is in the pause: no attempt is live
	var sent atomic.Int64
	sendErr := make(chan error, 1)
	go func() {
		payload := make([]byte, size)
		for i := 1; i <= msgs; i++ {
			if err := st.Send(&testingv1.ChatRequest{Seq: int64(i), Payload: payload}); err != nil {
				sendErr <- err
				return
			}
			sent.Add(1)
		}
		sendErr <- st.CloseSend()
	}()
	time.Sleep(500 * time.Millisecond) // well inside the pause
	if n := sent.Load(); n*size > bound+size {
		t.Errorf("%d messages of %d KiB (%.1f MiB) taken in the pause; want the sender held past the %d MiB bound by one message", n, size>>10, float64(n*size)/(1<<20), bound>>20)
	}
	if err := <-sendErr; err != nil {
		t.Fatalf("sending after the pause: %v", err)
	}
	seqs := <-echoes
	if len(seqs) != msgs+1 {
		t.Fatalf("%d echoes, want %d", len(seqs), msgs+1)
	}
	for i, s := range seqs {
		if s != int64(i) {
			t.Fatalf("echo %d has seq %d: want every message once, in order", i, s)
		}
	}
}
