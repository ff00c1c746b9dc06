// Package storetest checks that a server.Store keeps its contract: the
// same tests run against the in-memory store and against Redis (a real
// redis-server), so that both mean the same thing to server.WithIdempotency.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stagger-go/stagger/server"
)

// Run runs the contract tests. newStore returns an empty store (keys of
// earlier subtests must not be visible: give each a fresh one, or a fresh
// key prefix). The lease and TTL tests wait on real time, in tens of
// milliseconds.
func Run(t *testing.T, newStore func(t *testing.T) server.Store) {
	ctx := context.Background()
	fp := func(b byte) server.Fingerprint { return server.Fingerprint{b} }

	t.Run("ClaimOnce", func(t *testing.T) {
		s := newStore(t)
		ok, _, err := s.Claim(ctx, "k", fp(1), "t1", time.Minute)
		if err != nil || !ok {
			t.Fatalf("first Claim: %v, %v; want claimed", ok, err)
		}
		ok, found, err := s.Claim(ctx, "k", fp(2), "t2", time.Minute)
		if err != nil || ok || found.Done || found.Token != "t1" || found.Fingerprint != fp(1) {
			t.Fatalf("second Claim: %v, %+v, %v; want the running entry of t1", ok, found, err)
		}
	})

	t.Run("CompleteReplays", func(t *testing.T) {
		s := newStore(t)
		mustClaim(t, s, "k", fp(1), "t1", time.Minute)
		out := []byte("outcome\x00bytes")
		if err := s.Complete(ctx, "k", "t1", out, time.Minute); err != nil {
			t.Fatal(err)
		}
		ok, found, err := s.Claim(ctx, "k", fp(1), "t2", time.Minute)
		if err != nil || ok || !found.Done || !bytes.Equal(found.Outcome, out) || found.Fingerprint != fp(1) {
			t.Fatalf("Claim after Complete: %v, %+v, %v; want the done entry", ok, found, err)
		}
		if err := s.Complete(ctx, "k", "t1", out, time.Minute); !errors.Is(err, server.ErrLeaseLost) {
			t.Errorf("second Complete: %v, want ErrLeaseLost", err)
		}
	})

	t.Run("ReleaseFreesOnlyItsOwn", func(t *testing.T) {
		s := newStore(t)
		mustClaim(t, s, "k", fp(1), "t1", time.Minute)
		if err := s.Release(ctx, "k", "other"); err != nil {
			t.Fatal(err)
		}
		if ok, _, _ := s.Claim(ctx, "k", fp(1), "t2", time.Minute); ok {
			t.Fatal("Release with another token freed the key")
		}
		if err := s.Release(ctx, "k", "t1"); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, s, "k", fp(1), "t3", time.Minute)
		if err := s.Complete(ctx, "k", "t1", nil, time.Minute); !errors.Is(err, server.ErrLeaseLost) {
			t.Errorf("Complete by a released token: %v, want ErrLeaseLost", err)
		}
		if err := s.Complete(ctx, "k", "t3", []byte("x"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, "k", "t3"); err != nil {
			t.Fatal(err)
		}
		if ok, found, _ := s.Claim(ctx, "k", fp(1), "t4", time.Minute); ok || !found.Done {
			t.Error("Release removed a done entry")
		}
	})

	t.Run("LeaseExpires", func(t *testing.T) {
		s := newStore(t)
		mustClaim(t, s, "k", fp(1), "t1", 50*time.Millisecond)
		time.Sleep(120 * time.Millisecond)
		mustClaim(t, s, "k", fp(2), "t2", time.Minute)
		if err := s.Complete(ctx, "k", "t1", []byte("late"), time.Minute); !errors.Is(err, server.ErrLeaseLost) {
			t.Errorf("Complete after the lease: %v, want ErrLeaseLost", err)
		}
	})

	t.Run("TTLExpires", func(t *testing.T) {
		s := newStore(t)
		mustClaim(t, s, "k", fp(1), "t1", time.Minute)
		if err := s.Complete(ctx, "k", "t1", []byte("x"), 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(120 * time.Millisecond)
		mustClaim(t, s, "k", fp(1), "t2", time.Minute)
	})

	t.Run("ConcurrentClaims", func(t *testing.T) {
		s := newStore(t)
		const n = 32
		var wg sync.WaitGroup
		var mu sync.Mutex
		winners := 0
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, _, err := s.Claim(ctx, "k", fp(1), fmt.Sprint("t", i), time.Minute)
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					winners++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if winners != 1 {
			t.Errorf("%d claims won, want 1", winners)
		}
	})

	t.Run("KeysAreIndependent", func(t *testing.T) {
		s := newStore(t)
		mustClaim(t, s, "a", fp(1), "t1", time.Minute)
		mustClaim(t, s, "b", fp(1), "t2", time.Minute)
	})

	// The server hands a Store scoped keys (server.StoreKey): the same
	// idempotency key from two callers is two keys, whatever one does to
	// the other's entry.
	t.Run("ScopesAreIndependent", func(t *testing.T) {
		s := newStore(t)
		alice, bob := server.StoreKey("alice", "k"), server.StoreKey("bob", "k")
		mustClaim(t, s, alice, fp(1), "ta", time.Minute)
		mustClaim(t, s, bob, fp(1), "tb", time.Minute)
		if err := s.Complete(ctx, alice, "ta", []byte("alice's"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, bob, "ta", []byte("stolen"), time.Minute); !errors.Is(err, server.ErrLeaseLost) {
			t.Errorf("Complete of bob's key with alice's token: %v, want ErrLeaseLost", err)
		}
		ok, found, err := s.Claim(ctx, bob, fp(1), "tb2", time.Minute)
		if err != nil || ok || found.Done || found.Token != "tb" {
			t.Fatalf("bob's key after alice's Complete: %v, %+v, %v; want bob's running entry", ok, found, err)
		}
		if err := s.Release(ctx, bob, "tb"); err != nil {
			t.Fatal(err)
		}
		ok, found, err = s.Claim(ctx, alice, fp(1), "ta2", time.Minute)
		if err != nil || ok || !found.Done || string(found.Outcome) != "alice's" {
			t.Fatalf("alice's key after bob's Release: %v, %+v, %v; want alice's done entry", ok, found, err)
		}
		mustClaim(t, s, bob, fp(1), "tb3", time.Minute)
		// Scopes and keys that a plain concatenation would confuse, and a
		// scope of any bytes.
		mustClaim(t, s, server.StoreKey("a", "bk"), fp(1), "t1", time.Minute)
		mustClaim(t, s, server.StoreKey("ab", "k"), fp(1), "t2", time.Minute)
		mustClaim(t, s, server.StoreKey("", "abk"), fp(1), "t3", time.Minute)
		mustClaim(t, s, server.StoreKey("CN=caf\u00e9\x00{}\n", "abk"), fp(1), "t4", time.Minute)
	})
}

func mustClaim(t *testing.T, s server.Store, key string, fp server.Fingerprint, token string, lease time.Duration) {
	t.Helper()
	ok, found, err := s.Claim(context.Background(), key, fp, token, lease)
	if err != nil || !ok {
		t.Fatalf("Claim(%q, %q): %v, %+v, %v; want claimed", key, token, ok, found, err)
	}
}
