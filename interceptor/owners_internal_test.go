package interceptor

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
	"testing"
)

// ownerSites returns, for the package's non-test source, the functions
// ("file: func") that call policy.Policy.Decide and those that end a call
// (call.end, told from the other methods named end by its first argument,
// the connection: cc or x.cc).
func ownerSites(t *testing.T) (deciders, enders []string) {
	t.Helper()
	eachCall(t, func(string) bool { return true }, func(file string, fn *ast.FuncDecl, ce *ast.CallExpr, sel *ast.SelectorExpr) {
		site := file + ": " + fn.Name.Name
		switch {
		case sel.Sel.Name == "Decide":
			deciders = append(deciders, site)
		case sel.Sel.Name == "end" && len(ce.Args) == 2 && isConn(ce.Args[0]):
			enders = append(enders, site)
		}
	})
	return slices.Compact(deciders), slices.Compact(enders)
}

// eachCall walks the package's non-test files whose name in says so, and
// calls visit for each call of a method or a package's function (x.name(...))
// in a function's body, with the file and the function it is in.
func eachCall(t *testing.T, in func(string) bool, visit func(file string, fn *ast.FuncDecl, ce *ast.CallExpr, sel *ast.SelectorExpr)) {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || !in(name) {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if ce, ok := n.(*ast.CallExpr); ok {
					if sel, ok := ce.Fun.(*ast.SelectorExpr); ok {
						visit(name, fn, ce, sel)
					}
				}
				return true
			})
		}
	}
}

func isConn(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name == "cc"
	case *ast.SelectorExpr:
		return x.Sel.Name == "cc"
	}
	return false
}

