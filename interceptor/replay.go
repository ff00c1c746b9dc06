package interceptor

import (
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"google.golang.org/protobuf/proto"
)

// DefaultReplayBufferSize is the default bound, in bytes, of one stream's
// replay buffer: grpc-go's per-RPC retry buffer default (gRFC A6).
const DefaultReplayBufferSize = 256 << 10

// WithReplayBufferSize bounds, in bytes, the messages one stream keeps for
// replay before it commits (n <= 0: DefaultReplayBufferSize). A message is
// counted at its proto.Size, the size grpc marshals; a stream whose next
// message would pass the bound commits: it sends the message and never
// retries again. Useful per call for a stream known to send much.
func WithReplayBufferSize(n int) Option {
	return Option{apply: func(o *options) { o.replaySize = n }}
}

// WithReplayBufferLimit makes every stream of the interceptors built with it
// (and every call given it) hold, all together, at most l's bytes in replay
// buffers: a stream whose next message does not fit commits, as if its own
// buffer had overflowed. Give one connection's interceptors the same l to cap
// that connection; nil means no cap across streams.
func WithReplayBufferLimit(l *ReplayLimit) Option {
	return Option{apply: func(o *options) { o.replayLimit = l }}
}

// ReplayLimit is a cap on the bytes held by the replay buffers of every
// stream that shares it (WithReplayBufferLimit). It counts bytes as streams
// keep messages and gives them back when a stream commits or ends, and it
// remembers the most it ever held, which tests and metrics read.
//
// A ReplayLimit is safe for concurrent use; its zero value holds nothing and
// admits nothing (use NewReplayLimit).
type ReplayLimit struct {
	max  int64
	used atomic.Int64
	peak atomic.Int64
}

// NewReplayLimit returns a cap of maxBytes across streams (maxBytes <= 0:
// every stream commits at its first message).
func NewReplayLimit(maxBytes int64) *ReplayLimit {
	return &ReplayLimit{max: maxBytes}
}

// InUse returns the bytes the sharing streams hold now.
func (l *ReplayLimit) InUse() int64 { return l.used.Load() }

// Peak returns the most bytes the sharing streams ever held at once.
func (l *ReplayLimit) Peak() int64 { return l.peak.Load() }

// reserve takes n bytes if they fit under the cap.
func (l *ReplayLimit) reserve(n int64) bool {
	for {
		u := l.used.Load()
		if u+n > l.max {
			return false
		}
		if l.used.CompareAndSwap(u, u+n) {
			l.notePeak(u + n)
			return true
		}
	}
}

// force takes n bytes whether or not they fit (a message that must be kept
// while a replay runs; see replayBuffer.force).
func (l *ReplayLimit) force(n int64) {
	l.notePeak(l.used.Add(n))
}

