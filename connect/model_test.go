package staggerconnect_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"

	"github.com/stagger-go/stagger/connect/internal/proto/stagger/testing/v1/testingv1connect"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/internal/callmodel"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// The model test of the Connect front end, the grpc-go front end's
// (TestModelOneAttemptSeen of the root module) through Connect: a
// connect-go server over real HTTP on loopback answers each attempt from a
// script (keyed by grpc-previous-rpc-attempts), tagging its headers,
// trailers, messages and error with the attempt's number; the schedules of
// package callmodel (two to four attempts, some failing before they leave
// the client) run unary, server, client and bidi streams, under a retry and
// a hedging policy, each over one of the protocols (the seed chooses). Two
// properties: every observable the caller has (the response's or the
// stream's headers and trailers, the messages, the error with its code,
// message and metadata) names one attempt, and it is the attempt the model
// picks.
//
// Connect differs from gRPC in one way the model knows (callmodel's
// LateHeaders): a connect-go handler's response headers leave with its
// first message or its end, so only a stream's first message commits it.
//
// The schedules play in real time, many calls at once. A retried schedule
// has no race (its attempts take turns), so it must match the model
// exactly. A hedged one races its attempts: it plays modelHedgeScale times
// slower, and the second property holds it only when no two events that
// decide it come closer than modelMargin of the schedule's time; one that
// differs from the model under the load of the others is played again
// alone and twice as slow, and fails when it differs every time (the
// first property holds every schedule, always).

const (
	// modelHedgeScale is how long one millisecond of a hedged schedule
	// lasts (a retried one plays at its own pace).
	modelHedgeScale = 4
	// modelMargin: the model's pick holds a hedged schedule when no two
	// events that decide it come closer than this, in the schedule's time.
	modelMargin = 4 * time.Millisecond
	// modelReruns is how many times a hedged schedule that differed from
	// the model under load plays again, alone and twice as slow.
	modelReruns = 3
	// modelWorkers is how many calls run at once.
	modelWorkers = 32
	// modelSeedsDefault is how many seeds each mode runs, unless
	// MODEL_SEEDS says otherwise (N for 1 to N, A-B for A to B);
	// modelSeedsRace under the race detector, which slows the calls about
	// fourfold: 1,000 took 39 s on two loaded cores, 2,000 would take 80.
	modelSeedsDefault, modelSeedsRace = 2000, 1000
)

// modelFixedSeeds are seeds past the default ones that once failed; they
// run whatever MODEL_SEEDS says.
var modelFixedSeeds []uint64

// modelSeeds are the seeds each mode runs.
func modelSeeds(t *testing.T) []uint64 {
	t.Helper()
	n := uint64(modelSeedsDefault)
	if raceOn {
		n = modelSeedsRace
	}
	seeds, err := callmodel.Seeds(os.Getenv("MODEL_SEEDS"), n)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range modelFixedSeeds {
		if !slices.Contains(seeds, s) {
			seeds = append(seeds, s)
		}
	}
	return seeds
}

// modelStep returns the attempt's number and step from a request's header:
// the script is in x-script, and the attempt is one more than
// grpc-previous-rpc-attempts.
func modelStep(h http.Header) (int, callmodel.Step, error) {
	sc, err := callmodel.ParseScript(h.Get("x-script"))
	if err != nil {
		return 0, callmodel.Step{}, err
	}
	n := 1
	if v := h.Get("grpc-previous-rpc-attempts"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil {
			return 0, callmodel.Step{}, err
		}
		n = p + 1
	}
	if n > len(sc) {
		return 0, callmodel.Step{}, fmt.Errorf("attempt %d of a script of %d", n, len(sc))
	}
	return n, sc[n-1], nil
}

// modelService answers each attempt from its step (modelStep): its
// response headers carry x-attempt, its trailers x-attempt-trailer, its
// messages the attempt's number, and a failure's message is "attempt n".
// A stream sends its messages at the step's Hdr (connect-go sends the
// headers with the first); unary calls and client streams answer at End.
type modelService struct {
	testingv1connect.UnimplementedTestServiceHandler
}

// modelAttempt is one attempt as the service plays it.
type modelAttempt struct {
	ctx     context.Context
	n       int
	st      callmodel.Step
	arrived time.Time
	// scale is how long a millisecond of the schedule lasts (x-scale).
	scale time.Duration
}

// arrive reads the attempt's step and tags its response.
func (*modelService) arrive(ctx context.Context) (*modelAttempt, error) {
	arrived := time.Now()
	ci, ok := connect.CallInfoForHandlerContext(ctx)
	if !ok {
		return nil, connect.NewError(connect.CodeInternal, errors.New("no call info"))
	}
	n, st, err := modelStep(ci.RequestHeader())
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	scale, err := strconv.Atoi(ci.RequestHeader().Get("x-scale"))
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	s := strconv.Itoa(n)
	ci.ResponseHeader().Set("x-attempt", s)
	ci.ResponseTrailer().Set("x-attempt-trailer", s)
	return &modelAttempt{ctx: ctx, n: n, st: st, arrived: arrived, scale: time.Duration(scale)}, nil
}

