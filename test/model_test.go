//go:build go1.25

package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/internal/callmodel"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The model test: a server answers each attempt from a script (keyed by
// grpc-previous-rpc-attempts), tagging its headers, trailer, messages and
// status with the attempt's number; random schedules of two to four
// attempts (some failing before they leave the client) run through the
// grpc front end, unary, server, client and bidi streams, under a retry
// and a hedging policy, on synctest's virtual clock. Two
// properties: every observable the caller has names one attempt, and it is
// the attempt the model picks (gRFC A6 as package interceptor's doc states
// it: a commit, else the end that ended the call).

// modelSeeds are the schedules CI runs; a seed that ever failed joins them.
var modelSeeds = func() []uint64 {
	s := make([]uint64, 2000)
	for i := range s {
		s[i] = uint64(i + 1)
	}
	return s
}()

// modelServer answers each attempt of Get and ListItems from the script in
// the call's x-script header.
func modelServer() []grpc.ServerOption {
	wait := func(ctx context.Context, d time.Duration) bool {
		if d <= 0 {
			return ctx.Err() == nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	step := func(ctx context.Context) (int, callmodel.Step) {
		md, _ := metadata.FromIncomingContext(ctx)
		n := attemptNumber(ctx)
		sc, _ := callmodel.ParseScript(md.Get("x-script")[0])
		return n, sc[n-1]
	}
	end := func(n int, st callmodel.Step) error {
		if st.Code == codes.OK {
			return nil
		}
		return status.Error(st.Code, "attempt "+strconv.Itoa(n))
	}
	unary := func(ctx context.Context, _ any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		n, st := step(ctx)
		s := strconv.Itoa(n)
		elapsed := time.Duration(0)
		if st.Hdr >= 0 {
			if !wait(ctx, st.Hdr) {
				return nil, ctx.Err()
			}
			_ = grpc.SendHeader(ctx, metadata.Pairs("x-attempt", s))
			elapsed = st.Hdr
		}
		if !wait(ctx, st.End-elapsed) {
			return nil, ctx.Err()
		}
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-attempt-trailer", s))
		if st.Code == codes.OK {
			if st.Hdr < 0 {
				_ = grpc.SetHeader(ctx, metadata.Pairs("x-attempt", s))
			}
			return &testingv1.GetResponse{Reply: &testingv1.Reply{Attempt: int32(n)}}, nil
		}
		return nil, end(n, st)
	}
	stream := func(_ any, ss grpc.ServerStream, info *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
		ctx := ss.Context()
		n, st := step(ctx)
		s := strconv.Itoa(n)
		method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
		// The requests first: one, or all the client sends.
		for {
			var req any = new(testingv1.ListItemsRequest)
			switch method {
			case "Upload":
				req = new(testingv1.UploadRequest)
			case "Chat":
				req = new(testingv1.ChatRequest)
			}
			err := ss.RecvMsg(req)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if method == "ListItems" {
				break
			}
		}
		reply := func(i int) any {
			r := &testingv1.Reply{Attempt: int32(n), Seq: int64(i)}
			switch method {
			case "Upload":
				return &testingv1.UploadResponse{Reply: r}
			case "Chat":
				return &testingv1.ChatResponse{Reply: r}
			}
			return &testingv1.ListItemsResponse{Reply: r}
		}
		elapsed := time.Duration(0)
		if st.Hdr >= 0 {
			if !wait(ctx, st.Hdr) {
				return ctx.Err()
			}
			_ = ss.SendHeader(metadata.Pairs("x-attempt", s))
			for i := 1; i <= st.Msgs; i++ {
				if err := ss.SendMsg(reply(i)); err != nil {
					return err
				}
			}
			elapsed = st.Hdr
		}
		if !wait(ctx, st.End-elapsed) {
			return ctx.Err()
		}
		ss.SetTrailer(metadata.Pairs("x-attempt-trailer", s))
		if method == "Upload" && st.Code == codes.OK {
			if st.Hdr < 0 {
				_ = ss.SetHeader(metadata.Pairs("x-attempt", s))
			}
			if err := ss.SendMsg(reply(1)); err != nil {
				return err
			}
		}
		return end(n, st)
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream)}
}

// modelRefuse is a client interceptor below stagger's: it fails an
// attempt whose step is unopened before it leaves, as a client-side
// interceptor or an admission check may.
func modelRefuse() []grpc.DialOption {
	step := func(ctx context.Context) (int, callmodel.Step) {
		md, _ := metadata.FromOutgoingContext(ctx)
		n := 1
		if v := md.Get("grpc-previous-rpc-attempts"); len(v) == 1 {
			p, _ := strconv.Atoi(v[0])
			n = p + 1
		}
		sc, _ := callmodel.ParseScript(md.Get("x-script")[0])
		return n, sc[n-1]
	}
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if n, st := step(ctx); st.Unopened {
			return status.Error(st.Code, "attempt "+strconv.Itoa(n))
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if n, st := step(ctx); st.Unopened {
			return nil, status.Error(st.Code, "attempt "+strconv.Itoa(n))
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream)}
}

// modelSeen is what the caller saw of one call.
type modelSeen struct {
	err                    error
	header, trailer        metadata.MD // the call options' holders
	peer                   peer.Peer   // the grpc.Peer holder
	finished               []error     // what grpc.OnFinish ran with
	streamHeader, streamTr metadata.MD // a stream's Header and Trailer
	replies                []int32     // the attempts the messages name
}

// modelPredicate, given to a hedged call, would retry every failure: a
// hedging policy does not use it (its non-fatal codes decide), so the model
// picks the same attempt with it as without.
var modelPredicate = interceptor.WithPredicate(func(error) (retry, decided bool) { return true, true })

// runModelCase runs c; pred adds modelPredicate to the call's options.
func runModelCase(ctx context.Context, client testingv1.TestServiceClient, c callmodel.Case, pred bool) (seen modelSeen) {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-script", c.Script.String())
	opts := []grpc.CallOption{grpc.Header(&seen.header), grpc.Trailer(&seen.trailer), grpc.Peer(&seen.peer),
		// The call's goroutine reads finished once the call has ended, which
		// comes after OnFinish ran (the package doc's rule).
		grpc.OnFinish(func(err error) { seen.finished = append(seen.finished, err) })}
	if pred {
		opts = append(opts, modelPredicate)
	}
	if !c.Stream {
		resp, err := client.Get(ctx, &testingv1.GetRequest{}, opts...)
		seen.err = err
		if err == nil {
			seen.replies = []int32{resp.GetReply().GetAttempt()}
		}
		return seen
	}
	var st interface {
		Header() (metadata.MD, error)
		Trailer() metadata.MD
	}
	switch c.Method {
	case "Upload":
		up, err := client.Upload(ctx, opts...)
		if err != nil {
			seen.err = err
			return seen
		}
		st = up
		_ = up.Send(&testingv1.UploadRequest{Seq: 1})
		resp, err := up.CloseAndRecv()
		seen.err = err
		if err == nil {
			seen.replies = []int32{resp.GetReply().GetAttempt()}
		}
	case "Chat":
		chat, err := client.Chat(ctx, opts...)
		if err != nil {
			seen.err = err
			return seen
		}
		st = chat
		_ = chat.Send(&testingv1.ChatRequest{Seq: 1})
		_ = chat.CloseSend()
		seen.replies, seen.err = recvAll(chat.Recv)
	default:
		list, err := client.ListItems(ctx, &testingv1.ListItemsRequest{}, opts...)
		if err != nil {
			seen.err = err
			return seen
		}
		st = list
		seen.replies, seen.err = recvAll(list.Recv)
	}
	seen.streamHeader, _ = st.Header()
	seen.streamTr = st.Trailer()
	return seen
}

// recvAll receives to the end and returns the attempts the messages name
// and the status (nil: OK).
func recvAll[M interface{ GetReply() *testingv1.Reply }](recv func() (M, error)) ([]int32, error) {
	var attempts []int32
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return attempts, nil
		}
		if err != nil {
			return attempts, err
		}
		attempts = append(attempts, m.GetReply().GetAttempt())
	}
}

