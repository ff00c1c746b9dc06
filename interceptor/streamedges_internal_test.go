//go:build go1.25

package interceptor

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/stagger-go/stagger/policy"
)

// The edges where a retried and a hedged stream's sends and Context meet an
// attempt's end or the commit, pinned for both kinds of stream over bufconn
// in a synctest bubble (issue 71).

const (
	edgeMethod  = "/stagger.testing.v1.TestService/Chat"
	edgeRetried = `"retryPolicy": {"maxAttempts": 3, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}`
	edgeHedged  = `"hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "1s", "nonFatalStatusCodes": ["UNAVAILABLE"]}`
)

var edgeKinds = []struct{ name, policy string }{{"retried", edgeRetried}, {"hedged", edgeHedged}}

// edgeRig is a bidi stream through the stream interceptor to a bufconn
// server whose handler is told the attempt's number (from 1). sendFault,
// when set, is asked before attempt n's SendMsg reaches grpc: a non-nil
// error is returned in its place, as from a transport that answers so.
type edgeRig struct {
	s   *retryStream
	rep Report

	mu        sync.Mutex
	calls     int
	ctxs      []context.Context
	sendFault func(n int, ctx context.Context) error
	// openFault, when set, fails attempt n's NewStream with its error.
	openFault func(n int) error
}

type faultyStream struct {
	grpc.ClientStream
	fault func() error
}

func (f faultyStream) SendMsg(m any) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.ClientStream.SendMsg(m)
}

