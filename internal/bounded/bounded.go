// Package bounded holds the interceptors' maps that must not grow without
// end: a program that makes up method names, or reloads files with ever new
// settings, cannot grow the process's memory through them. Past its bound a
// map hands out what it would have kept without keeping it.
package bounded

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Map maps keys to values it makes on first use (what the interceptors
// remember per method). K is a type parameter, not any, so that a known
// key is found without an allocation: made an interface inside Get, it
// stays on the stack for Load. Safe for concurrent use; its zero value is
// empty.
type Map[K comparable, V any] struct {
	m sync.Map
	n atomic.Int64
}

// Get returns key's value; a new key, while m holds fewer than bound keys,
// gets fresh() (added), else the zero V.
func (m *Map[K, V]) Get(key K, bound int64, fresh func() V) (v V, added bool) {
	if x, seen := m.m.Load(key); seen {
		return x.(V), false
	}
	if m.n.Load() >= bound {
		return v, false
	}
	x, seen := m.m.LoadOrStore(key, fresh())
	if !seen {
		m.n.Add(1)
	}
	return x.(V), !seen
}

// Len returns how many keys m holds.
func (m *Map[K, V]) Len() int64 { return m.n.Load() }

// Kept is a map read with one atomic load and copied on write under its
// mutex (what a State keeps per settings). Safe for concurrent use; its
// zero value is empty.
type Kept[K comparable, V any] struct {
	mu  sync.Mutex
	cur atomic.Pointer[map[K]V]
}

// Load returns the map as it stands; it must not be written.
func (m *Kept[K, V]) Load() map[K]V {
	if p := m.cur.Load(); p != nil {
		return *p
	}
	return nil
}

// Values returns m's values, in no particular order.
func (m *Kept[K, V]) Values() []V {
	cur := m.Load()
	out := make([]V, 0, len(cur))
	for _, v := range cur {
		out = append(out, v)
	}
	return out
}

// Get returns what m holds for key, else build's, kept when keep says so and
// m holds fewer than bound keys. An error from build gives the zero value.
func (m *Kept[K, V]) Get(key K, bound int, build func() (V, error), keep bool) V {
	if v, ok := m.Load()[key]; ok {
		return v
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.Load()
	if v, ok := cur[key]; ok {
		return v
	}
	v, err := build()
	if err != nil {
		return *new(V)
	}
	if !keep || len(cur) >= bound {
		return v
	}
	next := maps.Clone(cur)
	if next == nil {
		next = make(map[K]V, 1)
	}
	next[key] = v
	m.cur.Store(&next)
	return v
}

// Drop removes the keys gone picks; what a caller got before keeps.
func (m *Kept[K, V]) Drop(gone func(K) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.Load() {
		if gone(k) {
			next := maps.Clone(m.Load())
			maps.DeleteFunc(next, func(k K, _ V) bool { return gone(k) })
			m.cur.Store(&next)
			return
		}
	}
}
