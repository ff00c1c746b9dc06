package interceptor

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const listMethod = "/stagger.testing.v1.TestService/ListItems"

var serverStream = &grpc.StreamDesc{StreamName: "ListItems", ServerStreams: true}

// openResumable opens a server stream of fs, resumable with resume (3
// attempts, no pause), and sends its request.
func openResumable(t *testing.T, fs *fakeStreamer, resume ResumeFunc) grpc.ClientStream {
	t.Helper()
	opts := append(streamNoPause(3), WithResume(listMethod, resume))
	cs, err := StreamClientInterceptor(opts...)(context.Background(), serverStream, nil, listMethod, fs.stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(sv("req")); err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestResumeNoAllocationPerMessage: a committed resumable stream receives
// a message without an allocation of its own (the fake attempt allocates
// nothing; the end-to-end cost is BenchmarkResumeMessage in package
// test).
func TestResumeNoAllocationPerMessage(t *testing.T) {
	fs := &fakeStreamer{plan: []func(*fakeAttempt) error{
		func(a *fakeAttempt) error { a.recvN = 1 << 30; return nil },
	}}
	cs := openResumable(t, fs, func(req, last proto.Message) (proto.Message, error) { return req, nil })
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	m := new(wrapperspb.StringValue)
	if err := cs.RecvMsg(m); err != nil { // commits
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = cs.RecvMsg(m) }); n != 0 {
		t.Errorf("%v allocs per message on a committed resumable stream, want 0", n)
	}
	if rs := cs.(*retryStream); rs.res == nil || rs.res.last != m {
		t.Error("the stream is not resumable, or did not keep the last message")
	}
}

// TestResumeNeedsClosedRequest: a server stream whose request was not
// closed (CloseSend) when it failed after a message is not resumed: the
// request to continue is not known to be whole.
func TestResumeNeedsClosedRequest(t *testing.T) {
	fs := &fakeStreamer{plan: []func(*fakeAttempt) error{
		func(a *fakeAttempt) error { a.recvN, a.end = 1, errStreamDown; return nil },
	}}
	called := false
	cs := openResumable(t, fs, func(req, last proto.Message) (proto.Message, error) { called = true; return req, nil })
	if err := drainStream(cs); err == nil || Attempts(err) != 1 || called {
		t.Errorf("err = %v (attempts %d), resume called %v; want the stream's error after 1 attempt, no resume", err, Attempts(err), called)
	}
}
