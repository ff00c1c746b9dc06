# stagger's tasks. Every target runs from the repository root.
include tools.mk

TOOLS := $(CURDIR)/.tools/bin
export PATH := $(TOOLS):$(PATH)
GO ?= go
FUZZTIME ?= 30s
BENCHCOUNT ?= 10
BENCHTIME ?= 200ms

# The modules: the core (.), with the stagger command, and the nested ones
# go.work joins (the lab and its command stagger-lab, which need today's
# grpc-go and peers; the Redis store, which
# needs go-redis and a redis-server on PATH for its tests; the OpenTelemetry
# adapter; the connect-go front end; grpc-go's interop cases run through
# stagger, which import grpc-go's interop package). In workspace mode
# ./... stops at a nested module's go.mod, so PKGS names each module's tree.
MODULES := . lab server/redisstore otel soak connect interop
PKGS := ./... ./lab/... ./server/redisstore/... ./otel/... ./soak/... ./connect/... ./interop/...
# The modules whose versions make a lane, printed with it.
LANE_DEPS := google.golang.org/grpc google.golang.org/protobuf github.com/grpc-ecosystem/go-grpc-middleware/v2
lane_versions = $$($(1) $(GO) list -m -f '{{.Path}} {{.Version}}' $(LANE_DEPS) | paste -sd, - | sed 's/,/, /g')

.PHONY: all test conformance soak test-oldest test-newest test-realtime lint tidy-check proto proto-check tools bench demo lab-plot lab-figures fuzz fuzz-ci clean api-check api-check-selftest api-baseline install-check

all: lint test

## The test targets run on TEST_TOOLCHAIN (Go 1.27.4), which the go command
## fetches once from the module proxy (GOTOOLCHAIN). Go 1.26's race detector
## crashes the process (SIGSEGV in __tsan::SlotLock, or "ThreadSanitizer:
## CHECK failed: tsan_rtl.cpp:346") when two goroutines of one
## testing/synctest bubble start timers that are due at once: the runtime runs
## such a timer at once on the calling thread with the bubble's one race
## context (runtime/time.go, timer.modify), so two threads share it. bufconn
## makes two per dial (time.AfterFunc(0, ...)), so a bubble whose connections
## (re)connect together (the lab's) crashed the lab's tests one run in three
## under load. Go 1.27.4 runs the same tests clean; go1.26.11 still crashes.
## Where the toolchain cannot be fetched, the installed Go runs the tests,
## with a warning.
TEST_TOOLCHAIN ?= go1.27.4
TESTGO = $(shell if GOTOOLCHAIN=$(TEST_TOOLCHAIN) $(GO) version >/dev/null 2>&1; then echo "GOTOOLCHAIN=$(TEST_TOOLCHAIN) $(GO)"; else echo "warning: $(TEST_TOOLCHAIN) could not be fetched; testing on $$($(GO) env GOVERSION), whose race detector can crash in synctest bubbles" >&2; echo "$(GO)"; fi)

## test: every package with the race detector, on both ends of the supported
## range (the command README.md and .ci/run give): test-oldest, then test-newest
test: test-oldest test-newest

## test-oldest: the core module alone (GOWORK=off), on the oldest grpc-go and
## protobuf its go.mod requires, as a user who adopts it without upgrading;
## then grpc-go's interop cases (interop/, GOWORK=off: the same oldest grpc-go)
test-oldest:
	@echo "== lane oldest (GOWORK=off, core module): $(call lane_versions,GOWORK=off)"
	GOWORK=off $(TESTGO) test -race -count=1 ./...
	cd interop && GOWORK=off $(TESTGO) test -race -count=1 ./...

## test-newest: every module of the workspace (go.work), on the newest
## releases the nested modules require (today's grpc-go and peers); the
## interop cases without the race detector here (the oldest lane runs them
## under it: 96 s against 6 s, and the engine's code is the same); not the
## core's packages whose tests link no module the lanes take at different
## versions (.ci/lane-free: budget, breaker, ...), which build the same in
## both lanes: test-oldest runs them
test-newest:
	@echo "== lane newest (go.work, every module): $(call lane_versions,)"
	@free=$$(GO="$(TESTGO)" .ci/lane-free); echo "left to lane oldest, built alike in both:" $$free; \
	core=$$($(TESTGO) list ./... | grep -vxF "$$free"); \
	echo $(TESTGO) test -race -count=1 '<the core but those>' $(filter-out ./... ./interop/...,$(PKGS)); \
	$(TESTGO) test -race -count=1 $$core $(filter-out ./... ./interop/...,$(PKGS))
	$(TESTGO) test -count=1 ./interop/...

