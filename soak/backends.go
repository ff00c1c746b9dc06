package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/stagger-go/stagger/testserver"
)

// downLedger counts, for one backend, the calls made and the attempts it
// received while it was down for longer than any call's deadline
// (callTimeoutMax): a retry layer that storms a down backend sends it
// several attempts per call there, one that holds its retries about one.
// The counts are checked at the end (downAttemptsMax).
type downLedger struct {
	name string
	// since is when the backend's outage began (Unix nanoseconds; 0: up).
	since           atomic.Int64
	calls, attempts atomic.Uint64
}

// set marks the backend down (from now) or up.
func (d *downLedger) set(down bool, now time.Time) {
	if down {
		d.since.Store(now.UnixNano())
	} else {
		d.since.Store(0)
	}
}

// late reports whether the backend has been down, at now, for longer than
// any call's deadline: every call then made starts and ends in the outage.
func (d *downLedger) late(now time.Time) bool {
	s := d.since.Load()
	return s != 0 && now.UnixNano()-s >= int64(callTimeoutMax)
}

// call counts a call made at now; attempt, an attempt received at now.
func (d *downLedger) call(now time.Time) {
	if d.late(now) {
		d.calls.Add(1)
	}
}

func (d *downLedger) attempt(now time.Time) {
	if d.late(now) {
		d.attempts.Add(1)
	}
}

// String says what was counted.
func (d *downLedger) String() string {
	c, a := d.calls.Load(), d.attempts.Load()
	per := 0.0
	if c > 0 {
		per = float64(a) / float64(c)
	}
	return fmt.Sprintf("%s: %d calls made and %d attempts received while down past every deadline (%.2f per call)", d.name, c, a, per)
}

// check breaks the run when the backend got more than downAttemptsMax
// attempts per call while down past every deadline, over downMinCalls
// calls or more.
func (d *downLedger) check(fail func(string)) {
	c, a := d.calls.Load(), d.attempts.Load()
	if c >= downMinCalls && float64(a) > downAttemptsMax*float64(c) {
		fail(fmt.Sprintf("a retry storm on a down backend: %s; want at most %.2f", d, downAttemptsMax))
	}
}

// counting is a backend's outermost server interceptor: it counts every
// attempt received, on the ledger of its outages.
func counting(d *downLedger) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			d.attempt(time.Now())
			return handler(ctx, req)
		}, func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			d.attempt(time.Now())
			return handler(srv, ss)
		}
}

// payments is the fleet's second backend: one testserver on loopback TCP
// that the processes call beside the replicas (Put, paced: paymentsCallers
// per process, one call every paymentsEvery each), with faults of its own
// drawn from their own source (paymentsFaults), independent of the
// replicas'.
type payments struct {
	ts   *testserver.Server
	down *downLedger
	rng  *rand.Rand
	hist *history
	// counts are its faults: outages past every deadline, flaky spells.
	outages, flaky int
}

func newPayments(seed uint64, hist *history) (*payments, error) {
	p := &payments{down: &downLedger{name: "payments"}, rng: rand.New(rand.NewPCG(seed, 0x9a75)), hist: hist}
	unary, stream := counting(p.down)
	p.ts = testserver.New(testserver.WithTCP(), testserver.WithServerOptions(
		grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream)))
	if p.ts.Addr() == "" {
		p.ts.Close()
		return nil, fmt.Errorf("soak: payments could not listen on loopback TCP")
	}
	return p, nil
}

// run injects payments' faults until ctx ends, one at a time: an outage
// of outageMin to outageMax (past every deadline), or a flaky spell
// (flakyShare of its attempts fail) of faultSpanMin to faultSpanMax, each
// after a pause of paymentsFaultGap on average; then it heals.
func (p *payments) run(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	p.ts.SetFailureRate(baseFailures)
	defer func() {
		p.ts.SetOutage(false)
		p.down.set(false, time.Now())
		p.ts.SetFailureRate(0)
	}()
	for {
		sleep(ctx, time.Duration(p.rng.ExpFloat64()*float64(paymentsFaultGap)))
		if ctx.Err() != nil {
			return
		}
		if p.rng.IntN(2) == 0 {
			d := outageMin + time.Duration(p.rng.Int64N(int64(outageMax-outageMin)))
			p.outages++
			p.hist.addf("fault outage payments for %s", d.Round(time.Millisecond))
			p.ts.SetOutage(true)
			p.down.set(true, time.Now())
			sleep(ctx, d)
			p.ts.SetOutage(false)
			p.down.set(false, time.Now())
			continue
		}
		d := faultSpanMin + time.Duration(p.rng.Int64N(int64(faultSpanMax-faultSpanMin)))
		p.flaky++
		p.hist.addf("fault flaky payments for %s", d.Round(time.Millisecond))
		p.ts.SetFailureRate(flakyShare)
		sleep(ctx, d)
		p.ts.SetFailureRate(baseFailures)
	}
}
