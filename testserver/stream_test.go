package testserver_test

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

func TestListItems(t *testing.T) {
	cases := []struct {
		name        string
		script      *testingv1.Script
		wantSeqs    []int64
		wantCode    codes.Code
		wantHeaders bool
		startAfter  int64
	}{
		{"success", &testingv1.Script{ResponseCount: 3, PayloadBytes: 7}, []int64{1, 2, 3}, codes.OK, true, 0},
		{"empty success", &testingv1.Script{}, nil, codes.OK, false, 0},
		{"fail after two", &testingv1.Script{FailAttempts: 1, MessagesBeforeFailure: 2, ResponseCount: 5, Code: int32(codes.Internal)}, []int64{1, 2}, codes.Internal, true, 0},
		{"trailers only", &testingv1.Script{FailAttempts: 1, ResponseCount: 5}, nil, codes.Unavailable, false, 0},
		{"headers then fail", &testingv1.Script{FailAttempts: 1, HeadersFirst: true, ResponseCount: 5}, nil, codes.Unavailable, true, 0},
		{"start after two", &testingv1.Script{ResponseCount: 5}, []int64{3, 4, 5}, codes.OK, true, 2},
		{"start past the end", &testingv1.Script{ResponseCount: 3}, nil, codes.OK, false, 5},
		{"fail after two from four", &testingv1.Script{FailAttempts: 1, MessagesBeforeFailure: 2, ResponseCount: 10}, []int64{4, 5}, codes.Unavailable, true, 3},
		{"fail at the end of the list", &testingv1.Script{FailAttempts: 1, MessagesBeforeFailure: 5, ResponseCount: 4}, []int64{3, 4}, codes.Unavailable, true, 2},
	}
	forEachTransport(t, nil, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				tc.script.Key = t.Name()
				stream, err := client.ListItems(callCtx(t), &testingv1.ListItemsRequest{Script: tc.script, StartAfter: tc.startAfter})
				if err != nil {
					t.Fatal(err)
				}
				var seqs []int64
				for {
					m, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						err = nil
					}
					if err != nil || m == nil {
						if status.Code(err) != tc.wantCode {
							t.Fatalf("got %v, want %v", err, tc.wantCode)
						}
						break
					}
					if len(m.GetReply().GetPayload()) != int(tc.script.PayloadBytes) {
						t.Errorf("payload of %d bytes, want %d", len(m.GetReply().GetPayload()), tc.script.PayloadBytes)
					}
					seqs = append(seqs, m.GetReply().GetSeq())
				}
				if !slices.Equal(seqs, tc.wantSeqs) {
					t.Errorf("got seqs %v, want %v", seqs, tc.wantSeqs)
				}
				recs := s.Attempts(t.Name())
				if len(recs) != 1 || recs[0].Code != tc.wantCode || recs[0].Sent != len(tc.wantSeqs) || recs[0].HeadersSent != tc.wantHeaders {
					t.Errorf("records %+v, want one ending %v after %d messages, headers %v", recs, tc.wantCode, len(tc.wantSeqs), tc.wantHeaders)
				}
			})
		}
		if got := s.Executions(testingv1.TestService_ListItems_FullMethodName); got != 4 {
			t.Errorf("Executions(ListItems) = %d, want 4", got)
		}
	})
}

// A negative start_after is refused, naming the field, and not recorded.
func TestListItemsNegativeStart(t *testing.T) {
	forEachTransport(t, nil, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		stream, err := testingv1.NewTestServiceClient(cc).ListItems(callCtx(t), &testingv1.ListItemsRequest{Script: &testingv1.Script{Key: "k", ResponseCount: 3}, StartAfter: -1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "start_after") {
			t.Errorf("got %v, want INVALID_ARGUMENT naming start_after", err)
		}
		if n := len(s.Attempts("k")); n != 0 {
			t.Errorf("%d attempts recorded, want 0", n)
		}
	})
}

// reset_attempts breaks a ListItems stream mid-way: its connection is
// dropped after at most messages_before_failure messages; the next attempt
// of the key sends the rest.
func TestListItemsReset(t *testing.T) {
	forEachTransport(t, nil, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		sc := &testingv1.Script{Key: "k", ResetAttempts: 1, MessagesBeforeFailure: 2, ResponseCount: 5}
		read := func(start int64) (seqs []int64, err error) {
			stream, err := client.ListItems(callCtx(t), &testingv1.ListItemsRequest{Script: sc, StartAfter: start}, grpc.WaitForReady(true))
			if err != nil {
				return nil, err
			}
			for {
				m, err := stream.Recv()
				if err != nil {
					if errors.Is(err, io.EOF) {
						err = nil
					}
					return seqs, err
				}
				seqs = append(seqs, m.GetReply().GetSeq())
			}
		}
		seqs, err := read(0)
		if status.Code(err) != codes.Unavailable || len(seqs) > 2 || !slices.Equal(seqs, seqsTo(len(seqs))) {
			t.Fatalf("first attempt: seqs %v, %v; want at most 1, 2, then UNAVAILABLE", seqs, err)
		}
		rest, err := read(int64(len(seqs)))
		if err != nil || !slices.Equal(append(seqs, rest...), seqsTo(5)) {
			t.Fatalf("second attempt: seqs %v, %v; want the rest of 1..5", rest, err)
		}
		recs := s.Attempts("k")
		if len(recs) != 2 || !recs[0].Reset || recs[0].Sent != 2 || recs[1].Reset || recs[1].Code != codes.OK {
			t.Errorf("records %+v, want a reset after 2 messages, then OK", recs)
		}
	})
}

