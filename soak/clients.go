package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/balancer/elsewhere"
	"github.com/stagger-go/stagger/breaker"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// methodsPolicy is every process's methods: Get hedged, Put retried with a
// per-attempt timeout, the rest (Write, which carries an idempotency key,
// and the three streams) retried.
const methodsPolicy = `"methodConfig": [
  {"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}],
   "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "20ms", "nonFatalStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}},
  {"name": [{"service": "stagger.testing.v1.TestService", "method": "Put"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "20ms", "maxBackoff": "400ms", "backoffMultiplier": 2,
     "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"], "perAttemptRecvTimeout": "50ms"}},
  {"name": [{"service": "stagger.testing.v1.TestService"}],
   "retryPolicy": {"maxAttempts": 4, "initialBackoff": "20ms", "maxBackoff": "400ms", "backoffMultiplier": 2,
     "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]`

// crowdBackoff is a crowd's: impatient callers retry at once, so that
// their retries wait in the Gate a millisecond or two and make room.
const crowdBackoff = `"initialBackoff": "1ms", "maxBackoff": "20ms"`

// churnPolicy is the churn process's: Get retried (not hedged: a hedge
// does not wait in the Gate) up to five attempts, a millisecond apart, so
// that a failing Get enters the Gate again and again within its short
// deadline.
const churnPolicy = `"methodConfig": [
  {"name": [{"service": "stagger.testing.v1.TestService", "method": "Get"}],
   "retryPolicy": {"maxAttempts": 5, "initialBackoff": "1ms", "maxBackoff": "2ms", "backoffMultiplier": 2,
     "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]`

// guards are the breaker and throttling sections some processes add.
const (
	breakerPolicy  = `, "circuitBreaker": {"failureRatio": 0.5, "minimumThroughput": 20, "samplingWindow": "5s", "breakDuration": "1s", "maxBreakDuration": "2s"}`
	throttlePolicy = `, "adaptiveThrottling": {"k": 2}`
)

// processKind is one kind of client process of the fleet.
type processKind struct {
	name string
	// guard is added to the policy file (breakerPolicy, throttlePolicy).
	guard string
	// room is the Gate's MaxWaiting (0: the default budget's).
	room int
	// elsewhere: the stagger_elsewhere balancer, else round_robin.
	elsewhere bool
	// crowd: requests fanned out (crowdFanOut), shorter deadlines, more
	// of them cancelled and a budget that pays for few retries, so that
	// its full waiting room sees callers leave while more critical
	// retries arrive.
	crowd bool
	// churn: Gets only (churnPolicy), every Get of half the requests
	// failing every attempt, requests given up when one of their retries
	// is deferred (givingUp), so that retries enter a room of one
	// together, a more critical one evicting the waiter while the
	// waiter's caller gives up (the numbers: churnRoom and after).
	churn bool
}

// kinds are the client processes: the default budget, a breaker,
// throttling, three crowds with a small waiting room (one also behind a
// breaker), where a more critical retry evicts a less critical one, and
// the churn process, whose room of one sees that many times a second.
var kinds = []processKind{
	{name: "default"},
	{name: "breaker", guard: breakerPolicy, elsewhere: true},
	{name: "throttle", guard: throttlePolicy},
	{name: "small-room", room: smallRoom, elsewhere: true, crowd: true},
	{name: "small-room-2", room: smallRoom, crowd: true},
	{name: "small-room-breaker", guard: breakerPolicy, room: smallRoom, crowd: true},
	{name: "churn", room: churnRoom, crowd: true, churn: true},
}

// process is one client process's worth of clients: its own budgets (one
// per backend, each method's a Gate), breakers (in state, the interceptors'
// State), connection to every replica and connection to payments, dialed
// with the same options.
type process struct {
	kind      processKind
	cc, payCC *grpc.ClientConn
	client    testingv1.TestServiceClient
	payClient testingv1.TestServiceClient
	budgets   *budget.Backends
	room      int // each Gate's MaxWaiting
	state     *interceptor.State
}

// gates sums the process's Gates' states: the calls waiting now, and how
// many waited and how their waits ended.
func (p *process) gates() (sum budget.State) {
	for _, st := range p.budgets.States() {
		sum.Waiting += st.Waiting
		sum.Deferred += st.Deferred
		sum.DeferAdmitted += st.DeferAdmitted
		sum.DeferGaveUp += st.DeferGaveUp
	}
	return sum
}