## test-realtime: the real-time lane (the TestRealTime tests, and the real-time port of
## go-grpc-middleware's per-retry-timeout tests, of the test/ and
## server packages: loopback TCP, real time, many calls at once per run), in both lanes: RT_COUNT runs at
## -cpu=1,2, then RT_HOG_COUNT runs at -cpu=1 beside a CPU hog (three busy loops),
## one package at a time (-p 1: the hog is the load, not the other package).
## CI keeps the counts low enough for .ci/run to stay under 15 minutes; hunt
## a rare race with more (RT_COUNT=10 RT_HOG_COUNT=8: about 20 minutes)
RT_COUNT ?= 4
RT_HOG_COUNT ?= 2
RT_RUN = -race -run '^TestRealTime|^TestMiddlewarePerRetryTimeoutPortRealTime$$' -count=$(RT_COUNT)
RT_HOG_RUN = -race -run '^TestRealTime|^TestMiddlewarePerRetryTimeoutPortRealTime$$' -count=$(RT_HOG_COUNT)
test-realtime:
	@echo "== real-time lane, oldest: $(call lane_versions,GOWORK=off)"
	GOWORK=off $(TESTGO) test $(RT_RUN) -cpu=1,2 ./test ./server
	@echo "== real-time lane, newest: $(call lane_versions,)"
	$(TESTGO) test $(RT_RUN) -cpu=1,2 ./test ./server
	@echo "== real-time lane beside a CPU hog, oldest then newest"
	@hogs=""; for i in 1 2 3; do sh -c 'while :; do :; done' & hogs="$$hogs $$!"; done; \
	trap 'kill $$hogs' EXIT; \
	GOWORK=off $(TESTGO) test -p 1 $(RT_HOG_RUN) -cpu=1 ./test ./server && $(TESTGO) test -p 1 $(RT_HOG_RUN) -cpu=1 ./test ./server

## conformance: the Connect conformance suite (connectconformance
## $(CONNECTCONFORMANCE_VERSION), client mode, its whole default suite: 4,618
## cases) through connect/internal/conformance's client, with the race
## detector: without stagger, then with every code retried, then hedged;
## each case must end as it expects, a retry or hedge the only difference
## (TestConformanceSuite says how it is judged; about 2 minutes).
## CONFORMANCE_RUNS=30 runs it 30 times (a flake one run in 30 shows in
## one of them), each run to the end, then says how many passed and fails
## if any failed; CONFORMANCE_HALF=hedge (or retry, or without_stagger)
## runs that half only (about 45 s a run). CI runs it once, whole.
CONFORMANCE_RUNS ?= 1
CONFORMANCE_HALF ?=
conformance: $(TOOLS)/connectconformance
	@passed=0; for i in $$(seq 1 $(CONFORMANCE_RUNS)); do \
		echo "== conformance run $$i of $(CONFORMANCE_RUNS)"; \
		CONNECTCONFORMANCE=$(TOOLS)/connectconformance $(TESTGO) test -race -count=1 -timeout 20m -v \
			-run '^TestConformanceSuite$$$(if $(CONFORMANCE_HALF),/^$(CONFORMANCE_HALF)$$)' ./connect/internal/conformance/ \
			&& passed=$$((passed + 1)); \
	done; \
	echo "== conformance: $$passed of $(CONFORMANCE_RUNS) runs passed"; \
	test $$passed -eq $(CONFORMANCE_RUNS)

## tidy-check: every module's go.mod and go.sum are tidy
tidy-check:
	@for m in $(MODULES); do (cd $$m && $(GO) mod tidy -diff) || { echo "go.mod or go.sum of module $$m is not tidy: run 'go mod tidy' in $$m"; exit 1; }; done

## lint: gofmt, go vet and staticcheck (both lanes), buf lint
lint: $(TOOLS)/staticcheck $(TOOLS)/buf
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	GOWORK=off $(GO) vet ./...
	$(GO) vet $(PKGS)
	GOWORK=off staticcheck ./...
	staticcheck $(PKGS)
	buf lint

