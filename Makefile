# compactor — see README.md. Every target works offline on a fresh clone except those that run
# the real Pi through the project's harness interop/pi/pi (Node 20 + the npm registry the first
# time; interop/pi/README.md): interop, interop-releases, e2e, chaos, test-extension, bench-read.
GO       ?= go
BIN      ?= bin
PKGS     := ./...
# The packages whose tests run the live Pi when COMPACTOR_INTEROP=1 (contexts, plans, appends
# loaded by Pi): `make interop` runs the ones that depend on the release for each Pi of the
# matrix, the rest once. The other packages do not depend on Pi and run in `make test`.
INTEROP_PKGS := ./cutpoint/ ./sessionio/ ./sessionio/liveappend/ ./engine/ ./internal/cli/

# The Pi harness and its version matrix (interop/pi/versions.txt, newest last = the default).
PI_HARNESS ?= $(abspath interop/pi/pi)
export PI_HARNESS
# The Pi the suites that run compactor next to a live Pi (e2e, e2e-matrix, test-extension) use
# by default: the newest of the matrix, the one users run (chaos and bench-read run the
# harness's default, the same). PI_VERSION=0.73.1 make e2e runs a suite against another Pi.
PI_LIVE_VERSION ?= 1.6.0

# staticcheck at a pinned version, built by `go run` from the module proxy on first use
# (then from the module and build caches), so a fresh clone needs nothing installed.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# The version stamped into the binaries: the nearest tag (or the commit) and -dirty for
# local changes. `go install ...@vX.Y.Z` needs no stamp: the binary reads the module version.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/compactor-dev/compactor/internal/cli/command.version=$(VERSION)

.PHONY: all build static image test test-ui bench-ui vet configref wire identical bench bench-read bench-sweep bench-state proptest fuzz interop interop-releases goldens e2e e2e-matrix chaos redteam test-extension demo clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/compactor ./cmd/compactor
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/enqueue ./cmd/enqueue

# The static binary the container image and the systemd unit use: no cgo, so no libc and
# no dynamic loader (it runs in an empty root file system).
static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X github.com/compactor-dev/compactor/internal/cli/command.version=$(VERSION)" -o $(BIN)/compactor-static ./cmd/compactor

# The container image (deploy/Containerfile, FROM scratch) with whichever builder is
# installed: buildah, podman or docker. The context is bin/image/ alone.
CONTAINER ?= $(shell command -v buildah || command -v podman || command -v docker)
CA_CERTS  ?= /etc/ssl/certs/ca-certificates.crt
image: static
	rm -rf $(BIN)/image && mkdir -p $(BIN)/image
	cp $(BIN)/compactor-static $(BIN)/image/compactor
	cp $(CA_CERTS) $(BIN)/image/ca-certificates.crt
	$(CONTAINER) build -f deploy/Containerfile -t compactor:$(VERSION) $(BIN)/image

# go vet, staticcheck (the e2e, chaos and ui suites too: they build only with their tags) and gofmt.
vet:
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)
	$(STATICCHECK) -tags e2e ./e2e/
	$(STATICCHECK) -tags chaos ./chaos/
	$(STATICCHECK) -tags ui ./internal/console/
	$(STATICCHECK) -tags redteam ./redteam/
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || (echo "gofmt needed:"; gofmt -l .; exit 1)

# The README's test command: vet + gofmt + every test with the race detector. Needs no
# network and no services: NATS tests start an embedded nats-server themselves.
test: vet
	$(GO) test -race -count=1 -timeout 9m $(PKGS)
	@# The live-writer race at full size (1,000 appends), without the race detector's slowdown.
	@out=$$($(GO) test -count=1 -run 'TestAppendRacesLiveWriter' -v ./sessionio/liveappend/ 2>&1); code=$$?; \
	  echo "$$out" | grep -E 'appends wrote|live_test|^(ok|FAIL|--- FAIL)'; exit $$code

# The configuration reference (docs/configuration.md), generated from every command's flags
# and the environment variables the code names; a test fails when it is out of date.
configref:
	$(GO) run ./internal/cmd/genconfigref

# The extension's side of the wire contract (extensions/pi/src/wire.gen.ts and
# extensions/pi/test/testdata/wire-samples.json), generated from the Go types of package wire
# (and engine.Prepared); a test fails when it is out of date.
wire:
	$(GO) run ./internal/cmd/wirets

# Every output unchanged: what compactor prints for every file of testdata/corpus (context,
# plan and compact --dry-run, each policy and keep, Pi 0.73.1 and 1.6.0; scripts/identical) at
# BASE and in the working tree, compared byte for byte; a difference fails. For changes that
# must not change behaviour (restructuring, comments, docs). About a minute on 2 cores.
BASE ?= main
IDENTICAL_DIR ?= .compactor/identical
identical:
	scripts/identical $(IDENTICAL_DIR)/base $(BASE)
	scripts/identical $(IDENTICAL_DIR)/head
	@diff -rq $(IDENTICAL_DIR)/base $(IDENTICAL_DIR)/head || { diff -r $(IDENTICAL_DIR)/base $(IDENTICAL_DIR)/head | head -100; exit 1; }
	@echo "identical: every output of $(BASE) unchanged in the working tree"

