package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
)

// TestNewRejectsBadSettings: every bad setting is an error naming the
// option and the field; nothing is built.
func TestNewRejectsBadSettings(t *testing.T) {
	for _, tc := range []struct {
		opts []server.Option
		want string
	}{
		{[]server.Option{server.WithConcurrencyLimit(0)}, "WithConcurrencyLimit: limit must be at least 1, got 0"},
		{[]server.Option{server.WithConcurrencyLimit(-5)}, "WithConcurrencyLimit: limit must be at least 1, got -5"},
		{[]server.Option{server.WithPushbackRange(0, time.Second)}, "WithPushbackRange: min must be at least 1ms, got 0s"},
		{[]server.Option{server.WithPushbackRange(time.Second, time.Millisecond)}, "WithPushbackRange: max must be at least min (1s), got 1ms"},
		{[]server.Option{server.WithPushbackRange(time.Millisecond, 1000*time.Hour)}, "WithPushbackRange: max must be at most"},
		{[]server.Option{server.WithExempt("Check")}, `WithExempt: methods[0]: want a full method name`},
		{[]server.Option{nil}, "New: option 0 is nil"},
	} {
		s, err := server.New(tc.opts...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || s != nil {
			t.Errorf("New: %v, %v; want an error containing %q", s, err, tc.want)
		}
	}
	// Two bad options: both are named.
	_, err := server.New(server.WithConcurrencyLimit(0), server.WithPushbackRange(0, 0))
	if err == nil || !strings.Contains(err.Error(), "WithConcurrencyLimit") || !strings.Contains(err.Error(), "WithPushbackRange") {
		t.Errorf("New: %v; want both errors", err)
	}
}

// TestHandlerOutcomesUnchanged: a handler that returns a non-status error,
// a nil reply, or panics (under a recovery interceptor placed outside) gets
// exactly what it gets without the server side, every option on.
func TestHandlerOutcomesUnchanged(t *testing.T) {
	h := &handlerService{get: func(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
		switch req.GetScript().GetKey() {
		case "error":
			return nil, errors.New("plain error")
		case "nil":
			return nil, nil
		case "panic":
			panic("handler panicked")
		}
		return &testingv1.GetResponse{}, nil
	}}
	type outcome struct {
		err     string
		trailer metadata.MD
		header  metadata.MD
	}
	run := func(t *testing.T, opts ...grpc.UnaryServerInterceptor) map[string]outcome {
		cl := serveHandlers(t, h, grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{recovery.UnaryServerInterceptor(recovery.WithRecoveryHandler(recovered))}, opts...)...))
		got := map[string]outcome{}
		for _, key := range []string{"error", "nil", "panic", "ok"} {
			var o outcome
			_, err := cl.Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: key}}, grpc.Trailer(&o.trailer), grpc.Header(&o.header))
			o.err = status.Convert(err).String()
			got[key] = o
		}
		return got
	}
	want := run(t)
	side := newSide(t, server.WithConcurrencyLimit(4), server.WithRetryAtOneLayer())
	got := run(t, side.Unary())
	for key, w := range want {
		g := got[key]
		if g.err != w.err || len(g.trailer) != len(w.trailer) || len(g.header) != len(w.header) {
			t.Errorf("%s: with the server side %+v, without %+v", key, g, w)
		}
	}
	if !strings.Contains(want["panic"].err, "handler panicked") || !strings.Contains(want["error"].err, "plain error") {
		t.Errorf("the handlers did not run as meant: %v", want)
	}
}

// recovered turns a panic into a status without the stack, which differs
// from run to run.
func recovered(p any) error { return status.Errorf(codes.Internal, "recovered: %v", p) }

// TestPanicFreesTheSlot: a panic goes through the interceptor unchanged
// and the call no longer counts toward the concurrency limit.
func TestPanicFreesTheSlot(t *testing.T) {
	side := newSide(t, server.WithConcurrencyLimit(1))
	u := side.Unary()
	info := &grpc.UnaryServerInfo{FullMethod: testingv1.TestService_Get_FullMethodName}
	sentinel := errors.New("sentinel")
	func() {
		defer func() {
			if r := recover(); r != sentinel {
				t.Errorf("recovered %v, want the handler's own panic value", r)
			}
		}()
		_, _ = u(context.Background(), nil, info, func(context.Context, any) (any, error) { panic(sentinel) })
		t.Error("the panic did not go through")
	}()
	resp, err := u(context.Background(), "req", info, func(_ context.Context, req any) (any, error) { return req, nil })
	if err != nil || resp != "req" {
		t.Errorf("after the panic: %v, %v; want the call admitted", resp, err)
	}
}
