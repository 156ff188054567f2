# juice-slurm. `make demo` runs the whole system on a fresh Debian 12 machine; `make test` passes the tests.
# Both need root: they install and start a real Slurm cluster and PostgreSQL (test/testbed.sh).
SHELL := /bin/bash
GO ?= go
GOFLAGS ?=
BIN := bin
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.Version=$(VERSION)
STATICCHECK_VERSION := v0.8.2
# Integration tests that talk to the test bed read its env file; see test/testbed/testbed.go.
export JUICE_TESTBED_ENV ?= /var/tmp/juice-testbed/env
# The test bed's Slurm cluster is one per machine: whatever wires it and runs jobs on it holds this lock, so two
# checkouts never test each other's plugin and hooks. (-o: what the command starts, daemons above all, must not
# inherit the lock; test/testbed.sh closes inherited descriptors too.)
HOST_LOCK := /var/tmp/juice-testbed/host.lock
ON_HOST := mkdir -p $(dir $(HOST_LOCK)) && flock -o $(HOST_LOCK)

.PHONY: all build go-build spank test unit test-go test-smoke test-spank test-e2e test-compat testbed-up testbed-down \
	testbed-wire demo bench chaos chaos-short fuzz lint clean \
	juice-legacy-up juice-legacy-down test-juice-legacy test-juice-legacy-smoke test-juice-legacy-loss

all: build

build: go-build spank

go-build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

spank:
	$(MAKE) -C spank

# Unit tests only: no service needed.
unit:
	$(GO) test -count=1 ./...

# Everything CI runs: the test bed comes up first (installing what is missing), then the C and Go suites
# against the real daemons, the end-to-end suite and a short chaos run on the wired cluster, then the Slurm
# 24.11 and 26.05 compatibility runs.
test: testbed-up build lint test-spank test-go test-smoke test-e2e chaos-short test-compat
	@echo "make test: all suites passed"

test-spank:
	$(MAKE) -C spank test
	$(MAKE) -C spank fuzz-smoke

test-go:
	$(GO) test -race -count=1 -timeout 15m ./...

# The test bed itself: a job through slurmrestd on the real slurmd, and PostgreSQL.
# Every target that runs jobs on the host's cluster holds the host lock and wires this checkout's plugin and hooks
# first: another checkout may have wired its own in between.
test-smoke: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && $(GO) test -count=1 -tags smoke ./test/smoke/'

test-e2e: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && $(GO) test -race -count=1 -timeout 20m -tags e2e ./test/e2e/...'

test-compat: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && bash test/chroot/test-compat.sh'

testbed-up:
	bash test/testbed.sh up

testbed-wire: build
	$(ON_HOST) bash test/testbed.sh wire

testbed-down:
	bash test/testbed.sh down

demo:
	$(ON_HOST) bash test/demo.sh

# The legacy open-source Juice controller as a second counterparty, with JWT validation on, our issuer and our
# agent emulator (test/juicelegacy/README.md). Needs the test bed's PostgreSQL (JUICE_LEGACY_PG_URL to override);
# the tests read /var/tmp/juice-testbed/legacy/env and bring nothing up themselves.
juice-legacy-up:
	bash test/juicelegacy/legacy.sh up

juice-legacy-down:
	bash test/juicelegacy/legacy.sh down

test-juice-legacy-smoke:
	$(GO) test -count=1 -tags legacy -v -run '^TestLegacy' ./test/juicelegacy/

# juice-slurm against the legacy controller (brought up here): its own tests and the juiceapi contract suite
# (which juice-sim passes in test-go), then on the wired cluster the e2e cases that apply to it (srun with 2 GPUs, a
# VRAM slice, cancel while pending, requeue when full) and the short chaos run, with the legacy controller as the
# Juice side.
LEGACY_E2E = ^(TestSrunGetsTwoGPUs|TestSbatchVRAMSliceWritesSessionEnv|TestPendingRequestVisibleAndCancelReleases|TestPoolFullBatchJobIsRequeuedThenServed)$$
test-juice-legacy: build
	bash test/juicelegacy/legacy.sh up
	CI=true $(GO) test -count=1 -tags legacy -run '^(TestLegacy|TestContractLegacy)' ./test/juicelegacy/
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && JUICE_E2E_JUICE=legacy $(GO) test -count=1 -timeout 20m -tags e2e -run "$(LEGACY_E2E)" ./test/e2e/ && $(GO) run ./test/chaos -juice legacy -jobs 60 -kills 4 -rest-outage 15s'

# The agent-loss test waits for the controller's 30 s missing-agent timeout.
test-juice-legacy-loss:
	JUICE_LEGACY_LOSS=1 $(GO) test -count=1 -tags legacy -v -run '^TestLegacyAgentLoss$$' ./test/juicelegacy/

bench: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && bash test/bench.sh'

chaos: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && $(GO) run ./test/chaos -jobs 500 -kills 20 -rest-outage 60s -out test/results/chaos.md'

chaos-short: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && $(GO) run ./test/chaos -jobs 60 -kills 4 -rest-outage 15s'

FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseVRAM$$' -fuzztime $(FUZZTIME) ./reconcile/request/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./reconcile/request/
	$(GO) test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME) ./reconcile/session/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeJobs$$' -fuzztime $(FUZZTIME) ./slurmrest/

lint:
	$(GO) vet -tags e2e,integration,smoke,legacy ./...
	@command -v staticcheck >/dev/null || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	PATH="$$PATH:$$($(GO) env GOPATH)/bin" staticcheck -tags e2e,integration,smoke,legacy ./...

clean:
	rm -rf $(BIN)
	$(MAKE) -C spank clean