// close closes the process's connections.
func (p *process) close() {
	_ = p.cc.Close()
	if p.payCC != nil {
		_ = p.payCC.Close()
	}
}

// openBreakers lists the process's breakers that are not closed now, each
// as its key and state.
func (p *process) openBreakers() []string {
	var out []string
	for _, set := range p.state.Breakers() {
		for _, s := range set.Snapshots() {
			if s.State != breaker.StateClosed {
				out = append(out, fmt.Sprintf("%s is %v", s.Key, s.State))
			}
		}
	}
	slices.Sort(out)
	return out
}

// dialProcess builds process p of kind k against the replicas' addresses
// and payments' (payAddr).
func dialProcess(p int, k processKind, addrs []string, payAddr string, hook func(context.Context, interceptor.Event)) (*process, error) {
	methods := methodsPolicy
	if k.crowd {
		methods = strings.ReplaceAll(methods, `"initialBackoff": "20ms", "maxBackoff": "400ms"`, crowdBackoff)
	}
	if k.churn {
		methods = churnPolicy
	}
	cfg, err := policy.ParseConfig([]byte("{" + methods + k.guard + "}"))
	if err != nil {
		return nil, fmt.Errorf("soak: policy of %s: %w", k.name, err)
	}
	bs := budget.DefaultSettings()
	if k.crowd {
		bs.TokenBucket = crowdBudget
	}
	bs.Defer.MaxWaiting = k.room
	budgets, err := budget.NewBackends(bs)
	if err != nil {
		return nil, err
	}
	one, _ := budget.New(bs) // bs is valid: NewBackends took it
	if _, ok := one.(budget.Deferrer); !ok {
		return nil, fmt.Errorf("soak: the budget of %s does not defer", k.name)
	}
	pr := &process{kind: k, budgets: budgets, room: bs.WithDefaults().Defer.MaxWaiting, state: interceptor.NewState()}
	res := manual.NewBuilderWithScheme(fmt.Sprintf("soak%d", p))
	var as []resolver.Address
	for _, a := range addrs {
		as = append(as, resolver.Address{Addr: a})
	}
	res.InitialState(resolver.State{Addresses: as})
	lb := `{"loadBalancingConfig": [{"round_robin": {}}]}`
	if k.elsewhere {
		lb = elsewhere.ServiceConfig
	}
	dial := append(stagger.DialOptions(cfg, interceptor.WithDefaultBudgets(budgets), interceptor.WithCallHook(hook), interceptor.WithState(pr.state)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	pr.cc, err = grpc.NewClient(res.Scheme()+":///replicas", append(dial, grpc.WithResolvers(res), grpc.WithDefaultServiceConfig(lb))...)
	if err != nil {
		return nil, err
	}
	pr.client = testingv1.NewTestServiceClient(pr.cc)
	if pr.payCC, err = grpc.NewClient("passthrough:///"+payAddr, dial...); err != nil {
		_ = pr.cc.Close()
		return nil, err
	}
	pr.payClient = testingv1.NewTestServiceClient(pr.payCC)
	return pr, nil
}

// op is one kind of call of the workload.
type op uint8

const (
	opWriteMemory op = iota // keyed Write, de-duplicated in the memory store
	opWriteRedis            // keyed Write, in the Redis store
	opGet                   // idempotent read, hedged
	opPut                   // idempotent write, per-attempt timeout
	opList                  // server stream
	opUpload                // client stream
	opChat                  // bidi stream
	opGetFailing            // a Get whose every attempt fails (the churn process)
	opPayments              // a Put to payments, the second backend
)

var opNames = [...]string{"write-memory", "write-redis", "get", "put", "list", "upload", "chat", "get-failing", "payments"}

func (o op) String() string { return opNames[o] }

// pickOp draws an operation: keyed writes the most, since they carry the
// ledger's invariants.
func pickOp(rng *rand.Rand, redis bool) op {
	switch x := rng.IntN(100); {
	case x < 25:
		return opWriteMemory
	case x < 40:
		if redis {
			return opWriteRedis
		}
		return opWriteMemory
	case x < 60:
		return opGet
	case x < 75:
		return opPut
	case x < 85:
		return opList
	case x < 93:
		return opUpload
	}
	return opChat
}

// crowdBudget is the default budget's token bucket, ten times smaller and
// ten times slower to refill: it starts empty and pays one retry per 50
// calls that succeed at once, so that nearly every retry of a crowd waits
// in its Gate.
var crowdBudget = budget.TokenBucketSettings{Capacity: 10, Initial: 0.1, RetryCost: 5, TimeoutRetryCost: 10, SuccessReward: 0.1}

var script = &testingv1.Script{Delay: durationpb.New(serviceDelay), ResponseCount: listLength}

// failingScript fails every attempt of a call at once (UNAVAILABLE): with
// no key, the server counts each attempt as the first.
var failingScript = &testingv1.Script{FailAttempts: 1}

// callTrack counts the EventEnd the interceptor gave one call.
type callTrack struct{ ends atomic.Int32 }

type trackKey struct{}

// call makes one call of kind o; it returns an error for a call that
// succeeded with the wrong content (a stream that lost, repeated or
// reordered messages).
func (p *process) call(ctx context.Context, o op, id uint64, crit criticality.Level) (ok bool, bad error) {
	c := p.client
	co := []grpc.CallOption{interceptor.WithCriticality(crit)}
	var err error
	switch o {
	case opWriteMemory, opWriteRedis:
		h := memoryKeyHeader
		if o == opWriteRedis {
			h = redisKeyHeader
		}
		_, err = c.Write(ctx, &testingv1.WriteRequest{Script: script, Payload: writePayload(id)}, append(co, interceptor.WithIdempotencyKey(h))...)
	case opGet:
		_, err = c.Get(ctx, &testingv1.GetRequest{Script: script}, co...)
	case opGetFailing:
		_, err = c.Get(ctx, &testingv1.GetRequest{Script: failingScript}, co...)
	case opPut:
		_, err = c.Put(ctx, &testingv1.PutRequest{Script: script}, co...)
	case opPayments:
		_, err = p.payClient.Put(ctx, &testingv1.PutRequest{Script: script}, co...)
	case opList:
		err, bad = list(ctx, c, co)
	case opUpload:
		err, bad = upload(ctx, c, co)
	case opChat:
		err, bad = chat(ctx, c, co)
	}
	return err == nil && bad == nil, bad
}

// wantSeqs is what every stream must carry, once each, in order.
var wantSeqs = []int64{1, 2, 3, 4, 5}

func list(ctx context.Context, c testingv1.TestServiceClient, co []grpc.CallOption) (err, bad error) {
	s, err := c.ListItems(ctx, &testingv1.ListItemsRequest{Script: script}, co...)
	if err != nil {
		return err, nil
	}
	var got []int64
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err, nil
		}
		got = append(got, m.GetReply().GetSeq())
	}
	return nil, sameSeqs("ListItems", got)
}

