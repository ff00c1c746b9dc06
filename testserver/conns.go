package testserver

import (
	"context"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc/peer"
)

// connTracker keeps the server's open connections (bufconn and TCP) by a
// remote address unique to each, so that a handler can drop the connection
// its RPC came on (Script.reset_attempts). bufconn gives every connection
// the same address; the tracker numbers them.
type connTracker struct {
	mu    sync.Mutex
	next  uint64
	conns map[string]*trackedConn
}

func (t *connTracker) wrap(lis net.Listener) net.Listener {
	return &trackedListener{Listener: lis, t: t}
}

// drop closes the connection the RPC of ctx came on: with a TCP reset
// (SO_LINGER 0) when it is TCP. It reports whether it found one.
func (t *connTracker) drop(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return false
	}
	t.mu.Lock()
	c := t.conns[p.Addr.String()]
	t.mu.Unlock()
	if c == nil {
		return false
	}
	if tcp, ok := c.Conn.(*net.TCPConn); ok {
		// Linger 0: close sends RST, not FIN, as a crashed peer's kernel
		// or a middlebox would. The error can only be "closed already".
		_ = tcp.SetLinger(0)
	}
	_ = c.Close()
	return true
}

type trackedListener struct {
	net.Listener
	t *connTracker
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	t := l.t
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	tc := &trackedConn{Conn: c, t: t, addr: trackedAddr{Addr: c.RemoteAddr(), id: t.next}}
	if t.conns == nil {
		t.conns = make(map[string]*trackedConn)
	}
	t.conns[tc.addr.String()] = tc
	return tc, nil
}

// trackedConn is an accepted connection with a unique remote address; Close
// forgets it.
type trackedConn struct {
	net.Conn
	t    *connTracker
	addr trackedAddr
	once sync.Once
}

func (c *trackedConn) RemoteAddr() net.Addr { return c.addr }

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c.addr.String())
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}

// trackedAddr is the connection's real remote address with the tracker's
// number for it, "127.0.0.1:5678#3".
type trackedAddr struct {
	net.Addr
	id uint64
}

func (a trackedAddr) String() string { return fmt.Sprintf("%s#%d", a.Addr, a.id) }
