package lab

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestFleetValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  FleetConfig
		want string // in the error; "" means valid
	}{
		{"defaults", FleetConfig{}, ""},
		{"clients", FleetConfig{Clients: -1}, "lab: fleet: Clients: must be in [1, 10000], got -1"},
		{"capacity past 1 ms per attempt", FleetConfig{Workers: 2, Capacity: 3000}, "lab: fleet: Capacity: must be in [1, Workers × 1000]"},
		{"load", FleetConfig{Load: -0.5}, "lab: fleet: Load: must be in (0, 10] (a share of Capacity), got -0.5"},
		{"deadline", FleetConfig{Deadline: -time.Second}, "lab: fleet: Deadline: must be >= 0 (0: none), got -1s"},
		{"outage off the bins", FleetConfig{Outage: 150 * time.Millisecond}, "lab: fleet: Outage: must be a whole number of 100ms in [100ms, 1h], got 150ms"},
		{"after too short", FleetConfig{After: 2 * time.Second}, "lab: fleet: After: must be at least 3s"},
		{"arrivals", FleetConfig{Arrivals: "bursty"}, `lab: fleet: Arrivals: must be "even" or "poisson", got "bursty"`},
		{"unknown contender", FleetConfig{Contenders: []string{"naive"}}, `lab: fleet: Contenders: must be among stagger, grpc-go-throttle, grpc-middleware, failsafe-go, no-retry, got "naive"`},
		{"repeated contender", FleetConfig{Contenders: []string{"stagger", "stagger"}}, `lab: fleet: Contenders: must not repeat a name, got "stagger"`},
		{"poisson", FleetConfig{Arrivals: ArrivalsPoisson, Deadline: time.Second}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Defaults().Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestFleetPlumbing runs a short fleet (5 clients, a 2 s outage; the
// command line runs the full one) in real time over loopback TCP and
// checks the measurement, not any contender's figures: every attempt the
// clients began is one the server received and recorded, the server's
// refusals add up to its own counter, the calls are those the schedule
// offers, and a client that does not retry serves no call made in the
// outage (but those whose only attempt reached the server after it).
func TestFleetPlumbing(t *testing.T) {
	cfg := FleetConfig{
		Clients: 5, Capacity: 200, Workers: 10, Load: 0.4,
		Warmup: time.Second, Outage: 2 * time.Second, After: 3 * time.Second, Drain: 20 * time.Second,
	}
	rep, err := RunFleet(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Config
	if len(rep.Results) != len(FleetContenders()) {
		t.Fatalf("%d results, want one per contender (%d)", len(rep.Results), len(FleetContenders()))
	}
	// Even arrivals: client i calls at i × interval ÷ Clients, then every
	// interval, while before the load's end.
	interval := time.Duration(float64(c.Clients) / c.Rate() * float64(time.Second))
	load := c.Warmup + c.Outage + c.After
	wantCalls, wantOutage := 0, 0
	for i := range c.Clients {
		for at := time.Duration(i) * interval / time.Duration(c.Clients); at < load; at += interval {
			wantCalls++
			if at >= c.Warmup && at < c.Warmup+c.Outage {
				wantOutage++
			}
		}
	}
	for _, r := range rep.Results {
		t.Run(r.Contender, func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("%+v", r)
				}
			}()
			if r.Calls != wantCalls || r.OutageCalls != wantOutage {
				t.Errorf("calls %d, outage calls %d; the schedule offers %d and %d", r.Calls, r.OutageCalls, wantCalls, wantOutage)
			}
			if r.Cut != 0 {
				t.Errorf("%d calls cut by the lab, want none", r.Cut)
			}
			if r.Reported != 0 || r.Limit != 1 {
				t.Errorf("%d calls saw a load report from a server that sends none; room's limit %v, want 1 at 40 %% load", r.Reported, r.Limit)
			}
			if int64(r.ClientAttempts) != r.ServerReceived || r.RecordedAttempts != r.ClientAttempts {
				t.Errorf("attempts: clients began %d, server received %d, recorded %d; want all equal", r.ClientAttempts, r.ServerReceived, r.RecordedAttempts)
			}
			if int64(r.ServerRefused+r.ServerUnavailable) != r.ServerRejected {
				t.Errorf("server refused %d + unavailable %d != its Stats.Rejected %d", r.ServerRefused, r.ServerUnavailable, r.ServerRejected)
			}
			if r.DownAttempts != r.ServerUnavailable {
				t.Errorf("attempts arrived in the outage %d, UNAVAILABLE sent %d; want equal", r.DownAttempts, r.ServerUnavailable)
			}
			sum := 0
			for _, n := range r.Load {
				sum += n
			}
			if sum != r.RecordedAttempts {
				t.Errorf("the load's bins add up to %d, the records to %d", sum, r.RecordedAttempts)
			}
			if r.Served > r.Calls || r.OutageServed > r.OutageCalls || r.RefusedFresh > r.RefusedAfter || r.FailedRoom > r.FailedAfter {
				t.Errorf("a part exceeds its whole: %+v", r)
			}
			if r.OutageCalls > 0 && r.OutageLate > r.OutageCalls/10 {
				t.Logf("%d of %d outage calls reached the server only after the return: the machine is slow", r.OutageLate, r.OutageCalls)
			}
		})
	}
	byName := map[string]FleetResult{}
	for _, r := range rep.Results {
		byName[r.Contender] = r
	}
	nr := byName["no-retry"]
	if nr.ClientAttempts != nr.Calls {
		t.Errorf("no-retry: %d attempts for %d calls, want one each", nr.ClientAttempts, nr.Calls)
	}
	if nr.OutageServed != nr.OutageLate || nr.DownAttempts != nr.OutageCalls-nr.OutageLate {
		t.Errorf("no-retry: served %d of %d outage calls, %d attempts arrived in the outage; want exactly the %d whose attempt arrived after the return served, and one attempt each for the others",
			nr.OutageServed, nr.OutageCalls, nr.DownAttempts, nr.OutageLate)
	}
	if nr.RefusedAfter-nr.RefusedFresh > nr.OutageLate {
		t.Errorf("no-retry: %d refusals after the return, %d of them first attempts of fresh calls; every other one must be an outage call's late first attempt (%d)", nr.RefusedAfter, nr.RefusedFresh, nr.OutageLate)
	}
	// A layer that retries shows its retries at the server: go-grpc-middleware
	// sends its 4 attempts within 0.1 + 0.2 + 0.4 s (±20 %), inside the 2 s
	// outage.
	if mw := byName["grpc-middleware"]; mw.DownPerCall < 2 {
		t.Errorf("grpc-middleware: %.2f attempts per call in the outage, want its retries counted (over 2)", mw.DownPerCall)
	}

	var out bytes.Buffer
	if err := WriteFleet(&out, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range append(namesOf(FleetContenders()), "FIRST S BACK", "REFUSED AFTER", "HELD DONE P50/P90/MAX", "CLIENT ATT", "no deadline", "even arrivals") {
		if !strings.Contains(out.String(), want) {
			t.Errorf("WriteFleet's output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestFleetReturnFailsNoCallBeforeItsBound runs stagger alone in a small
// fleet (5 processes at 80 % of the server's capacity) back from a 3 s
// outage, in real time over loopback TCP: the return's refusals cut the
// held retries' pace, and a held call the room left cannot send fails at
// its own bound (max-wait; or the hold rule's, a wait nothing held), never
// earlier because others wait before it
// (issue 72: the backlog rule it replaces failed 257-417 calls of about
// 400 early, and a fleet's held calls the room could have served with
// them).
func TestFleetReturnFailsNoCallBeforeItsBound(t *testing.T) {
	cfg := FleetConfig{
		Clients: 5, Capacity: 200, Workers: 10, Load: 0.8, Contenders: []string{"stagger"},
		Warmup: time.Second, Outage: 3 * time.Second, After: 8 * time.Second, Drain: 20 * time.Second,
	}
	rep, err := RunFleet(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	t.Logf("%d calls failed after the return; failed p50 %v, p99 %v; refused after the return %d; outage calls served %d of %d; %v",
		r.FailedAfter, r.FailP50, r.FailP99, r.RefusedAfter, r.OutageServed, r.OutageCalls, r.AfterReasons)
	if r.RefusedAfter == 0 {
		t.Skipf("the server refused nothing after the return (the machine too slow to load it?): nothing to cut")
	}
	for _, x := range r.AfterReasons {
		rule, _, _ := strings.Cut(x.Reason, ":")
		switch rule {
		case "deferred/max-wait", "deferred/hold", "deferred/hopeless", "deferred/deadline":
			// Its own bound, or its own pause with nothing to hold it.
		default:
			if strings.HasPrefix(rule, "deferred/") {
				t.Errorf("%d calls failed after the return by %s, want only their own bounds", x.Count, rule)
			}
		}
	}
	if r.OutageServed == 0 {
		t.Errorf("none of the outage's %d calls served", r.OutageCalls)
	}
}

// TestFleetReports: with Reports, the fleet's server sends a load report on
// every answer while up, and stagger's clients read it: every call served
// saw one (its last answer was a success, with a report), and the room's
// limit is printed beside the figures.
func TestFleetReports(t *testing.T) {
	cfg := FleetConfig{
		Clients: 5, Capacity: 200, Workers: 10, Load: 0.4, Reports: true, Contenders: []string{"stagger"},
		Warmup: time.Second, Outage: time.Second, After: 3 * time.Second, Drain: 20 * time.Second,
	}
	rep, err := RunFleet(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	if r.Served == 0 || r.Reported < r.Served {
		t.Errorf("%d calls served, %d saw a load report; want every served call to", r.Served, r.Reported)
	}
	if r.Limit != 1 {
		t.Errorf("room's limit %v, want 1 at 40 %% load", r.Limit)
	}
	var out bytes.Buffer
	if err := WriteFleet(&out, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ROOM'S LIMIT", "100.0%", "reports its load"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("WriteFleet's output lacks %q:\n%s", want, out.String())
		}
	}
}
