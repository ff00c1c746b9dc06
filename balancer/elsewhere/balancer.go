package elsewhere

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/balancer"
	// round_robin is the default child; grpc registers it too, but say so.
	_ "google.golang.org/grpc/balancer/roundrobin"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
)

// Name is the policy's name in a service config's loadBalancingConfig.
const Name = "stagger_elsewhere"

// ServiceConfig is a service config that makes a connection use the policy
// over round_robin, for grpc.WithDefaultServiceConfig. It holds nothing
// else: a connection that needs more in its service config names the
// policy there instead.
const ServiceConfig = `{"loadBalancingConfig": [{"stagger_elsewhere": {}}]}`

// defaultChild is the child policy when the config names none.
const defaultChild = "round_robin"

func init() { balancer.Register(builder{}) }

type builder struct{}

func (builder) Name() string { return Name }

func (builder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	inUse.Store(true)
	b := &elsewhereBalancer{cc: cc, opts: opts, subConns: make(map[*subConnInfo]struct{})}
	b.view.Store(&view{})
	return b
}

// lbConfig is the policy's parsed config: its child's name and config.
type lbConfig struct {
	serviceconfig.LoadBalancingConfig
	childName   string
	childConfig serviceconfig.LoadBalancingConfig
}

// ParseConfig reads {"childPolicy": [{"name": {config}}, ...]}: the first
// registered policy of the list is the child (gRPC's rule for a list of
// policies); round_robin when the list is absent.
func (builder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	inUse.Store(true)
	var raw struct {
		ChildPolicy []map[string]json.RawMessage `json:"childPolicy"`
	}
	if len(js) > 0 {
		if err := json.Unmarshal(js, &raw); err != nil {
			return nil, fmt.Errorf("elsewhere: config: %v", err)
		}
	}
	if raw.ChildPolicy == nil {
		return &lbConfig{childName: defaultChild}, nil
	}
	var names []string
	for i, entry := range raw.ChildPolicy {
		if len(entry) != 1 {
			return nil, fmt.Errorf("elsewhere: childPolicy[%d]: want one policy name as the only key, got %d keys", i, len(entry))
		}
		for name, cfg := range entry {
			if name == Name {
				return nil, fmt.Errorf("elsewhere: childPolicy[%d]: %s cannot be its own child", i, Name)
			}
			bb := balancer.Get(name)
			if bb == nil {
				names = append(names, name)
				continue
			}
			parsed := &lbConfig{childName: name}
			if p, ok := bb.(balancer.ConfigParser); ok {
				c, err := p.ParseConfig(cfg)
				if err != nil {
					return nil, fmt.Errorf("elsewhere: childPolicy[%d] (%s): %v", i, name, err)
				}
				parsed.childConfig = c
			}
			return parsed, nil
		}
	}
	return nil, fmt.Errorf("elsewhere: childPolicy: no registered policy among %q", names)
}

// backend is a READY SubConn and its address.
type backend struct {
	sc   balancer.SubConn
	addr string
}

// view is what a picker knows of the child's SubConns.
type view struct {
	// ready is the READY SubConns, in address order.
	ready []backend
	// all is every SubConn the balancer knows of, whatever its state, so
	// that a pick of one this view does not hold READY is still known by
	// its address: grpc reports a SubConn's new state to the balancer
	// after the SubConn took it, and the child's picker may still hold a
	// SubConn this view has already seen leave READY (and that has
	// reconnected since).
	all []backend
}

// subConnInfo is what the balancer knows of a SubConn the child made.
type subConnInfo struct {
	sc    balancer.SubConn
	addr  string
	state connectivity.State
	// gen is the generation of the child that made it.
	gen uint64
}

// elsewhereBalancer runs the child policy through a balancer.ClientConn of
// its own (childConn) that sees every SubConn the child makes and its state,
// and wraps every picker the child sends up.
//
// grpc calls a balancer's methods and the SubConns' listeners one at a time;
// mu guards what a child that calls UpdateState from a goroutine of its own
// could race with.
type elsewhereBalancer struct {
	cc   balancer.ClientConn
	opts balancer.BuildOptions

	mu        sync.Mutex
	child     balancer.Balancer
	childName string
	// gen numbers the children built; a picker from an older one is
	// dropped.
	gen      uint64
	closed   bool
	subConns map[*subConnInfo]struct{}

	// view is the SubConns and which are READY, replaced whenever one
	// changes state; pickers read it at every pick.
	view atomic.Pointer[view]
}

func (b *elsewhereBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	cfg, _ := s.BalancerConfig.(*lbConfig)
	if cfg == nil {
		cfg = &lbConfig{childName: defaultChild}
	}
	bb := balancer.Get(cfg.childName)
	if bb == nil {
		return fmt.Errorf("elsewhere: child policy %q is not registered", cfg.childName)
	}
	b.mu.Lock()
	closed, child := b.closed, b.child
	build := !closed && (child == nil || b.childName != cfg.childName)
	var gen uint64
	if build {
		// From now on only the new child's pickers are sent up.
		b.gen++
		gen = b.gen
	}
	b.mu.Unlock()
	if closed {
		return nil
	}
	if build {
		// Built without the lock: a child may call its ClientConn as it
		// is built.
		built := bb.Build(&childConn{ClientConn: b.cc, b: b, gen: gen}, b.opts)
		b.mu.Lock()
		old := b.child
		b.child, b.childName = built, cfg.childName
		b.mu.Unlock()
		if old != nil {
			old.Close()
			b.shutdownOlderThan(gen)
		}
		child = built
	}
	s.BalancerConfig = cfg.childConfig
	return child.UpdateClientConnState(s)
}

