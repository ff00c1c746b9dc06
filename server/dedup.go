package server

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// DefaultIdempotencyHeader is the request header Dedup reads the key from
// unless told otherwise: the name stagger's examples give
// interceptor.WithIdempotencyKey, and the IETF Idempotency-Key draft's.
const DefaultIdempotencyHeader = "idempotency-key"

// ReplayedHeader is the response header ("true") of an outcome replayed
// from the store instead of running the handler.
const ReplayedHeader = "idempotent-replayed"

// Defaults of IdempotencyOptions.
const (
	DefaultIdempotencyTTL      = 24 * time.Hour
	DefaultLease               = time.Minute
	DefaultMaxLease            = 10 * time.Minute
	DefaultMaxKeyLength        = 255
	maxKeyLengthLimit          = 4096
	outcomeVersion        byte = 1
)

// IdempotencyOptions configure de-duplication (WithIdempotency); the zero
// value takes the defaults.
type IdempotencyOptions struct {
	// Header is the request header that carries the key; default
	// DefaultIdempotencyHeader.
	Header string
	// Key, when set, is asked first for a request's key: the application
	// supplies it (AIP-155's request_id in the request message). ok false
	// falls back to Header.
	Key func(ctx context.Context, method string, req any) (key string, ok bool)
	// TTL is how long an outcome is replayed; default
	// DefaultIdempotencyTTL (24 hours, as Stripe keeps them).
	TTL time.Duration
	// Lease bounds a running entry of a request without a deadline;
	// default DefaultLease. A request with a deadline holds its key until
	// the deadline and a second more, at most MaxLease (default
	// DefaultMaxLease).
	Lease, MaxLease time.Duration
	// MaxKeyLength bounds a key's length; default DefaultMaxKeyLength.
	MaxKeyLength int
	// Scope names the caller a key belongs to: an outcome is found only by
	// requests of the scope that stored it (the package documentation,
	// "Idempotency keys", says what that promises). It is asked only for
	// requests that carry a valid key. An error refuses the request
	// without running the handler or storing anything: a gRPC status error
	// as it is, any other as UNAUTHENTICATED. "" is a scope like any
	// other. Default: the caller's verified TLS client certificate, and ""
	// for callers without one.
	Scope func(ctx context.Context) (string, error)
	// Logger gets the warning, once, that keys are shared by every caller
	// without a verified client certificate (the first time such a
	// request carries a key; never with Scope set); default slog.Default()
	// as it is then.
	Logger *slog.Logger
}

// WithIdempotency turns on de-duplication of unary calls that carry an
// idempotency key, with store keeping the keys (NewMemoryStore for one
// replica; the Redis store of the nested module
// github.com/stagger-go/stagger/server/redisstore for a fleet). See the
// package documentation, "Idempotency keys".
func WithIdempotency(store Store, o IdempotencyOptions) Option {
	return func(s *settings) {
		if store == nil {
			s.errs = append(s.errs, errors.New("server: WithIdempotency: store is nil"))
		}
		bad := func(field, why string, got any) {
			s.errs = append(s.errs, fmt.Errorf("server: WithIdempotency: IdempotencyOptions.%s: %s, got %v", field, why, got))
		}
		if o.Header == "" {
			o.Header = DefaultIdempotencyHeader
		} else if !validHeaderName(o.Header) {
			bad("Header", "must be a lower-case metadata key (a-z, 0-9, -, _, .) not starting with grpc-", fmt.Sprintf("%q", o.Header))
		}
		switch {
		case o.TTL < 0:
			bad("TTL", "must be positive (0 takes the default)", o.TTL)
		case o.TTL == 0:
			o.TTL = DefaultIdempotencyTTL
		}
		switch {
		case o.Lease < 0:
			bad("Lease", "must be positive (0 takes the default)", o.Lease)
		case o.Lease == 0:
			o.Lease = DefaultLease
		}
		switch {
		case o.MaxLease < 0:
			bad("MaxLease", "must be positive (0 takes the default)", o.MaxLease)
		case o.MaxLease == 0:
			o.MaxLease = DefaultMaxLease
		}
		if o.MaxLease < o.Lease {
			bad("MaxLease", fmt.Sprintf("must be at least Lease (%v)", o.Lease), o.MaxLease)
		}
		switch {
		case o.MaxKeyLength < 0 || o.MaxKeyLength > maxKeyLengthLimit:
			bad("MaxKeyLength", fmt.Sprintf("must be in [1, %d] (0 takes the default)", maxKeyLengthLimit), o.MaxKeyLength)
		case o.MaxKeyLength == 0:
			o.MaxKeyLength = DefaultMaxKeyLength
		}
		s.dedup = &dedup{store: store, o: o}
	}
}

