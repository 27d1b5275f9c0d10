# clusterrun: `make demo` runs the demo cluster locally; `make test` runs every test. See README.md.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
STATE := $(CURDIR)/.clusterrun

# Pinned tools, installed into ./bin by `make tools` (skipped when already there).
TEMPORAL_CLI_VERSION := v1.5.1
STATICCHECK_VERSION := v0.8.2
WORKFLOWCHECK_VERSION := v0.6.0
TEMPORAL := $(BIN)/temporal
STATICCHECK := $(BIN)/staticcheck
WORKFLOWCHECK := $(BIN)/workflowcheck

export TEMPORAL_ADDRESS ?= 127.0.0.1:7233
TEST_TIMEOUT ?= 20m

.PHONY: all tools build up down demo test test-race check fmt vet lint bench clean record-histories

all: build

tools: $(TEMPORAL) $(STATICCHECK) $(WORKFLOWCHECK)

$(TEMPORAL):
	@echo "tools: building the temporal CLI $(TEMPORAL_CLI_VERSION) (dev server 1.29.1, Web UI 2.42.1); the first build takes a few minutes"
	GOBIN=$(BIN) $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)

$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(WORKFLOWCHECK):
	GOBIN=$(BIN) $(GO) install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)

build:
	$(GO) build -o $(BIN)/clusterrun ./starter
	$(GO) build -o $(BIN)/clusterrun-worker ./workers
	CGO_ENABLED=0 $(GO) build -ldflags="-s -w" -o $(BIN)/clusterrun-shim ./workers/shim

# The dev server (Web UI on :8233, database in .clusterrun/) and host workers host-a and host-b, in the background.
up: $(TEMPORAL) build
	./deployments/dev/up.sh

down:
	./deployments/dev/down.sh

demo: up
	$(BIN)/clusterrun run examples/demo.yaml
	@echo "The dev server keeps running (Web UI: http://localhost:8233); stop it with: make down"

# Every test: unit, workflow (testsuite), process control on real processes, and end to end against a real
# dev server with several host worker processes (tests/ starts and stops its own server on free ports).
# The fault tests run in parallel, each with a server of its own: -parallel lets them overlap on 2 cores.
TEST_PARALLEL ?= 6
test: $(TEMPORAL) build
	$(GO) test -count=1 -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) ./...

test-race: $(TEMPORAL) build
	$(GO) test -race -count=1 -parallel $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) ./...

# Runs the end-to-end suite and saves the history of every run it made under workflows/testdata/histories/$(HISTORIES),
# where workflows/replay_test.go replays them: a later workflow change that would wedge runs in flight fails it.
HISTORIES ?= next
record-histories: $(TEMPORAL) build
	rm -rf workflows/testdata/histories/$(HISTORIES)
	CLUSTERRUN_RECORD_HISTORIES=$(CURDIR)/workflows/testdata/histories/$(HISTORIES) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./tests/

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

lint: $(STATICCHECK) $(WORKFLOWCHECK)
	$(STATICCHECK) ./...
	$(WORKFLOWCHECK) ./workflows/...

# The one gate: format, vet, static checks, workflow determinism checks, race-enabled tests.
check: fmt vet lint test-race

# Benchmarks side by side with Slurm's srun; see docs/benchmarks.md. Needs root for the Slurm setup.
bench: $(TEMPORAL) build
	./tests/bench/run.sh

clean:
	rm -rf $(BIN)/clusterrun $(BIN)/clusterrun-worker $(BIN)/clusterrun-shim
