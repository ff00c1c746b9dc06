//go:build go1.25

package test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/stagger-go/stagger/interceptor"
	"github.com/stagger-go/stagger/testserver"
)

// TestAbandonedStreamHoldersWrittenFirst: a caller that cancels a stream and
// then reads its final status finds its grpc.Header, grpc.Trailer and
// grpc.Peer holders written before the end was announced, on the retried
// stream (with and without a retry policy) and the hedged one. grpc writes
// the holders of an attempt's options when it finishes the attempt, on a
// goroutine of its own when the context ends: the stream must fill the
// caller's holders itself. The end-of-call hook says when the end is near,
// so the caller's next Recv finds the stream ended without calling into
// grpc; the race detector sees a write after the end. The holders show the
// attempt that answered, whichever engine runs the stream.
func TestAbandonedStreamHoldersWrittenFirst(t *testing.T) {
	for _, tc := range []struct{ name, file string }{
		{"retried", retryFile},
		{"once", `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}]}]}`},
		{"hedged", hedgeStreamRTFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ending := make(chan struct{}, 1)
			srv := testserver.New()
			t.Cleanup(srv.Close)
			c := staggerClient(t, srv, tc.file, []interceptor.Option{interceptor.WithCallHook(func(_ context.Context, e interceptor.Event) {
				if e.Kind == interceptor.EventEnd {
					ending <- struct{}{}
				}
			})})
			for range 20 {
				var header, trailer metadata.MD
				var p peer.Peer
				abandonChat(t, c, ending, grpc.Header(&header), grpc.Trailer(&trailer), grpc.Peer(&p))
				// The attempt that answered shows its headers and peer, as
				// grpc-go's own stream does when its caller cancels.
				if header == nil || p.Addr == nil {
					t.Fatalf("after the end: header %v, peer %v; want the answering attempt's", header, p.Addr)
				}
				_ = len(trailer)
			}
		})
	}
}
