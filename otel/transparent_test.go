package staggerotel

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// refusingServer is a bare HTTP/2 server, after grpc-go's own test of
// transparent retries (test/retry_test.go, TestRetryStats): it answers the
// first stream with RST_STREAM(REFUSED_STREAM), which tells grpc-go that
// the server's application never saw it, so that grpc-go retries it
// transparently; it answers every other stream, once the client has ended
// it, with one empty message and status OK.
type refusingServer struct {
	lis  net.Listener
	done chan struct{}
	mu   sync.Mutex
	conn net.Conn
}

func startRefusingServer(t *testing.T) *refusingServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &refusingServer{lis: lis, done: make(chan struct{})}
	go s.serve()
	t.Cleanup(func() {
		_ = lis.Close()
		s.mu.Lock()
		if s.conn != nil {
			_ = s.conn.Close()
		}
		s.mu.Unlock()
		<-s.done
	})
	return s
}

func (s *refusingServer) serve() {
	defer close(s.done)
	conn, err := s.lis.Accept()
	if err != nil {
		return // closed before the client connected
	}
	s.mu.Lock()
	s.conn = conn
	s.mu.Unlock()
	defer func() { _ = conn.Close() }()
	if _, err := io.ReadFull(conn, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	w := bufio.NewWriter(conn)
	fr := http2.NewFramer(w, bufio.NewReader(conn))
	// A write that fails (the client closed the connection) ends the
	// server; a failure that matters fails the client's call.
	if err := fr.WriteSettings(); err != nil {
		return
	}
	if err := w.Flush(); err != nil {
		return
	}
	refused := false
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return // the client closed the connection
		}
		var sid uint32
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				err = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				err = fr.WritePing(true, f.Data)
			}
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				sid = f.StreamID
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				sid = f.StreamID
			}
		}
		if err == nil && sid != 0 {
			if !refused {
				refused = true
				err = fr.WriteRSTStream(sid, http2.ErrCodeRefusedStream)
			} else {
				err = respondOK(fr, sid)
			}
		}
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			return
		}
	}
}

// respondOK answers stream sid with one empty message and status OK.
func respondOK(fr *http2.Framer, sid uint32) error {
	headers := func(end bool, kv ...string) error {
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		for i := 0; i < len(kv); i += 2 {
			if err := enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]}); err != nil {
				return err
			}
		}
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: sid, BlockFragment: buf.Bytes(), EndStream: end, EndHeaders: true})
	}
	if err := headers(false, ":status", "200", "content-type", "application/grpc"); err != nil {
		return err
	}
	if err := fr.WriteData(sid, false, []byte{0, 0, 0, 0, 0}); err != nil { // an empty message
		return err
	}
	return headers(true, "grpc-status", "0")
}

// getOnlyConfig retries Get only: stagger runs the other methods in one
// attempt.
const getOnlyConfig = `{"methodConfig": [{
	"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "1s",
		"backoffMultiplier": 2, "jitter": "NONE", "retryableStatusCodes": ["UNAVAILABLE"]}
}]}`