// checkModel compares what the caller saw with the model's attempt n.
func checkModel(c callmodel.Case, seen modelSeen, n int) error {
	st := c.Script[n-1]
	s := strconv.Itoa(n)
	var problems []string
	if st.Code == codes.OK {
		if seen.err != nil {
			problems = append(problems, fmt.Sprintf("status %v, want OK", seen.err))
		}
	} else if got := status.Convert(seen.err); got.Code() != st.Code || got.Message() != "attempt "+s {
		problems = append(problems, fmt.Sprintf("status %v, want %v \"attempt %s\"", seen.err, st.Code, s))
	}
	var wantHeader, wantTrailer []string
	if c.HasHeaders(st) {
		wantHeader = []string{s}
	}
	if !st.Unopened {
		wantTrailer = []string{s}
	}
	if len(seen.finished) != 1 || status.Convert(seen.finished[0]).Proto().String() != status.Convert(seen.err).Proto().String() {
		problems = append(problems, fmt.Sprintf("OnFinish ran with %v, want once with %v", seen.finished, seen.err))
	}
	var gotPeer, wantPeer []string
	if seen.peer.Addr != nil {
		gotPeer = []string{seen.peer.Addr.String()}
	}
	if c.HasPeer(st) {
		wantPeer = []string{"bufconn"}
	}
	obs := []callmodel.Observed{
		{Name: "grpc.Header", Key: "x-attempt", Got: seen.header.Get("x-attempt"), Want: wantHeader},
		{Name: "grpc.Trailer", Key: "x-attempt-trailer", Got: seen.trailer.Get("x-attempt-trailer"), Want: wantTrailer},
		{Name: "grpc.Peer", Key: "addr", Got: gotPeer, Want: wantPeer},
	}
	if c.Stream {
		obs = append(obs,
			callmodel.Observed{Name: "Header()", Key: "x-attempt", Got: seen.streamHeader.Get("x-attempt"), Want: wantHeader},
			callmodel.Observed{Name: "Trailer()", Key: "x-attempt-trailer", Got: seen.streamTr.Get("x-attempt-trailer"), Want: wantTrailer})
	}
	return c.Check(n, problems, obs, seen.replies)
}

