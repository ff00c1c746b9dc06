package budget

import (
	"hash/maphash"
	"sync/atomic"
)

// keyed maps strings to values for lookups that take no lock and
// allocate nothing: the map is never changed, but copied, changed and
// replaced, by writers that hold a lock of their own (Backends.mu). A
// write costs a copy, so a Backends splits its targets into shards
// (targetShards): an add copies one shard's few. The zero value is empty.
type keyed[V any] struct {
	m atomic.Pointer[map[string]V]
}

func (k *keyed[V]) load(key string) (V, bool) {
	var v V
	m := k.m.Load()
	if m == nil {
		return v, false
	}
	v, ok := (*m)[key]
	return v, ok
}

func (k *keyed[V]) snapshot() map[string]V {
	if m := k.m.Load(); m != nil {
		return *m
	}
	return nil
}

// store sets key to v; under the writers' lock.
func (k *keyed[V]) store(key string, v V) {
	old := k.snapshot()
	m := make(map[string]V, len(old)+1)
	for ok, ov := range old {
		m[ok] = ov
	}
	m[key] = v
	k.m.Store(&m)
}

// remove deletes the keys; under the writers' lock.
func (k *keyed[V]) remove(keys ...string) {
	if len(keys) == 0 {
		return
	}
	old := k.snapshot()
	m := make(map[string]V, len(old))
	for ok, ov := range old {
		m[ok] = ov
	}
	for _, key := range keys {
		delete(m, key)
	}
	k.m.Store(&m)
}

// targetShards: an add copies a 32nd of the targets (32 at the cap), and a
// lookup hashes its target once more to find its shard.
const targetShards = 32

// shardedKeyed is keyed split by the hash of the key.
type shardedKeyed[V any] struct {
	seed   maphash.Seed
	shards [targetShards]keyed[V]
}

func (s *shardedKeyed[V]) shard(key string) *keyed[V] {
	return &s.shards[maphash.String(s.seed, key)%targetShards]
}

func (s *shardedKeyed[V]) load(key string) (V, bool) { return s.shard(key).load(key) }

// each calls f for every key; under the writers' lock, or on a moment's
// view of each shard.
func (s *shardedKeyed[V]) each(f func(string, V)) {
	for i := range s.shards {
		for k, v := range s.shards[i].snapshot() {
			f(k, v)
		}
	}
}
