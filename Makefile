# juice-slurm. `make demo` runs the whole system on a fresh Debian 12 machine; `make test` passes the tests.
# Both need root: they install and start a real Slurm cluster and PostgreSQL (test/testbed.sh).
SHELL := /bin/bash
GO ?= go
GOFLAGS ?=
BIN := bin
# The version of every artefact: the binaries, the plugin, the man page and the packages.
VERSION ?= $(shell cat VERSION)
LDFLAGS := -X main.Version=$(VERSION)
STATICCHECK_VERSION := v0.8.2
# Integration tests that talk to the test bed read its env file; see test/testbed/testbed.go.
export JUICE_TESTBED_ENV ?= /var/tmp/juice-testbed/env
# The test bed's Slurm cluster is one per machine: whatever wires it and runs jobs on it holds this lock, so two
# checkouts never test each other's plugin and hooks. (-o: what the command starts, daemons above all, must not
# inherit the lock; test/testbed.sh closes inherited descriptors too.)
HOST_LOCK := /var/tmp/juice-testbed/host.lock
ON_HOST := mkdir -p $(dir $(HOST_LOCK)) && flock -o $(HOST_LOCK)

.PHONY: all build go-build spank install package test-package demo-installed test-bare bench-p5-large test-failover chaos-failover chaos-slurm-failover test-upgrade chaos-upgrade test unit test-go test-smoke test-spank test-e2e test-security test-compat test-releases test-token-renewal testbed-up testbed-down \
	testbed-wire demo bench bench-licenses bench-scale chaos chaos-short soak fuzz lint clean \
	juice-legacy-up juice-legacy-down test-juice-legacy chaos-legacy test-juice-legacy-smoke test-juice-legacy-loss

all: build

build: go-build spank

