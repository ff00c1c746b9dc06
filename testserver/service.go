package testserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// PushbackTrailer is the trailer gRPC clients read server pushback from.
const PushbackTrailer = "grpc-retry-pushback-ms"

// HeadersFirstHeader is a response header the server sends when a script's
// headers_first makes it send headers early, so a test can see on the client
// that headers arrived before the failure.
const HeadersFirstHeader = "testserver-headers-first"

// MaxPayload bounds Script.payload_bytes so a script cannot exhaust memory, and
// keeps a reply under gRPC's default 4 MiB receive limit.
const MaxPayload = 1 << 20

type service struct {
	testingv1.UnimplementedTestServiceServer
	s *Server
}

// transport is what a handler can do to its RPC besides sending messages; unary
// and streaming RPCs do it through different calls.
type transport struct {
	ctx        context.Context
	sendHeader func() error
	setTrailer func(metadata.MD)
}

func unaryTransport(ctx context.Context) transport {
	return transport{
		ctx:        ctx,
		sendHeader: func() error { return grpc.SendHeader(ctx, metadata.Pairs(HeadersFirstHeader, "true")) },
		// SetTrailer fails only outside a handler, which this never is.
		setTrailer: func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) },
	}
}

func streamTransport(ss grpc.ServerStream) transport {
	return transport{
		ctx:        ss.Context(),
		sendHeader: func() error { return ss.SendHeader(metadata.Pairs(HeadersFirstHeader, "true")) },
		setTrailer: ss.SetTrailer,
	}
}

// begin records the attempt, applies the server-wide modes, sends headers when
// the script says so and waits the scripted delay. A non-nil error ends the
// handler; the attempt has then been ended too.
func (s *Server) begin(tr transport, method string, sc *testingv1.Script, at time.Time) (*attempt, error) {
	a := s.arrive(tr.ctx, method, sc.GetKey(), at)
	var deadline time.Time
	if d, ok := tr.ctx.Deadline(); ok {
		// gRPC sets the deadline on the time package's clock; the Workers
		// mode compares it with the server's.
		deadline = at.Add(time.Until(d))
	}
	rej := s.admit(a, at, deadline)
	if a.load >= 0 {
		// Asked for only when reported: the recorder writes the trailer.
		if r := orca.CallMetricsRecorderFromContext(tr.ctx); r != nil {
			r.SetApplicationUtilization(a.load)
		}
	}
	if rej != nil {
		if rej.pushback != "" {
			tr.setTrailer(metadata.MD{PushbackTrailer: []string{rej.pushback}})
		}
		a.end(rej.st.Code(), endRejected)
		return nil, rej.st.Err()
	}
	if a.job != nil {
		// Waiting for a worker, then served. The caller may give up
		// meanwhile; the attempt costs the workers what it costs all the
		// same.
		if err := s.awaitWorker(tr.ctx, a.job); err != nil {
			if tr.ctx.Err() != nil {
				return nil, a.broken(tr.ctx, err)
			}
			a.end(status.Code(err), endCancelled) // dropped
			return nil, err
		}
	}
	if sc.GetHeadersFirst() {
		if err := tr.sendHeader(); err != nil {
			return nil, a.broken(tr.ctx, err)
		}
		a.headers = true
	}
	if err := s.clock.Sleep(tr.ctx, s.scaled(delayFor(sc, a.number()))); err != nil {
		return nil, a.broken(tr.ctx, err)
	}
	return a, nil
}

// failing reports whether the script fails this attempt.
func (a *attempt) failing(sc *testingv1.Script) bool {
	return a.number() <= int(sc.GetFailAttempts())
}

// fail ends the attempt with the script's failure.
func (a *attempt) fail(tr transport, sc *testingv1.Script) error {
	if len(sc.GetPushback()) > 0 {
		tr.setTrailer(metadata.MD{PushbackTrailer: append([]string(nil), sc.GetPushback()...)})
	}
	code := codes.Code(sc.GetCode())
	if code == codes.OK {
		code = codes.Unavailable
	}
	msg := sc.GetMessage()
	if msg == "" {
		msg = fmt.Sprintf("testserver: scripted failure of attempt %d", a.number())
	}
	st := status.New(code, msg)
	if d := sc.GetRetryInfoDelay(); d != nil {
		if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: d}); err == nil {
			st = withInfo
		}
	}
	a.end(code, endFailed)
	return st.Err()
}

