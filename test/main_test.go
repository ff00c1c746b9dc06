// Package test holds stagger's end-to-end tests, as grpc-go keeps its own in
// test/: real gRPC over bufconn against testserver inside testing/synctest
// bubbles, real time over loopback TCP (the TestRealTime tests, which
// `make test-realtime` repeats), and ports of grpc-go's and
// go-grpc-middleware's retry tests run through stagger. The root package
// keeps only what documents it: its Examples, the test of DialOptions, and
// the checks of the README and docs.
package test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
