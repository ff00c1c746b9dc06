package server_test

import (
	"context"
	"net"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// listener is a bufconn listener a test serves its own grpc.Server on.
type listener struct{ *bufconn.Listener }

func newListener(t testing.TB) listener {
	t.Helper()
	return listener{bufconn.Listen(1 << 20)}
}

// dial returns a client connection to l, closed at the end of the test.
func (l listener) dial(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	all := append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)
	cc, err := grpc.NewClient("passthrough:///bufnet", all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// netListen listens on a free loopback TCP port.
func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