// broken ends an attempt whose RPC stopped under it: its context ended, or a
// send or receive failed.
func (a *attempt) broken(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		st := status.FromContextError(ctx.Err())
		a.end(st.Code(), endCancelled)
		return st.Err()
	}
	code := status.Code(err)
	a.end(code, endCancelled)
	return err
}

func (a *attempt) reply(sc *testingv1.Script, seq int64) *testingv1.Reply {
	n := int(sc.GetPayloadBytes())
	if n < 0 {
		n = 0
	}
	if n > MaxPayload {
		n = MaxPayload
	}
	return &testingv1.Reply{Key: a.key, Attempt: int32(a.number()), Seq: seq, Payload: make([]byte, n)}
}

func delayFor(sc *testingv1.Script, attempt int) time.Duration {
	d := sc.GetDelay().AsDuration()
	if ds := sc.GetAttemptDelays(); attempt-1 < len(ds) {
		d = ds[attempt-1].AsDuration()
	}
	return d
}

func (s *Server) unary(ctx context.Context, method string, sc *testingv1.Script) (*testingv1.Reply, error) {
	at := s.clock.Now()
	tr := unaryTransport(ctx)
	a, err := s.begin(tr, method, sc, at)
	if err != nil {
		return nil, err
	}
	if a.failing(sc) {
		return nil, a.fail(tr, sc)
	}
	r := a.reply(sc, 0)
	if a.number() <= int(sc.GetFailAttempts())+int(sc.GetResetAttempts()) || s.resetting() {
		// The work is done; the reply never leaves.
		a.reset = true
		a.end(codes.OK, endServed)
		if s.conns.drop(ctx) {
			<-ctx.Done()
		}
		return nil, status.Error(codes.Unavailable, "testserver: connection dropped after the call ran (reset_attempts or SetResets)")
	}
	a.end(codes.OK, endServed)
	return r, nil
}

func (v *service) Write(ctx context.Context, req *testingv1.WriteRequest) (*testingv1.WriteResponse, error) {
	if v.s.relay != nil {
		return relay(v.s, ctx, testingv1.TestService_Write_FullMethodName, req.GetScript(), func(ctx context.Context) (*testingv1.WriteResponse, error) {
			return v.s.relay.Write(ctx, req)
		})
	}
	r, err := v.s.unary(ctx, testingv1.TestService_Write_FullMethodName, req.GetScript())
	if err != nil {
		return nil, err
	}
	return &testingv1.WriteResponse{Reply: r}, nil
}

func (v *service) Get(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
	if v.s.relay != nil {
		return relay(v.s, ctx, testingv1.TestService_Get_FullMethodName, req.GetScript(), func(ctx context.Context) (*testingv1.GetResponse, error) {
			return v.s.relay.Get(ctx, req)
		})
	}
	r, err := v.s.unary(ctx, testingv1.TestService_Get_FullMethodName, req.GetScript())
	if err != nil {
		return nil, err
	}
	return &testingv1.GetResponse{Reply: r}, nil
}

func (v *service) Put(ctx context.Context, req *testingv1.PutRequest) (*testingv1.PutResponse, error) {
	if v.s.relay != nil {
		return relay(v.s, ctx, testingv1.TestService_Put_FullMethodName, req.GetScript(), func(ctx context.Context) (*testingv1.PutResponse, error) {
			return v.s.relay.Put(ctx, req)
		})
	}
	r, err := v.s.unary(ctx, testingv1.TestService_Put_FullMethodName, req.GetScript())
	if err != nil {
		return nil, err
	}
	return &testingv1.PutResponse{Reply: r}, nil
}

