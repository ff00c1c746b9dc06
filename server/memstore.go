package server

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"
)

// Defaults of MemoryOptions.
const (
	DefaultMaxEntries = 100_000
	DefaultMaxBytes   = 64 << 20
)

// entryOverhead is what an entry costs beside its key and outcome, for
// MaxBytes: the map slot, the list element and the Entry.
const entryOverhead = 160

// MemoryOptions configure a MemoryStore; the zero value takes the defaults.
type MemoryOptions struct {
	// MaxEntries bounds the keys held (running and done); default
	// DefaultMaxEntries.
	MaxEntries int
	// MaxBytes bounds the bytes held (keys, outcomes and a fixed overhead
	// per entry); default DefaultMaxBytes.
	MaxBytes int64
	// Now is the store's clock (leases and TTLs); default time.Now.
	Now func() time.Time
}

// MemoryStore is a Store in the process's memory, for a service of one
// replica (a fleet needs a shared store, such as the Redis one). It is
// bounded: past MaxEntries or MaxBytes it evicts the oldest done entry
// (the one that finished first), then expired running ones; a running
// entry whose lease has not expired is never evicted (that would let its
// key run twice), so a store full of them refuses new keys (ErrStoreFull,
// and the request fails with UNAVAILABLE). Expired entries go when met or
// evicted: no goroutine, no timer per entry.
type MemoryStore struct {
	maxEntries int
	maxBytes   int64
	now        func() time.Time

	mu    sync.Mutex
	m     map[string]*list.Element // of *memEntry
	done  list.List                // done entries, oldest first
	run   list.List                // running entries, oldest claim first
	bytes int64
}

type memEntry struct {
	key     string
	e       Entry
	expires time.Time
}

func (x *memEntry) size() int64 {
	return int64(len(x.key)+len(x.e.Outcome)+len(x.e.Token)) + entryOverhead
}

// NewMemoryStore returns an empty MemoryStore, or an error naming a bad
// option.
func NewMemoryStore(o MemoryOptions) (*MemoryStore, error) {
	if o.MaxEntries < 0 {
		return nil, fmt.Errorf("server: MemoryOptions.MaxEntries: must be at least 1 (0 takes the default, %d), got %d", DefaultMaxEntries, o.MaxEntries)
	}
	if o.MaxBytes < 0 {
		return nil, fmt.Errorf("server: MemoryOptions.MaxBytes: must be at least 1 (0 takes the default, %d), got %d", DefaultMaxBytes, o.MaxBytes)
	}
	s := &MemoryStore{maxEntries: o.MaxEntries, maxBytes: o.MaxBytes, now: o.Now, m: make(map[string]*list.Element)}
	if s.maxEntries == 0 {
		s.maxEntries = DefaultMaxEntries
	}
	if s.maxBytes == 0 {
		s.maxBytes = DefaultMaxBytes
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Len returns the number of entries held, expired ones not yet removed
// included, and their bytes as MaxBytes counts them.
func (s *MemoryStore) Len() (entries int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m), s.bytes
}

// Claim implements Store.
func (s *MemoryStore) Claim(_ context.Context, key string, fp Fingerprint, token string, lease time.Duration) (bool, Entry, error) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.m[key]; ok {
		x := el.Value.(*memEntry)
		if now.Before(x.expires) {
			found := x.e
			return false, found, nil
		}
		s.removeLocked(el)
	}
	x := &memEntry{key: key, e: Entry{Fingerprint: fp, Token: token}, expires: now.Add(lease)}
	if !s.roomLocked(now, x.size(), nil) {
		return false, Entry{}, ErrStoreFull
	}
	s.m[key] = s.run.PushBack(x)
	s.bytes += x.size()
	return true, Entry{}, nil
}

// Complete implements Store.
func (s *MemoryStore) Complete(_ context.Context, key, token string, outcome []byte, ttl time.Duration) error {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.m[key]
	if !ok {
		return ErrLeaseLost
	}
	x := el.Value.(*memEntry)
	if x.e.Done || x.e.Token != token || !now.Before(x.expires) {
		return ErrLeaseLost
	}
	s.run.Remove(el)
	s.bytes -= x.size()
	x.e.Done, x.e.Token, x.e.Outcome, x.expires = true, "", outcome, now.Add(ttl)
	s.bytes += x.size()
	s.m[key] = s.done.PushBack(x)
	// Make room by evicting older done entries; the new one stays even when
	// it alone passes MaxBytes (dropping it would let its key run again).
	s.roomLocked(now, 0, s.m[key])
	return nil
}

// Release implements Store.
func (s *MemoryStore) Release(_ context.Context, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.m[key]; ok {
		if x := el.Value.(*memEntry); !x.e.Done && x.e.Token == token {
			s.removeLocked(el)
		}
	}
	return nil
}

func (s *MemoryStore) removeLocked(el *list.Element) {
	x := el.Value.(*memEntry)
	if x.e.Done {
		s.done.Remove(el)
	} else {
		s.run.Remove(el)
	}
	delete(s.m, x.key)
	s.bytes -= x.size()
}

// roomLocked evicts until an entry of size more fits (more 0: until the
// store is within its bounds), never keep. It reports whether it made room.
func (s *MemoryStore) roomLocked(now time.Time, more int64, keep *list.Element) bool {
	extra := 0
	if more > 0 {
		extra = 1
	}
	for len(s.m)+extra > s.maxEntries || s.bytes+more > s.maxBytes {
		switch front := s.done.Front(); {
		case front != nil && front != keep:
			s.removeLocked(front)
		case front != nil && front.Next() != nil:
			s.removeLocked(front.Next())
		case s.run.Front() != nil && !now.Before(s.run.Front().Value.(*memEntry).expires):
			s.removeLocked(s.run.Front())
		default:
			return false
		}
	}
	return true
}