func TestModelOneAttemptSeen(t *testing.T) {
	for _, mode := range callmodel.Modes {
		t.Run(mode.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := testserver.New(testserver.WithServerOptions(modelServer()...))
				t.Cleanup(srv.Close)
				clients := map[int]testingv1.TestServiceClient{}
				client := func(attempts int) testingv1.TestServiceClient {
					if cl, ok := clients[attempts]; ok {
						return cl
					}
					file := fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
						"retryPolicy": {"maxAttempts": %d, "initialBackoff": "0.01s", "maxBackoff": "0.01s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`, attempts)
					if mode.Hedge {
						file = fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
							"hedgingPolicy": {"maxAttempts": %d, "hedgingDelay": "%s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`, attempts, callmodel.Delay)
					}
					clients[attempts] = staggerClient(t, srv, file, []interceptor.Option{interceptor.WithBudget(nil)}, modelRefuse()...)
					return clients[attempts]
				}
				ran := 0
				for _, seed := range modelSeeds {
					c := callmodel.Random(seed, mode.Hedge, mode.Method)
					n, margin := c.Pick()
					if margin == 0 {
						continue // two events at one instant
					}
					ran++
					seen := runModelCase(context.Background(), client(len(c.Script)), c, mode.Hedge && seed%2 == 1)
					if err := checkModel(c, seen, n); err != nil {
						t.Errorf("seed %d, script %s: model picks attempt %d: %v", seed, c.Script, n, err)
					}
					// Let the cancelled attempts end before the next call.
					synctest.Wait()
				}
				t.Logf("%d schedules of %d had distinct times", ran, len(modelSeeds))
				if ran < len(modelSeeds)/2 {
					t.Errorf("only %d of %d schedules had distinct times", ran, len(modelSeeds))
				}
			})
		})
	}
}
