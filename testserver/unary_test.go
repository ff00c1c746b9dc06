package testserver_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

func callCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// attemptCtx adds the headers a retrying client sends on attempt n (1 = first).
func attemptCtx(ctx context.Context, n int, idemKey string) context.Context {
	kv := []string{"idempotency-key", idemKey}
	if n > 1 {
		kv = append(kv, "grpc-previous-rpc-attempts", strconv.Itoa(n-1))
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

func TestUnaryFailFirstAttempts(t *testing.T) {
	cases := []struct {
		name     string
		script   *testingv1.Script
		wantCode codes.Code
		wantMsg  string
	}{
		{"default code", &testingv1.Script{FailAttempts: 2}, codes.Unavailable, "testserver: scripted failure of attempt"},
		{"given code and message", &testingv1.Script{FailAttempts: 2, Code: int32(codes.ResourceExhausted), Message: "slow down"}, codes.ResourceExhausted, "slow down"},
		{"aborted", &testingv1.Script{FailAttempts: 2, Code: int32(codes.Aborted)}, codes.Aborted, "testserver: scripted failure"},
	}
	forEachTransport(t, nil, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				tc.script.Key = t.Name()
				for n := 1; n <= 3; n++ {
					ctx := attemptCtx(callCtx(t), n, "idem-1")
					resp, err := client.Write(ctx, &testingv1.WriteRequest{Script: tc.script})
					if n <= 2 {
						st := status.Convert(err)
						if st.Code() != tc.wantCode || !strings.Contains(st.Message(), tc.wantMsg) {
							t.Fatalf("attempt %d: got %v, want code %v with message %q", n, err, tc.wantCode, tc.wantMsg)
						}
						continue
					}
					if err != nil {
						t.Fatalf("attempt %d: %v", n, err)
					}
					if r := resp.GetReply(); r.GetKey() != t.Name() || r.GetAttempt() != 3 {
						t.Fatalf("attempt %d: reply %v, want key %q attempt 3", n, r, t.Name())
					}
				}
				recs := s.Attempts(t.Name())
				if len(recs) != 3 {
					t.Fatalf("got %d records, want 3", len(recs))
				}
				for i, r := range recs {
					wantPrev := ""
					if i > 0 {
						wantPrev = strconv.Itoa(i)
					}
					wantCode := tc.wantCode
					if i == 2 {
						wantCode = codes.OK
					}
					if r.Method != testingv1.TestService_Write_FullMethodName || r.Attempt != i+1 || r.PreviousAttempts != wantPrev ||
						r.IdempotencyKey != "idem-1" || !r.Done || r.Code != wantCode || r.Cancelled || r.Rejected || r.Arrived.IsZero() {
						t.Errorf("record %d = %+v", i, r)
					}
				}
			})
		}
		if got := s.Executions(testingv1.TestService_Write_FullMethodName); got != int64(len(cases)) {
			t.Errorf("Executions(Write) = %d, want %d", got, len(cases))
		}
		if got := s.Executions(testingv1.TestService_Get_FullMethodName); got != 0 {
			t.Errorf("Executions(Get) = %d, want 0", got)
		}
	})
}

func TestUnaryPushbackAndRetryInfo(t *testing.T) {
	cases := []struct {
		name      string
		pushback  []string
		retryInfo *durationpb.Duration
	}{
		{"none", nil, nil},
		{"valid", []string{"250"}, nil},
		{"negative", []string{"-1"}, nil},
		{"malformed", []string{"soon"}, nil},
		{"repeated", []string{"100", "200"}, nil},
		{"retry info", nil, durationpb.New(1500 * time.Millisecond)},
		{"both", []string{"10"}, durationpb.New(time.Second)},
	}
	forEachTransport(t, nil, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				var trailer metadata.MD
				_, err := client.Get(callCtx(t), &testingv1.GetRequest{Script: &testingv1.Script{
					Key: t.Name(), FailAttempts: 1, Pushback: tc.pushback, RetryInfoDelay: tc.retryInfo,
				}}, grpc.Trailer(&trailer))
				st := status.Convert(err)
				if st.Code() != codes.Unavailable {
					t.Fatalf("got %v, want UNAVAILABLE", err)
				}
				if got := trailer.Get(testserver.PushbackTrailer); !slices.Equal(got, tc.pushback) {
					t.Errorf("pushback trailer = %q, want %q", got, tc.pushback)
				}
				var infos []*errdetails.RetryInfo
				for _, d := range st.Details() {
					if ri, ok := d.(*errdetails.RetryInfo); ok {
						infos = append(infos, ri)
					}
				}
				switch {
				case tc.retryInfo == nil && len(infos) != 0:
					t.Errorf("got RetryInfo %v, want none", infos)
				case tc.retryInfo != nil && (len(infos) != 1 || infos[0].GetRetryDelay().AsDuration() != tc.retryInfo.AsDuration()):
					t.Errorf("got RetryInfo %v, want one with delay %v", infos, tc.retryInfo.AsDuration())
				}
			})
		}
	})
}

func TestUnaryHeadersFirst(t *testing.T) {
	forEachTransport(t, nil, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		for _, headersFirst := range []bool{false, true} {
			t.Run(strconv.FormatBool(headersFirst), func(t *testing.T) {
				var header metadata.MD
				_, err := client.Put(callCtx(t), &testingv1.PutRequest{Script: &testingv1.Script{
					Key: t.Name(), FailAttempts: 1, HeadersFirst: headersFirst,
				}}, grpc.Header(&header))
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("got %v, want UNAVAILABLE", err)
				}
				if got := len(header.Get(testserver.HeadersFirstHeader)) > 0; got != headersFirst {
					t.Errorf("client saw headers %v, want %v (header %v)", got, headersFirst, header)
				}
				recs := s.Attempts(t.Name())
				if len(recs) != 1 || recs[0].HeadersSent != headersFirst {
					t.Errorf("records %+v, want one with HeadersSent %v", recs, headersFirst)
				}
			})
		}
	})
}

func TestPayloadBytes(t *testing.T) {
	cases := []struct {
		ask  int32
		want int
	}{{0, 0}, {100, 100}, {-5, 0}, {1 << 30, testserver.MaxPayload}}
	forEachTransport(t, nil, func(t *testing.T, s *testserver.Server, cc *grpc.ClientConn) {
		client := testingv1.NewTestServiceClient(cc)
		for _, tc := range cases {
			resp, err := client.Get(callCtx(t), &testingv1.GetRequest{Script: &testingv1.Script{PayloadBytes: tc.ask}})
			if err != nil {
				t.Fatalf("payload_bytes %d: %v", tc.ask, err)
			}
			if got := len(resp.GetReply().GetPayload()); got != tc.want {
				t.Errorf("payload_bytes %d: got %d bytes, want %d", tc.ask, got, tc.want)
			}
		}
	})
}

func BenchmarkUnaryGet(b *testing.B) {
	s := testserver.New()
	defer s.Close()
	cc, err := s.Dial(grpc.WithDisableRetry())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	client := testingv1.NewTestServiceClient(cc)
	req := &testingv1.GetRequest{Script: &testingv1.Script{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := client.Get(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
