package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stagger-go/stagger/server"
	"github.com/stagger-go/stagger/server/storetest"
)

func TestMemoryStoreContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) server.Store {
		s, err := server.NewMemoryStore(server.MemoryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestMemoryStoreBounded: past MaxEntries or MaxBytes the oldest done
// entry goes; running entries never do, so a store full of them refuses.
func TestMemoryStoreBounded(t *testing.T) {
	ctx := context.Background()
	s, err := server.NewMemoryStore(server.MemoryOptions{MaxEntries: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if ok, _, err := s.Claim(ctx, k, server.Fingerprint{}, "t"+k, time.Minute); !ok || err != nil {
			t.Fatal(k, ok, err)
		}
	}
	if _, _, err := s.Claim(ctx, "d", server.Fingerprint{}, "td", time.Minute); !errors.Is(err, server.ErrStoreFull) {
		t.Fatalf("Claim with every entry running: %v, want ErrStoreFull", err)
	}
	for _, k := range []string{"b", "a"} { // b finishes first: the oldest done
		if err := s.Complete(ctx, k, "t"+k, []byte(k), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _, err := s.Claim(ctx, "d", server.Fingerprint{}, "td", time.Minute); !ok || err != nil {
		t.Fatalf("Claim: %v, %v; want room made", ok, err)
	}
	if ok, found, _ := s.Claim(ctx, "a", server.Fingerprint{}, "y", time.Minute); ok || !found.Done {
		t.Error("a, done after b, was evicted first")
	}
	if ok, _, _ := s.Claim(ctx, "b", server.Fingerprint{}, "x", time.Minute); !ok {
		t.Error("the oldest done entry (b) was not evicted")
	}
	n, _ := s.Len()
	if n > 3 {
		t.Errorf("%d entries, bound 3", n)
	}

	small, _ := server.NewMemoryStore(server.MemoryOptions{MaxBytes: 2000})
	for i := 0; i < 100; i++ {
		k := strings.Repeat("k", 10) + string(rune('A'+i%26)) + string(rune('a'+i/26))
		if ok, _, err := small.Claim(ctx, k, server.Fingerprint{}, "t", time.Minute); !ok || err != nil {
			t.Fatal(i, ok, err)
		}
		if err := small.Complete(ctx, k, "t", make([]byte, 300), time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, b := small.Len(); b > 2000 {
			t.Fatalf("%d bytes held, bound 2000", b)
		}
	}
	for _, o := range []server.MemoryOptions{{MaxEntries: -1}, {MaxBytes: -1}} {
		if _, err := server.NewMemoryStore(o); err == nil || !strings.Contains(err.Error(), "MemoryOptions.Max") {
			t.Errorf("%+v: %v, want an error naming the field", o, err)
		}
	}
}
