package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stagger-go/stagger/server"
)

// BenchmarkClaimFresh: the first attempt of a request, one round trip to a
// Redis on loopback.
func BenchmarkClaimFresh(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, newClient(b, startRedis(b), nil), "")
	fp := server.Fingerprint{1}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if ok, _, err := s.Claim(ctx, strconv.Itoa(i), fp, "token-0123456789abcdef", time.Minute); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkClaimComplete: a request that runs its handler, two round trips,
// with an outcome of 256 bytes.
func BenchmarkClaimComplete(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, newClient(b, startRedis(b), nil), "")
	fp := server.Fingerprint{1}
	out := make([]byte, 256)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		key := strconv.Itoa(i)
		if ok, _, err := s.Claim(ctx, key, fp, "token-0123456789abcdef", time.Minute); !ok || err != nil {
			b.Fatal(ok, err)
		}
		if err := s.Complete(ctx, key, "token-0123456789abcdef", out, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimReplay: a retry of a request that ran, which finds its
// done entry (256 bytes of outcome): one round trip.
func BenchmarkClaimReplay(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, newClient(b, startRedis(b), nil), "")
	fp := server.Fingerprint{1}
	if ok, _, err := s.Claim(ctx, "k", fp, "t", time.Minute); !ok || err != nil {
		b.Fatal(ok, err)
	}
	if err := s.Complete(ctx, "k", "t", make([]byte, 256), time.Hour); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if ok, found, err := s.Claim(ctx, "k", fp, "t2", time.Minute); ok || err != nil || !found.Done {
			b.Fatal(ok, found, err)
		}
	}
}

// BenchmarkPing: one round trip and nothing else, the baseline the Claim
// benchmarks compare with.
func BenchmarkPing(b *testing.B) {
	ctx := context.Background()
	c := newClient(b, startRedis(b), nil)
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
