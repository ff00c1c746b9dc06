package staggerconnect_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"connectrpc.com/connect"

	staggerconnect "github.com/stagger-go/stagger/connect"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// streamProtocols are the protocols that carry every kind of stream: bidi
// needs HTTP/2 (connect-go's HTTP/1.1 client sends a stream's request
// before it reads the response).
func streamProtocols(bidi bool) []protocol {
	if !bidi {
		return protocols
	}
	var out []protocol
	for _, p := range protocols {
		if p.h2c {
			out = append(out, p)
		}
	}
	return out
}

func TestServerStreamRetried(t *testing.T) {
	for _, p := range streamProtocols(false) {
		t.Run(p.name, func(t *testing.T) {
			ts := newTestServer(t, p.h2c, nil)
			var rep interceptor.Report
			client := ts.testClient(p, newClient(t, retryFile))
			ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
			st, err := client.ListItems(ctx, connect.NewRequest(&testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 2, ResponseCount: 3}}))
			if err != nil {
				t.Fatal(err)
			}
			var seqs []int64
			for st.Receive() {
				if a := st.Msg().GetReply().GetAttempt(); a != 3 {
					t.Errorf("message from attempt %d, want 3", a)
				}
				seqs = append(seqs, st.Msg().GetReply().GetSeq())
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			_ = st.Close()
			if !slices.Equal(seqs, []int64{1, 2, 3}) {
				t.Errorf("received %v, want [1 2 3]", seqs)
			}
			if rep.Attempts != 3 {
				t.Errorf("%d attempts, want 3", rep.Attempts)
			}
		})
	}
}

func TestServerStreamCommitted(t *testing.T) {
	for _, p := range streamProtocols(false) {
		t.Run(p.name, func(t *testing.T) {
			ts := newTestServer(t, p.h2c, nil)
			var rep interceptor.Report
			client := ts.testClient(p, newClient(t, retryFile))
			ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
			st, err := client.ListItems(ctx, connect.NewRequest(&testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "k", FailAttempts: 1, MessagesBeforeFailure: 1, ResponseCount: 3}}))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for st.Receive() {
				n++
			}
			_ = st.Close()
			if n != 1 || connect.CodeOf(st.Err()) != connect.CodeUnavailable {
				t.Errorf("received %d then %v; want 1 then unavailable (committed: not retried)", n, st.Err())
			}
			if rep.Attempts != 1 || rep.Reason != policy.ReasonCommitted {
				t.Errorf("report %+v, want 1 attempt, committed", rep)
			}
		})
	}
}

func TestClientStreamRetried(t *testing.T) {
	for _, p := range streamProtocols(false) {
		t.Run(p.name, func(t *testing.T) {
			ts := newTestServer(t, p.h2c, nil)
			var rep interceptor.Report
			client := ts.testClient(p, newClient(t, retryFile))
			ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
			st := client.Upload(ctx)
			st.RequestHeader().Set("x-app", "mine")
			for i := int64(1); i <= 3; i++ {
				m := &testingv1.UploadRequest{Seq: i}
				if i == 1 {
					m.Script = &testingv1.Script{Key: "k", FailAttempts: 1}
				}
				if err := st.Send(m); err != nil && !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
			}
			resp, err := st.CloseAndReceive()
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Msg.GetReceived(); !slices.Equal(got, []int64{1, 2, 3}) {
				t.Errorf("server received %v, want [1 2 3]", got)
			}
			if rep.Attempts != 2 {
				t.Errorf("%d attempts, want 2", rep.Attempts)
			}
			for i, h := range ts.svc.Record("k").Headers {
				if h.Get("x-app") != "mine" {
					t.Errorf("attempt %d lost the application's header", i+1)
				}
			}
		})
	}
}

func TestBidiStreamRetried(t *testing.T) {
	for _, p := range streamProtocols(true) {
		t.Run(p.name, func(t *testing.T) {
			ts := newTestServer(t, p.h2c, nil)
			var rep interceptor.Report
			client := ts.testClient(p, newClient(t, retryFile))
			ctx := staggerconnect.WithCallOptions(context.Background(), interceptor.WithReport(&rep))
			st := client.Chat(ctx)
			for i := int64(1); i <= 2; i++ {
				m := &testingv1.ChatRequest{Seq: i}
				if i == 1 {
					m.Script = &testingv1.Script{Key: "k", FailAttempts: 1}
				}
				if err := st.Send(m); err != nil && !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
			}
			if err := st.CloseRequest(); err != nil {
				t.Fatal(err)
			}
			var seqs []int64
			for m, err := st.Receive(); !errors.Is(err, io.EOF); m, err = st.Receive() {
				if err != nil {
					t.Fatal(err)
				}
				if a := m.GetReply().GetAttempt(); a != 2 {
					t.Errorf("message from attempt %d, want 2", a)
				}
				seqs = append(seqs, m.GetReply().GetSeq())
			}
			_ = st.CloseResponse()
			if !slices.Equal(seqs, []int64{1, 2}) {
				t.Errorf("received %v, want [1 2]", seqs)
			}
			if rep.Attempts != 2 {
				t.Errorf("%d attempts, want 2", rep.Attempts)
			}
		})
	}
}