## api-check: the exported Go API of every module with one (the core, otel,
## server/redisstore; each alone, GOWORK=off) against the last release's,
## recorded in api/: fails on an incompatible change that the Unreleased
## section of CHANGELOG.md does not name under "### Breaking"; additions pass
## (README.md, "Stability"; internal/apicheck says how changes are named)
api-check: $(TOOLS)/apidiff
	GOWORK=off $(GO) run ./internal/apicheck -apidiff $(TOOLS)/apidiff

## api-check-selftest: the check on a copy of the core module fails on an
## exported function removed, passes once CHANGELOG.md lists it, passes an addition
api-check-selftest: $(TOOLS)/apidiff
	PATH="$(TOOLS):$$PATH" APICHECK_SELFTEST=1 GOWORK=off $(GO) test -count=1 -run '^TestCheckFailsOnIncompatibleChange$$' ./internal/apicheck/

## install-check: the stagger command builds as a user builds it, with only
## the core module published: `go install .../cmd/stagger@VERSION` outside the
## repository, and go build in a scratch module that requires the core, the
## core served from a module proxy on disk (TestInstallFromCoreOnly; ~20 s)
install-check:
	STAGGER_INSTALL_CHECK=1 $(TESTGO) test -count=1 -run '^TestInstallFromCoreOnly$$' ./cmd/stagger/

## api-baseline: at a release, RELEASE=vX.Y.Z: record the exported API of the
## working tree in api/ (commit it with the release, and move CHANGELOG.md's
## Unreleased entries under the release's heading in the same commit)
api-baseline: $(TOOLS)/apidiff
	@test -n "$(RELEASE)" || { echo "usage: make api-baseline RELEASE=vX.Y.Z"; exit 2; }
	GOWORK=off $(GO) run ./internal/apicheck -apidiff $(TOOLS)/apidiff -write -version $(RELEASE)

## proto: regenerate the committed Go code from proto/ with the pinned plugins;
## the Connect code of the test service goes into the connect module
## (connect/buf.gen.yaml), whose dependency the core module must not require;
## the Connect conformance protocol's code into its client
## (connect/internal/conformance/buf.gen.yaml)
GENERATED := proto connect/internal/proto connect/internal/conformance/gen
proto: $(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/protoc-gen-connect-go
	buf generate
	buf generate --template connect/buf.gen.yaml
	buf generate --template connect/internal/conformance/buf.gen.yaml

## proto-check: fail when the committed generated code is stale
proto-check: proto
	@git diff --exit-code -- $(GENERATED) || (echo "generated code is stale: run 'make proto' and commit"; exit 1)
	@test -z "$$(git status --porcelain -- $(GENERATED))" || (git status --porcelain -- $(GENERATED); echo "make proto added files: commit them"; exit 1)

## tools: install the pinned tools into .tools/bin
tools: $(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/protoc-gen-connect-go $(TOOLS)/staticcheck $(TOOLS)/benchstat $(TOOLS)/apidiff $(TOOLS)/connectconformance

$(TOOLS)/buf:
	GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(TOOLS)/protoc-gen-go:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(TOOLS)/protoc-gen-go-grpc:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(TOOLS)/protoc-gen-connect-go:
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
$(TOOLS)/benchstat:
	GOBIN=$(TOOLS) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)
$(TOOLS)/apidiff:
	GOBIN=$(TOOLS) $(GO) install golang.org/x/exp/cmd/apidiff@$(APIDIFF_VERSION)
$(TOOLS)/connectconformance:
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/conformance/cmd/connectconformance@$(CONNECTCONFORMANCE_VERSION)

## bench: micro-benchmarks of every package and the side-by-side peers
## (lab/peers_bench_test.go), one package at a time (-p 1: packages benchmarked in
## parallel share the cores), -benchmem, BENCHCOUNT runs of BENCHTIME each; then the
## peers as ratios to "no interceptor" (BENCHMARKS.md says how long it takes).
## bench.txt opens with the peers' versions, as benchstat configuration lines.
bench: $(TOOLS)/benchstat
	$(GO) list -m -f '{{.Path}}: {{.Version}}' $(LANE_DEPS) github.com/failsafe-go/failsafe-go | tee bench.txt
	$(GO) test -p 1 -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) -count=$(BENCHCOUNT) $(PKGS) | tee -a bench.txt
	grep -E '^(goos|goarch|pkg|cpu|[a-z./-]+/[a-z0-9./-]+:|BenchmarkPeers)' bench.txt | benchstat -col /impl /dev/stdin

