// Package canontarget caches grpc.ClientConn.CanonicalTarget by the target
// as dialled (one string names one server), so that two spellings of one
// backend share its budget, Gate and breaker.
package canontarget

import (
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
)

// max bounds a Cache: past max entries it starts afresh.
const max = 1024

// Cache maps a dialled target to its canonical one. Safe for concurrent
// use; its zero value is empty.
type Cache struct {
	m sync.Map
	n atomic.Int64
}

// Of returns cc's canonical target, or target for a front end (cc nil).
func (c *Cache) Of(cc *grpc.ClientConn, target string) string {
	if cc == nil {
		return target
	}
	if canon, ok := c.Load(target); ok {
		return canon
	}
	canon := cc.CanonicalTarget()
	c.Store(target, canon)
	return canon
}

// Load returns the canonical target of target, if known.
func (c *Cache) Load(target string) (canon string, ok bool) {
	v, ok := c.m.Load(target)
	if ok {
		canon = v.(string)
	}
	return canon, ok
}

// Store records canon as target's canonical target.
func (c *Cache) Store(target, canon string) {
	if c.n.Add(1) > max {
		c.m.Range(func(k, _ any) bool { c.m.Delete(k); return true })
		c.n.Store(1)
	}
	c.m.Store(target, canon)
}

// Delete forgets target.
func (c *Cache) Delete(target string) { c.m.Delete(target) }