func seqsTo(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

func TestUpload(t *testing.T) {
	cases := []struct {
		name         string
		script       *testingv1.Script
		send         int
		wantCode     codes.Code
		wantReceived int
	}{
		{"success", &testingv1.Script{}, 4, codes.OK, 4},
		{"fail after everything", &testingv1.Script{FailAttempts: 1}, 4, codes.Unavailable, 4},
		{"fail after two", &testingv1.Script{FailAttempts: 1, MessagesBeforeFailure: 2, Code: int32(codes.Aborted)}, 4, codes.Aborted, 2},
		{"limit beyond what is sent", &testingv1.Script{FailAttempts: 1, MessagesBeforeFailure: 9}, 3, codes.Unavailable, 3},
	}
	forEachTransport(t, nil, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				tc.script.Key = t.Name()
				stream, err := client.Upload(callCtx(t))
				if err != nil {
					t.Fatal(err)
				}
				var sent []int64
				for i := 1; i <= tc.send; i++ {
					req := &testingv1.UploadRequest{Seq: int64(10 * i)}
					if i == 1 {
						req.Script = tc.script
					}
					// io.EOF means the server already ended the RPC; the
					// status comes from CloseAndRecv.
					if err := stream.Send(req); err != nil {
						if !errors.Is(err, io.EOF) {
							t.Fatal(err)
						}
						break
					}
					sent = append(sent, req.Seq)
				}
				resp, err := stream.CloseAndRecv()
				if status.Code(err) != tc.wantCode {
					t.Fatalf("got %v, want %v", err, tc.wantCode)
				}
				if tc.wantCode == codes.OK && !slices.Equal(resp.GetReceived(), sent) {
					t.Errorf("server received %v, client sent %v", resp.GetReceived(), sent)
				}
				recs := s.Attempts(t.Name())
				if len(recs) != 1 || recs[0].Code != tc.wantCode || recs[0].Received != tc.wantReceived || recs[0].Method != testingv1.TestService_Upload_FullMethodName {
					t.Errorf("records %+v, want one ending %v after %d messages", recs, tc.wantCode, tc.wantReceived)
				}
			})
		}
	})
}

func TestChat(t *testing.T) {
	cases := []struct {
		name      string
		script    *testingv1.Script
		send      int
		wantCode  codes.Code
		wantEchos int
	}{
		{"success", &testingv1.Script{}, 3, codes.OK, 3},
		{"fail at once", &testingv1.Script{FailAttempts: 1}, 3, codes.Unavailable, 0},
		{"fail after two echoes", &testingv1.Script{FailAttempts: 1, MessagesBeforeFailure: 2, Code: int32(codes.Unavailable)}, 3, codes.Unavailable, 2},
		{"client closes first", &testingv1.Script{FailAttempts: 1, MessagesBeforeFailure: 5}, 2, codes.Unavailable, 2},
	}
	forEachTransport(t, nil, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				tc.script.Key = t.Name()
				stream, err := client.Chat(callCtx(t))
				if err != nil {
					t.Fatal(err)
				}
				var echoes []int64
				var final error
				// Lock step: send one, read its echo, so the test knows exactly
				// which message the failure followed.
				for i := 1; i <= tc.send && final == nil; i++ {
					req := &testingv1.ChatRequest{Seq: int64(i)}
					if i == 1 {
						req.Script = tc.script
					}
					if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
						t.Fatal(err)
					}
					m, err := stream.Recv()
					if err != nil {
						final = err
						break
					}
					echoes = append(echoes, m.GetReply().GetSeq())
				}
				if final == nil {
					if err := stream.CloseSend(); err != nil {
						t.Fatal(err)
					}
					_, final = stream.Recv()
				}
				if errors.Is(final, io.EOF) {
					final = nil
				}
				if status.Code(final) != tc.wantCode {
					t.Fatalf("got %v, want %v", final, tc.wantCode)
				}
				want := make([]int64, tc.wantEchos)
				for i := range want {
					want[i] = int64(i + 1)
				}
				if !slices.Equal(echoes, want) {
					t.Errorf("echoes %v, want %v", echoes, want)
				}
				recs := s.Attempts(t.Name())
				if len(recs) != 1 || recs[0].Code != tc.wantCode || recs[0].Sent != tc.wantEchos {
					t.Errorf("records %+v, want one ending %v after %d echoes", recs, tc.wantCode, tc.wantEchos)
				}
			})
		}
	})
}

// Server-wide modes refuse stream attempts too, before their script runs.
func TestStreamsUnderOutage(t *testing.T) {
	forEachTransport(t, []testserver.Option{testserver.WithOutage(true)}, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		ctx := callCtx(t)
		sc := &testingv1.Script{Key: t.Name(), ResponseCount: 3}

		ls, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: sc})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ls.Recv(); status.Code(err) != codes.Unavailable {
			t.Errorf("ListItems: got %v, want UNAVAILABLE", err)
		}
		us, err := client.Upload(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := us.Send(&testingv1.UploadRequest{Script: sc, Seq: 1}); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if _, err := us.CloseAndRecv(); status.Code(err) != codes.Unavailable {
			t.Errorf("Upload: got %v, want UNAVAILABLE", err)
		}
		cs, err := client.Chat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.Send(&testingv1.ChatRequest{Script: sc, Seq: 1}); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if _, err := cs.Recv(); status.Code(err) != codes.Unavailable {
			t.Errorf("Chat: got %v, want UNAVAILABLE", err)
		}
		recs := s.Attempts(t.Name())
		if len(recs) != 3 {
			t.Fatalf("got %d records, want 3", len(recs))
		}
		for i, r := range recs {
			if !r.Rejected || r.Attempt != i+1 || r.Code != codes.Unavailable {
				t.Errorf("record %d = %+v, want rejected", i, r)
			}
		}
	})
}