func validHeaderName(h string) bool {
	if len(h) >= 5 && h[:5] == "grpc-" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// dedup is WithIdempotency's state.
type dedup struct {
	store Store
	o     IdempotencyOptions
	// warned is set once Logger was told that keys are shared.
	warned atomic.Bool
	// serve runs the handler under the rest of the server side
	// (Interceptors.serve).
	serve func(ctx context.Context, req any, handler grpc.UnaryHandler) (any, error)
}

// key returns the request's key ("" when it has none), or an
// INVALID_ARGUMENT error naming the header for a bad one.
func (d *dedup) key(ctx context.Context, method string, req any) (string, error) {
	var key string
	fromReq := false
	if d.o.Key != nil {
		key, fromReq = d.o.Key(ctx, method, req)
	}
	bad := func(format string, args ...any) error {
		where := "the request's key"
		if !fromReq {
			where = "header " + strconv.Quote(d.o.Header)
		}
		return status.Errorf(codes.InvalidArgument, "server: idempotency key in %s: %s", where, fmt.Sprintf(format, args...))
	}
	if !fromReq {
		vals := metadata.ValueFromIncomingContext(ctx, d.o.Header)
		switch len(vals) {
		case 0:
			return "", nil
		case 1:
			key = vals[0]
		default:
			return "", bad("want one value, got %d", len(vals))
		}
	}
	if key == "" {
		return "", bad("empty")
	}
	if len(key) > d.o.MaxKeyLength {
		return "", bad("%d bytes, longer than the limit of %d", len(key), d.o.MaxKeyLength)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return "", bad("byte %d is 0x%02x, outside printable ASCII", i, c)
		}
	}
	return key, nil
}

// scope returns the caller's scope, or the error that refuses the request.
func (d *dedup) scope(ctx context.Context) (string, error) {
	if d.o.Scope == nil {
		scope, ok := peerScope(ctx)
		if !ok && !d.warned.Swap(true) {
			// At first use, not in New: the TLS credentials go to
			// grpc.NewServer, not here, and one server may take callers
			// with and without certificates.
			l := d.o.Logger
			if l == nil {
				// Read now: a program may set its default after New.
				l = slog.Default()
			}
			l.Warn("server: idempotency keys of callers without a verified TLS client certificate are shared by all of them: " +
				"one such caller that sends another's key with the same request gets its stored reply; " +
				"require client certificates or set IdempotencyOptions.Scope")
		}
		return scope, nil
	}
	scope, err := d.o.Scope(ctx)
	if err != nil {
		// A status of OK would let the request through in the scope "":
		// a failed Scope never does.
		if st, ok := status.FromError(err); ok && st.Code() != codes.OK {
			return "", st.Err()
		}
		return "", status.Errorf(codes.Unauthenticated, "server: idempotency key's scope (IdempotencyOptions.Scope): %v", err)
	}
	return scope, nil
}

// fingerprint is SHA-256 of method, a zero byte and req's deterministic
// encoding.
func fingerprint(method string, req any) (Fingerprint, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return Fingerprint{}, status.Errorf(codes.Internal, "server: idempotency: request of %s is a %T, not a protobuf message", method, req)
	}
	bp := fpBuffers.Get().(*[]byte)
	defer fpBuffers.Put(bp)
	b := append(append((*bp)[:0], method...), 0)
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, m)
	if err != nil {
		return Fingerprint{}, status.Errorf(codes.Internal, "server: idempotency: encoding the request of %s: %v", method, err)
	}
	if cap(b) <= fpBufferKeep {
		*bp = b
	}
	return sha256.Sum256(b), nil
}