# Benchmarks (not part of `make test`).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 30m $(PKGS)

# Reading sessions, whole process: compactor against the real Pi in the same run (a 7.5 MiB
# Pi-written session), and long-lived sessions (5, 10, 20 compactions; ~100 MiB) against the
# same live context without the history; then the in-process tail-read benchmark. The
# sessions are generated once into BENCH_DIR with Pi's own SessionManager (the harness; PI_VERSION
# picks the Pi, the newest by default).
BENCH_DIR ?= .compactor/bench-read
BENCH_RUNS ?= 7
bench-read: build
	$(PI_HARNESS) install
	$(GO) run ./bench/read -dir $(BENCH_DIR) -compactor $(BIN)/compactor -pi $(PI_HARNESS) -runs $(BENCH_RUNS)
	COMPACTOR_BENCH_SESSIONS=$(abspath $(BENCH_DIR)) $(GO) test -run '^$$' -bench ReadTail -benchmem -benchtime 5x -count=1 ./sessionio

# The sweep of a 10,000-session fleet (~1.5 GB generated once into SWEEP_BENCH_DIR from the
# corpus, distinct ids and contents): first sweep, re-sweep, baselines; then where the first
# sweep's CPU goes (docs/performance.md).
SWEEP_BENCH_N   ?= 10000
SWEEP_BENCH_DIR ?= $(abspath .compactor/sweep-fleet)
bench-sweep:
	mkdir -p $(BIN) $(SWEEP_BENCH_DIR)
	SWEEP_BENCH_N=$(SWEEP_BENCH_N) SWEEP_BENCH_DIR=$(SWEEP_BENCH_DIR) SWEEP_BENCH_CPUPROFILE=$(abspath $(BIN))/sweep-first.pprof \
	  $(GO) test -run '^$$' -bench 'BenchmarkSweep$$' -benchtime 1x -count=1 -timeout 30m ./internal/cli/
	$(GO) tool pprof -top -cum $(BIN)/sweep-first.pprof 2>/dev/null | grep -E 'flat%|\(\*Service\)\.Sweep|sweeper\)\.one|\(\*Engine\)\.CheckBudget|engine\.\(\*Engine\)\.load|sessionio\.ReadFile|ContextTokens|sweeper\)\.remember|publishJob|os\.Stat|runtime\.gcBgMarkWorker' | head -20

# State that stays bounded, at full size (docs/operations.md, docs/performance.md):
# one sweep after 10,000 sessions were swept and 5,000 deleted; the memory of a `compactor
# run` of 1 store of 100 while the other stores' records grow from 1,000 to 100,000; what
# --nats-sync always costs an enqueue.
bench-state:
	COMPACTOR_SWEEP_PRUNE_N=10000 $(GO) test -count=1 -v -timeout 10m -run 'TestSweepRemovesRecordsOfDeletedFiles$$' ./pipeline/ | grep -E 'prune_test|^(--- |ok|FAIL)'
	$(GO) test -run '^$$' -bench 'HostMemory$$' -benchtime 1x -count=1 -timeout 15m ./internal/cli/
	$(GO) test -run '^$$' -bench 'EnqueueSync$$' -benchtime 1x -count=5 -timeout 10m ./pipeline/

# Property tests at full size: at least 10,000 generated sessions per policy, and 10,000
# generated trees on which the tail reader must agree with the full reader (every need), with
# and without a checkpoint of an earlier size of the file.
proptest:
	$(GO) test -count=1 -timeout 60m -run 'TestProperty' ./cutpoint/ -rapid.checks=10000
	$(GO) test -count=1 -timeout 60m -run 'TestTailMatchesFullRead$$|TestCheckpointMatchesFullRead$$' -v ./sessionio/ -rapid.checks=10000

# Fuzz the session reader (FUZZTIME=5m by default): the full reader, and the tail reader
# against it.
FUZZTIME ?= 5m
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) ./sessionio/
	$(GO) test -run '^$$' -fuzz FuzzTailMatchesFullRead -fuzztime $(FUZZTIME) ./sessionio/
	$(GO) test -run '^$$' -fuzz FuzzCheckpoint -fuzztime $(FUZZTIME) ./sessionio/

