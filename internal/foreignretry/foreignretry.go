// Package foreignretry reads another retry library's call options, which
// compile as grpc.CallOption and do nothing under stagger: the interceptors
// use it to notice them and to keep the attempts go-grpc-middleware's retry
// options ask for (a call that asked for fewer attempts must not get more).
package foreignretry

import (
	"math"
	"reflect"
	"unsafe"

	"google.golang.org/grpc"
)

// Attempts reads the attempts go-grpc-middleware's retry call option
// opt allows: 1 for retry.Disable() (WithMax(0)), n for WithMax(n); 0 for
// its other options and for one it cannot read. Both major versions keep
// it in the field max of the struct their applyFunc fills, so the option
// is applied to a fresh one; any other shape panics in reflect, which
// reads as no value. A call that asked for fewer attempts must not get
// more under stagger: a non-idempotent call retried is the one mistake a
// retry layer must not make.
func Attempts(opt grpc.CallOption) (n int) {
	defer func() {
		if recover() != nil {
			n = 0
		}
	}()
	v := reflect.ValueOf(opt)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	c := reflect.New(v.Type()).Elem() // addressable, so its field can be called
	c.Set(v)
	f := c.FieldByName("applyFunc")
	apply := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	o := reflect.New(f.Type().In(0).Elem())
	mx := o.Elem().FieldByName("max")
	if mx.Kind() != reflect.Uint {
		return 0
	}
	const unset = math.MaxUint64
	reflect.NewAt(mx.Type(), unsafe.Pointer(mx.UnsafeAddr())).Elem().SetUint(unset)
	apply.Call([]reflect.Value{o})
	switch m := mx.Uint(); {
	case m == unset:
		return 0
	case m == 0:
		return 1 // Disable: the first attempt alone
	case m > math.MaxInt32:
		return math.MaxInt32
	default:
		return int(m)
	}
}

// IsOption reports whether opt is another retry library's call
// option, which compiles as a grpc.CallOption and does nothing under
// stagger; grpc's common options are told apart by their type alone.
func IsOption(opt grpc.CallOption) bool {
	switch opt.(type) {
	case grpc.StaticMethodCallOption, grpc.HeaderCallOption, grpc.TrailerCallOption, grpc.PeerCallOption,
		grpc.OnFinishCallOption, grpc.PerRPCCredsCallOption, grpc.FailFastCallOption, grpc.CompressorCallOption,
		grpc.MaxRecvMsgSizeCallOption, grpc.MaxSendMsgSizeCallOption, grpc.ContentSubtypeCallOption,
		grpc.ForceCodecCallOption, grpc.MaxRetryRPCBufferSizeCallOption:
		return false
	}
	t := reflect.TypeOf(opt)
	if t == nil {
		return false
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.PkgPath() {
	case "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry",
		"github.com/grpc-ecosystem/go-grpc-middleware/retry":
		return true
	}
	return false
}