// stored reports whether an outcome with code is kept and replayed. Codes
// a client may retry (the request did not take effect, or may succeed
// later) are not: the key is released and a retry runs the handler again.
func stored(code codes.Code) bool {
	switch code {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}

// lease is how long a request's claim holds its key.
func (d *dedup) lease(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return d.o.Lease
	}
	return min(max(time.Until(dl)+leaseMargin, leaseMargin), d.o.MaxLease)
}

// unary runs handler at most once per key (see the package documentation).
func (d *dedup) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	key, err := d.key(ctx, info.FullMethod, req)
	if err != nil || key == "" {
		if err != nil {
			return nil, err
		}
		return d.serve(ctx, req, handler)
	}
	scope, err := d.scope(ctx)
	if err != nil {
		return nil, err
	}
	fp, err := fingerprint(info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	// key stays the caller's for messages; the store sees it scoped.
	skey := StoreKey(scope, key)
	token := newToken()
	poll := waitPollStart
	for {
		claimed, found, err := d.store.Claim(ctx, skey, fp, token, d.lease(ctx))
		if err != nil {
			return nil, storeError(ctx, key, err)
		}
		if claimed {
			return d.run(ctx, skey, token, req, handler)
		}
		if found.Fingerprint != fp {
			return nil, status.Errorf(codes.FailedPrecondition, "server: idempotency key %q was used with another request (a different method or message): use a new key for a new request", key)
		}
		if found.Done {
			return replay(ctx, key, found.Outcome)
		}
		// The first request with the key is running: wait for it, within
		// this one's deadline.
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
		poll = min(2*poll, waitPollMax)
	}
}

// storeError is the status of a request the store failed: UNAVAILABLE (a
// retry may find the store back), or the context's when it ended.
func storeError(ctx context.Context, key string, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unavailable, "server: idempotency store, key %q: %v", key, err)
}