# Every Pi of the matrix (installed once each from its lockfile; interop/pi/versions.txt: the
# newest release of each rule set that changes contexts or plans, 1.0.3 for the summaries, and
# 0.73.1, the last under the old package name): the harness's selftest, then every golden of
# that release (testdata/expected/<version>/, the serialization, file-list and branch goldens of
# summarize/testdata/golden/<version>/ with their edge-case sessions, and the per-entry
# estimates of tokenize/testdata/estimate-goldens/<version>.json) and, where committed, its
# generated corpus (testdata/corpus/gen-<version>/) re-checked byte for byte against the live
# Pi; then the Go tests that depend on the release, against that live Pi (INTEROP_RELEASE_TESTS:
# random sessions planned by compactor and by Pi, every compaction compactor appends to the
# corpus loading as planned and written as that Pi writes it, branch summaries). The live
# tests that do not depend on the release (appends racing a live writer, a full disk, the
# tail reader, ...) run once, with the newest Pi (the rest of INTEROP_PKGS).
#
# Why not the whole INTEROP_PKGS for every release, as with two: it takes about 4 minutes a
# release and most of it is release-independent, so 9 releases would take 35 minutes; this
# takes about 1 minute a release plus one full run. What compactor makes of each release's
# contexts and plans is proven offline by its goldens in make test (internal/cli, cutpoint),
# and every published release by make interop-releases.
INTEROP_RELEASE_TESTS := TestDifferentialAgainstPi$$|TestAppendsLoadAsPlannedInEveryPi$$|TestBranchSummaryWherePiPutsIt$$
interop:
	@set -e; for v in $$($(PI_HARNESS) matrix); do \
	  echo "== Pi $$v"; \
	  PI_VERSION=$$v $(PI_HARNESS) selftest; \
	  PI_VERSION=$$v $(PI_HARNESS) goldens --check; \
	  PI_VERSION=$$v $(PI_HARNESS) exec summarize/testdata/gen-goldens.mjs --check; \
	  PI_VERSION=$$v $(PI_HARNESS) exec tokenize/testdata/gen-estimate-goldens.mjs --check; \
	  PI_VERSION=$$v PIGOLDEN_VERSIONS=$$v COMPACTOR_INTEROP=1 CUTPOINT_DIFF_N=20 $(GO) test -count=1 -timeout 10m -run '$(INTEROP_RELEASE_TESTS)' ./cutpoint/ ./engine/; \
	done
	@newest=$$($(PI_HARNESS) matrix | tail -n 1); echo "== the live tests that do not depend on the release, with Pi $$newest"; \
	  PI_VERSION=$$newest COMPACTOR_INTEROP=1 $(GO) test -count=1 -timeout 30m -skip '$(INTEROP_RELEASE_TESTS)' $(INTEROP_PKGS)

# Every published release of Pi from 0.73.0 on, as the npm registry lists them (not part of
# make test or CI's run; .github/workflows/pi-releases.yml runs the newest every week): each
# installed by the harness (without a lockfile unless pinned, with its own releases of pi-ai
# and its other packages), its own generated sessions and its goldens made, and compactor's
# contexts, plans and appends compared with them (internal/cmd/pireleases). Writes the table
# of docs/compatibility.md; 0 differences is its pass (exit 1 names the release and the first
# difference; exit 2: a release matches but compactor does not know it yet).
# PI_RELEASES=newest, or a comma-separated list, checks those only (the table is not written).
# PI_RELEASES_FLAGS=-clean removes each install once checked (all of them take some 16 GB).
PI_RELEASES ?= all
PI_RELEASES_FLAGS ?=
interop-releases:
	$(GO) run ./internal/cmd/pireleases -releases $(PI_RELEASES) $(PI_RELEASES_FLAGS)

# Rewrite the goldens of every Pi of the matrix, oldest first, from the live Pi, and the
# generated corpus of those that have one committed (testdata/corpus/gen-<version>/: 0.73.1
# and 1.6.0); summarize's goldens before tokenize's, which read summarize's edge-case sessions.
# The goldens are golden stores (interop/pi/lib/store.mjs): a release stores only what differs
# from the pinned release before it.
goldens:
	@set -e; for v in $$($(PI_HARNESS) matrix); do \
	  if [ -d testdata/corpus/gen-$$v ]; then PI_VERSION=$$v $(PI_HARNESS) gen --compact >/dev/null; fi; \
	  PI_VERSION=$$v $(PI_HARNESS) goldens; \
	  PI_VERSION=$$v $(PI_HARNESS) exec summarize/testdata/gen-goldens.mjs >/dev/null; \
	  PI_VERSION=$$v $(PI_HARNESS) exec tokenize/testdata/gen-estimate-goldens.mjs; \
	done

