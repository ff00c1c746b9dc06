# stagger's tasks. Every target runs from the repository root.
include tools.mk

TOOLS := $(CURDIR)/.tools/bin
export PATH := $(TOOLS):$(PATH)
GO ?= go
FUZZTIME ?= 30s
BENCHCOUNT ?= 10
BENCHTIME ?= 200ms

.PHONY: all test lint proto proto-check tools bench demo fuzz clean

all: lint test

## test: every package, with the race detector (the command README.md and .ci/run give)
test:
	$(GO) test -race -count=1 ./...

## lint: gofmt, go vet, staticcheck, buf lint
lint: $(TOOLS)/staticcheck $(TOOLS)/buf
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	staticcheck ./...
	buf lint

## proto: regenerate the committed Go code from proto/ with the pinned plugins
proto: $(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc
	buf generate

## proto-check: fail when the committed generated code is stale
proto-check: proto
	@git diff --exit-code -- proto || (echo "generated code in proto/ is stale: run 'make proto' and commit"; exit 1)
	@test -z "$$(git status --porcelain -- proto)" || (git status --porcelain -- proto; echo "make proto added files: commit them"; exit 1)

## tools: install the pinned tools into .tools/bin
tools: $(TOOLS)/buf $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc $(TOOLS)/staticcheck $(TOOLS)/benchstat

$(TOOLS)/buf:
	GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(TOOLS)/protoc-gen-go:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(TOOLS)/protoc-gen-go-grpc:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
$(TOOLS)/benchstat:
	GOBIN=$(TOOLS) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

## bench: micro-benchmarks of every package and the side-by-side peers
## (bench_peers_test.go), one package at a time (-p 1: packages benchmarked in
## parallel share the cores), -benchmem, BENCHCOUNT runs of BENCHTIME each; then the
## peers as ratios to "no interceptor" (BENCHMARKS.md says how long it takes)
bench: $(TOOLS)/benchstat
	$(GO) test -p 1 -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) -count=$(BENCHCOUNT) ./... | tee bench.txt
	grep -E '^(goos|goarch|pkg|cpu|BenchmarkPeers)' bench.txt | benchstat -col /impl /dev/stdin

## demo: the storm lab, side by side, for both kinds of outage (~25 s once built)
demo:
	$(GO) run ./cmd/stagger lab -scenario unavailable,refused,refused-wfr

## fuzz: every fuzz target, FUZZTIME each
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list='^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf .tools bench.txt