// newEdgeRig opens the stream in a synctest bubble; cleanup ends it.
func newEdgeRig(t *testing.T, ctx context.Context, pol string, handler func(n int, ss grpc.ServerStream) error, fault func(n int, ctx context.Context) error) *edgeRig {
	t.Helper()
	cfg, err := policy.ParseConfig([]byte(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true, ` + pol + `}]}`))
	if err != nil {
		t.Fatal(err)
	}
	g := &edgeRig{sendFault: fault}
	cc := bufconnServe(t, func(_ any, ss grpc.ServerStream) error {
		g.mu.Lock()
		g.calls++
		n := g.calls
		g.mu.Unlock()
		return handler(n, ss)
	})
	streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		g.mu.Lock()
		g.ctxs = append(g.ctxs, ctx)
		n := len(g.ctxs)
		openFault := g.openFault
		g.mu.Unlock()
		if openFault != nil {
			if err := openFault(n); err != nil {
				return nil, err
			}
		}
		cs, err := cc.NewStream(ctx, desc, method, opts...)
		if err != nil || g.sendFault == nil {
			return cs, err
		}
		return faultyStream{ClientStream: cs, fault: func() error { return g.sendFault(n, ctx) }}, nil
	}
	k := newCore([]Option{WithConfig(cfg)})
	cs, err := k.stream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, cc, edgeMethod, streamer, []grpc.CallOption{WithReport(&g.rep)})
	if err != nil {
		t.Fatal(err)
	}
	g.s = cs.(*retryStream)
	return g
}

func (g *edgeRig) kept() int {
	g.s.mu.Lock()
	defer g.s.mu.Unlock()
	return len(g.s.buf.msgs)
}

// holdServer answers nothing until the attempt ends.
func holdServer(_ int, ss grpc.ServerStream) error {
	<-ss.Context().Done()
	return ss.Context().Err()
}

// TestStreamEdgeSendEOF: an attempt's SendMsg that says io.EOF (its server
// ended it) is nil to the caller before the stream commits, and the message
// stays kept for the next attempt; after the commit it is io.EOF, as grpc-go
// says (RecvMsg then has the status), for a retried and a hedged stream.
func TestStreamEdgeSendEOF(t *testing.T) {
	for _, kind := range edgeKinds {
		t.Run(kind.name+"/before commit", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				g := newEdgeRig(t, ctx, kind.policy, holdServer, func(n int, _ context.Context) error {
					if n == 1 {
						return io.EOF
					}
					return nil
				})
				synctest.Wait()
				if err := g.s.SendMsg(&emptypb.Empty{}); err != nil {
					t.Errorf("SendMsg: %v, want nil before the commit", err)
				}
				if n := g.kept(); n != 1 {
					t.Errorf("%d messages kept, want the one sent", n)
				}
				cancel()
				if err := g.s.RecvMsg(new(emptypb.Empty)); status.Code(err) != codes.Canceled {
					t.Errorf("RecvMsg: %v, want CANCELED", err)
				}
			})
		})
		t.Run(kind.name+"/after commit", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				g := newEdgeRig(t, ctx, kind.policy, func(_ int, ss grpc.ServerStream) error {
					if err := ss.SendHeader(nil); err != nil {
						return err
					}
					return status.Error(codes.Unavailable, "the server's failure")
				}, nil)
				if md, err := g.s.Header(); md == nil || err != nil {
					t.Fatalf("Header: %v, %v; want the server's headers", md, err)
				}
				synctest.Wait() // the server's status is in
				if err := g.s.SendMsg(&emptypb.Empty{}); err != io.EOF {
					t.Errorf("SendMsg: %v, want io.EOF after the commit", err)
				}
				if err := g.s.RecvMsg(new(emptypb.Empty)); status.Code(err) != codes.Unavailable {
					t.Errorf("RecvMsg: %v, want the server's UNAVAILABLE", err)
				}
				if g.rep.Attempts != 1 {
					t.Errorf("%d attempts, want 1 (committed)", g.rep.Attempts)
				}
			})
		})
	}
}

// TestStreamEdgeSendRefused: a send that grpc refuses (an error other than
// io.EOF on an attempt whose context is alive) is the caller's error, and
// the message is not kept. A hedged stream sends to every attempt open and
// takes the refusal of the oldest alone: a later attempt's error is not the
// caller's. An attempt that dies as it sends (its context ended) did not
// refuse, whatever its transport says: nil, and the message stays kept.
func TestStreamEdgeSendRefused(t *testing.T) {
	refused := status.Error(codes.ResourceExhausted, "refused")
	for _, kind := range edgeKinds {
		t.Run(kind.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				g := newEdgeRig(t, ctx, kind.policy, holdServer, func(n int, _ context.Context) error {
					if n == 1 {
						return refused
					}
					return nil
				})
				if err := g.s.SendMsg(&emptypb.Empty{}); err != refused {
					t.Errorf("SendMsg: %v, want the attempt's refusal", err)
				}
				if n := g.kept(); n != 0 {
					t.Errorf("%d messages kept, want none", n)
				}
			})
		})
	}
	t.Run("hedged/a later attempt refuses", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			g := newEdgeRig(t, ctx, edgeHedged, holdServer, func(n int, _ context.Context) error {
				if n == 2 {
					return refused
				}
				return nil
			})
			time.Sleep(time.Second) // the hedging delay: attempt 2 goes
			synctest.Wait()
			g.mu.Lock()
			calls := g.calls
			g.mu.Unlock()
			if calls != 2 {
				t.Fatalf("%d attempts open, want 2", calls)
			}
			if err := g.s.SendMsg(&emptypb.Empty{}); err != nil {
				t.Errorf("SendMsg: %v, want nil (attempt 1 took it)", err)
			}
			if n := g.kept(); n != 1 {
				t.Errorf("%d messages kept, want the one sent", n)
			}
		})
	})
	// A retried attempt has a context of its own with a per-attempt timer.
	timed := strings.Replace(edgeRetried, `"maxAttempts": 3,`, `"maxAttempts": 3, "perAttemptRecvTimeout": "10s",`, 1)
	for _, kind := range []struct{ name, policy string }{{"retried", timed}, {"hedged", edgeHedged}} {
		t.Run(kind.name+"/a dying attempt's error", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				// connect-go's Send on a cancelled stream says why, where
				// grpc-go's says io.EOF: the attempt died, grpc did not
				// refuse. A retried stream took it for a refusal, returned
				// it and dropped the message its next attempt needed.
				var g *edgeRig
				g = newEdgeRig(t, ctx, kind.policy, holdServer, func(_ int, ctx context.Context) error {
					g.s.first.cancel() // the attempt dies as the message goes
					return status.FromContextError(ctx.Err()).Err()
				})
				if err := g.s.SendMsg(&emptypb.Empty{}); err != nil {
					t.Errorf("SendMsg: %v, want nil (the attempt died; RecvMsg tells)", err)
				}
				if n := g.kept(); kind.name == "retried" && n != 1 {
					t.Errorf("%d messages kept, want the one sent", n)
				}
			})
		})
	}
}

// TestStreamSendAcrossCommit: an attempt's send that fails after the stream
// committed meanwhile is the caller's error when the stream committed to
// that attempt, and nothing when it committed to another, which the replay
// gave the message. Before one send path, a retried stream answered io.EOF
// from its old attempt though its new one, committed, went on, and a hedged
// stream answered nil for its winner's io.EOF.
func TestStreamSendAcrossCommit(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
		handler      func(n int, ss grpc.ServerStream) error
		want         error
	}{
		{"retried/committed to the next attempt", edgeRetried, func(n int, ss grpc.ServerStream) error {
			if n == 1 {
				return status.Error(codes.Unavailable, "the server's failure")
			}
			in := new(emptypb.Empty)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			if err := ss.SendMsg(in); err != nil {
				return err
			}
			return holdServer(n, ss)
		}, nil},
		{"hedged/committed to the attempt", edgeHedged, func(n int, ss grpc.ServerStream) error {
			if err := ss.SendHeader(nil); err != nil {
				return err
			}
			return holdServer(n, ss)
		}, io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				release := make(chan struct{})
				g := newEdgeRig(t, ctx, tc.policy, tc.handler, func(n int, _ context.Context) error {
					if n == 1 {
						<-release
						return io.EOF
					}
					return nil
				})
				sent := make(chan error, 1)
				go func() { sent <- g.s.SendMsg(&emptypb.Empty{}) }()
				synctest.Wait() // attempt 1's send waits
				if tc.want == nil {
					if err := g.s.RecvMsg(new(emptypb.Empty)); err != nil {
						t.Fatalf("RecvMsg: %v, want attempt 2's message", err)
					}
				} else if md, err := g.s.Header(); md == nil || err != nil {
					t.Fatalf("Header: %v, %v; want attempt 1's headers", md, err)
				}
				close(release)
				if err := <-sent; err != tc.want {
					t.Errorf("SendMsg: %v, want %v", err, tc.want)
				}
			})
		})
	}
}

// TestStreamEdgeContext: Context commits the stream, before its first
// answer too, and returns the context of the attempt it committed to, whose
// Done follows that attempt, ended with the stream; the attempt's failure
// is then final (one attempt). After the commit it returns the same attempt's context.
func TestStreamEdgeContext(t *testing.T) {
	for _, kind := range edgeKinds {
		t.Run(kind.name+"/before commit", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				g := newEdgeRig(t, ctx, kind.policy, holdServer, nil)
				got := g.s.Context()
				if got == g.s.callCtx {
					t.Errorf("Context is the call's, want attempt 1's")
				}
				g.s.mu.Lock()
				committed, cur := g.s.committed, g.s.cur
				g.s.mu.Unlock()
				if !committed || cur != &g.s.first {
					t.Errorf("Context did not commit the stream to attempt 1")
				}
				if again := g.s.Context(); again != got {
					t.Errorf("Context after the commit is another context")
				}
				select {
				case <-got.Done():
					t.Fatal("the attempt's context ended with the stream open")
				default:
				}
				cancel()
				if err := g.s.RecvMsg(new(emptypb.Empty)); status.Code(err) != codes.Canceled {
					t.Errorf("RecvMsg: %v, want CANCELED", err)
				}
				<-got.Done() // ended with the stream
				if g.rep.Attempts != 1 {
					t.Errorf("%d attempts, want 1 (committed by Context)", g.rep.Attempts)
				}
			})
		})
	}
	t.Run("retried/during a retry's pause", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			g := newEdgeRig(t, ctx, edgeRetried, func(int, grpc.ServerStream) error {
				return status.Error(codes.Unavailable, "the server's failure")
			}, nil)
			got := make(chan error, 1)
			go func() { got <- g.s.RecvMsg(new(emptypb.Empty)) }()
			synctest.Wait() // attempt 1 failed; RecvMsg waits out the pause
			if c := g.s.Context(); c != g.s.callCtx {
				t.Errorf("Context during the pause is not the call's")
			}
			// The next attempt commits as it opens: its failure is final.
			if err := <-got; status.Code(err) != codes.Unavailable {
				t.Errorf("RecvMsg: %v, want UNAVAILABLE", err)
			}
			if g.rep.Attempts != 2 {
				t.Errorf("%d attempts, want 2 (the second committed as it opened)", g.rep.Attempts)
			}
			<-g.s.Context().Done()
		})
	})
}

// TestStreamContextCommitsNextOpen: Context called while a retried stream
// is between attempts commits the stream to the next attempt to go live,
// as a hedged stream's Context with none open does (one fact, commitNext):
// a next attempt that fails to open is final, as grpc-go's Context commits
// and never retries after. Before, a retried stream kept a flag of its own
// that committed only an attempt that opened, and tried a third.
func TestStreamContextCommitsNextOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		g := newEdgeRig(t, ctx, edgeRetried, func(int, grpc.ServerStream) error {
			return status.Error(codes.Unavailable, "the server's failure")
		}, nil)
		g.mu.Lock()
		g.openFault = func(n int) error {
			if n == 2 {
				return status.Error(codes.Unavailable, "attempt 2 did not open")
			}
			return nil
		}
		g.mu.Unlock()
		got := make(chan error, 1)
		go func() { got <- g.s.RecvMsg(new(emptypb.Empty)) }()
		synctest.Wait() // attempt 1 failed; RecvMsg waits out the pause
		if c := g.s.Context(); c != g.s.callCtx {
			t.Errorf("Context during the pause is not the call's")
		}
		err := <-got
		if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "attempt 2 did not open" {
			t.Errorf("RecvMsg: %v, want attempt 2's failure to open", err)
		}
		if g.rep.Attempts != 2 {
			t.Errorf("%d attempts, want 2 (the stream committed to the second)", g.rep.Attempts)
		}
	})
}