// ListItems sends the items after start_after of a list of
// Script.response_count (seq start_after+1, ..., response_count); a failing
// attempt sends at most messages_before_failure of them, then fails; a reset
// attempt (reset_attempts, after the failing ones, or any attempt in the
// reset mode, SetResets) sends as many, then drops its connection.
func (v *service) ListItems(req *testingv1.ListItemsRequest, ss grpc.ServerStreamingServer[testingv1.ListItemsResponse]) error {
	start := req.GetStartAfter()
	if start < 0 {
		return status.Errorf(codes.InvalidArgument, "testserver: ListItemsRequest.start_after (%d) is negative", start)
	}
	s := v.s
	at := s.clock.Now()
	sc := req.GetScript()
	tr := streamTransport(ss)
	a, err := s.begin(tr, testingv1.TestService_ListItems_FullMethodName, sc, at)
	if err != nil {
		return err
	}
	failing := a.failing(sc)
	reset := !failing && (a.number() <= int(sc.GetFailAttempts())+int(sc.GetResetAttempts()) || s.resetting())
	last := int64(sc.GetResponseCount())
	if failing || reset {
		last = min(last, start+int64(sc.GetMessagesBeforeFailure()))
	}
	for seq := start + 1; seq <= last; seq++ {
		if err := ss.Send(&testingv1.ListItemsResponse{Reply: a.reply(sc, seq)}); err != nil {
			return a.broken(tr.ctx, err)
		}
		a.sent++
		a.headers = true
	}
	switch {
	case failing:
		return a.fail(tr, sc)
	case reset:
		a.reset = true
		a.end(codes.OK, endServed)
		if s.conns.drop(tr.ctx) {
			<-tr.ctx.Done()
		}
		return status.Error(codes.Unavailable, "testserver: connection dropped mid-stream (reset_attempts or SetResets)")
	}
	a.end(codes.OK, endServed)
	return nil
}

// beginClientStream receives the first message of a client stream, which
// carries the script, and begins the attempt. The arrival time is read before
// Recv: the attempt arrived when the stream opened, not when its first message
// came.
// first is nil when the client closed its side without sending anything; the
// attempt then runs with a nil (empty) script.
func beginClientStream[Req interface{ GetScript() *testingv1.Script }](s *Server, tr transport, method string, recv func() (Req, error)) (first Req, a *attempt, err error) {
	at := s.clock.Now()
	first, err = recv()
	if err != nil && !errors.Is(err, io.EOF) {
		return first, nil, s.arrive(tr.ctx, method, "", at).broken(tr.ctx, err)
	}
	a, err = s.begin(tr, method, first.GetScript(), at)
	return first, a, err
}

// Upload reads the script from the first message and collects every message's
// seq. A failing attempt with messages_before_failure N > 0 fails right after
// its N-th message (the rest are not read); with N = 0 it fails after the client
// closed its side, having read everything.
func (v *service) Upload(ss grpc.ClientStreamingServer[testingv1.UploadRequest, testingv1.UploadResponse]) error {
	tr := streamTransport(ss)
	first, a, err := beginClientStream(v.s, tr, testingv1.TestService_Upload_FullMethodName, ss.Recv)
	if err != nil {
		return err
	}
	sc := first.GetScript()
	failing := a.failing(sc)
	limit := int(sc.GetMessagesBeforeFailure())
	var got []int64
	for msg := first; msg != nil; {
		got = append(got, msg.GetSeq())
		a.received++
		if failing && limit > 0 && len(got) >= limit {
			return a.fail(tr, sc)
		}
		msg, err = ss.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return a.broken(tr.ctx, err)
		}
	}
	if failing {
		return a.fail(tr, sc)
	}
	resp := &testingv1.UploadResponse{Reply: a.reply(sc, 0), Received: got}
	a.end(codes.OK, endServed)
	return ss.SendAndClose(resp)
}

// Chat reads the script from the first message and echoes every message (the
// reply's seq is the request's). A failing attempt fails after
// messages_before_failure echoes (0: before echoing anything).
func (v *service) Chat(ss grpc.BidiStreamingServer[testingv1.ChatRequest, testingv1.ChatResponse]) error {
	tr := streamTransport(ss)
	first, a, err := beginClientStream(v.s, tr, testingv1.TestService_Chat_FullMethodName, ss.Recv)
	if err != nil {
		return err
	}
	sc := first.GetScript()
	if first != nil {
		a.received++
	}
	failing := a.failing(sc)
	limit := int(sc.GetMessagesBeforeFailure())
	if failing && limit <= 0 {
		return a.fail(tr, sc)
	}
	for msg := first; msg != nil; {
		if err := ss.Send(&testingv1.ChatResponse{Reply: a.reply(sc, msg.GetSeq())}); err != nil {
			return a.broken(tr.ctx, err)
		}
		a.sent++
		a.headers = true
		if failing && a.sent >= limit {
			return a.fail(tr, sc)
		}
		msg, err = ss.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return a.broken(tr.ctx, err)
		}
		a.received++
	}
	if failing {
		return a.fail(tr, sc)
	}
	a.end(codes.OK, endServed)
	return nil
}