// shutdownOlderThan shuts down the SubConns that children before
// generation gen made and left: a closed child need not shut down its own
// (grpc-go v1.64's round_robin and pick_first do not), and they would stay
// connected, and READY here, for nothing.
func (b *elsewhereBalancer) shutdownOlderThan(gen uint64) {
	var stale []balancer.SubConn
	b.mu.Lock()
	for info := range b.subConns {
		if info.gen < gen {
			if info.sc != nil {
				stale = append(stale, info.sc)
			}
			info.state = connectivity.Shutdown
			delete(b.subConns, info)
		}
	}
	b.publishLocked()
	b.mu.Unlock()
	for _, sc := range stale {
		sc.Shutdown()
	}
}

func (b *elsewhereBalancer) ResolverError(err error) {
	if child := b.currentChild(); child != nil {
		child.ResolverError(err)
	}
}

// UpdateSubConnState is not called: every SubConn the child makes has a
// StateListener (childConn.NewSubConn).
func (b *elsewhereBalancer) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}

func (b *elsewhereBalancer) Close() {
	b.mu.Lock()
	child := b.child
	b.closed, b.child = true, nil
	b.mu.Unlock()
	if child != nil {
		child.Close()
	}
}

// ExitIdle asks the child to connect, when it can be asked.
func (b *elsewhereBalancer) ExitIdle() {
	if ei, ok := b.currentChild().(interface{ ExitIdle() }); ok {
		ei.ExitIdle()
	}
}

func (b *elsewhereBalancer) currentChild() balancer.Balancer {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.child
}

// subConnState records a SubConn's new state and republishes the READY set.
func (b *elsewhereBalancer) subConnState(info *subConnInfo, state connectivity.State) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if info.state == connectivity.Shutdown {
		// Shut down by shutdownOlderThan: gone for good.
		return
	}
	info.state = state
	if state == connectivity.Shutdown {
		delete(b.subConns, info)
	}
	b.publishLocked()
}

func (b *elsewhereBalancer) publishLocked() {
	v := &view{ready: make([]backend, 0, len(b.subConns)), all: make([]backend, 0, len(b.subConns))}
	for info := range b.subConns {
		if info.sc == nil {
			continue
		}
		v.all = append(v.all, backend{sc: info.sc, addr: info.addr})
		if info.state == connectivity.Ready {
			v.ready = append(v.ready, backend{sc: info.sc, addr: info.addr})
		}
	}
	// A stable order, so that the picker's rotation visits each in turn.
	sort.Slice(v.ready, func(i, j int) bool { return v.ready[i].addr < v.ready[j].addr })
	b.view.Store(v)
}

// childConn is the child policy's balancer.ClientConn: the channel's, but
// for SubConns (tracked) and pickers (wrapped).
type childConn struct {
	balancer.ClientConn
	b   *elsewhereBalancer
	gen uint64
}

func (c *childConn) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	info := &subConnInfo{state: connectivity.Idle, gen: c.gen}
	if len(addrs) > 0 {
		info.addr = addrs[0].Addr
	}
	inner := opts.StateListener
	opts.StateListener = func(s balancer.SubConnState) {
		c.b.subConnState(info, s.ConnectivityState)
		if inner != nil {
			inner(s)
			return
		}
		// A child that set no listener learns of states the old way.
		c.b.mu.Lock()
		child, sc := c.b.child, info.sc
		c.b.mu.Unlock()
		if child != nil && sc != nil {
			//lint:ignore SA1019 the child set no listener: this is how it hears.
			child.UpdateSubConnState(sc, s)
		}
	}
	//lint:ignore SA1019 the child asked for it; pass it on.
	sc, err := c.ClientConn.NewSubConn(addrs, opts)
	if err != nil {
		return nil, err
	}
	c.b.mu.Lock()
	info.sc = sc
	c.b.subConns[info] = struct{}{}
	c.b.publishLocked()
	c.b.mu.Unlock()
	return sc, nil
}

func (c *childConn) UpdateAddresses(sc balancer.SubConn, addrs []resolver.Address) {
	c.b.mu.Lock()
	for info := range c.b.subConns {
		if info.sc == sc && len(addrs) > 0 {
			info.addr = addrs[0].Addr
		}
	}
	c.b.publishLocked()
	c.b.mu.Unlock()
	//lint:ignore SA1019 the child called it; pass it on.
	c.ClientConn.UpdateAddresses(sc, addrs)
}

func (c *childConn) UpdateState(s balancer.State) {
	c.b.mu.Lock()
	stale := c.b.closed || c.gen != c.b.gen
	c.b.mu.Unlock()
	if stale {
		return
	}
	if s.Picker != nil {
		s.Picker = &picker{child: s.Picker, view: &c.b.view}
	}
	c.b.cc.UpdateState(s)
}

// picker is the child's picker, steered away from the backends a call's
// earlier attempts used.
type picker struct {
	child balancer.Picker
	view  *atomic.Pointer[view]
	// next rotates the first backend an alternative is looked for at, so
	// that the alternatives spread.
	next atomic.Uint32
}

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	res, err := p.child.Pick(info)
	if err != nil {
		return res, err
	}
	set := setFromContext(info.Ctx)
	if set == nil {
		return res, nil
	}
	v := p.view.Load()
	ready := v.ready
	addr, known := "", false
	for _, r := range v.all {
		if r.sc == res.SubConn {
			addr, known = r.addr, true
			break
		}
	}
	if !known {
		return res, nil
	}
	set.mu.Lock()
	if set.usedLocked(addr) {
		n := uint32(len(ready))
		start := p.next.Add(1)
		for i := uint32(0); i < n; i++ {
			r := ready[(start+i)%n]
			if !set.usedLocked(r.addr) {
				res.SubConn, addr = r.sc, r.addr
				break
			}
		}
	}
	set.addLocked(addr)
	set.mu.Unlock()
	return res, nil
}
