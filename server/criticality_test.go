package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/server"
)

// seen is what one layer's handler saw of its request's criticality.
type seen struct {
	// header is criticality.Header as it arrived ("" when absent).
	header string
	// fromContext is criticality.FromContext of the handler's context ("-"
	// when it carries none); level is server.Criticality.
	fromContext string
	level       criticality.Level
}

// recorder keeps what a layer's handlers saw, in order.
type recorder struct {
	mu  sync.Mutex
	got []seen
}

func (r *recorder) record(ctx context.Context) {
	s := seen{header: strings.Join(metadata.ValueFromIncomingContext(ctx, criticality.Header), ","), fromContext: "-", level: server.Criticality(ctx)}
	if l, ok := criticality.FromContext(ctx); ok {
		s.fromContext = l.String()
	}
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
}

func (r *recorder) last(t *testing.T) seen {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) == 0 {
		t.Fatal("the layer saw no request")
	}
	return r.got[len(r.got)-1]
}

// serveLayer serves h with the server side's default interceptors on
// bufconn, and returns its listener.
func serveLayer(t *testing.T, h *handlerService) listener {
	t.Helper()
	g := grpc.NewServer(newSide(t).ServerOptions()...)
	testingv1.RegisterTestServiceServer(g, h)
	lis := newListener(t)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis
}

// fileWith is threeAttempts with the entry's "criticality" set to level
// ("" leaves it out).
func fileWith(level string) string {
	if level == "" {
		return threeAttempts
	}
	return strings.Replace(threeAttempts, `"name": [`, `"criticality": "`+level+`", "name": [`, 1)
}

// layers is client → A → B → C over bufconn: every server has the server
// side's interceptors; A and B call the next layer through a stagger client
// of threeAttempts with the "criticality" fileA and fileB say, on their
// handler's context (for A, the stream's, when the top opens ListItems).
type layers struct {
	top     testingv1.TestServiceClient
	a, b, c *recorder
}

func newLayers(t *testing.T, fileA, fileB string, top ...grpc.DialOption) layers {
	t.Helper()
	l := layers{a: &recorder{}, b: &recorder{}, c: &recorder{}}
	cLis := serveLayer(t, &handlerService{get: func(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
		l.c.record(ctx)
		return &testingv1.GetResponse{}, nil
	}})
	toC := testingv1.NewTestServiceClient(cLis.dial(t, staggerFile(t, fileWith(fileB))...))
	bLis := serveLayer(t, &handlerService{get: func(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
		l.b.record(ctx)
		return toC.Get(ctx, req)
	}})
	toB := testingv1.NewTestServiceClient(bLis.dial(t, staggerFile(t, fileWith(fileA))...))
	aLis := serveLayer(t, &handlerService{
		get: func(ctx context.Context, req *testingv1.GetRequest) (*testingv1.GetResponse, error) {
			l.a.record(ctx)
			return toB.Get(ctx, req)
		},
		list: func(req *testingv1.ListItemsRequest, ss grpc.ServerStreamingServer[testingv1.ListItemsResponse]) error {
			l.a.record(ss.Context())
			if _, err := toB.Get(ss.Context(), &testingv1.GetRequest{}); err != nil {
				return err
			}
			return ss.Send(&testingv1.ListItemsResponse{})
		},
	})
	if len(top) == 0 {
		top = staggerFile(t, threeAttempts)
	}
	l.top = testingv1.NewTestServiceClient(aLis.dial(t, top...))
	return l
}

