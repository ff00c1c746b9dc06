// Package elsewhere is a gRPC load-balancing policy that sends a call's
// retries and hedges to backends its earlier attempts did not use.
//
// A retry that goes back to the backend that just failed, or a hedge sent to
// the replica that is slow, is wasted. An interceptor cannot choose the
// backend; a load-balancing policy can. This one, registered with grpc as
// "stagger_elsewhere" (Name), wraps a child policy (round_robin by default)
// and, for each pick, looks at the backends the call's earlier attempts
// went to: when the child picked one of them and a READY backend exists that
// none of them used, it picks that one instead; otherwise (every READY
// backend was used, or the call's first attempt) the child's pick stands.
// Hedges of one call thus go to distinct backends while there are enough,
// and a retry after a failure goes to another backend whenever one is READY.
//
// # Enabling it
//
// Name the policy in the service config, given as a dial option or sent by
// the name resolver:
//
//	opts := append(stagger.DialOptions(cfg),
//		grpc.WithDefaultServiceConfig(elsewhere.ServiceConfig), // {"loadBalancingConfig": [{"stagger_elsewhere": {}}]}
//		grpc.WithTransportCredentials(creds))
//	conn, err := grpc.NewClient("dns:///shop.internal:443", opts...)
//
// A policy file may name it in its loadBalancingConfig too, but stagger
// does not hand a file's loadBalancingConfig to grpc (policy.Config
// reports it as grpc-go's to apply): give it to grpc as above, or from the
// resolver. The policy spreads attempts over the addresses the resolver
// returns (DNS with several A records, a headless Kubernetes service), so it
// helps only when there are several.
//
// With a child other than round_robin (the first registered policy of the
// list is used, as gRPC does for loadBalancingConfig):
//
//	{"loadBalancingConfig": [{"stagger_elsewhere": {"childPolicy": [{"weighted_round_robin": {}}, {"round_robin": {}}]}}]}
//
// Importing the package registers the policy; the interceptor package
// imports it, so any program that uses stagger has it. Without the policy in
// a connection's service config nothing changes for that connection.
//
// # How a call's backends are known
//
// stagger's interceptors give every call that may retry or hedge a context
// carrying a small set shared by all its attempts (NewCallContext); the
// picker records in it the address of every backend it picks for the call,
// and reads it at the next pick. Concurrent hedges of one call pick under
// the set's lock, so two of them never take the same unused backend. For
// calls that stagger does not retry (grpc-go's own retry, a hand-made loop),
// call NewCallContext yourself once per call. A pick whose context carries
// no set is the child's, unchanged. Backend reads the latest pick's
// address, Backends every address the call's attempts went to.
//
// Before a config naming the policy was parsed or a balancer of it built,
// NewCallContext does nothing: a program that never uses the policy pays no
// allocation for it. The policy is usually parsed as the connection is made
// (grpc.WithDefaultServiceConfig); when it arrives from the name resolver
// instead, the first call of the process is made before it and is not
// tracked.
//
// # READY backends
//
// The child makes its SubConns through the policy, which watches each
// one's connectivity state; a READY SubConn is a candidate. The address of a
// SubConn is its first address. With round_robin on grpc-go v1.64 the
// SubConns are the child's own (balancer/base); on later versions
// round_robin runs a pick_first leaf per endpoint, and their SubConns are
// watched the same way. The alternative is chosen among the READY backends
// not yet used, in address order from a rotating start, so alternatives
// spread. The child's own pick is known by its address whatever the state
// the policy last saw it in: grpc reports a SubConn's new state after the
// SubConn took it, so the child's picker may still return a SubConn the
// policy saw leave READY (a connection reset) and that is connected again;
// when the call used it, the pick is steered elsewhere all the same.
//
// Outlier detection (gRFC A50) belongs above this policy
// ({"outlier_detection_experimental": {"childPolicy": [{"stagger_elsewhere": {}}]}}):
// an ejected backend then is not READY here and is never picked as an
// alternative. Below it, an ejected backend may still be picked as one.
//
// # Concurrency
//
// The balancer and its pickers follow grpc's rules for balancers and are safe
// for the concurrent picks grpc makes. NewCallContext and Backend are safe
// for concurrent use; a set belongs to one call.
package elsewhere