# End to end with the real Pi (RPC mode) against the scripted model of internal/scriptllm:
# the live-agent scenarios and Pi's own compaction timings (e2e/README.md). Not part of
# `make test`: it needs Node and, the first time, the npm registry. One test:
# make e2e E2E_RUN=TestScenarioA (the workload matrix and its long run are make e2e-matrix's, not run by default)
E2E_RUN ?= .
e2e: export PI_VERSION ?= $(PI_LIVE_VERSION)
e2e:
	$(PI_HARNESS) install
	cd extensions/pi && npm ci --no-audit --no-fund --loglevel=error --omit=dev
	$(GO) test -tags e2e -count=1 -v -timeout 45m -run '$(E2E_RUN)' $(if $(filter .,$(E2E_RUN)),-skip '^TestZeroWait(Matrix|LongRun)$$') ./e2e/

# The zero-wait workload matrix (e2e/matrix_test.go): seven workloads, each with Pi
# alone and with the extension and compactor, against the Pi of PI_VERSION; the table goes to
# docs/live-agents.md. About 35 minutes per Pi. One cell, or the fastest cell over at least 12
# compactions:
# make e2e-matrix E2E_RUN=TestZeroWaitMatrix/20k-1k-fast
# make e2e-matrix E2E_RUN=TestZeroWaitLongRun
e2e-matrix: export PI_VERSION ?= $(PI_LIVE_VERSION)
e2e-matrix:
	$(PI_HARNESS) install
	cd extensions/pi && npm ci --no-audit --no-fund --loglevel=error --omit=dev
	$(GO) test -tags e2e -count=1 -v -timeout 90m -run '$(if $(filter .,$(E2E_RUN)),TestZeroWaitMatrix,$(E2E_RUN))' ./e2e/

# The reliability suite (chaos/, docs/reliability.md): worker SIGKILL loops, a node kill on a
# 3-node cluster, LLM faults, bad files, a full disk; real processes on loopback, every file
# checked and loaded by the real Pi. Then the full-disk appends at the library level (the
# restore entry needs a Pi line placed inside the append), also checked by the real Pi. Not
# part of `make test`; bounded at 10 minutes.
CHAOS_RUN ?= .
chaos:
	$(PI_HARNESS) install
	$(GO) test -tags chaos -count=1 -v -timeout 10m -run '$(CHAOS_RUN)' ./chaos/
	COMPACTOR_INTEROP=1 $(GO) test -count=1 -v -timeout 5m -run 'TestAppendFullDisk' ./sessionio/liveappend/

# The red-team suite (redteam/, docs/security.md "The red-team suite"): a real nats-server
# from `compactor auth`'s configuration, stores hostA and hostB set up and served by real
# workers, every attack with hostA's keys; hostB's state compared byte for byte before and
# after each, its flows timed against a run without attacks; then the control run (the
# relay with both stores in one account, where it must be seen). Offline; about 2.5 min.
redteam:
	$(GO) test -tags redteam -count=1 -v -timeout 15m ./redteam/

# The Pi extension's own tests (extensions/pi: Node, a real nats-server, the real Pi), against
# the Pi of PI_VERSION: its CLI in RPC mode, and its library (PI_PACKAGE_DIR) for the unit tests.
test-extension: export PI_VERSION ?= $(PI_LIVE_VERSION)
test-extension:
	$(PI_HARNESS) install
	cd extensions/pi && npm ci --no-audit --no-fund --loglevel=error && npm run typecheck && \
	  PI_PACKAGE_DIR="$$($(PI_HARNESS) where)" npm test

# The README's main command: the service on its embedded defaults (embedded NATS,
# extractive summarizer) over a scratch copy of the example store, once, with a report.
demo:
	rm -rf .compactor/demo && mkdir -p .compactor/demo
	cp -R examples/sessions .compactor/demo/sessions
	$(GO) run ./cmd/compactor run --once --config configs/example.json

clean:
	rm -rf $(BIN)

# The web console in a real browser (internal/console/ui_test.go): headless Chromium (Debian's
# chromium package; CHROMIUM=PATH for another) driven through the DevTools protocol on a
# fleet doing real work. SCREENSHOTS=docs/images retakes the pictures docs/operations.md
# shows. UI_COUNT=10 runs it ten times.
UI_COUNT ?= 1
test-ui:
	$(GO) test -tags ui -count=$(UI_COUNT) -timeout 30m -run 'TestConsoleInBrowser' -v ./internal/console/
	@if [ -n "$(SCREENSHOTS)" ]; then mkdir -p $(SCREENSHOTS) && COMPACTOR_UI_SCREENSHOTS=$(abspath $(SCREENSHOTS)) $(GO) test -tags ui -count=1 -timeout 10m -run 'TestConsoleInBrowser' ./internal/console/; fi

# The console's first page on a fleet of 10,000 sessions, 1,000 dead letters and 100,000
# events, in the browser (Navigation Timing), and the server's CPU per page.
bench-ui:
	$(GO) test -tags ui -run '^$$' -bench 'ConsoleFirstPage' -benchtime 20x -count=1 -timeout 30m -v ./internal/console/
