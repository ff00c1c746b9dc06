package staggerconnect_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/stagger-go/stagger/connect/internal/proto/stagger/testing/v1/testingv1connect"
	"github.com/stagger-go/stagger/connect/internal/testservice"
)

// protocol is one way a Connect client talks to the test server: a wire
// protocol over HTTP/1.1 or over HTTP/2 without TLS (h2c).
type protocol struct {
	name string
	opts []connect.ClientOption
	h2c  bool
}

// protocols are the three protocols, each over the HTTP versions it runs on
// (gRPC needs HTTP/2).
var protocols = []protocol{
	{name: "connect/http1"},
	{name: "connect/h2c", h2c: true},
	{name: "grpc/h2c", opts: []connect.ClientOption{connect.WithGRPC()}, h2c: true},
	{name: "grpcweb/http1", opts: []connect.ClientOption{connect.WithGRPCWeb()}},
	{name: "grpcweb/h2c", opts: []connect.ClientOption{connect.WithGRPCWeb()}, h2c: true},
}

// testServer is the test service over real HTTP on loopback.
type testServer struct {
	svc    *testservice.Service
	url    string
	client *http.Client
}

// newTestServer starts the test service, its handler wrapped by wrap (nil:
// none), with handler options hopts, over HTTP/1.1 or h2c, and returns it
// with an HTTP client for it; both are closed when the test ends.
func newTestServer(t *testing.T, h2c bool, wrap func(http.Handler) http.Handler, hopts ...connect.HandlerOption) *testServer {
	t.Helper()
	svc := testservice.New()
	mux := http.NewServeMux()
	path, h := testingv1connect.NewTestServiceHandler(svc, hopts...)
	if wrap != nil {
		h = wrap(h)
	}
	mux.Handle(path, h)
	url, tr := serve(t, h2c, mux)
	return &testServer{svc: svc, url: url, client: &http.Client{Transport: tr}}
}

// serve serves h over HTTP/1.1 or h2c on loopback and returns its URL and
// a transport for it; both are closed when the test ends.
func serve(t *testing.T, h2c bool, h http.Handler) (string, *http.Transport) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnContext = testservice.ConnContext
	tr := &http.Transport{}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		srv.Config.Protocols = &p
		tr.Protocols = &p
	}
	srv.Start()
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return srv.URL, tr
}

// testClient returns a client of ts in protocol p with the interceptors ics.
func (ts *testServer) testClient(p protocol, ics ...connect.Interceptor) testingv1connect.TestServiceClient {
	opts := append([]connect.ClientOption{connect.WithInterceptors(ics...)}, p.opts...)
	return testingv1connect.NewTestServiceClient(ts.client, ts.url, opts...)
}

func runtimeGosched() { time.Sleep(time.Millisecond) }

func asConnectError(err error) (*connect.Error, bool) {
	var cerr *connect.Error
	ok := errors.As(err, &cerr)
	return cerr, ok
}