// until waits until d of the schedule after the attempt arrived, and
// returns the error of a client that went away first.
func (a *modelAttempt) until(d time.Duration) error {
	t := time.NewTimer(time.Until(a.arrived.Add(d * a.scale)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-a.ctx.Done():
		return connect.NewError(connect.CodeOf(a.ctx.Err()), a.ctx.Err())
	}
}

// end waits for the step's end and returns its status.
func (a *modelAttempt) end() error {
	if err := a.until(a.st.End); err != nil {
		return err
	}
	if a.st.Code == codes.OK {
		return nil
	}
	return connect.NewError(connect.Code(a.st.Code), fmt.Errorf("attempt %d", a.n))
}

func (a *modelAttempt) reply(seq int) *testingv1.Reply {
	return &testingv1.Reply{Attempt: int32(a.n), Seq: int64(seq)}
}

// messages sends the step's messages at its Hdr.
func (a *modelAttempt) messages(send func(*testingv1.Reply) error) error {
	if a.st.Hdr < 0 || a.st.Msgs == 0 {
		return nil
	}
	if err := a.until(a.st.Hdr); err != nil {
		return err
	}
	for i := 1; i <= a.st.Msgs; i++ {
		if err := send(a.reply(i)); err != nil {
			return err
		}
	}
	return nil
}

func (s *modelService) Get(ctx context.Context, _ *connect.Request[testingv1.GetRequest]) (*connect.Response[testingv1.GetResponse], error) {
	a, err := s.arrive(ctx)
	if err != nil {
		return nil, err
	}
	if err := a.end(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&testingv1.GetResponse{Reply: a.reply(0)}), nil
}

func (s *modelService) ListItems(ctx context.Context, _ *connect.Request[testingv1.ListItemsRequest], st *connect.ServerStream[testingv1.ListItemsResponse]) error {
	a, err := s.arrive(ctx)
	if err != nil {
		return err
	}
	if err := a.messages(func(r *testingv1.Reply) error { return st.Send(&testingv1.ListItemsResponse{Reply: r}) }); err != nil {
		return err
	}
	return a.end()
}

func (s *modelService) Upload(ctx context.Context, st *connect.ClientStream[testingv1.UploadRequest]) (*connect.Response[testingv1.UploadResponse], error) {
	a, err := s.arrive(ctx)
	if err != nil {
		return nil, err
	}
	for st.Receive() {
	}
	if err := st.Err(); err != nil {
		return nil, err
	}
	if err := a.end(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&testingv1.UploadResponse{Reply: a.reply(0)}), nil
}

func (s *modelService) Chat(ctx context.Context, st *connect.BidiStream[testingv1.ChatRequest, testingv1.ChatResponse]) error {
	a, err := s.arrive(ctx)
	if err != nil {
		return err
	}
	for {
		_, err := st.Receive()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := a.messages(func(r *testingv1.Reply) error { return st.Send(&testingv1.ChatResponse{Reply: r}) }); err != nil {
		return err
	}
	return a.end()
}

// modelRefuse fails the requests of the attempts whose step is unopened
// before they leave the client, as net/http's transport fails a request it
// could not send: with the step's code and "attempt n" (connect-go keeps a
// *connect.Error a RoundTripper returns).
type modelRefuse struct{ next http.RoundTripper }

func (m modelRefuse) RoundTrip(r *http.Request) (*http.Response, error) {
	if n, st, err := modelStep(r.Header); err == nil && st.Unopened {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, connect.NewError(connect.Code(st.Code), fmt.Errorf("attempt %d", n))
	}
	return m.next.RoundTrip(r)
}

// modelServer is the model service over HTTP/1.1 or h2c on loopback, with
// an HTTP client whose transport refuses the unopened attempts.
type modelServer struct {
	url    string
	client *http.Client
}

func newModelServer(t *testing.T, h2c bool) *modelServer {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(testingv1connect.NewTestServiceHandler(new(modelService)))
	url, tr := serve(t, h2c, mux)
	tr.MaxIdleConnsPerHost = 4 * modelWorkers
	return &modelServer{url: url, client: &http.Client{Transport: modelRefuse{next: tr}}}
}

// modelSeen is what the caller saw of one call.
type modelSeen struct {
	err error
	// header and trailer are the response's (unary, client stream) or the
	// stream's (ResponseHeader, ResponseTrailer); conn* are a client
	// stream's conn's.
	header, trailer         http.Header
	connHeader, connTrailer http.Header
	replies                 []int32
}

// runModelCall makes c's call, its schedule played scale times slower, and
// returns what the caller saw.
func runModelCall(ctx context.Context, client testingv1connect.TestServiceClient, c callmodel.Case, scale int) (seen modelSeen) {
	script := c.Script.String()
	tag := func(h http.Header) {
		h.Set("x-script", script)
		h.Set("x-scale", strconv.Itoa(scale))
	}
	switch c.Method {
	case "Get":
		req := connect.NewRequest(&testingv1.GetRequest{})
		tag(req.Header())
		resp, err := client.Get(ctx, req)
		seen.err = err
		if err == nil {
			seen.header, seen.trailer = resp.Header(), resp.Trailer()
			seen.replies = []int32{resp.Msg.GetReply().GetAttempt()}
		}
	case "Upload":
		up := client.Upload(ctx)
		tag(up.RequestHeader())
		_ = up.Send(&testingv1.UploadRequest{Seq: 1})
		resp, err := up.CloseAndReceive()
		seen.err = err
		if err == nil {
			seen.header, seen.trailer = resp.Header(), resp.Trailer()
			seen.replies = []int32{resp.Msg.GetReply().GetAttempt()}
		}
		if conn, err := up.Conn(); err == nil {
			seen.connHeader, seen.connTrailer = conn.ResponseHeader(), conn.ResponseTrailer()
		}
	case "ListItems":
		req := connect.NewRequest(&testingv1.ListItemsRequest{})
		tag(req.Header())
		list, err := client.ListItems(ctx, req)
		if err != nil {
			seen.err = err
			return seen
		}
		for list.Receive() {
			seen.replies = append(seen.replies, list.Msg().GetReply().GetAttempt())
		}
		seen.err = list.Err()
		seen.header, seen.trailer = list.ResponseHeader(), list.ResponseTrailer()
		_ = list.Close()
	case "Chat":
		chat := client.Chat(ctx)
		tag(chat.RequestHeader())
		_ = chat.Send(&testingv1.ChatRequest{Seq: 1})
		_ = chat.CloseRequest()
		for {
			m, err := chat.Receive()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					seen.err = err
				}
				break
			}
			seen.replies = append(seen.replies, m.GetReply().GetAttempt())
		}
		seen.header, seen.trailer = chat.ResponseHeader(), chat.ResponseTrailer()
		_ = chat.CloseResponse()
	}
	return seen
}