func upload(ctx context.Context, c testingv1.TestServiceClient, co []grpc.CallOption) (err, bad error) {
	s, err := c.Upload(ctx, co...)
	if err != nil {
		return err, nil
	}
	for _, seq := range wantSeqs {
		m := &testingv1.UploadRequest{Seq: seq}
		if seq == 1 {
			m.Script = script
		}
		if err := s.Send(m); err != nil {
			break // the status comes from CloseAndRecv
		}
	}
	r, err := s.CloseAndRecv()
	if err != nil {
		return err, nil
	}
	return nil, sameSeqs("Upload", r.GetReceived())
}

func chat(ctx context.Context, c testingv1.TestServiceClient, co []grpc.CallOption) (err, bad error) {
	s, err := c.Chat(ctx, co...)
	if err != nil {
		return err, nil
	}
	var got []int64
	for _, seq := range wantSeqs {
		m := &testingv1.ChatRequest{Seq: seq}
		if seq == 1 {
			m.Script = script
		}
		if err := s.Send(m); err != nil {
			break
		}
		r, err := s.Recv()
		if err != nil {
			return err, nil
		}
		got = append(got, r.GetReply().GetSeq())
	}
	if err := s.CloseSend(); err != nil {
		return err, nil
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		return err, nil
	}
	return nil, sameSeqs("Chat", got)
}

func sameSeqs(method string, got []int64) error {
	if slices.Equal(got, wantSeqs) {
		return nil
	}
	return fmt.Errorf("%s succeeded with messages %v, want %v", method, got, wantSeqs)
}
