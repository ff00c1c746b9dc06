package interceptor

import (
	"sync/atomic"

	"google.golang.org/protobuf/proto"
)

// DefaultReplayBufferSize is the default bound, in bytes, of one stream's
// replay buffer: grpc-go's per-RPC retry buffer default (gRFC A6).
const DefaultReplayBufferSize = 256 << 10

// WithReplayBufferSize bounds, in bytes, the messages one stream keeps for
// replay before it commits (n <= 0: DefaultReplayBufferSize). A message is
// counted at its proto.Size, the size grpc marshals; a stream whose next
// message would pass the bound, or is not a proto.Message (another codec:
// it cannot be sized), commits: it sends the message and never retries
// again. With no attempt live (a backoff, a pushback, a wait in the Gate)
// that message is kept past the bound for the next attempt, and a later
// SendMsg blocks, as flow control would, until an attempt is live (the
// stream commits to it) or the stream ends: the bound is passed by one
// message at most. Useful per call for a stream known to send much.
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
// stream that shares it (WithReplayBufferLimit), given back as a stream
// commits or ends; it remembers the most it ever held.
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

func (l *ReplayLimit) notePeak(v int64) {
	for {
		p := l.peak.Load()
		if v <= p || l.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

func (l *ReplayLimit) free(n int64) { l.used.Add(-n) }

// replayBuffer keeps, by reference and in order, the messages a stream sent
// before it committed. Its stream's mu guards it.
type replayBuffer struct {
	msgs  []any
	bytes int64
	max   int64
	limit *ReplayLimit
	// forced: a message was kept past the bounds (force).
	forced bool
}

func (b *replayBuffer) init(size int, limit *ReplayLimit) {
	if size <= 0 {
		size = DefaultReplayBufferSize
	}
	b.max, b.limit = int64(size), limit
}

// messageSize is m's proto.Size; ok false for a message of another codec.
func messageSize(m any) (n int64, ok bool) {
	if pm, isProto := m.(proto.Message); isProto {
		return int64(proto.Size(pm)), true
	}
	return 0, false
}

// keepBeforeCommit is the overflow rule of every stream, for m, sent
// before the stream committed; live says whether an attempt can take m
// now. kept: m fits. Else the stream commits: to the live attempt when
// there is one (commitNow), else to the next attempt to go live, whose
// replay gets m kept past the bound (commitNext).
func (b *replayBuffer) keepBeforeCommit(m any, live bool) (kept, commitNow bool) {
	if n, ok := messageSize(m); ok && b.bytes+n <= b.max && (b.limit == nil || b.limit.reserve(n)) {
		b.msgs, b.bytes = append(b.msgs, m), b.bytes+n
		return true, false
	}
	if live {
		return false, true
	}
	b.force(m)
	return false, false
}

// force keeps m past the bounds, by one message: SendMsg is one at a time.
func (b *replayBuffer) force(m any) {
	n, _ := messageSize(m)
	if b.limit != nil {
		b.limit.notePeak(b.limit.used.Add(n))
	}
	b.msgs, b.bytes, b.forced = append(b.msgs, m), b.bytes+n, true
}

// dropLast forgets the last message kept, grpc refused, when the buffer
// still holds count messages (it was not released in between).
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

func (b *replayBuffer) release() {
	if b.limit != nil && b.bytes > 0 {
		b.limit.free(b.bytes)
	}
	clear(b.msgs)
	b.msgs, b.bytes, b.forced = nil, 0, false
}