// checkModel compares what the caller saw with the model's attempt n: its
// status, its tags (none for an attempt that never left the client) and
// its messages.
func checkModel(c callmodel.Case, seen modelSeen, n int) error {
	st := c.Script[n-1]
	s := strconv.Itoa(n)
	var problems []string
	var cerr *connect.Error
	if st.Code == codes.OK {
		if seen.err != nil {
			problems = append(problems, fmt.Sprintf("error %v, want none", seen.err))
		}
	} else if !errors.As(seen.err, &cerr) || cerr.Code() != connect.Code(st.Code) || cerr.Message() != "attempt "+s {
		problems = append(problems, fmt.Sprintf("error %v, want %v \"attempt %s\"", seen.err, connect.Code(st.Code), s))
	}
	var tag []string
	if !st.Unopened {
		tag = []string{s}
	}
	// Each observable names its attempt in both keys: x-attempt (headers)
	// and x-attempt-trailer (trailers).
	var obs []callmodel.Observed
	observe := func(name string, h http.Header, hdr, trl []string) {
		obs = append(obs, callmodel.Observed{Name: name, Key: "x-attempt", Got: h.Values("x-attempt"), Want: hdr},
			callmodel.Observed{Name: name, Key: "x-attempt-trailer", Got: h.Values("x-attempt-trailer"), Want: trl})
	}
	if c.Stream && !c.ClientStream || seen.err == nil {
		observe("header", seen.header, tag, nil)
		observe("trailer", seen.trailer, nil, tag)
	}
	if c.ClientStream {
		observe("conn header", seen.connHeader, tag, nil)
		observe("conn trailer", seen.connTrailer, nil, tag)
	}
	if cerr != nil {
		observe("error metadata", cerr.Meta(), tag, tag)
	}
	return c.Check(n, problems, obs, seen.replies)
}

