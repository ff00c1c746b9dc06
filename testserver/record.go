package testserver

import (
	"context"
	"strings"
	"time"

	"github.com/stagger-go/stagger/criticality"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// AttemptRecord is what the server saw of one attempt. Records are values: the
// server hands out copies.
type AttemptRecord struct {
	// Method is the full method name, e.g. "/stagger.testing.v1.TestService/Get".
	Method string
	// Attempt is this attempt's number among the key's attempts as the server
	// counted them on arrival (1 = first); attempts rejected by a server-wide
	// mode count too.
	Attempt int
	// PreviousAttempts is the grpc-previous-rpc-attempts header as sent (values
	// joined with "," if repeated), "" when absent.
	PreviousAttempts string
	// IdempotencyKey is the idempotency header (see WithIdempotencyHeader) as
	// sent (values joined with ","), "" when absent.
	IdempotencyKey string
	// Criticality is the criticality header (criticality.Header) as sent
	// (values joined with ","), "" when absent.
	Criticality string
	// Arrived is when the attempt arrived, on the server's clock. For client and
	// bidi streams it is when the stream started, before the first message.
	Arrived time.Time
	// Deadline is the deadline the attempt's context carried on arrival (the
	// client's grpc-timeout, on the time package's clock), zero when none:
	// what the server knows of the client's deadline.
	Deadline time.Time
	// Done reports whether the attempt has ended; Ended, Code and Cancelled are
	// set only then.
	Done bool
	// Ended is when the attempt ended, on the server's clock.
	Ended time.Time
	// Code is the status the server ended the attempt with (OK on success).
	Code codes.Code
	// Cancelled reports that the attempt's context ended (the client cancelled,
	// its deadline passed, or the connection went) before the server answered.
	Cancelled bool
	// Rejected reports that a server-wide mode (outage, capacity, failure rate,
	// a full Workers queue) refused the attempt before its script ran.
	Rejected bool
	// HeadersSent reports that response headers were sent before the attempt
	// ended (headers_first, or a stream message).
	HeadersSent bool
	// Sent is how many response messages the attempt sent.
	Sent int
	// Received is how many request messages the attempt read (streams from the
	// client; 0 for unary and ListItems).
	Received int
	// Reset reports that the attempt ran to completion (it counts in
	// Executions) and the server then dropped its connection instead of
	// answering (Script.reset_attempts).
	Reset bool
}

// Stats counts every attempt the server received, whatever its key.
type Stats struct {
	// Received is every attempt that arrived.
	Received int64
	// Rejected is the attempts a server-wide mode refused.
	Rejected int64
	// Failed is the attempts that failed because their script said so.
	Failed int64
	// Cancelled is the attempts whose context ended before the server answered.
	Cancelled int64
	// Served is the attempts that ran to completion (OK, or Reset).
	Served int64
	// InFlight is the attempts in a handler right now.
	InFlight int
	// Queued is the attempts waiting for a worker right now, on the
	// server's clock (the Workers mode).
	Queued int
	// Work is the worker time of the work begun so far (the Workers mode):
	// Service per attempt served, a tenth of it per attempt rejected or
	// dropped, counted in full from when a worker begins it.
	Work time.Duration
	// Wasted is the part of Work done for callers that had gone (the
	// Workers mode says which).
	Wasted time.Duration
}

// maxBuckets bounds the arrival series so a clock jump cannot exhaust memory;
// arrivals past it are counted in the last bucket.
const maxBuckets = 1 << 20

// attempt is the server's handle on one running attempt.
type attempt struct {
	s        *Server
	method   string
	key      string
	rec      *AttemptRecord // nil when key is empty; guarded by s.mu
	admitted bool           // counted in inFlight
	headers  bool
	sent     int
	received int
	reset    bool
	// job is the attempt's place in the Workers mode (nil when off);
	// load the utilization its answer reports (Workers.ReportLoad; -1:
	// none).
	job  *job
	load float64
}

func firstJoined(md metadata.MD, name string) string {
	return strings.Join(md.Get(name), ",")
}

// countArrivalLocked counts an attempt that arrived at `at` in
// Stats.Received and in its arrival bucket. s.mu is held.
func (s *Server) countArrivalLocked(at time.Time) {
	s.stats.Received++
	idx := int64(0)
	if d := at.Sub(s.start); d > 0 {
		idx = int64(d / s.bucket)
	}
	if idx >= maxBuckets {
		idx = maxBuckets - 1
	}
	for int64(len(s.arrivals)) <= idx {
		s.arrivals = append(s.arrivals, 0)
	}
	s.arrivals[idx]++
}

// Refused records an attempt that a server-side layer in front of the
// test service refused before it reached a handler (a concurrency limit
// installed with WithServerOptions): it arrived (Stats.Received,
// Arrivals) and was rejected (Stats.Rejected), and under the Workers mode
// it costs a rejection's worker time (Workers.RejectionCost), as reading
// and refusing a request is work the serving threads do.
func (s *Server) Refused() {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.countArrivalLocked(now)
	s.stats.Rejected++
	if s.workers.on() {
		s.workers.advance(now)
		s.workers.reject()
	}
}

// arrive records an attempt's arrival and returns its number among its key's
// attempts (1 when key is empty).
func (s *Server) arrive(ctx context.Context, method, key string, at time.Time) *attempt {
	md, _ := metadata.FromIncomingContext(ctx)
	a := &attempt{s: s, method: method, key: key, load: -1}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.countArrivalLocked(at)
	if key == "" {
		return a
	}
	ks := s.keys[key]
	if ks == nil {
		ks = &keyState{}
		s.keys[key] = ks
	}
	a.rec = &AttemptRecord{
		Method:           method,
		Attempt:          len(ks.attempts) + 1,
		PreviousAttempts: firstJoined(md, "grpc-previous-rpc-attempts"),
		IdempotencyKey:   firstJoined(md, s.idempotencyHeader),
		Criticality:      firstJoined(md, criticality.Header),
		Arrived:          at,
	}
	a.rec.Deadline, _ = ctx.Deadline()
	ks.attempts = append(ks.attempts, a.rec)
	s.notifyLocked()
	return a
}

// number is the attempt's number among its key's attempts (1 for no key).
func (a *attempt) number() int {
	if a.rec == nil {
		return 1
	}
	// Attempt is set once at arrival and never changes, so reading it without
	// the lock races with nothing.
	return a.rec.Attempt
}

// end records how the attempt ended. kind says which counter it goes to.
func (a *attempt) end(code codes.Code, kind endKind) {
	s := a.s
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.admitted {
		s.inFlight--
	}
	switch kind {
	case endRejected:
		s.stats.Rejected++
	case endFailed:
		s.stats.Failed++
	case endCancelled:
		s.stats.Cancelled++
	case endServed:
		s.stats.Served++
		s.execs[a.method]++
	}
	if a.rec != nil {
		a.rec.Done = true
		a.rec.Ended = now
		a.rec.Code = code
		a.rec.Cancelled = kind == endCancelled
		a.rec.Rejected = kind == endRejected
		a.rec.HeadersSent = a.headers
		a.rec.Sent = a.sent
		a.rec.Received = a.received
		a.rec.Reset = a.reset
	}
	s.notifyLocked()
}

type endKind int

const (
	endServed endKind = iota
	endFailed
	endRejected
	endCancelled
)

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Attempts returns a copy of the records of key's attempts, in arrival order.
func (s *Server) Attempts(key string) []AttemptRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attemptsLocked(key)
}