// run runs the handler for a claimed key and keeps its outcome.
func (d *dedup) run(ctx context.Context, key, token string, req any, handler grpc.UnaryHandler) (resp any, err error) {
	rec := &recorder{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	hctx := ctx
	if rec.ServerTransportStream != nil {
		hctx = grpc.NewContextWithServerTransportStream(ctx, rec)
	}
	done := false
	defer func() {
		if !done {
			// The handler panicked: free the key (with a context of its
			// own: the request's may be gone), and let the panic go on.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), panicReleaseTimeout)
			_ = d.store.Release(rctx, key, token)
			cancel()
		}
	}()
	resp, err = d.serve(hctx, req, handler)
	done = true
	// The outcome goes to the store whatever becomes of the request now
	// (a store's own timeouts bound it).
	sctx := context.WithoutCancel(ctx)
	code := status.Code(err)
	if !stored(code) {
		_ = d.store.Release(sctx, key, token)
		return resp, err
	}
	out, encErr := encodeOutcome(resp, err, rec)
	if encErr != nil {
		_ = d.store.Release(sctx, key, token)
		return resp, err
	}
	// A failed Complete (the store is down, or the lease expired while the
	// handler ran) leaves the handler's answer the request's: the key
	// becomes free when the lease expires (package documentation).
	_ = d.store.Complete(sctx, key, token, out, d.o.TTL)
	return resp, err
}

// recorder passes a handler's headers and trailers on and keeps a copy.
type recorder struct {
	grpc.ServerTransportStream
	mu              sync.Mutex
	header, trailer metadata.MD
}

func (r *recorder) SetHeader(md metadata.MD) error {
	if err := r.ServerTransportStream.SetHeader(md); err != nil {
		return err
	}
	r.mu.Lock()
	r.header = metadata.Join(r.header, md)
	r.mu.Unlock()
	return nil
}

func (r *recorder) SendHeader(md metadata.MD) error {
	if err := r.ServerTransportStream.SendHeader(md); err != nil {
		return err
	}
	r.mu.Lock()
	r.header = metadata.Join(r.header, md)
	r.mu.Unlock()
	return nil
}

func (r *recorder) SetTrailer(md metadata.MD) error {
	if err := r.ServerTransportStream.SetTrailer(md); err != nil {
		return err
	}
	r.mu.Lock()
	r.trailer = metadata.Join(r.trailer, md)
	r.mu.Unlock()
	return nil
}

// fpBuffers hold the bytes fingerprint hashes; buffers past fpBufferKeep
// are not kept.
var fpBuffers = sync.Pool{New: func() any { b := make([]byte, 0, fpBufferStart); return &b }}

// newToken names a claim: 128 random bits (math/rand/v2's generator is
// seeded from the system's entropy per process), unique across replicas.
func newToken() string {
	var b [32]byte
	out := strconv.AppendUint(b[:0], rand.Uint64(), 36)
	out = append(out, '.')
	out = strconv.AppendUint(out, rand.Uint64(), 36)
	return string(out)
}

// encodeOutcome encodes what a replay answers: version, code, then the
// reply's full name and encoding (OK) or the status's encoding, then the
// header and the trailer.
func encodeOutcome(resp any, err error, rec *recorder) ([]byte, error) {
	b := make([]byte, 1, 128)
	b[0] = outcomeVersion
	st := status.Convert(err)
	b = binary.AppendUvarint(b, uint64(st.Code()))
	if err == nil {
		m, ok := resp.(proto.Message)
		if !ok || m == nil {
			return nil, fmt.Errorf("reply %T is not a protobuf message", resp)
		}
		b = appendBytes(b, []byte(m.ProtoReflect().Descriptor().FullName()))
		// Encoded in a pooled buffer, then copied: cheaper than asking
		// for the size first (a second walk of the message).
		bp := fpBuffers.Get().(*[]byte)
		body, merr := proto.MarshalOptions{Deterministic: true}.MarshalAppend((*bp)[:0], m)
		if merr == nil {
			b = appendBytes(b, body)
		}
		if cap(body) <= fpBufferKeep {
			*bp = body[:0]
		}
		fpBuffers.Put(bp)
		if merr != nil {
			return nil, merr
		}
	} else {
		body, merr := proto.Marshal(st.Proto())
		if merr != nil {
			return nil, merr
		}
		b = appendBytes(b, body)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	b = appendMD(b, rec.header)
	return appendMD(b, rec.trailer), nil
}

func appendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

func appendMD(b []byte, md metadata.MD) []byte {
	b = binary.AppendUvarint(b, uint64(len(md)))
	for k, vs := range md {
		b = appendBytes(b, []byte(k))
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendBytes(b, []byte(v))
		}
	}
	return b
}

// decoder reads an encoded outcome; err is its first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("truncated")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errors.New("truncated")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) md() metadata.MD {
	n := d.uvarint()
	if d.err != nil || n == 0 {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errors.New("truncated")
		return nil
	}
	md := make(metadata.MD, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := string(d.bytes())
		nv := d.uvarint()
		if nv > uint64(len(d.b)) {
			d.err = errors.New("truncated")
			return nil
		}
		for j := uint64(0); j < nv && d.err == nil; j++ {
			md[k] = append(md[k], string(d.bytes()))
		}
	}
	return md
}

// replay answers a request with the outcome stored under key.
func replay(ctx context.Context, key string, outcome []byte) (any, error) {
	bad := func(why any) error {
		return status.Errorf(codes.Internal, "server: idempotency key %q: the stored outcome cannot be read (%v)", key, why)
	}
	if len(outcome) == 0 || outcome[0] != outcomeVersion {
		return nil, bad("unknown encoding")
	}
	d := &decoder{b: outcome[1:]}
	code := codes.Code(d.uvarint())
	var reply proto.Message
	var st *status.Status
	if code == codes.OK {
		name, body := d.bytes(), d.bytes()
		if d.err == nil {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
			if err != nil {
				return nil, bad(err)
			}
			reply = mt.New().Interface()
			if err := proto.Unmarshal(body, reply); err != nil {
				return nil, bad(err)
			}
		}
	} else {
		body := d.bytes()
		if d.err == nil {
			var p spb.Status
			if err := proto.Unmarshal(body, &p); err != nil {
				return nil, bad(err)
			}
			st = status.FromProto(&p)
		}
	}
	header, trailer := d.md(), d.md()
	if d.err != nil {
		return nil, bad(d.err)
	}
	_ = grpc.SetHeader(ctx, metadata.Join(header, metadata.Pairs(ReplayedHeader, "true")))
	if len(trailer) > 0 {
		_ = grpc.SetTrailer(ctx, trailer)
	}
	if st != nil {
		return nil, st.Err()
	}
	return reply, nil
}
