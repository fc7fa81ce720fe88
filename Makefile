# compactor — see README.md. Every target works offline on a fresh clone except `interop`,
# which runs the real Pi through ../shared/oracle/pi-oracle (Node + the npm registry).
GO       ?= go
BIN      ?= bin
PI_ORACLE ?= $(abspath ../shared/oracle/pi-oracle)
PKGS     := ./...

.PHONY: all build test vet bench bench-read proptest fuzz interop demo clean

all: build

build:
	$(GO) build -o $(BIN)/compactor ./cmd/compactor
	$(GO) build -o $(BIN)/enqueue ./cmd/enqueue

vet:
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || (echo "gofmt needed:"; gofmt -l .; exit 1)

# The README's test command: vet + gofmt + every test with the race detector. Needs no
# network and no services: NATS tests start an embedded nats-server themselves.
test: vet
	$(GO) test -race -count=1 -timeout 9m $(PKGS)

# Benchmarks (not part of `make test`).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 30m $(PKGS)

# Reading sessions, whole process: compactor against the real Pi in the same run (a 7.5 MiB
# Pi-written session), and long-lived sessions (5, 10, 20 compactions; ~100 MiB) against the
# same live context without the history; then the in-process tail-read benchmark. The
# sessions are generated once into BENCH_DIR with Pi's own SessionManager (Node + pi-oracle).
BENCH_DIR ?= .compactor/bench-read
BENCH_RUNS ?= 7
bench-read: build
	$(GO) run ./bench/read -dir $(BENCH_DIR) -compactor $(BIN)/compactor -pi-oracle $(PI_ORACLE) -runs $(BENCH_RUNS)
	COMPACTOR_BENCH_SESSIONS=$(abspath $(BENCH_DIR)) $(GO) test -run '^$$' -bench ReadTail -benchmem -benchtime 5x -count=1 ./sessionio

# Property tests at full size: at least 10,000 generated sessions per policy, and 10,000
# generated trees on which the tail reader must agree with the full reader (every need).
proptest:
	$(GO) test -count=1 -timeout 60m -run 'TestProperty' ./cutpoint/ -rapid.checks=10000
	$(GO) test -count=1 -timeout 60m -run 'TestTailMatchesFullRead$$' -v ./sessionio/ -rapid.checks=10000

# Fuzz the session reader (FUZZTIME=5m by default): the full reader, and the tail reader
# against it.
FUZZTIME ?= 5m
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) ./sessionio/
	$(GO) test -run '^$$' -fuzz FuzzTailMatchesFullRead -fuzztime $(FUZZTIME) ./sessionio/

# Re-check every golden against the live Pi (installs the pinned npm package once).
interop:
	$(PI_ORACLE) install
	COMPACTOR_INTEROP=1 PI_ORACLE=$(PI_ORACLE) CUTPOINT_DIFF_N=60 $(GO) test -count=1 -timeout 30m $(PKGS)

# The README's main command: the service on its embedded defaults (embedded NATS,
# extractive summarizer) over a scratch copy of the example store, once, with a report.
demo:
	rm -rf .compactor/demo && mkdir -p .compactor/demo
	cp -R examples/sessions .compactor/demo/sessions
	$(GO) run ./cmd/compactor run --once --config configs/example.json

clean:
	rm -rf $(BIN)
