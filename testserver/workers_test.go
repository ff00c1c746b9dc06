//go:build go1.25

// synctest_test.go selects the Go 1.23 timer channels synctest needs.

package testserver_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// workerCall is how one call to a Workers server ended, on the bubble's
// clock.
type workerCall struct {
	code codes.Code
	at   time.Duration // since the test's start
}

// workerCalls makes calls in a synctest bubble, one after another at the
// same instant, so that they arrive in the order made.
type workerCalls struct {
	t      *testing.T
	client testingv1.TestServiceClient
	start  time.Time
	done   map[string]chan workerCall
}

// call makes a Get keyed key, with a deadline timeout from now unless it is
// 0, and returns once the server holds it (queued, served or rejected).
func (w *workerCalls) call(key string, timeout time.Duration) {
	w.t.Helper()
	ch := make(chan workerCall, 1)
	w.done[key] = ch
	go func() {
		ctx := context.Background()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		_, err := w.client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key}})
		ch <- workerCall{status.Code(err), time.Since(w.start)}
	}()
	synctest.Wait()
}

func (w *workerCalls) sleepUntil(at time.Duration) {
	time.Sleep(time.Until(w.start.Add(at)))
}

// want waits for the calls made since the last want and checks how they
// ended: every call's code and end time.
func (w *workerCalls) want(want map[string]workerCall) {
	w.t.Helper()
	for key, ch := range w.done {
		delete(w.done, key)
		got := <-ch
		if got != want[key] {
			w.t.Errorf("call %s ended %v at %v, want %v at %v", key, got.code, got.at, want[key].code, want[key].at)
		}
	}
}

func newWorkerCalls(t *testing.T, w testserver.Workers) (*testserver.Server, *workerCalls) {
	s, client := bubbleClient(t, testserver.WithWorkers(w))
	return s, &workerCalls{t: t, client: client, start: s.Start(), done: map[string]chan workerCall{}}
}

const ms = time.Millisecond

// Two workers, a queue of one, 100 ms per attempt: the third attempt waits,
// the fourth and fifth find the queue full and cost a tenth each, which
// the workers spend as they come free, before they take the third.
func TestWorkersQueueAndRejections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newWorkerCalls(t, testserver.Workers{Count: 2, Queue: 1, Service: 100 * ms})
		for _, key := range []string{"a", "b", "c", "d", "e"} {
			c.call(key, 0)
		}
		if st := s.Stats(); st.Queued != 1 || st.Rejected != 2 || st.InFlight != 3 {
			t.Errorf("at 0: stats %+v, want 1 queued, 2 rejected, 3 in flight", st)
		}
		// Worker 0 serves a [0, 100), d's rejection [100, 110), c [110,
		// 210); worker 1 b [0, 100), e's rejection [100, 110): f, at
		// 150 ms, finds it free.
		c.sleepUntil(150 * ms)
		c.call("f", 0)
		if st := s.Stats(); st.Queued != 0 || st.Work != 420*ms {
			t.Errorf("at 150 ms: stats %+v, want none queued, 420ms of work (4 attempts, 2 rejections)", st)
		}
		ok, re := codes.OK, codes.ResourceExhausted
		c.want(map[string]workerCall{
			"a": {ok, 100 * ms}, "b": {ok, 100 * ms}, "c": {ok, 210 * ms},
			"d": {re, 0}, "e": {re, 0}, "f": {ok, 250 * ms},
		})
		if recs := s.Attempts("d"); len(recs) != 1 || !recs[0].Rejected {
			t.Errorf("d's records %+v, want one rejected attempt", recs)
		}
		// Off: attempts cost nothing.
		s.SetWorkers(testserver.Workers{})
		c.call("g", 0)
		c.want(map[string]workerCall{"g": {ok, 250 * ms}})
	})
}