# juice-slurm-hook is linked statically (CGO_ENABLED=0: the pure-Go resolver): slurmctld execs it for every job,
# and the dynamic loader's relocations and libc cost about 2 ms of each start on 2 cores (issue 14, P1).
go-build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ $(filter-out ./cmd/juice-slurm-hook,$(wildcard ./cmd/*))
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/juice-slurm-hook

spank:
	$(MAKE) -C spank VERSION=$(VERSION)

# make install [PREFIX=/usr/local] [DESTDIR=] [SYSCONFDIR=/etc]: the binaries, the plugin and the hooks in
# $(LIBDIR), juice-slurm in $(PREFIX)/bin, the units and their generator, the man pages (juice-slurm(1) for users,
# juice-slurm(8)), the docs, the examples and the monitoring files; the settings file, /etc/default/juice-slurm
# (SLURM_USER) and the logrotate file only when there is none. Paths inside the installed files follow PREFIX. Then,
# as root, $(LIBDIR)/juice-slurm-setup makes the state and log directories and sets the owners (the packages run it
# themselves).
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
LIBDIR := $(PREFIX)/lib/juice-slurm
DATADIR := $(PREFIX)/share/juice-slurm
DOCDIR := $(PREFIX)/share/doc/juice-slurm
UNITDIR ?= $(PREFIX)/lib/systemd/system
GENERATORDIR ?= $(PREFIX)/lib/systemd/system-generators
MANDIR := $(PREFIX)/share/man
# Files that name the install directory: /usr/local/lib/juice-slurm in the tree.
SUBST := sed -e 's\#/usr/local/lib/juice-slurm\#$(LIBDIR)\#g' -e 's\#/usr/share/doc/juice-slurm\#$(DOCDIR)\#g'
install: build
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(DATADIR)/examples $(DESTDIR)$(DATADIR)/monitoring \
		$(DESTDIR)$(DOCDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(GENERATORDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 \
		$(DESTDIR)$(SYSCONFDIR)/juice-slurm $(DESTDIR)$(SYSCONFDIR)/default $(DESTDIR)$(SYSCONFDIR)/logrotate.d
	install -m 0755 $(BIN)/juice-slurm $(BIN)/juice-slurm-hook $(BIN)/juice-sim $(DESTDIR)$(LIBDIR)/
	install -m 0755 spank/build/spank_juice.so $(DESTDIR)$(LIBDIR)/
	install -m 0755 hooks/juice-prolog.sh hooks/juice-epilog.sh deploy/juice-slurm-token-renew deploy/juice-slurm-setup \
		$(DESTDIR)$(LIBDIR)/
	$(SUBST) deploy/juice-slurm-generator >$(DESTDIR)$(GENERATORDIR)/juice-slurm-generator && \
		chmod 0755 $(DESTDIR)$(GENERATORDIR)/juice-slurm-generator
	$(SUBST) hooks/slurmctld-parts.sh >$(DESTDIR)$(LIBDIR)/slurmctld-parts.sh && chmod 0755 $(DESTDIR)$(LIBDIR)/slurmctld-parts.sh
	ln -sfn ../lib/juice-slurm/juice-slurm $(DESTDIR)$(PREFIX)/bin/juice-slurm
	install -m 0644 hooks/job_submit.lua hooks/juice_submit.lua $(DESTDIR)$(DATADIR)/
	for f in hooks/juice-config.sh deploy/juice-policy.conf deploy/juice-slurm.conf deploy/slurm.conf.juice \
		deploy/plugstack.conf.d-juice.conf; do $(SUBST) $$f >$(DESTDIR)$(DATADIR)/examples/$$(basename $$f); done
	install -m 0755 deploy/make-secrets.sh deploy/make-hook-cert.sh $(DESTDIR)$(DATADIR)/
	install -m 0644 deploy/monitoring/*.yml deploy/monitoring/*.json deploy/monitoring/README.md $(DESTDIR)$(DATADIR)/monitoring/
	for u in deploy/*.service deploy/*.timer; do $(SUBST) $$u >$(DESTDIR)$(UNITDIR)/$$(basename $$u); done
	for s in 1 8; do sed -e 's/^\.TH JUICE-SLURM '$$s' "\([^"]*\)" "juice-slurm [^"]*"/.TH JUICE-SLURM '$$s' "\1" "juice-slurm $(VERSION)"/' \
		docs/juice-slurm.$$s | gzip -9n >$(DESTDIR)$(MANDIR)/man$$s/juice-slurm.$$s.gz; done
	install -m 0644 README.md CHANGELOG.md LICENSE docs/*.md $(DESTDIR)$(DOCDIR)/
	[ -e $(DESTDIR)$(SYSCONFDIR)/juice-slurm/juice-slurm.conf ] || \
		install -m 0640 deploy/juice-slurm.conf $(DESTDIR)$(SYSCONFDIR)/juice-slurm/juice-slurm.conf
	[ -e $(DESTDIR)$(SYSCONFDIR)/default/juice-slurm ] || \
		install -m 0644 deploy/juice-slurm.default $(DESTDIR)$(SYSCONFDIR)/default/juice-slurm
	[ -e $(DESTDIR)$(SYSCONFDIR)/logrotate.d/juice-slurm ] || \
		install -m 0644 deploy/juice-slurm.logrotate $(DESTDIR)$(SYSCONFDIR)/logrotate.d/juice-slurm

# Packages, built by nfpm (a Go tool, pinned here and installed outside our go.mod) from `make install` into a
# staging tree: build/juice-slurm_$(VERSION)-1_amd64.deb and build/juice-slurm-$(VERSION)-1.x86_64.rpm. The plugin
# is built against this host's spank.h: build the packages on the Slurm release they are for. They depend on that
# release (slurmd loads no plugin of another one): SLURM_RELEASE, e.g. 22.05 from slurm_version.h's
# SLURM_VERSION_NUMBER 0x160508, up to SLURM_NEXT (22.06) excluded.
NFPM_VERSION := v2.48.0
TOOLS := /var/tmp/juice-tools
NFPM ?= $(TOOLS)/nfpm-$(NFPM_VERSION)
PKGROOT := build/pkgroot
$(NFPM):
	mkdir -p $(TOOLS)/bin
	cd / && GOBIN=$(TOOLS)/bin GOFLAGS= $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
	mv $(TOOLS)/bin/nfpm $@

SLURM_INCLUDE ?= /usr/include
SLURM_VERSION_NUMBER = $(shell sed -n 's/^\#define SLURM_VERSION_NUMBER \(0x[0-9a-fA-F]*\)$$/\1/p' $(SLURM_INCLUDE)/slurm/slurm_version.h)
SLURM_RELEASE = $(shell v=$(SLURM_VERSION_NUMBER); printf '%d.%02d' $$((v >> 16)) $$(((v >> 8) & 255)))
SLURM_NEXT = $(shell v=$(SLURM_VERSION_NUMBER); printf '%d.%02d' $$((v >> 16)) $$((((v >> 8) & 255) + 1)))
package: build $(NFPM)
	@[ -n "$(SLURM_VERSION_NUMBER)" ] || { echo "package: no SLURM_VERSION_NUMBER in $(SLURM_INCLUDE)/slurm/slurm_version.h" >&2; exit 1; }
	rm -rf $(PKGROOT) && mkdir -p build
	$(MAKE) --no-print-directory install DESTDIR=$(CURDIR)/$(PKGROOT) PREFIX=/usr UNITDIR=/usr/lib/systemd/system \
		GENERATORDIR=/usr/lib/systemd/system-generators
	rm -f build/juice-slurm_$(VERSION)-1_amd64.deb build/juice-slurm-$(VERSION)-1.x86_64.rpm
	for p in deb rpm; do VERSION=$(VERSION) SLURM_RELEASE=$(SLURM_RELEASE) SLURM_NEXT=$(SLURM_NEXT) \
		$(NFPM) package --config deploy/nfpm.yaml --packager $$p --target build/ || exit; done

# The package test/package/check.sh upgrades from: the one built at PACKAGE_PREV_REF (the last commit whose
# package had no maintainer scripts), as version PACKAGE_PREV_VERSION. Needs the git history.
PACKAGE_PREV_REF := 404f1dbecb043d8453d31ddcfd99fded22f9dfe2
PACKAGE_PREV_VERSION := 0.8.99
PREV_DEB := build/prev/juice-slurm_$(PACKAGE_PREV_VERSION)-1_amd64.deb
$(PREV_DEB):
	@git cat-file -e $(PACKAGE_PREV_REF)^{commit} 2>/dev/null || \
		{ echo "test-package: the package to upgrade from is built from commit $(PACKAGE_PREV_REF): not here" >&2; exit 1; }
	rm -rf build/prev && mkdir -p build/prev/src
	git archive $(PACKAGE_PREV_REF) | tar -x -C build/prev/src
	$(MAKE) --no-print-directory -C build/prev/src package VERSION=$(PACKAGE_PREV_VERSION)
	cp build/prev/src/$(@:build/prev/%=build/%) $@ && rm -rf build/prev/src

# Builds both packages, checks what they hold, then on this host (holding the host lock) installs the previous
# package, upgrades it to this one, reconfigures it for another SlurmUser, removes it, purges it and installs it
# again, checking the directories, owners, modes and settings at each step (test/package/check.sh). The .deb is
# left installed: make demo-installed runs from it.
test-package: package $(PREV_DEB)
	$(ON_HOST) bash test/package/check.sh $(VERSION) build/juice-slurm_$(VERSION)-1_amd64.deb \
		build/juice-slurm-$(VERSION)-1.x86_64.rpm $(PREV_DEB)

# Unit tests only: no service needed.
unit:
	$(GO) test -count=1 ./...

# Everything CI runs: the test bed comes up first (installing what is missing), then the C and Go suites
# against the real daemons, the end-to-end suite and a short chaos run on each Slurm release's fully wired
# cluster (22.05 on the host, 24.11 and 26.05 in chroots), the security suite (on the host), the legacy Juice
# controller as the Juice side (on the host), then the REST compatibility runs; last, the packages are built and
# checked, the .deb installed, and the demo run from the installed files (issue 13's acceptance, and the README's
# first command: the demo fails on any step that does not do what it shows); then the README's first command again,
# from a Debian 12 root that has none of what it installs (test-bare: a missing or racing install step fails here,
# though this machine kept what earlier runs installed).
test: testbed-up build lint test-spank test-go test-smoke test-replicas test-upgrade test-failover test-releases test-security test-juice-legacy test-compat test-package demo-installed test-bare
	@echo "make test: all suites passed"

# make demo from a bare Debian 12 root (test/bare/bare.sh): its own network namespace, so the host's test bed runs on.
test-bare:
	bash test/bare/bare.sh

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

# The controller on hosts of its own (docs/admin.md section 7): two replicas as SlurmUser, each in a network namespace
# of its own reaching the bed's services over a bridge, a certificate naming both, the hooks calling both over TLS,
# the leader killed between two sruns and while a prolog waits (test/replicas, issue 25 item 3).
test-replicas: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && bash test/testbed.sh services && bash test/replicas/replicas.sh'

# Upgrades with live jobs (issue 25 item 1, test/upgrade): a release of the history installed as it was (its
# binary, settings and schema, two replicas, its hooks and job_submit.lua), jobs in every state (ended, running,
# waiting in their prologs, pending, reserved ahead while pending, a request and a release in flight), then this
# checkout's migrate, a rolling restart of the replicas, the hooks and job_submit.lua, as docs/admin.md section 8
# orders them; every job completes, none requeued, no session lost, doubled or left.
# make test: from the first release and from the last one of the schema before this one (16 runs each);
# make chaos-upgrade (in make chaos): from the last release of every schema, 200 runs each.
test-upgrade: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && bash test/testbed.sh services && bash test/upgrade/run.sh short'

UPGRADE_OUT ?= test/results/upgrade.md
chaos-upgrade: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && bash test/testbed.sh services && UPGRADE_OUT=$(UPGRADE_OUT) bash test/upgrade/run.sh long'

# PostgreSQL that fails over: a primary and a streaming standby of their own (test/pgpair.sh, ports 5441/5442),
# a multi-host URL with target_session_attrs=read-write, and the standby promoted in the middle of a run of jobs
# (test/failover). FAILOVER_OUT=test/results/failover.md keeps the figures.
test-failover:
	bash test/pgpair.sh up
	JUICE_FAILOVER_RESULT=$(FAILOVER_OUT) $(GO) test -race -count=1 -tags failover -v -run '^TestPromoteTheStandbyMidRun$$' ./test/failover/ \
		| grep -v '^    [a-z_]*\.go:[0-9]*: [a-z]*: "' ; rc=$${PIPESTATUS[0]}; bash test/pgpair.sh down; exit $$rc

test-e2e: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && $(GO) test -race -count=1 -timeout 20m -tags e2e ./test/e2e/...'

# Issue 15's findings replayed (docs/security.md): on the wired test bed as the user nobody, with a libslurm
# submitter the suite builds (F1, F2, F9, F10, F11), then the cases that need no cluster (F3 to F14).
SECURITY_UNIT := TestRequestOverThePolicyFailsAtOnce|TestRequestTheClientRefusesNeverStaysInReleasing|TestIdleConnectionFloodDoesNotStopAnotherUsersProlog|TestWaitsPerPeerAreCapped|TestPoolLabelsOnlyForKnownPools|TestHookSendsTheSecretOnlyToThePinnedController|TestHookLogIsPrivateAndUnforgeable|TestServerAndClientTLS|TestCheckRedirectKeepsTokensHome|TestRuntimeRoleHasNoDDL|TestSchemaVersion|TestMigrateAndTheControllersSchemaCheck|TestVectors|TestOfNamesTheLocalUser|TestHookURLListSkipsAReplicaThatIsDown|TestLookaheadIsFairPerUser|TestSessionVectors|TestKeyFile|TestKeyRotation|TestPrologOutcomes|TestSweepFilesRemovesWhatNoReadyReservationOwns|TestSessionFileGoesWithItsReadySession|TestStateDirRemoveKeepsANewerFile
test-security: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && JUICE_E2E_SECURITY=1 $(GO) test -count=1 -timeout 15m -tags e2e -run '"'"'^TestSecurity'"'"' ./test/e2e/'
	$(GO) test -count=1 -run '^($(SECURITY_UNIT))$$' ./controller/... ./cmd/juice-slurm/ ./internal/... ./reconcile/...
	$(MAKE) -C spank test
	sh deploy/make-secrets.test.sh $(CURDIR)/$(BIN)/juice-slurm

test-compat: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && bash test/chroot/test-compat.sh'

# The e2e suite and chaos-short on every release (RELEASES="22.05 24.11 26.05" by default), each on its own wired
# cluster; test/releases.sh takes each cluster's lock itself (the host's is HOST_LOCK).
RELEASES ?= 22.05 24.11 26.05
test-releases: build
	bash test/releases.sh $(RELEASES)

# The slurmrestd token renewed under a running controller (deploy/juice-slurm-token-renew): the 24.11 and 26.05
# clusters with a 2-minute token renewed every 40 s, 10 minutes of jobs on each side by side, no failed poll
# (about 11 minutes; not in make test).
RENEWAL_RELEASES ?= 24.11 26.05
test-token-renewal: build
	TOKEN_RENEWAL=1 bash test/releases.sh $(RENEWAL_RELEASES)

testbed-up:
	bash test/testbed.sh up

testbed-wire: build
	$(ON_HOST) bash test/testbed.sh wire

testbed-down:
	bash test/testbed.sh down

# make demo SLURM=24.11 or SLURM=26.05: the same demo on that release's chroot cluster (test/chroot/), under its lock.
SLURM ?= 22.05
DEMO_LOCK = $(if $(filter 22.05,$(SLURM)),$(ON_HOST),flock -o $(dir $(HOST_LOCK))chroot-$(if $(filter 24.11,$(SLURM)),trixie,sid).lock)
demo:
	$(DEMO_LOCK) env SLURM=$(SLURM) bash test/demo.sh

# The demo from the installed .deb (make test-package installs it): the plugin, hooks, job_submit.lua, settings
# examples, controller and juice-sim all from /usr/lib/juice-slurm and /usr/share/juice-slurm.
demo-installed:
	$(ON_HOST) env JUICE_TESTBED_INSTALLED=/usr bash test/demo.sh

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
# Juice side. All of it under the host lock, starting from a fresh legacy controller: it exits when PostgreSQL,
# which it shares with the test bed, is restarted (a chaos run does that), and its agents exit with it.
# The chaos run gets a fresh legacy database and agents-chaos.json: agents that read whole answers
# (the real agent exits once its state passes 4 KB, about 8 sessions stacked on one agent) and have room for the
# VRAM the legacy controller never gives back.
LEGACY_E2E = ^(TestHandoffPassesTheSessionAlongAnArray|TestHandoffNeverCrossesUsersOrAccounts|TestSrunGetsTwoGPUs|TestSbatchVRAMSliceWritesSessionEnv|TestPendingRequestVisibleAndCancelReleases|TestPoolFullBatchJobWaitsForItsLicense)$$
test-juice-legacy: build
	$(ON_HOST) sh -c 'set -e; L=test/juicelegacy/legacy.sh; bash $$L down; bash $$L up; \
		CI=true $(GO) test -count=1 -tags legacy -run "^(TestLegacy|TestContractLegacy)" ./test/juicelegacy/; \
		bash test/testbed.sh wire; \
		JUICE_E2E_JUICE=legacy $(GO) test -count=1 -timeout 20m -tags e2e -run "$(LEGACY_E2E)" ./test/e2e/; \
		bash $$L down; JUICE_LEGACY_AGENTS=$(CURDIR)/test/juicelegacy/agents-chaos.json bash $$L up; \
		$(GO) run ./test/chaos -juice legacy -jobs 60 -kills 4 -rest-outage 15s; \
		bash $$L down; bash $$L up'

# The full chaos run with the legacy controller as the Juice side (as make chaos with juice-sim).
chaos-legacy: build
	$(ON_HOST) sh -c 'set -e; L=test/juicelegacy/legacy.sh; bash $$L down; \
		JUICE_LEGACY_AGENTS=$(CURDIR)/test/juicelegacy/agents-chaos.json bash $$L up; bash test/testbed.sh wire; \
		$(GO) run ./test/chaos -juice legacy -jobs 500 -kills 20 -rest-outage 60s -out test/results/chaos-legacy.md; \
		bash $$L down; bash $$L up'

# The agent-loss test waits for the controller's 30 s missing-agent timeout.
test-juice-legacy-loss:
	JUICE_LEGACY_LOSS=1 $(GO) test -count=1 -tags legacy -v -run '^TestLegacyAgentLoss$$' ./test/juicelegacy/

bench: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && bash test/bench.sh'

# Issue 23: the pools as Slurm licenses, on and off, beside plain Slurm (the array and a burst on the demo's 4-GPU
# pool), about 15 minutes; also part of make bench. Figures in test/results/bench-licenses.md.
bench-licenses: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && bash test/bench/licenses.sh && bash test/testbed.sh wire'

# Issue 14 item 5: P5 (the controller's memory and standing cost) at 100,000 tracked runs, PostgreSQL only, about
# 10 minutes; the figures go to test/results/bench-p5-100k.md (make bench runs P5 at 10,000).
BENCH_P5_N ?= 100000
bench-p5-large:
	mkdir -p build && JUICE_BENCH_HEAPPROFILE=build/p5-heap.pprof $(GO) run ./test/bench/cmd/juice-bench -only p5 -p5-n $(BENCH_P5_N) -out test/results/bench-p5-100k.md

# Issue 14 item 1: the controller's polling cost with a large queue, on the Slurm 26.05 chroot (its own lock: held for
# the whole run: about 20 minutes at 10,000,20,000, about 50 at 10,000,100,000). BENCH_SCALE_SIZES: the queue sizes,
# growing. At 100,000 one listing takes slurmrestd about 4 minutes and 14 GiB: slurmrestd is started anew before each
# phase, and a phase is stopped (slurmrestd killed, its figures so far kept) when MemAvailable falls under 3 GiB.
BENCH_SCALE_SIZES ?= 10000,20000
bench-scale: build
	flock -o $(dir $(HOST_LOCK))chroot-sid.lock sh -c 'bash test/chroot/slurm-chroot.sh up sid && \
		JUICE_TESTBED_ENV=$(dir $(HOST_LOCK))chroot-sid/env $(GO) run ./test/bench/cmd/juice-bench-scale \
		-sizes $(BENCH_SCALE_SIZES) -restart-restd "bash test/chroot/slurm-chroot.sh restart-rest sid" -out test/results/bench-scale.md'

chaos: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && $(GO) run ./test/chaos -jobs 500 -kills 20 -rest-outage 60s -slurm-events -out test/results/chaos.md'
	$(MAKE) --no-print-directory chaos-upgrade
	$(MAKE) --no-print-directory chaos-slurm-failover CHAOS_OUT=1

# Issue 25 item 2: a backup slurmctld (a second SlurmctldHost, in a network and UTS namespace of its own) takes over
# from the primary stopped in the middle of a chaos run, and gives control back when the primary starts again
# (test/slurmfailover/failover.sh), on each release's bed in turn, under its lock (about 4 minutes each).
# CHAOS_OUT=1 keeps the figures in test/results/chaos-slurm-failover-RELEASE.md. On 26.05 the primary, stopped,
# strands the jobs whose prologs wait, and the controller requeues them (docs/admin.md section 7).
FAILOVER_RELEASES ?= 22.05 24.11 26.05
chaos-slurm-failover: build
	@set -e; for r in $(FAILOVER_RELEASES); do \
		case $$r in 22.05) lock=$(HOST_LOCK); bed="bash test/testbed.sh";; \
		24.11) lock=$(dir $(HOST_LOCK))chroot-trixie.lock; bed="bash test/chroot/slurm-chroot.sh";; \
		26.05) lock=$(dir $(HOST_LOCK))chroot-sid.lock; bed="bash test/chroot/slurm-chroot.sh";; \
		*) echo "chaos-slurm-failover: no release $$r (22.05, 24.11, 26.05)"; exit 2;; esac; \
		suite=$$(case $$r in 24.11) echo trixie;; 26.05) echo sid;; esac); \
		echo "== chaos-slurm-failover on Slurm $$r"; \
		mkdir -p $(dir $(HOST_LOCK)); \
		flock -o $$lock sh -c "$$bed up $$suite && $$bed wire $$suite && bash test/slurmfailover/failover.sh $$r -jobs 60 -kills 4 \
			-rest-outage 15s -restart-postgres=false -dbd-outage 0 $(if $(CHAOS_OUT),-out test/results/chaos-slurm-failover-$$r.md)"; \
	done

# Issue 25 item 5: one controller process under mixed load with faults for SOAK (an hour), sampled every 30 s: RSS,
# open files, goroutines, PostgreSQL connections and Juice sessions, each with its slope, in test/results/soak.md;
# it fails unless each is flat and nothing leaked (test/chaos/soak.go).
SOAK ?= 60m
soak: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && $(GO) run ./test/chaos -soak $(SOAK) -timeout $$(( $(SOAK:m=) + 30 ))m -out test/results/soak.md'

# The short chaos run on a PostgreSQL that fails over (test/pgpair.sh): instead of a restart of PostgreSQL, the
# standby is promoted and the primary stopped after the second kill. CHAOS_OUT=file keeps the figures.
chaos-failover: build
	$(ON_HOST) bash -c 'bash test/testbed.sh wire && bash test/pgpair.sh up && { $(GO) run ./test/chaos -jobs 60 -kills 4 \
		-rest-outage 15s -pg-failover $(if $(CHAOS_OUT),-out $(CHAOS_OUT)); rc=$$?; bash test/pgpair.sh down; exit $$rc; }'

chaos-short: build
	$(ON_HOST) sh -c 'bash test/testbed.sh wire && $(GO) run ./test/chaos -jobs 60 -kills 4 -rest-outage 15s'

FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseVRAM$$' -fuzztime $(FUZZTIME) ./internal/vram/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./reconcile/request/
	$(GO) test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME) ./reconcile/session/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeJobs$$' -fuzztime $(FUZZTIME) ./slurmrest/
	$(MAKE) -C spank fuzz FUZZTIME=$(FUZZTIME)

lint:
	$(GO) vet -tags e2e,integration,smoke,legacy,tokenrenewal ./...
	@command -v staticcheck >/dev/null || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	PATH="$$PATH:$$($(GO) env GOPATH)/bin" staticcheck -tags e2e,integration,smoke,legacy,tokenrenewal ./...

clean:
	rm -rf $(BIN) build
	$(MAKE) -C spank clean
