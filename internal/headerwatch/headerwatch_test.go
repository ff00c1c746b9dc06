package headerwatch

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/stats"
)

// TestHandler: a client's headers (or, failing those, its first message)
// mark the watched attempt once and wake its engine without waiting; a
// server's, a trailer and an unwatched context do nothing; no allocation.
func TestHandler(t *testing.T) {
	wake := make(chan int, 1)
	a := New(context.Background(), wake, 7)
	var h Handler
	h.HandleRPC(a, &stats.InTrailer{Client: true})
	h.HandleRPC(a, &stats.InHeader{Client: false})
	if _, ok := a.Arrived(); ok || len(wake) != 0 {
		t.Fatal("a trailer or a server's header marked the attempt")
	}
	before := time.Now()
	h.HandleRPC(a, &stats.InHeader{Client: true})
	at, ok := a.Arrived()
	if !ok || at.Before(before) || time.Since(at) < 0 {
		t.Fatalf("Arrived() = %v, %v after the headers; want a time since %v", at, ok, before)
	}
	h.HandleRPC(a, &stats.InPayload{Client: true}) // a full wake channel: no wait
	if again, _ := a.Arrived(); !again.Equal(at) || len(wake) != 1 || <-wake != 7 {
		t.Fatalf("second report: Arrived %v (want %v), %d wake-ups", again, at, len(wake))
	}
	b := New(context.Background(), wake, 8)
	h.HandleRPC(b, &stats.InPayload{Client: true})
	if _, ok := b.Arrived(); !ok {
		t.Error("a first message did not mark the attempt")
	}
	in, plain := &stats.InHeader{Client: true}, context.WithValue(context.Background(), key{}, 1)
	watched := New(context.Background(), make(chan int), 9)
	if n := testing.AllocsPerRun(100, func() {
		h.HandleRPC(plain, in)
		h.HandleRPC(context.Background(), in)
		h.HandleRPC(watched, in)
	}); n != 0 {
		t.Errorf("HandleRPC allocates %v times", n)
	}
}

// TestAttempts: First names the attempt whose headers came first; Drop
// cancels and forgets one; CancelOthers cancels all but one.
func TestAttempts(t *testing.T) {
	var s Attempts[int]
	ctxs := map[int]context.Context{}
	for n := 1; n <= 6; n++ {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[n] = s.Watch(ctx, n, cancel, nil, n)
	}
	if n, _ := s.First(); n != 0 {
		t.Fatalf("First() = %d before any headers", n)
	}
	var h Handler
	h.HandleRPC(ctxs[5], &stats.InHeader{Client: true})
	h.HandleRPC(ctxs[2], &stats.InHeader{Client: true})
	if n, _ := s.First(); n != 5 {
		t.Fatalf("First() = %d, want 5", n)
	}
	s.Drop(5)
	if n, _ := s.First(); n != 2 || ctxs[5].Err() == nil {
		t.Fatalf("after Drop(5): First() = %d (want 2), attempt 5's context %v", n, ctxs[5].Err())
	}
	s.CancelOthers(2)
	for n, ctx := range ctxs {
		if (ctx.Err() == nil) != (n == 2) {
			t.Errorf("attempt %d: context %v", n, ctx.Err())
		}
	}
	for n := range ctxs {
		s.Drop(n)
	}
}