// One worker, 100 ms per attempt: an attempt a layer in front of the
// service refused (Refused) while a is served costs a tenth, which the
// worker spends before it takes b; it counts as an arrival and a
// rejection. Without the Workers mode it costs nothing.
func TestWorkersRefusedInFront(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newWorkerCalls(t, testserver.Workers{Count: 1, Queue: 2, Service: 100 * ms})
		c.call("a", 0) // [0, 100)
		s.Refused()    // [100, 110)
		c.call("b", 0) // [110, 210)
		if st := s.Stats(); st.Received != 3 || st.Rejected != 1 || st.Queued != 1 {
			t.Errorf("stats %+v, want 3 received, 1 rejected, 1 queued", st)
		}
		if got := s.Arrivals(); len(got) != 1 || got[0] != 3 {
			t.Errorf("arrivals %v, want [3]", got)
		}
		ok := codes.OK
		c.want(map[string]workerCall{"a": {ok, 100 * ms}, "b": {ok, 210 * ms}})
		if st := s.Stats(); st.Work != 210*ms {
			t.Errorf("work %v, want 210ms (2 attempts, 1 refusal)", st.Work)
		}
		s.SetWorkers(testserver.Workers{})
		s.Refused()
		c.call("c", 0)
		c.want(map[string]workerCall{"c": {ok, 210 * ms}})
	})
}

// From 1 s to 2 s one worker of two takes attempts: the other finishes
// what it began before and idles until 2 s.
func TestWorkersReduced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s, c := newWorkerCalls(t, testserver.Workers{Count: 2, Queue: 2, Service: 100 * ms,
			Reduced: 1, ReducedFrom: start.Add(time.Second), ReducedTo: start.Add(2 * time.Second)})
		c.sleepUntil(950 * ms)
		c.call("a", 0) // worker 0, [950, 1050)
		c.call("b", 0) // worker 1, [950, 1050): begun before the reduction
		c.sleepUntil(time.Second)
		c.call("c", 0) // worker 0, [1050, 1150), for now
		c.call("d", 0) // worker 0, [1150, 1250), for now
		c.call("e", 0) // rejected: worker 0, [1050, 1060); c and d 10 ms later
		c.sleepUntil(1950 * ms)
		c.call("f", 0) // worker 0, [1950, 2050)
		c.call("g", 0) // worker 1 again, [2000, 2100)
		ok := codes.OK
		c.want(map[string]workerCall{
			"a": {ok, 1050 * ms}, "b": {ok, 1050 * ms}, "c": {ok, 1160 * ms}, "d": {ok, 1260 * ms},
			"e": {codes.ResourceExhausted, time.Second}, "f": {ok, 2050 * ms}, "g": {ok, 2100 * ms},
		})
		if st := s.Stats(); st.Work != 610*ms {
			t.Errorf("work %v, want 610ms (6 attempts, 1 rejection)", st.Work)
		}
	})
}

// A worker that takes an attempt whose deadline has passed drops it for a
// tenth of the service time; one whose deadline passes while it is served
// costs the whole service time.
func TestWorkersDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newWorkerCalls(t, testserver.Workers{Count: 1, Queue: 6, Service: 100 * ms})
		c.call("a", 0)         // [0, 100)
		c.call("b", 50*ms)     // taken at 100, due at 50: dropped, [100, 110)
		c.call("c", 0)         // [110, 210)
		c.call("d", 250*ms)    // taken at 210, due at 250: served, [210, 310)
		c.call("e", 0)         // [310, 410)
		c.call("f", 320*ms)    // taken at 410, due at 320: dropped, [410, 420)
		c.call("g", time.Hour) // [420, 520)
		ok, dl := codes.OK, codes.DeadlineExceeded
		c.want(map[string]workerCall{
			"a": {ok, 100 * ms}, "b": {dl, 50 * ms}, "c": {ok, 210 * ms}, "d": {dl, 250 * ms},
			"e": {ok, 410 * ms}, "f": {dl, 320 * ms}, "g": {ok, 520 * ms},
		})
		synctest.Wait()
		if st := s.Stats(); st.Work != 520*ms || st.Cancelled != 3 || st.Served != 4 {
			t.Errorf("stats %+v, want 520ms of work, 3 cancelled, 4 served", st)
		}
		// The server saw each caller give up at its deadline.
		for key, at := range map[string]time.Duration{"b": 50 * ms, "d": 250 * ms, "f": 320 * ms} {
			if recs := s.Attempts(key); len(recs) != 1 || !recs[0].Cancelled || recs[0].Ended.Sub(c.start) != at {
				t.Errorf("%s's records %+v, want one cancelled at %v", key, recs, at)
			}
		}
	})
}

