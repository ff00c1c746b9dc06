package server

import (
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
	m     map[string]*memEntry
	done  memList // done entries, oldest first
	run   memList // running entries, oldest claim first
	bytes int64
}

// memEntry is one key's entry, linked into done or run: one allocation per
// key, none to move it from one list to the other.
type memEntry struct {
	key        string
	e          Entry
	expires    time.Time
	prev, next *memEntry
}

// memList is a doubly linked list of entries, oldest first.
type memList struct{ head, tail *memEntry }

func (l *memList) push(x *memEntry) {
	x.prev, x.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = x
	} else {
		l.head = x
	}
	l.tail = x
}

func (l *memList) remove(x *memEntry) {
	if x.prev != nil {
		x.prev.next = x.next
	} else {
		l.head = x.next
	}
	if x.next != nil {
		x.next.prev = x.prev
	} else {
		l.tail = x.prev
	}
	x.prev, x.next = nil, nil
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
	s := &MemoryStore{maxEntries: o.MaxEntries, maxBytes: o.MaxBytes, now: o.Now, m: make(map[string]*memEntry)}
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
	if x, ok := s.m[key]; ok {
		if now.Before(x.expires) {
			return false, x.e, nil
		}
		s.removeLocked(x)
	}
	x := &memEntry{key: key, e: Entry{Fingerprint: fp, Token: token}, expires: now.Add(lease)}
	if !s.roomLocked(now, x.size(), nil) {
		return false, Entry{}, ErrStoreFull
	}
	s.m[key] = x
	s.run.push(x)
	s.bytes += x.size()
	return true, Entry{}, nil
}

// Complete implements Store.
func (s *MemoryStore) Complete(_ context.Context, key, token string, outcome []byte, ttl time.Duration) error {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	x, ok := s.m[key]
	if !ok || x.e.Done || x.e.Token != token || !now.Before(x.expires) {
		return ErrLeaseLost
	}
	s.run.remove(x)
	s.bytes -= x.size()
	x.e.Done, x.e.Token, x.e.Outcome, x.expires = true, "", outcome, now.Add(ttl)
	s.bytes += x.size()
	s.done.push(x)
	// Make room by evicting older done entries; the new one stays even when
	// it alone passes MaxBytes (dropping it would let its key run again).
	s.roomLocked(now, 0, x)
	return nil
}

// Release implements Store.
func (s *MemoryStore) Release(_ context.Context, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x, ok := s.m[key]; ok && !x.e.Done && x.e.Token == token {
		s.removeLocked(x)
	}
	return nil
}

func (s *MemoryStore) removeLocked(x *memEntry) {
	if x.e.Done {
		s.done.remove(x)
	} else {
		s.run.remove(x)
	}
	delete(s.m, x.key)
	s.bytes -= x.size()
}

// roomLocked evicts until an entry of size more fits (more 0: until the
// store is within its bounds), never keep. It reports whether it made room.
func (s *MemoryStore) roomLocked(now time.Time, more int64, keep *memEntry) bool {
	extra := 0
	if more > 0 {
		extra = 1
	}
	for len(s.m)+extra > s.maxEntries || s.bytes+more > s.maxBytes {
		switch front := s.done.head; {
		case front != nil && front != keep:
			s.removeLocked(front)
		case front != nil && front.next != nil:
			s.removeLocked(front.next)
		case s.run.head != nil && !now.Before(s.run.head.expires):
			s.removeLocked(s.run.head)
		default:
			return false
		}
	}
	return true
}