// modelFile is the policy file of a mode: attempts attempts of every
// method, retried or hedged, its times scale times the model's.
func modelFile(hedge bool, attempts, scale int) string {
	if hedge {
		return fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
			"hedgingPolicy": {"maxAttempts": %d, "hedgingDelay": "%s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`, attempts, callmodel.Delay*time.Duration(scale))
	}
	return fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
		"retryPolicy": {"maxAttempts": %d, "initialBackoff": "%[2]s", "maxBackoff": "%[2]s", "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`,
		attempts, callmodel.Backoff*time.Duration(scale))
}

// modelNamed returns the attempt whose answer seen is, all of it: 0 when
// it names none, or several.
func modelNamed(c callmodel.Case, seen modelSeen) int {
	for n := 1; n <= len(c.Script); n++ {
		if checkModel(c, seen, n) == nil {
			return n
		}
	}
	return 0
}

func TestModelOneAttemptSeen(t *testing.T) {
	seeds := modelSeeds(t)
	servers := map[bool]*modelServer{false: newModelServer(t, false), true: newModelServer(t, true)}
	for _, mode := range callmodel.Modes {
		t.Run(mode.Name, func(t *testing.T) {
			scale := 1
			if mode.Hedge {
				scale = modelHedgeScale
			}
			// The seed picks the protocol; bidi needs HTTP/2. Each
			// protocol has a client per number of attempts, and per scale
			// (the policy's times are the schedule's, scaled).
			protos := streamProtocols(mode.Method == "Chat")
			type clientKey struct{ proto, attempts, scale int }
			clients := make(map[clientKey]testingv1connect.TestServiceClient)
			for i, p := range protos {
				for attempts := 2; attempts <= 4; attempts++ {
					for _, sc := range []int{scale, 2 * scale} {
						stagger := newClient(t, modelFile(mode.Hedge, attempts, sc), interceptor.WithBudget(nil))
						srv := servers[p.h2c]
						opts := append([]connect.ClientOption{connect.WithInterceptors(stagger)}, p.opts...)
						clients[clientKey{i, attempts, sc}] = testingv1connect.NewTestServiceClient(srv.client, srv.url, opts...)
					}
				}
			}
			// play plays seed's schedule, scale times slower, and returns
			// its case, the model's pick and margin, what the caller saw
			// and how it differed from the pick (nil: not at all).
			play := func(seed uint64, scale int) (callmodel.Case, int, time.Duration, modelSeen, error) {
				c := callmodel.Random(seed, mode.Hedge, mode.Method)
				c.LateHeaders = true
				n, margin := c.Pick()
				i := int(seed % uint64(len(protos)))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				seen := runModelCall(ctx, clients[clientKey{i, len(c.Script), scale}], c, scale)
				return c, n, margin, seen, checkModel(c, seen, n)
			}
			describe := func(seed uint64, c callmodel.Case, n int, err error) string {
				return fmt.Sprintf("seed %d, %s, script %s: model picks attempt %d: %v", seed, protos[seed%uint64(len(protos))].name, c.Script, n, err)
			}
			var (
				mu       sync.Mutex
				failures = map[uint64]string{}
				// suspects differed from the model under load, hedged.
				suspects   []uint64
				held, near int
			)
			work := make(chan uint64)
			var wg sync.WaitGroup
			for range modelWorkers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for seed := range work {
						c, n, margin, seen, err := play(seed, scale)
						mu.Lock()
						switch {
						case margin < modelMargin:
							// Two deciding events too close to order: any
							// one attempt will do.
							near++
							if modelNamed(c, seen) == 0 {
								failures[seed] = describe(seed, c, n, fmt.Errorf("names no one attempt: %v", err))
							}
						case err == nil:
							held++
						case !mode.Hedge || modelNamed(c, seen) == 0:
							failures[seed] = describe(seed, c, n, err)
						default:
							suspects = append(suspects, seed)
						}
						mu.Unlock()
					}
				}()
			}
			for _, seed := range seeds {
				work <- seed
			}
			close(work)
			wg.Wait()
			// A hedged schedule that differed under load plays alone, and
			// twice as slow.
			var timing []uint64
			for _, seed := range suspects {
				var last string
				for range modelReruns {
					c, n, _, _, err := play(seed, 2*scale)
					if err == nil {
						last = ""
						break
					}
					last = describe(seed, c, n, err)
				}
				if last != "" {
					failures[seed] = last + fmt.Sprintf(" (and alone at half speed, %d times)", modelReruns)
				} else {
					timing = append(timing, seed)
					held++
				}
			}
			failed := slices.Sorted(maps.Keys(failures))
			for i, seed := range failed {
				if i == 20 {
					t.Errorf("... and %d more", len(failed)-i)
					break
				}
				t.Error(failures[seed])
			}
			slices.Sort(timing)
			shown, more := timing, ""
			if len(timing) > 20 {
				shown, more = timing[:20], fmt.Sprintf(" and %d more", len(timing)-20)
			}
			t.Logf("%d schedules of %d held to the model's pick (%d of them only when played alone: seeds %v%s); %d had deciding events closer than %v", held, len(seeds), len(timing), shown, more, near, modelMargin)
			if held < len(seeds)/2 {
				t.Errorf("only %d of %d schedules held to the model's pick", held, len(seeds))
			}
		})
	}
}