// A rejection comes before the queue: it pushes the attempt due first past
// its deadline, which makes it cheap, and the one behind it is done sooner
// than planned, its handler woken for it.
func TestWorkersRejectionComesFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newWorkerCalls(t, testserver.Workers{Count: 1, Queue: 2, Service: 100 * ms})
		c.call("a", 0)      // [0, 100)
		c.call("b", 105*ms) // [100, 200) for now
		c.call("c", 0)      // [200, 300) for now
		c.call("d", 0)      // rejected: [100, 110); b taken at 110, dropped [110, 120); c [120, 220)
		ok := codes.OK
		c.want(map[string]workerCall{
			"a": {ok, 100 * ms}, "b": {codes.DeadlineExceeded, 105 * ms}, "c": {ok, 220 * ms}, "d": {codes.ResourceExhausted, 0},
		})
		if st := s.Stats(); st.Work != 220*ms || st.Queued != 0 {
			t.Errorf("stats %+v, want 220ms of work, none queued", st)
		}
	})
}

// From 1 s to 2 s the server is three times slower: work begun then costs
// three times as much, whenever it ends; work begun before or after does
// not.
func TestWorkersSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		s, c := newWorkerCalls(t, testserver.Workers{Count: 1, Queue: 1, Service: 100 * ms,
			Slow: 3, SlowFrom: start.Add(time.Second), SlowTo: start.Add(2 * time.Second)})
		c.sleepUntil(950 * ms)
		c.call("a", 0) // [950, 1050): begun before the slowdown
		c.call("b", 0) // [1050, 1350): begun in it
		c.call("c", 0) // rejected: [1050, 1080), a tenth of 300 ms; b then [1080, 1380)
		c.sleepUntil(1900 * ms)
		c.call("d", 0) // [1900, 2200)
		c.call("e", 0) // [2200, 2300): begun after
		ok := codes.OK
		c.want(map[string]workerCall{
			"a": {ok, 1050 * ms}, "b": {ok, 1380 * ms}, "c": {codes.ResourceExhausted, 950 * ms},
			"d": {ok, 2200 * ms}, "e": {ok, 2300 * ms},
		})
		if st := s.Stats(); st.Work != 830*ms || st.Wasted != 0 {
			t.Errorf("stats %+v, want 830ms of work (100 + 30 + 300 + 300 + 100), none wasted", st)
		}
	})
}

// Work done for a caller that had gone is wasted: a dropped attempt, one
// whose deadline passes during its service, one whose caller cancels it
// while it is served or while it waits; work done for a caller still
// there is not.
func TestWorkersWasted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c := newWorkerCalls(t, testserver.Workers{Count: 1, Queue: 6, Service: 100 * ms})
		c.call("a", 0)      // [0, 100): served
		c.call("b", 50*ms)  // taken at 100, due at 50: dropped, [100, 110), wasted
		c.call("c", 150*ms) // [110, 210), due at 150: wasted
		c.call("d", 300*ms) // [210, 310), due at 300: wasted
		c.call("e", 500*ms) // [310, 410): served in time
		c.want(map[string]workerCall{
			"a": {codes.OK, 100 * ms}, "b": {codes.DeadlineExceeded, 50 * ms}, "c": {codes.DeadlineExceeded, 150 * ms},
			"d": {codes.DeadlineExceeded, 300 * ms}, "e": {codes.OK, 410 * ms},
		})
		synctest.Wait()
		if st := s.Stats(); st.Work != 410*ms || st.Wasted != 210*ms {
			t.Errorf("stats %+v, want 410ms of work, 210ms wasted (b 10, c 100, d 100)", st)
		}
		// Callers that cancel: f while it is served, h while it waits
		// behind g; h's work is wasted when a worker takes it.
		ctx, cancel := context.WithCancel(context.Background())
		var gets sync.WaitGroup
		get := func(key string) {
			gets.Add(1)
			go func() {
				defer gets.Done()
				_, _ = c.client.Get(ctx, &testingv1.GetRequest{Script: &testingv1.Script{Key: key}})
			}()
			synctest.Wait()
		}
		get("f")       // [410, 510)
		c.call("g", 0) // [510, 610)
		get("h")       // [610, 710)
		cancel()
		gets.Wait()
		c.want(map[string]workerCall{"g": {codes.OK, 610 * ms}})
		time.Sleep(time.Second)
		if st := s.Stats(); st.Work != 710*ms || st.Wasted != 410*ms {
			t.Errorf("stats %+v, want 710ms of work, 410ms wasted (f's and h's 100 more)", st)
		}
	})
}