## demo: the storm lab, side by side, for both kinds of outage and an outage that
## outlives the calls' deadlines (~1 min once built)
demo:
	$(GO) run ./lab/cmd/stagger-lab -scenario unavailable,refused,refused-wfr,long-outage

## soak: stagger under random faults for SOAK_TIME (soak/: three replicas with
## the server side and both idempotency stores, seven client processes, a
## seeded fault injector), with the race detector, which halts at the first
## race (SOAK_GORACE=halt_on_error=0 reports every race and runs on);
## SOAK_SEED replays a seed (the run prints its own). It ends with one
## summary line and fails when an invariant broke (soak/doc.go lists them).
## SOAK_CPU (GOMAXPROCS; twice the CPUs by default): with more Ps than CPUs
## the system preempts a goroutine between any two instructions, for a
## time slice, which opens the windows of races between real events; at
## GOMAXPROCS=2 on 2 CPUs the soak did not find the Gate's Leave/eviction
## race (issue 38) in 2 x 5 min of seed 2, at 4 in 33 s (seed 2) and 12 s (3).
SOAK_TIME ?= 10m
SOAK_SEED ?=
SOAK_TIMEOUT ?= 3h
SOAK_GORACE ?= halt_on_error=1
SOAK_CPU ?= $(shell echo $$((2 * $$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2))))
soak:
	GORACE=$(SOAK_GORACE) SOAK_TIME=$(SOAK_TIME) SOAK_SEED=$(SOAK_SEED) $(TESTGO) test -race -v -count=1 -cpu $(SOAK_CPU) -timeout $(SOAK_TIMEOUT) -run '^TestSoak$$' ./soak/

## lab-plot: regenerate docs/metastable.svg, the picture README.md shows, and
## docs/long-outage.svg: the metastable and long-outage scenarios at their
## defaults, every contender, on virtual time (a synctest bubble:
## lab/figures_test.go), so that the pictures show the retry layers and not the
## machine (~2 min)
lab-plot:
	LAB_FIGURES=$$(mktemp) LAB_FIGURES_RUNS=1 LAB_FIGURES_SCENARIOS=metastable,long-outage LAB_FIGURES_PLOT=$(CURDIR)/docs \
	  $(TESTGO) test -count=1 -run '^TestLabFigures$$' ./lab/

## lab-figures: BENCHMARKS.md's lab tables: every bufconn scenario at its
## defaults, and long-outage at every outage length of LAB_SWEEP (lab.OutageSweep),
## LAB_RUNS runs each on virtual time, medians and spreads in lab-figures.md
## (~10 min)
LAB_RUNS ?= 3
LAB_SWEEP ?= 0.5s,2s,5s,20s
lab-figures:
	LAB_FIGURES=$(CURDIR)/lab-figures.md LAB_FIGURES_RUNS=$(LAB_RUNS) LAB_FIGURES_SWEEP=$(LAB_SWEEP) $(TESTGO) test -count=1 -timeout 60m -run '^TestLabFigures$$' ./lab/

## fuzz: every fuzz target of FUZZ_PKGS (every package) whose name matches
## FUZZ_MATCH (every one), FUZZTIME each; a target's seed corpus is its
## f.Add calls and testdata/fuzz/<target>/ in its package
FUZZ_PKGS ?= $(PKGS)
FUZZ_MATCH ?= ^Fuzz
fuzz:
	@for pkg in $$($(GO) list $(FUZZ_PKGS)); do \
	  for f in $$($(GO) test -list='$(FUZZ_MATCH)' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## fuzz-ci: what CI fuzzes, FUZZ_CI_TIME (20s) each: the policy-file parser
## (FuzzParseConfig: hostile files) and Decide with hostile metadata
## (FuzzDecide: any status code, pushback trailers, RetryInfo bytes), from
## their corpora in policy/testdata/fuzz; about 45 s, plus the fuzzing build
## on a cold cache (about a minute on two loaded cores)
FUZZ_CI_TIME ?= 20s
fuzz-ci:
	@$(MAKE) --no-print-directory fuzz FUZZ_PKGS=./policy FUZZ_MATCH='^Fuzz(ParseConfig|Decide)' FUZZTIME=$(FUZZ_CI_TIME)

clean:
	rm -rf .tools bench.txt
