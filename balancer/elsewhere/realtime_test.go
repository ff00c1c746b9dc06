package elsewhere_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stagger-go/stagger/balancer/elsewhere"
	"github.com/stagger-go/stagger/testserver"
)

// rtResetFile: Get is idempotent, so stagger retries it after a reset (an
// ambiguous failure: the request may have run), up to 3 attempts, 10ms apart.
const rtResetFile = `{"methodConfig": [{"name": [{"service": "stagger.testing.v1.TestService"}], "idempotent": true,
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
    "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"], "jitter": "NONE"}}]}`

// rtResetCalls is how many calls TestRealTimeRetryAfterResetGoesElsewhere
// makes per run, rtResetPar at a time, and how many of them at least must
// meet a reset for the run to prove anything.
const (
	rtResetCalls = 90
	rtResetPar   = 6
	rtResetMin   = 3
)

// The real-time lane of the policy: over loopback TCP, on the time package's
// clock, three replicas behind one channel, of which the first resets the
// connection of every attempt it receives (testserver's reset mode: the
// request runs, then a TCP reset instead of the reply). The bad replica
// reconnects at once (its listener still accepts), so it is READY again,
// and round_robin's to pick, by the time of the retry 10ms later; the policy
// must send every retry after a reset to another replica. The servers' own
// records say which replica each attempt of each call reached, and the
// grpc-previous-rpc-attempts header which attempt of the call it was.
func TestRealTimeRetryAfterResetGoesElsewhere(t *testing.T) {
	srvs := replicas(t, 3)
	client := dial(t, srvs, withPolicy, rtResetFile)
	srvs[0].SetResets(true)
	errs := runCalls(client, "reset", rtResetCalls, rtResetPar, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Every attempt has ended (those a reset cut off end as the server
	// hears of it), so the records are final.
	for i := range rtResetCalls {
		for _, s := range srvs {
			_, _ = s.Await(ctx, fmt.Sprintf("reset-%d", i), func(r []testserver.AttemptRecord) bool {
				for _, a := range r {
					if !a.Done {
						return false
					}
				}
				return true
			})
		}
	}
	resets := 0
	for i, err := range errs {
		key := fmt.Sprintf("reset-%d", i)
		if err != nil {
			t.Errorf("call %d: %v", i, err)
			continue
		}
		// The attempts of the call, by their number in the call (0 = first),
		// and the replica each went to.
		replicaOf := map[int]int{}
		for r, s := range srvs {
			for _, rec := range s.Attempts(key) {
				n := 0
				if rec.PreviousAttempts != "" {
					var perr error
					if n, perr = strconv.Atoi(rec.PreviousAttempts); perr != nil {
						t.Fatalf("call %d: grpc-previous-rpc-attempts %q", i, rec.PreviousAttempts)
					}
				}
				if prev, dup := replicaOf[n]; dup {
					t.Errorf("call %d: attempt %d reached replicas %d and %d", i, n+1, prev, r)
				}
				replicaOf[n] = r
				if r == 0 && rec.Reset {
					resets++
				}
			}
		}
		// The attempt the servers saw next after each one on the
		// resetting replica (an attempt that failed in the client, never
		// reaching a server, is not in the records) must be on another.
		for n, r := range replicaOf {
			if r != 0 {
				continue
			}
			next := -1
			for m := range replicaOf {
				if m > n && (next < 0 || m < next) {
					next = m
				}
			}
			switch {
			case next < 0:
				t.Errorf("call %d succeeded, but its attempt %d, on the resetting replica, was the last the servers saw (replica by attempt: %v)", i, n+1, replicaOf)
			case replicaOf[next] == 0:
				t.Errorf("call %d: the retry after attempt %d's reset went to the resetting replica again (replica by attempt: %v)", i, n+1, replicaOf)
			}
		}
	}
	// Not vacuous: round_robin sent first attempts to the resetting replica
	// (a third of them while it is READY; it is not while it reconnects, so
	// runs under the race detector at -cpu=1 saw as few as 4 of 60).
	if resets < rtResetMin {
		t.Errorf("%d of %d calls met a reset, want at least %d", resets, rtResetCalls, rtResetMin)
	}
	if !t.Failed() {
		t.Logf("%s: %d of %d calls met a reset, every retry after one went to another replica", elsewhere.Name, resets, rtResetCalls)
	}
}