// TestOneOwnerSites counts who decides "retry or not" and who ends a
// call, so that a new engine or a new copy of a decision shows here
// (issue 71, one owner per call). Every unary call ends in one place,
// runUnary, whichever mode its loop (unaryLoop) ran its attempts in. The
// policy's Decide is asked in one function (verdict, which judges a
// hedged attempt's failure too), called by the call's decision
// (shouldRetry) alone, and so are the breaker and the budget for a retry:
// its askers differ only in the question (afterAttempt as an attempt
// ends, the per-attempt timer as it fires and as its grace ends, the loop
// for an attempt that decides nothing beside another, and hedging's loop
// for a hedge its start rule made due: askHedge, in hedgeState.admitHedge, for
// a unary call and a stream alike; and its judge for a hedged attempt's
// failure: askRaced, in hedgeState.judge, judged by the same function as a
// retry's, verdict). Only a first attempt is admitted
// elsewhere, by the breaker (admitBreaker, for admitFirst and the fast path).
// Every stream ends in one place too, retryStream.finishStream, the
// breaker's refusal of its first attempt included; a second place that
// ends a stream fails this test.
func TestOneOwnerSites(t *testing.T) {
	deciders, enders := ownerSites(t)
	if want := []string{"call_retry.go: verdict"}; !slices.Equal(deciders, want) {
		t.Errorf("functions that call Decide:\n%s\nwant %s alone", strings.Join(deciders, "\n"), want[0])
	}
	admitters := callersWhere(t, func(string) bool { return true }, "Allow", "Admit", "AllowRetry", "Closed")
	wantAdmitters := []string{"call_admit.go: admitBreaker", "call_retry.go: retryFacts.admit"}
	if !slices.Equal(admitters, wantAdmitters) {
		t.Errorf("functions that ask a breaker or a budget to admit an attempt:\n%s\nwant\n%s", strings.Join(admitters, "\n"), strings.Join(wantAdmitters, "\n"))
	}
	if got, want := identUsers(t, "admitBreaker"), []string{"call_admit.go: call.admitFirst", "unary.go: core.unaryInterceptor"}; !slices.Equal(got, want) {
		t.Errorf("a first attempt is admitted (admitBreaker) by %v, want %v alone", got, want)
	}
	if got, want := callersWhere(t, func(string) bool { return true }, "admit"), []string{"call_retry.go: retryFacts.shouldRetry"}; !slices.Equal(got, want) {
		t.Errorf("retryFacts.admit is called by %v, want %v alone", got, want)
	}
	if got, want := identUsers(t, "askHedge"), []string{"call_retry.go: retryFacts.admit", "call_retry.go: retryFacts.shouldRetry", "hedge.go: hedgeState.admitHedge"}; !slices.Equal(got, want) {
		t.Errorf("a hedge is admitted (askHedge) in %v, want %v alone", got, want)
	}
	// A hedged attempt's failure is judged by the hedging policy's
	// nonFatalStatusCodes in the decision alone (askRaced, raceVerdict),
	// asked by hedging's judge, for a unary call and a stream alike.
	if got, want := identUsers(t, "askRaced"), []string{"call_retry.go: retryFacts.shouldRetry", "call_retry.go: retryFacts.verdict", "hedge.go: hedgeState.judge"}; !slices.Equal(got, want) {
		t.Errorf("a hedged attempt's failure is judged (askRaced) in %v, want %v alone", got, want)
	}
	// "Retry or not" on a failure has one function, a retry's and a
	// hedge's alike (verdict: Decide or raceVerdict), asked by the decision
	// alone, with one caller rule (callerEnded) that the decision reads
	// once: hedging does not read the caller's context for it apart.
	if got, want := callersWhere(t, func(string) bool { return true }, "verdict"), []string{"call_retry.go: retryFacts.shouldRetry"}; !slices.Equal(got, want) {
		t.Errorf("retryFacts.verdict is called by %v, want the decision's %v alone", got, want)
	}
	if got, want := identUsers(t, "raceVerdict"), []string{"call_retry.go: retryFacts.verdict"}; !slices.Equal(got, want) {
		t.Errorf("raceVerdict is called by %v, want %v alone", got, want)
	}
	wantCallerRule := []string{"call_retry.go: attemptOutcome", "call_retry.go: breakerOutcome", "call_retry.go: retryFacts.shouldRetry"}
	if got := identUsers(t, "callerEnded"); !slices.Equal(got, wantCallerRule) {
		t.Errorf("the caller rule (callerEnded) is read in:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantCallerRule, "\n"))
	}
	// An attempt's outcome reaches the breaker, then the budget, from the
	// decision alone (retryFacts.record, asked through shouldRetry:
	// askSettled for a hedge's and a drained attempt's end), but for the
	// fast path's success written out and a retry's admission given back
	// unused (call.settle, the budget's alone).
	wantRecorders := []string{"call_retry.go: retryFacts.record", "unary.go: recordFirstSuccess", "unary_loop.go: call.settle"}
	if got := callersWhere(t, func(string) bool { return true }, "Record"); !slices.Equal(got, wantRecorders) {
		t.Errorf("functions that tell a breaker or a budget an outcome (Record):\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantRecorders, "\n"))
	}
	// A breaker's yes to a retry that is not sent goes back in one place
	// (returnProbe, through the breaker's Guard as a Gate's does), asked
	// by the admission the budget refused and by the one give-back of a
	// retry never sent (giveBack), which the unary loop's end and the
	// stream's end run.
	if got, want := callersWhere(t, func(string) bool { return true }, "ReturnRetry"), []string{"call_retry.go: retryFacts.returnProbe"}; !slices.Equal(got, want) {
		t.Errorf("a breaker's yes is given back (ReturnRetry) in %v, want %v alone", got, want)
	}
	if got, want := callersWhere(t, func(string) bool { return true }, "returnProbe"), []string{"call_retry.go: call.giveBack", "call_retry.go: retryFacts.admit"}; !slices.Equal(got, want) {
		t.Errorf("returnProbe is called by %v, want %v alone", got, want)
	}
	if got, want := callersWhere(t, func(string) bool { return true }, "giveBack"), []string{"stream_end.go: retryStream.finishStream", "unary_loop.go: unaryLoop.end"}; !slices.Equal(got, want) {
		t.Errorf("a retry never sent is given back (giveBack) in %v, want the ends %v alone", got, want)
	}
	if got, want := callersWhere(t, func(string) bool { return true }, "record"), []string{"call_retry.go: retryFacts.shouldRetry"}; !slices.Equal(got, want) {
		t.Errorf("retryFacts.record is called by %v, want the decision %v alone", got, want)
	}
	if got, want := callersWhere(t, func(string) bool { return true }, "Has"), []string{"call_retry.go: raceVerdict"}; !slices.Equal(got, want) {
		t.Errorf("a code set is read (Has) in %v, want %v alone", got, want)
	}
	// A hedged stream's committed end is judged by the decision too
	// (hedgeState.judge, askRaced, committed), and ends as a race nobody
	// won does (hedgeState.giveUp); a resume refused (prepareResume) ends as
	// a pause does (call.giveUp): the stream engine's files neither read
	// the caller rule nor tell the hooks of a give-up themselves.
	var streamGiveUps, streamGiveUpCallers []string
	for _, site := range identUsers(t, "EventGiveUp") {
		if streamFile(site[:strings.Index(site, ":")]) {
			streamGiveUps = append(streamGiveUps, site)
		}
	}
	if len(streamGiveUps) > 0 {
		t.Errorf("the stream engine tells the hooks of a give-up (EventGiveUp) in %v, want none", streamGiveUps)
	}
	eachCall(t, streamFile, func(file string, fn *ast.FuncDecl, _ *ast.CallExpr, sel *ast.SelectorExpr) {
		if sel.Sel.Name == "giveUp" {
			streamGiveUpCallers = append(streamGiveUpCallers, funcSite(file, fn))
		}
	})
	slices.Sort(streamGiveUpCallers)
	wantGiveUps := []string{"hedgestream.go: retryStream.endRace", "resume.go: retryStream.prepareResume", "stream.go: retryStream.settle"}
	if !slices.Equal(streamGiveUpCallers, wantGiveUps) {
		t.Errorf("the stream engine gives up (giveUp) in\n%s\nwant\n%s", strings.Join(streamGiveUpCallers, "\n"), strings.Join(wantGiveUps, "\n"))
	}
	// A loser's outcome (cancelled as another won or the race failed) has
	// one rule for both hedging engines.
	if got, want := identUsers(t, "loserOutcome"), []string{"hedgestream.go: retryStream.settleOthers", "unary_loop.go: unaryLoop.drain"}; !slices.Equal(got, want) {
		t.Errorf("a loser's outcome (loserOutcome) is decided in %v, want %v alone", got, want)
	}
	var unary, stream []string
	for _, s := range enders {
		if streamFile(s[:strings.Index(s, ":")]) {
			stream = append(stream, s)
		} else {
			unary = append(unary, s)
		}
	}
	if want := []string{"unary.go: runUnary"}; !slices.Equal(unary, want) {
		t.Errorf("unary call ends in:\n%s\nwant %s alone", strings.Join(unary, "\n"), want[0])
	}
	if want := []string{"stream_end.go: finishStream"}; !slices.Equal(stream, want) {
		t.Errorf("a stream ends in:\n%s\nwant %s alone", strings.Join(stream, "\n"), want[0])
	}
}

// callersOf returns, for the package's non-test source outside the stream
// engines' files, the functions ("file: Recv.func", or "file: func") that
// call a method or function named one of names.
func callersOf(t *testing.T, names ...string) []string {
	t.Helper()
	return callersWhere(t, func(name string) bool { return !streamFile(name) }, names...)
}

// callersWhere is callersOf over the non-test files whose name in says so.
func callersWhere(t *testing.T, in func(string) bool, names ...string) []string {
	t.Helper()
	var sites []string
	eachCall(t, in, func(file string, fn *ast.FuncDecl, _ *ast.CallExpr, sel *ast.SelectorExpr) {
		if !slices.Contains(names, sel.Sel.Name) {
			return
		}
		sites = append(sites, funcSite(file, fn))
	})
	slices.Sort(sites)
	return slices.Compact(sites)
}

// streamFile reports whether name is one of the stream engines' files
// (a stream's per-attempt timer's driver, stream_timer.go, among them),
// which decide a stream.
func streamFile(name string) bool {
	return strings.HasPrefix(name, "stream") || strings.HasPrefix(name, "hedgestream") ||
		name == "resume.go" || name == "replay.go"
}

// TestUnaryLoopOwnsTheCall: of a unary call, only its loop (unaryLoop)
// asks the decision (afterAttempt, shouldRetry), and only it commits
// (unaryLoop.adopt, the one caller of adopt, at its one end, unaryLoop.end:
// which attempt's reply and metadata the caller sees); a call that sends
// one attempt runs on the loop too (inline), whose holders are filled from
// its last attempt (unaryAttempt.finished, which runUnary runs). A
// decision or a commit made elsewhere fails it: send the loop an event
// instead.
func TestUnaryLoopOwnsTheCall(t *testing.T) {
	// The decision's own wrapper, and the per-attempt timer's rules, which
	// the loop runs (unaryLoop.take), as a stream's timer does under its
	// own lock (streamTimer); and hedging's admission of a hedge and its
	// judgement of a hedged attempt's failure, which the loop runs
	// (unaryLoop.run, attemptEnded), as a hedged stream's driver does;
	// and the record of a hedged attempt's end that needs no verdict
	// (askSettled), which the loop asks (attemptEnded, drain).
	deciders := []string{"call_retry.go: call.afterAttempt", "attempttimer.go: attemptTimer.take", "attempttimer.go: attemptTimer.decide", "hedge.go: hedgeState.admitHedge", "hedge.go: hedgeState.judge", "hedge.go: hedgeState.recordHedge"}
	for _, tc := range []struct {
		what  string
		names []string
		also  []string
	}{
		{"decides", []string{"afterAttempt", "shouldRetry"}, deciders},
		{"commits", []string{"adopt", "give"}, []string{"hedgecall.go: unaryAttempt.finished"}},
	} {
		for _, s := range callersOf(t, tc.names...) {
			if !strings.Contains(s, ": unaryLoop.") && !slices.Contains(tc.also, s) {
				t.Errorf("%s %s a unary call (%s); want the loop alone (unaryLoop)", s, tc.what, strings.Join(tc.names, ", "))
			}
		}
	}
	// One "an attempt ended", one commit, one end, whatever the mode.
	for _, tc := range []struct{ name, want string }{
		{"attemptEnded", "unary_loop.go: unaryLoop.handle"},
		{"adopt", "unary_loop.go: unaryLoop.end"},
	} {
		if got := callersOf(t, tc.name); !slices.Equal(got, []string{tc.want}) {
			t.Errorf("%s is called by %v, want %s alone", tc.name, got, tc.want)
		}
	}
	// The loop waits in its select alone: a retry's pause is its event
	// (dueT, evStart), not a blocking call (pause); the Deferrer's wait is
	// entered from the decision's one step (decided) and, for a refused
	// hedge with nothing in flight, hedging's (goOnRefused).
	if got := callersOf(t, "pause"); len(got) > 0 {
		t.Errorf("a unary call pauses in a blocking call (pause) in %v; want the pause as the loop's event", got)
	}
	if got, want := callersOf(t, "waitDeferred", "waitGate"), []string{"call_admit.go: call.pause", "call_admit.go: call.waitDeferred", "hedge.go: hedgeState.goOnRefused", "unary_loop.go: unaryLoop.decided"}; !slices.Equal(got, want) {
		t.Errorf("a call waits in the Deferrer in:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got, want := callersOf(t, "finished"), []string{"hedgecall.go: unaryAttempt.finished", "unary.go: core.runUnary", "unary.go: core.unaryInterceptor", "unary_loop.go: unaryLoop.end"}; !slices.Equal(got, want) {
		t.Errorf("a unary call's OnFinish runs (finished) in:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestOneTimer: the per-attempt timer's rules are written once, in
// attemptTimer's methods, which a unary call's loop (unaryLoop.take) and a
// stream's timer goroutine (streamTimer.takeLocked) both run: only they
// ask the call's decision as the timer fires and as its grace ends
// (askVerdict, askAdmit) and what the method's other attempts say
// (pace.Evidence's Fire, SlowForAll, Scout, Straggler).
func TestOneTimer(t *testing.T) {
	all := func(string) bool { return true }
	evidence := callersWhere(t, all, "Fire", "SlowForAll", "Scout", "Straggler")
	if len(evidence) == 0 {
		t.Fatal("no caller of pace.Evidence's rules found; the test no longer finds them")
	}
	for _, s := range evidence {
		if !strings.HasPrefix(s, "attempttimer.go: attemptTimer.") {
			t.Errorf("%s takes a per-attempt timer's decision; want attemptTimer's rules alone (attempttimer.go)", s)
		}
	}
	for _, ask := range []string{"askVerdict", "askAdmit"} {
		for _, s := range identUsers(t, ask) {
			if !strings.HasPrefix(s, "attempttimer.go: attemptTimer.") && s != "call_retry.go: retryFacts.shouldRetry" && s != "call_retry.go: retryFacts.admit" {
				t.Errorf("%s asks the call's decision as a per-attempt timer (%s); want attemptTimer's rules alone", s, ask)
			}
		}
	}
}

// identUsers returns, for the package's non-test source, the functions
// ("file: Recv.func") that name the identifier name.
func identUsers(t *testing.T, name string) []string {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var sites []string
	fset := token.NewFileSet()
	for _, e := range entries {
		file := e.Name()
		if !strings.HasSuffix(file, ".go") || strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok && id.Name == name {
					sites = append(sites, funcSite(file, fn))
				}
				return true
			})
		}
	}
	slices.Sort(sites)
	return slices.Compact(sites)
}

// funcSite names fn, in file: "file: Recv.func", or "file: func".
func funcSite(file string, fn *ast.FuncDecl) string {
	if fn.Recv != nil {
		typ := fn.Recv.List[0].Type
		if star, ok := typ.(*ast.StarExpr); ok {
			typ = star.X
		}
		if id, ok := typ.(*ast.Ident); ok {
			return file + ": " + id.Name + "." + fn.Name.Name
		}
	}
	return file + ": " + fn.Name.Name
}