// dialRefusing dials a fresh refusing server with TransparentRetries before
// stagger.DialOptions(file), recording into the returned reader.
func dialRefusing(t *testing.T, file string) (testingv1.TestServiceClient, *sdkmetric.ManualReader, string) {
	t.Helper()
	s := startRefusingServer(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	o := Options{MeterProvider: mp, PerTarget: true}
	opt, err := Option(o)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := TransparentRetries(o)
	if err != nil {
		t.Fatal(err)
	}
	dial := append(tr, stagger.DialOptions(parseConfig(t, file), interceptor.WithBudget(nil), opt)...)
	target := "passthrough:///" + s.lis.Addr().String()
	cc, err := grpc.NewClient(target, append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return testingv1.NewTestServiceClient(cc), reader, target
}

// transparentPoints returns grpc.client.call.transparent_retries' data
// points.
func transparentPoints(t *testing.T, reader sdkmetric.Reader) []metricdata.HistogramDataPoint[int64] {
	t.Helper()
	m, ok := collect(t, reader)[MetricTransparentRetries]
	if !ok {
		return nil
	}
	h, ok := m.Data.(metricdata.Histogram[int64])
	if !ok {
		t.Fatalf("%s is a %T", MetricTransparentRetries, m.Data)
	}
	return h.DataPoints
}

// checkTransparent checks that the histogram holds one call with one
// transparent retry, recorded under method and target.
func checkTransparent(t *testing.T, reader sdkmetric.Reader, method, target string) {
	t.Helper()
	dps := transparentPoints(t, reader)
	if len(dps) != 1 {
		t.Fatalf("%s has %d data points, want 1: %+v", MetricTransparentRetries, len(dps), dps)
	}
	dp := dps[0]
	if dp.Count != 1 || dp.Sum != 1 {
		t.Errorf("%s count %d sum %d, want 1 and 1", MetricTransparentRetries, dp.Count, dp.Sum)
	}
	if got := attrMap(dp.Attributes); len(got) != 2 || got[AttrMethod] != method || got[AttrTarget] != target {
		t.Errorf("%s attributes %v, want %s=%s, %s=%s", MetricTransparentRetries, got, AttrMethod, method, AttrTarget, target)
	}
}

func TestTransparentRetriesUnary(t *testing.T) {
	client, reader, target := dialRefusing(t, retryConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.Get(ctx, &testingv1.GetRequest{}); err != nil {
		t.Fatalf("Get: %v", err)
	}
	checkTransparent(t, reader, getMethod, target)
	ms := collect(t, reader)
	// grpc-go's transparent retry is below stagger, which saw one attempt.
	if _, ok := ms[MetricRetries]; ok {
		t.Errorf("%s recorded", MetricRetries)
	}
	// A call with no transparent retry records nothing: still one call.
	if _, err := client.Get(ctx, &testingv1.GetRequest{}); err != nil {
		t.Fatalf("Get: %v", err)
	}
	checkTransparent(t, reader, getMethod, target)
}

// TestTransparentRetriesStream checks a stream that stagger does not retry:
// for a stream it retries, stagger turns grpc-go's replay buffer off
// (grpc.MaxRetryRPCBufferSize(0)), so grpc-go retries it transparently only
// before its first message, and this server refuses it after.
func TestTransparentRetriesStream(t *testing.T) {
	client, reader, target := dialRefusing(t, getOnlyConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list := func() {
		t.Helper()
		st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{})
		if err != nil {
			t.Fatalf("ListItems: %v", err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if dps := transparentPoints(t, reader); len(dps) != 0 && dps[0].Count != 1 {
			t.Errorf("recorded before the stream ended: %+v", dps)
		}
		if _, err := st.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("Recv: %v, want io.EOF", err)
		}
	}
	list()
	checkTransparent(t, reader, "stagger.testing.v1.TestService/ListItems", target)
	list() // no transparent retry: records nothing
	checkTransparent(t, reader, "stagger.testing.v1.TestService/ListItems", target)
}

// TestTransparentRetriesNoRetry checks that calls with no transparent retry,
// over the test server, record nothing, stagger's retries included.
func TestTransparentRetriesNoRetry(t *testing.T) {
	srv := testserver.New()
	t.Cleanup(srv.Close)
	reader := sdkmetric.NewManualReader()
	o := Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))}
	opt, err := Option(o)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := TransparentRetries(o)
	if err != nil {
		t.Fatal(err)
	}
	cc := srv.ClientConn(t, append(tr, stagger.DialOptions(parseConfig(t, retryConfig), interceptor.WithBudget(nil), opt)...)...)
	client := testingv1.NewTestServiceClient(cc)
	ctx := context.Background()
	for _, sc := range []*testingv1.Script{{Key: "once"}, {Key: "retried", FailAttempts: 2}} {
		if _, err := client.Get(ctx, &testingv1.GetRequest{Script: sc}); err != nil {
			t.Fatalf("Get: %v", err)
		}
	}
	st, err := client.ListItems(ctx, &testingv1.ListItemsRequest{Script: &testingv1.Script{ResponseCount: 2}})
	if err != nil {
		t.Fatalf("ListItems: %v", err)
	}
	for {
		if _, err := st.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("Recv: %v", err)
			}
			break
		}
	}
	ms := collect(t, reader)
	if m, ok := ms[MetricTransparentRetries]; ok {
		t.Errorf("%s recorded: %+v", MetricTransparentRetries, m)
	}
	if r := histogram[int64](t, ms, MetricRetries); r.Count != 1 || r.Sum != 2 {
		t.Errorf("retries count %d sum %d, want 1 and 2", r.Count, r.Sum)
	}
}

// TestTransparentRetriesError checks that the histogram that cannot be
// created is named.
func TestTransparentRetriesError(t *testing.T) {
	_, err := TransparentRetries(Options{MeterProvider: failingInt64Provider{noop.NewMeterProvider()}})
	if !errors.Is(err, errNoInstrument) || !strings.Contains(err.Error(), MetricTransparentRetries) {
		t.Fatalf("TransparentRetries: %v, want errNoInstrument naming %s", err, MetricTransparentRetries)
	}
}

type failingInt64Provider struct{ metric.MeterProvider }

type failingInt64Meter struct{ metric.Meter }

func (p failingInt64Provider) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return failingInt64Meter{p.MeterProvider.Meter(name, opts...)}
}

func (failingInt64Meter) Int64Histogram(string, ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	return nil, errNoInstrument
}