// TestCriticalityChain: a call's criticality reaches the bottom of client →
// A → B → C unchanged, whatever the layers' files say; the file names the
// criticality of calls made for a request that named none, which then
// propagates; a call that names none sends no header at any layer.
func TestCriticalityChain(t *testing.T) {
	const (
		shed     = "SHEDDABLE"
		shedPlus = "SHEDDABLE_PLUS"
		crit     = "CRITICAL"
		critPlus = "CRITICAL_PLUS"
	)
	for _, tc := range []struct {
		name         string
		fileA, fileB string
		ctx          func() context.Context
		opts         []grpc.CallOption
		// want is the header each of A, B and C received; every layer's
		// server.Criticality is the header's level, CRITICAL without one.
		want [3]string
	}{
		{name: "sheddable call stays sheddable",
			opts: []grpc.CallOption{interceptor.WithCriticality(criticality.Sheddable)},
			want: [3]string{shed, shed, shed}},
		{name: "default stays critical, and sends nothing",
			want: [3]string{"", "", ""}},
		{name: "files saying CRITICAL_PLUS do not raise a sheddable request",
			fileA: critPlus, fileB: critPlus,
			opts: []grpc.CallOption{interceptor.WithCriticality(criticality.Sheddable)},
			want: [3]string{shed, shed, shed}},
		{name: "caller's context",
			ctx:  func() context.Context { return criticality.NewContext(context.Background(), criticality.SheddablePlus) },
			want: [3]string{shedPlus, shedPlus, shedPlus}},
		{name: "call option over the caller's context",
			ctx:  func() context.Context { return criticality.NewContext(context.Background(), criticality.SheddablePlus) },
			opts: []grpc.CallOption{interceptor.WithCriticality(criticality.CriticalPlus)},
			want: [3]string{critPlus, critPlus, critPlus}},
		{name: "A's file names the criticality of a request that named none",
			fileA: shed, fileB: critPlus,
			want: [3]string{"", shed, shed}},
		{name: "an explicit CRITICAL is not lowered by a file",
			fileA: shed,
			opts:  []grpc.CallOption{interceptor.WithCriticality(criticality.Critical)},
			want:  [3]string{crit, crit, crit}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLayers(t, tc.fileA, tc.fileB)
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx()
			}
			if _, err := l.top.Get(ctx, &testingv1.GetRequest{}, tc.opts...); err != nil {
				t.Fatal(err)
			}
			for i, r := range []*recorder{l.a, l.b, l.c} {
				wantLevel, wantCtx := criticality.Critical, "-"
				if tc.want[i] != "" {
					wantLevel, _ = criticality.Parse(tc.want[i])
					wantCtx = tc.want[i]
				}
				want := seen{header: tc.want[i], fromContext: wantCtx, level: wantLevel}
				if got := r.last(t); got != want {
					t.Errorf("layer %c saw %+v, want %+v", 'A'+i, got, want)
				}
			}
		})
	}
}

// TestCriticalityChainStream: a server stream's handler (A's ListItems)
// hands its request's criticality on to the calls it makes.
func TestCriticalityChainStream(t *testing.T) {
	l := newLayers(t, "CRITICAL_PLUS", "")
	st, err := l.top.ListItems(context.Background(), &testingv1.ListItemsRequest{}, interceptor.WithCriticality(criticality.Sheddable))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	want := seen{header: "SHEDDABLE", fromContext: "SHEDDABLE", level: criticality.Sheddable}
	for i, r := range []*recorder{l.a, l.b, l.c} {
		if got := r.last(t); got != want {
			t.Errorf("layer %c saw %+v, want %+v", 'A'+i, got, want)
		}
	}
}

// TestCriticalityHeaderFromAnyClient: the server side reads the header
// whatever client sent it (here grpc-go's own, through metadata): an
// invalid value counts as none (CRITICAL, nothing in the context, nothing
// passed on) and is logged once; of several values the least critical
// counts.
func TestCriticalityHeaderFromAnyClient(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	l := newLayers(t, "", "", grpc.WithDisableRetry())
	for _, tc := range []struct {
		name   string
		values []string
		want   seen // what B saw
	}{
		{"garbage", []string{"CRITICAL_PLUS_PLUS"}, seen{fromContext: "-", level: criticality.Critical}},
		{"empty", []string{""}, seen{fromContext: "-", level: criticality.Critical}},
		{"lower case", []string{"sheddable"}, seen{header: "SHEDDABLE", fromContext: "SHEDDABLE", level: criticality.Sheddable}},
		{"repeated", []string{"CRITICAL_PLUS", "SHEDDABLE_PLUS", "junk"}, seen{header: "SHEDDABLE_PLUS", fromContext: "SHEDDABLE_PLUS", level: criticality.SheddablePlus}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := metadata.MD{criticality.Header: tc.values}
			if _, err := l.top.Get(metadata.NewOutgoingContext(context.Background(), md), &testingv1.GetRequest{}); err != nil {
				t.Fatal(err)
			}
			if got := l.b.last(t); got != tc.want {
				t.Errorf("B saw %+v, want %+v", got, tc.want)
			}
		})
	}
	if n := strings.Count(buf.String(), "names no criticality"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "CRITICAL_PLUS_PLUS") {
		t.Errorf("the log line does not quote the value:\n%s", buf.String())
	}
}
