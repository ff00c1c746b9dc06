package testserver

import (
	"context"
	"errors"
	"math/rand"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// BufnetTarget is the target to dial the bufconn listener with, together with
// DialOption.
const BufnetTarget = "passthrough:///bufnet"

// Server is an in-process TestService that fails on demand. It always serves
// over bufconn and, on request, on a TCP listener on 127.0.0.1. It is safe for
// concurrent use.
type Server struct {
	clock             Clock
	idempotencyHeader string
	bucket            time.Duration
	start             time.Time
	serverOptions     []grpc.ServerOption
	relay             testingv1.TestServiceClient

	buf    *bufconn.Listener
	bufSrv *grpc.Server
	conns  connTracker
	serveW sync.WaitGroup

	tcpMu   sync.Mutex // guards tcpSrv, tcpAddr, closed
	tcpSrv  *grpc.Server
	tcpAddr string
	closed  bool

	mu       sync.Mutex // guards everything below
	changed  chan struct{}
	keys     map[string]*keyState
	execs    map[string]int64
	stats    Stats
	arrivals []int64

	outage               bool
	outageFrom, outageTo time.Time
	capacity             Capacity
	inFlight             int
	window               int64
	windowCount          int
	failureRate          float64
	resets               bool
	delayFactor          float64
	rng                  *rand.Rand
	workers              workerPool
}

type keyState struct {
	attempts []*AttemptRecord
}

// New starts a Server on bufconn (and on TCP with WithTCP). Close stops it.
func New(opts ...Option) *Server {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	s := &Server{
		clock:             cfg.clock,
		idempotencyHeader: cfg.idempotencyHeader,
		bucket:            cfg.bucket,
		serverOptions:     cfg.serverOptions,
		relay:             cfg.relay,
		changed:           make(chan struct{}),
		keys:              make(map[string]*keyState),
		execs:             make(map[string]int64),
		outage:            cfg.outage,
		outageFrom:        cfg.outageFrom,
		outageTo:          cfg.outageTo,
		capacity:          cfg.capacity,
		failureRate:       clamp01(cfg.failureRate),
		resets:            cfg.resets,
		delayFactor:       cfg.delayFactor,
		rng:               rand.New(rand.NewSource(cfg.seed)),
	}
	s.start = s.clock.Now()
	s.setWorkersLocked(cfg.workers) // nothing else can see s yet
	s.buf = bufconn.Listen(cfg.bufSize)
	s.bufSrv = s.newGRPCServer()
	s.serve(s.bufSrv, s.conns.wrap(s.buf))
	if cfg.tcp {
		// The error is kept for StartTCP to report; New itself cannot fail.
		_, _ = s.StartTCP()
	}
	return s
}

func (s *Server) newGRPCServer() *grpc.Server {
	// WaitForHandlers makes Stop wait for every handler, so Close leaves no
	// goroutine behind.
	opts := append([]grpc.ServerOption{grpc.WaitForHandlers(true)}, s.serverOptions...)
	g := grpc.NewServer(opts...)
	testingv1.RegisterTestServiceServer(g, &service{s: s})
	return g
}

func (s *Server) serve(g *grpc.Server, lis net.Listener) {
	s.serveW.Add(1)
	go func() {
		defer s.serveW.Done()
		// Serve returns when the server stops; that is the only way it ends here.
		_ = g.Serve(lis)
	}()
}

// DialOption returns the dial option that connects a client to the bufconn
// listener; use it with the target BufnetTarget.
func (s *Server) DialOption() grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return s.buf.DialContext(ctx)
	})
}

// DialContext returns a raw connection to the bufconn listener, for a client
// other than grpc-go's (an HTTP/2 client that speaks gRPC, such as a
// connect-go client with the gRPC protocol over h2c).
func (s *Server) DialContext(ctx context.Context) (net.Conn, error) { return s.buf.DialContext(ctx) }

// Dial returns a client connection to the bufconn listener, without transport
// security. opts come after the server's own, so they can add interceptors or
// grpc.WithDisableRetry.
func (s *Server) Dial(opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	all := append([]grpc.DialOption{s.DialOption(), grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	return grpc.NewClient(BufnetTarget, all...)
}

// DialTCP returns a client connection to the TCP listener, without transport
// security. It fails when the server is not serving on TCP.
func (s *Server) DialTCP(opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	addr := s.Addr()
	if addr == "" {
		return nil, errors.New("testserver: DialTCP: not serving on TCP (use WithTCP or StartTCP)")
	}
	all := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	return grpc.NewClient("passthrough:///"+addr, all...)
}

// ClientConn dials the bufconn listener for a test, fails the test when that
// fails, and closes the connection when the test ends.
func (s *Server) ClientConn(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := s.Dial(opts...)
	if err != nil {
		t.Fatalf("testserver: dial bufconn: %v", err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// StartTCP serves on a TCP listener on 127.0.0.1 (a free port) and returns its
// address. When already serving on TCP it returns the current address.
func (s *Server) StartTCP() (string, error) {
	return s.listenTCP("127.0.0.1:0")
}

func (s *Server) listenTCP(addr string) (string, error) {
	s.tcpMu.Lock()
	defer s.tcpMu.Unlock()
	if s.closed {
		return "", errors.New("testserver: server is closed")
	}
	if s.tcpSrv != nil {
		return s.tcpAddr, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	s.tcpSrv = s.newGRPCServer()
	s.tcpAddr = lis.Addr().String()
	s.serve(s.tcpSrv, s.conns.wrap(lis))
	return s.tcpAddr, nil
}

// Addr is the TCP listener's address ("127.0.0.1:port"), or "" when the server
// does not serve on TCP (never started, or stopped by StopServing).
func (s *Server) Addr() string {
	s.tcpMu.Lock()
	defer s.tcpMu.Unlock()
	if s.tcpSrv == nil {
		return ""
	}
	return s.tcpAddr
}

// StopServing makes the TCP side disappear: it closes the listener and every
// TCP connection (in-flight attempts on them are cancelled), so new connections
// are refused. The bufconn side is not affected. Resume listens again on the same
// port.
func (s *Server) StopServing() {
	s.tcpMu.Lock()
	g := s.tcpSrv
	s.tcpSrv = nil
	s.tcpMu.Unlock()
	if g != nil {
		g.Stop()
	}
}

// Resume listens again on the port StopServing closed. It fails when the port
// was taken in the meantime, or when the server never served on TCP.
func (s *Server) Resume() error {
	s.tcpMu.Lock()
	addr := s.tcpAddr
	s.tcpMu.Unlock()
	if addr == "" {
		return errors.New("testserver: Resume: the server never served on TCP")
	}
	_, err := s.listenTCP(addr)
	return err
}

// Close stops serving on bufconn and TCP, cancels in-flight attempts, and waits
// until every goroutine the server started has ended. It is safe to call more
// than once.
func (s *Server) Close() {
	s.tcpMu.Lock()
	if s.closed {
		s.tcpMu.Unlock()
		return
	}
	s.closed = true
	g := s.tcpSrv
	s.tcpSrv = nil
	s.tcpMu.Unlock()
	if g != nil {
		g.Stop()
	}
	s.bufSrv.Stop()
	s.serveW.Wait()
}

func clamp01(p float64) float64 {
	switch {
	case p > 1:
		return 1
	case p >= 0:
		return p
	default:
		// Negative and NaN both mean "never".
		return 0
	}
}