func (s *Server) attemptsLocked(key string) []AttemptRecord {
	ks := s.keys[key]
	if ks == nil {
		return nil
	}
	out := make([]AttemptRecord, len(ks.attempts))
	for i, r := range ks.attempts {
		out[i] = *r
	}
	return out
}

// AwaitAttempts waits until at least n attempts of key have ended and returns
// the key's records, or returns ctx's error with the records so far. It lets a
// test outside a synctest bubble wait for the server to see a cancellation.
func (s *Server) AwaitAttempts(ctx context.Context, key string, n int) ([]AttemptRecord, error) {
	return s.Await(ctx, key, func(recs []AttemptRecord) bool {
		done := 0
		for _, r := range recs {
			if r.Done {
				done++
			}
		}
		return done >= n
	})
}

// Await waits until cond holds for key's records and returns them, or returns
// ctx's error with the latest records. cond is called without the server's lock
// held, on a copy, each time an attempt of any key arrives or ends.
func (s *Server) Await(ctx context.Context, key string, cond func([]AttemptRecord) bool) ([]AttemptRecord, error) {
	for {
		s.mu.Lock()
		recs := s.attemptsLocked(key)
		ch := s.changed
		s.mu.Unlock()
		if cond(recs) {
			return recs, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return recs, ctx.Err()
		}
	}
}

// Executions returns how many times method's work completed successfully (its
// attempt ended with OK, or ran and was Reset). method is the full method name, e.g.
// testingv1.TestService_Write_FullMethodName.
func (s *Server) Executions(method string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.execs[method]
}

// Stats returns the server-wide counters.
func (s *Server) Stats() Stats {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.InFlight = s.inFlight
	s.workers.advance(now)
	st.Queued = len(s.workers.queue)
	st.Work = s.workers.work
	st.Wasted = s.workers.wasted
	return st
}

// Arrivals returns a copy of the number of attempts that arrived in each bucket
// (see WithArrivalBucket) since New, on the server's clock: element i counts
// arrivals in [start+i×bucket, start+(i+1)×bucket). The series ends at the last
// bucket that saw an arrival.
func (s *Server) Arrivals() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.arrivals...)
}

// ArrivalBucket is the width of the buckets Arrivals counts in.
func (s *Server) ArrivalBucket() time.Duration { return s.bucket }

// Start is the time New read from the server's clock; outage windows and
// arrival buckets are measured from it.
func (s *Server) Start() time.Time { return s.start }
