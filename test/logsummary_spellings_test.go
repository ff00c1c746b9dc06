//go:build go1.25

package test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stagger-go/stagger"
	"github.com/stagger-go/stagger/budget"
	"github.com/stagger-go/stagger/interceptor"
	testingv1 "github.com/stagger-go/stagger/proto/stagger/testing/v1"
	"github.com/stagger-go/stagger/testserver"
)

// The warn summary names a backend by its canonical target, as the budgets
// key it: two ClientConns that dial "127.0.0.1:P" and "dns:///127.0.0.1:P"
// (one server, one budget) through one set of dial options get one line
// for the calls the budget refuses on both, the first said at once and the
// next counted for the backend's next line; before, each spelling had a
// line of its own at once, two lines over one budget.
func TestRefusedSummaryOneLineForTwoSpellings(t *testing.T) {
	const msg = "stagger: calls ended without the retry their budget refused, per backend since its last such line"
	srv := testserver.New()
	defer srv.Close()
	addr, err := srv.StartTCP()
	if err != nil {
		t.Fatal(err)
	}
	// A throttle of 2 tokens refuses the retry after a call's first
	// failure (1 token left, not above half), at once: no Gate, no wait.
	bs, err := budget.NewBackends(budget.Settings{Kind: budget.KindThrottle, Throttle: budget.ThrottleSettings{MaxTokens: 2, TokenRatio: 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	rec := &slogLines{}
	opts := append(stagger.DialOptions(parse(t, retryFile), interceptor.WithDefaultBudgets(bs), interceptor.WithLogger(slogLogger(slog.New(rec)))),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	for i, target := range []string{addr, "dns:///" + addr} {
		cc, err := grpc.NewClient(target, opts...)
		if err != nil {
			t.Fatal(err)
		}
		var r interceptor.Report
		_, err = testingv1.NewTestServiceClient(cc).Get(context.Background(), &testingv1.GetRequest{Script: &testingv1.Script{Key: fmt.Sprint("down", i), FailAttempts: 10}}, interceptor.WithReport(&r))
		_ = cc.Close()
		if err == nil || r.Attempts != 1 || r.Reason.String() != "budget" {
			t.Fatalf("call through %q: %v, %d attempts, reason %v; want a failure whose retry the budget refused", target, err, r.Attempts, r.Reason)
		}
	}
	var lines []slogLine
	for _, l := range rec.all() {
		if l.msg == msg {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || lines[0].attrs["grpc.target"].String() != "dns:///"+addr {
		var got []string
		for _, l := range lines {
			got = append(got, l.attrs["grpc.target"].String())
		}
		t.Fatalf("summary lines for targets %q, want one, for dns:///%s (the second call's count waits for its interval)", got, addr)
	}
}
