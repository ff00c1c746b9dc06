package policy

import (
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Idempotency is what a method's proto option idempotency_level says of it.
type Idempotency uint8

const (
	// IdempotencyUnknown: the method is not marked, or not in the protobuf
	// registry. stagger treats it as having side effects.
	IdempotencyUnknown Idempotency = iota
	// IdempotencyNoSideEffects: idempotency_level = NO_SIDE_EFFECTS.
	IdempotencyNoSideEffects
	// IdempotencyIdempotent: idempotency_level = IDEMPOTENT.
	IdempotencyIdempotent
)

var idempotencyNames = [...]string{"IDEMPOTENCY_UNKNOWN", "NO_SIDE_EFFECTS", "IDEMPOTENT"}

// String returns the proto enum's name: "IDEMPOTENCY_UNKNOWN",
// "NO_SIDE_EFFECTS" or "IDEMPOTENT".
func (i Idempotency) String() string {
	if int(i) < len(idempotencyNames) {
		return idempotencyNames[i]
	}
	return "IDEMPOTENCY_UNKNOWN"
}

// Safe reports whether running the method more than once is safe: it has no
// side effects or is idempotent. Hedging and per-attempt-timeout retries
// need that.
func (i Idempotency) Safe() bool {
	return i == IdempotencyNoSideEffects || i == IdempotencyIdempotent
}

// IdempotencyOf returns the idempotency_level of the method named fullMethod
// ("/pkg.Service/Method", as grpc names it), read from the protobuf global
// registry (protoregistry.GlobalFiles): a method is found when its generated
// Go package is linked into the program. An unknown or malformed name is
// IdempotencyUnknown.
//
// Answers are cached for the life of the process, so the registry should be
// complete before the first lookup (generated packages register at init).
// After the first lookup of a method, IdempotencyOf takes no lock and does
// not allocate. It is safe for concurrent use.
func IdempotencyOf(fullMethod string) Idempotency {
	if m := idempotencyCache.Load(); m != nil {
		if v, ok := (*m)[fullMethod]; ok {
			return v
		}
	}
	v := lookupIdempotency(fullMethod)
	idempotencyStore(fullMethod, v)
	return v
}

// idempotencyCacheMax bounds the cache: method names come from the program's
// own stubs, but a program that builds names at run time must not grow it
// without end. Past the bound, lookups still answer, uncached.
const idempotencyCacheMax = 4096

var (
	// idempotencyCache is copied on write: reads are one atomic load and a
	// map lookup, and writes happen once per method.
	idempotencyCache atomic.Pointer[map[string]Idempotency]
	idempotencyMu    sync.Mutex
)

func idempotencyStore(fullMethod string, v Idempotency) {
	idempotencyStoreBounded(fullMethod, v, idempotencyCacheMax)
}

// idempotencyStoreBounded caches v for fullMethod unless the cache holds
// max methods.
func idempotencyStoreBounded(fullMethod string, v Idempotency, max int) {
	idempotencyMu.Lock()
	defer idempotencyMu.Unlock()
	var old map[string]Idempotency
	if p := idempotencyCache.Load(); p != nil {
		old = *p
	}
	if _, ok := old[fullMethod]; ok || len(old) >= max {
		return
	}
	m := make(map[string]Idempotency, len(old)+1)
	for k, x := range old {
		m[k] = x
	}
	m[strings.Clone(fullMethod)] = v
	idempotencyCache.Store(&m)
}

// lookupIdempotency reads the registry; it allocates.
func lookupIdempotency(fullMethod string) Idempotency {
	name, ok := strings.CutPrefix(fullMethod, "/")
	if !ok {
		return IdempotencyUnknown
	}
	svc, method, ok := strings.Cut(name, "/")
	if !ok || svc == "" || method == "" || strings.Contains(method, "/") {
		return IdempotencyUnknown
	}
	full := protoreflect.FullName(svc + "." + method)
	if !full.IsValid() {
		return IdempotencyUnknown
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(full)
	if err != nil {
		return IdempotencyUnknown
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return IdempotencyUnknown
	}
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok || opts == nil {
		return IdempotencyUnknown
	}
	switch opts.GetIdempotencyLevel() {
	case descriptorpb.MethodOptions_NO_SIDE_EFFECTS:
		return IdempotencyNoSideEffects
	case descriptorpb.MethodOptions_IDEMPOTENT:
		return IdempotencyIdempotent
	}
	return IdempotencyUnknown
}
