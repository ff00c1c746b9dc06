package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/criticality"
	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/policy"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
)

// pods is the client that dials pod addresses as they come and go: every
// pods.every a new target, a ClientConn of its own to one replica under a
// name no pod had before (passthrough://pod-N/address), which makes
// podCalls calls and is closed. Its budgets (budget.Backends of the
// default budget: one per target) meet more targets over the run than they
// keep (twice their cap), so that they forget while they serve; its calls
// are checked as every other's.
type pods struct {
	// proc holds the budgets, the room and the interceptors' State; each
	// pod copies it with its own connection.
	proc  process
	dial  []grpc.DialOption
	addrs []string
	every time.Duration
	// dialed counts the pods; most is the most targets the budgets held
	// at once (watch).
	dialed, most atomic.Int64
}

// podOps are a pod's calls: keyed writes (the ledger's), reads and puts.
var podOps = []op{opWriteMemory, opWriteMemory, opGet, opPut}

// newPods builds the pods client of a run of length d against the
// replicas' addresses.
func newPods(addrs []string, d time.Duration, hook func(context.Context, interceptor.Event)) (*pods, error) {
	cfg, err := policy.ParseConfig([]byte("{" + methodsPolicy + "}"))
	if err != nil {
		return nil, fmt.Errorf("soak: policy of pods: %w", err)
	}
	bs := budget.DefaultSettings()
	budgets, err := budget.NewBackends(bs)
	if err != nil {
		return nil, err
	}
	ps := &pods{addrs: addrs, proc: process{kind: processKind{name: "pods"}, budgets: budgets,
		room: bs.WithDefaults().Defer.MaxWaiting, state: interceptor.NewState()}}
	ps.dial = append(stagger.DialOptions(cfg, interceptor.WithDefaultBudgets(budgets), interceptor.WithCallHook(hook), interceptor.WithState(ps.proc.state)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	ps.every = min(max(d/time.Duration(2*budgets.Limits().Targets), podEveryMin), podEveryMax)
	return ps, nil
}

// podWork starts a pod every ps.every until loadCtx ends (skipping a turn
// while podsAtOnce run), then waits for them.
func (r *run) podWork(loadCtx context.Context, ps *pods, rng *rand.Rand) {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, podsAtOnce)
	t := time.NewTicker(ps.every)
	defer t.Stop()
	for {
		select {
		case <-loadCtx.Done():
			return
		case <-t.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			continue
		}
		n := ps.dialed.Add(1)
		addr, podRng := ps.addrs[rng.IntN(len(ps.addrs))], rand.New(rand.NewPCG(rng.Uint64(), uint64(n)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			r.pod(loadCtx, ps, n, addr, podRng)
		}()
	}
}

// pod dials pod n at addr, makes its calls and closes it.
func (r *run) pod(loadCtx context.Context, ps *pods, n int64, addr string, rng *rand.Rand) {
	cc, err := grpc.NewClient(fmt.Sprintf("passthrough://pod-%d/%s", n, addr), ps.dial...)
	if err != nil {
		r.fail(fmt.Sprintf("pods: dial pod %d: %v", n, err))
		return
	}
	defer cc.Close()
	p := ps.proc
	p.cc, p.client = cc, testingv1.NewTestServiceClient(cc)
	for range podCalls {
		timeout := callTimeoutMin + time.Duration(rng.Int64N(int64(podTimeoutMax-callTimeoutMin)))
		ctx, cancel := context.WithTimeout(context.WithoutCancel(loadCtx), timeout)
		r.one(ctx, &p, podOps[rng.IntN(len(podOps))], criticality.Levels()[rng.IntN(criticality.NumLevels)])
		cancel()
	}
}

// watchPods checks the pods' budgets: no more targets than their cap and
// the calls waiting now (a target a call waits on is kept past it), and
// no backend with more calls waiting than its room (all its methods).
func (r *run) watchPods(ps *pods) {
	targets, waiting := map[string]int{}, 0
	for _, st := range ps.proc.budgets.States() {
		targets[st.Target] += st.Waiting
		waiting += st.Waiting
	}
	for t, w := range targets {
		if w > ps.proc.room {
			r.fail(fmt.Sprintf("pods: %d calls wait on %s, more than its room of %d", w, t, ps.proc.room))
		}
	}
	if l := ps.proc.budgets.Limits(); len(targets) > l.Targets+waiting {
		r.fail(fmt.Sprintf("pods: the budgets hold %d targets, past their cap of %d and the %d calls waiting", len(targets), l.Targets, waiting))
	}
	if n := int64(len(targets)); n > ps.most.Load() {
		ps.most.Store(n)
	}
}

// String says what the pods did.
func (ps *pods) String() string {
	return fmt.Sprintf("%d targets dialled, one every %v; their budgets held at most %d at once (cap %d)",
		ps.dialed.Load(), ps.every, ps.most.Load(), ps.proc.budgets.Limits().Targets)
}