func (l *ReplayLimit) notePeak(v int64) {
	for {
		p := l.peak.Load()
		if v <= p || l.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

func (l *ReplayLimit) free(n int64) { l.used.Add(-n) }

// replayBuffer keeps the messages a stream sent before it committed, in
// order, so that a new attempt can send them again. It keeps references, not
// copies: the application must not modify a message after SendMsg returned
// (grpc-go's own rule, since it may still be marshalling it).
//
// A replayBuffer is guarded by its stream's mutex.
type replayBuffer struct {
	msgs  []any
	bytes int64
	max   int64
	limit *ReplayLimit
	// peak is the most bytes this buffer held (tests).
	peak int64
}

func (b *replayBuffer) init(size int, limit *ReplayLimit) {
	if size <= 0 {
		size = DefaultReplayBufferSize
	}
	b.max, b.limit = int64(size), limit
}

// messageSize is the size grpc will marshal m to. Messages that are not
// protobuf messages (another codec) have no size stagger can know cheaply:
// ok is false and the stream commits rather than hold unbounded memory.
func messageSize(m any) (n int64, ok bool) {
	if pm, isProto := m.(proto.Message); isProto {
		return int64(proto.Size(pm)), true
	}
	return 0, false
}

// add keeps m when it fits under the stream's bound and the shared cap; false
// means overflow: the stream must commit.
func (b *replayBuffer) add(m any) bool {
	n, ok := messageSize(m)
	if !ok || b.bytes+n > b.max {
		return false
	}
	if b.limit != nil && !b.limit.reserve(n) {
		return false
	}
	b.keep(m, n)
	return true
}

// keepBeforeCommit is the overflow rule of every stream, for m,
// sent before the stream committed; live says whether an attempt can take
// m now (the retried stream's current attempt outside a switch to the next,
// the hedged stream's oldest attempt open). It returns kept when m fits:
// the stream keeps it for the attempts to come and sends it to those live.
// A message that does not fit commits the stream: to the live attempt when
// there is one (commitNow: the stream commits to it, then sends m on it),
// else to the next attempt to go live, whose replay gets m kept past the
// bound (commitNext; the excess is that one message).
func (b *replayBuffer) keepBeforeCommit(m any, live bool) (kept, commitNow bool) {
	switch {
	case b.add(m):
		return true, false
	case live:
		return false, true
	}
	b.force(m)
	return false, false
}

// force keeps m past the bounds: a message sent while a replay runs must
// reach the new attempt, which commits as soon as the replay ends. The excess
// is at most that one message (SendMsg is never called concurrently).
func (b *replayBuffer) force(m any) {
	n, _ := messageSize(m)
	if b.limit != nil {
		b.limit.force(n)
	}
	b.keep(m, n)
}

func (b *replayBuffer) keep(m any, n int64) {
	b.msgs = append(b.msgs, m)
	b.bytes += n
	if b.bytes > b.peak {
		b.peak = b.bytes
	}
}

// dropLast forgets the last message kept when the buffer still holds count
// messages (it was not released in between): grpc refused to send that
// message (too large, cannot marshal), so it is not part of the stream.
func (b *replayBuffer) dropLast(count int) {
	k := len(b.msgs) - 1
	if k < 0 || len(b.msgs) != count {
		return
	}
	n, _ := messageSize(b.msgs[k])
	b.msgs[k] = nil
	b.msgs = b.msgs[:k]
	b.bytes -= n
	if b.limit != nil {
		b.limit.free(n)
	}
}

// release gives the memory back: at commit and when the stream ends.
func (b *replayBuffer) release() {
	if b.limit != nil && b.bytes > 0 {
		b.limit.free(b.bytes)
	}
	clear(b.msgs)
	b.msgs, b.bytes = nil, 0
}

// replayOn sends the messages kept in buf, in order, then CloseSend when
// *closeSent, on cs, a new attempt's stream, beside the application's
// SendMsg, which keeps its messages in buf meanwhile. Which of the two
// sends a message to the attempt is decided under mu: live runs under mu
// in the step that finds every message kept sent (and the CloseSend), and
// makes the attempt the one SendMsg sends to, so it gets every message
// once, in order. Before each step, under mu, lost (nil: never) says the
// attempt is no longer wanted: replayOn returns errHedgeLost.
//
// A send's io.EOF does not end the replay: every message kept, and the
// CloseSend, still go to the attempt, which then goes live; its RecvMsg
// tells its status. The stream below may open its request again without
// it knowing (the Connect front end's transparent re-open of a request
// that never left the client re-sends what the attempt was given), and a
// replay cut at the first io.EOF gave the re-opened request the messages
// before it alone, and no end. Another error is grpc refusing a message it
// took before (a local error), which replayOn returns.
func replayOn(mu *sync.Mutex, buf *replayBuffer, closeSent *bool, cs grpc.ClientStream, lost func() bool, live func()) error {
	closed := false
	for i := 0; ; {
		mu.Lock()
		if lost != nil && lost() {
			mu.Unlock()
			return errHedgeLost
		}
		if i < len(buf.msgs) {
			m := buf.msgs[i]
			mu.Unlock()
			i++
			if err := cs.SendMsg(m); err != nil && err != io.EOF {
				return err
			}
			continue
		}
		if *closeSent && !closed {
			// No message follows a CloseSend: the next step goes live.
			mu.Unlock()
			closed = true
			_ = cs.CloseSend() // grpc-go's CloseSend always returns nil
			continue
		}
		live()
		mu.Unlock()
		return nil
	}
}
