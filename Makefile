# lsmstats — see README.md. Targets a newcomer can guess.
# Recipes run in bash with pipefail: a benchmark that fails fails its
# target even when its output goes through tee.
SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c
GO       ?= go
PKGS     := ./...
FUZZTIME ?= 10s
OUT      := out
# The first line of each benchmark output: the commit it ran at, which make
# results stamps on the tables it writes from it.
COMMIT_LINE = echo "commit: $$(git rev-parse HEAD 2>/dev/null)$$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"

.PHONY: all build objstore test race bench bench-smoke bench-eta bench-jobs bench-compare matrix scale results demo demo-s3 demo-cluster lint fuzz torture faults soak clean

all: build test

build:
	$(GO) build $(PKGS)

# The main job: a 1M-row backfill with churn on an embedded store, live
# progress bars for the truth and both approaches, one SIGKILL crash. Built
# first (into bin/), so that the job's time is the job's, not the link's.
demo:
	$(GO) build -o bin/lsmstats ./cmd/lsmstats
	bin/lsmstats backfill --rows 1000000 --workload mixed --crash-at 60

# The demo's backfill, crash included, with the store's SSTs in a bucket of
# a SeaweedFS server on loopback that tools/s3run starts beside it and
# removes afterwards (make objstore builds the server once); the JSON
# report, which names the object store, goes to out/demo-s3.json.
demo-s3: objstore
	$(GO) build -o bin/lsmstats ./cmd/lsmstats
	$(GO) build -o bin/s3run ./tools/s3run
	mkdir -p $(OUT)
	bin/s3run bin/lsmstats backfill --rows 1000000 --workload mixed --crash-at 60 \
		--object-store 's3://{bucket}/demo?endpoint={endpoint}' --json $(OUT)/demo-s3.json

# The backfill over 3 store nodes (lsmstats node processes, driven by
# this process as their coordinator over gRPC on loopback) sharing a bucket
# of a SeaweedFS server: one vnode move by reference, one node killed with
# SIGKILL and recovered; the report goes to out/cluster.json.
demo-cluster: objstore
	$(GO) build -o bin/lsmstats ./cmd/lsmstats
	$(GO) build -o bin/s3run ./tools/s3run
	mkdir -p $(OUT)
	bin/s3run bin/lsmstats backfill --nodes 3 --rows 300000 --workload mixed --checkpoint-every 2 \
		--barrier-rows 512 --move-at 10 --kill-node-at 25 --lose-disk \
		--object-store 's3://{bucket}/cluster?endpoint={endpoint}' --json $(OUT)/cluster.json

# SeaweedFS's weed binary, the S3 server on loopback that the object-store
# tests start (internal/s3server), built into the user's cache directory
# (~/.cache/lsmstats/weed-<revision>), outside the repository, unless it is
# there already: about 10 minutes on two cores the first time, nothing
# after. make test and make race need it.
objstore:
	$(GO) run ./tools/buildweed -go $(GO)

# The test command of README.md: unit, data-driven, randomized, crash
# (SIGKILL) and short fuzz runs. The fuzz runs are budgeted in executions,
# not seconds: with a duration, Go 1.26's fuzz coordinator can report
# "context deadline exceeded" as a failure when the time runs out while a
# worker is busy (go.dev/issue/75804, fixed in Go 1.27), and CI machines are
# shared and busy.
#
# Every randomized test runs with a fixed seed (testutil.DefaultSeed) unless
# its flag names another; each logs its seed. LSMSTATS_RANDOM_SEEDS=1 make
# test draws time-based seeds instead, for exploration. The fuzz runs'
# mutator is seeded (GODEBUG=fuzzseed) too, but Go caches the inputs it
# found in GOCACHE and its workers interleave freely, so those runs are not
# repeated bit for bit; a failing input is written to testdata/fuzz.
test: build objstore
	$(GO) test -count=1 -timeout 30m $(PKGS)
	$(MAKE) --no-print-directory fuzz FUZZTIME=30000x FUZZSEED=1

# Every package under the race detector but the crash torture: its kills are
# timed to phases of a child process, which the detector slows so far that no
# kill lands past the child's initial load. The code the torture exercises
# runs under -race in lsm, backfill and bench, and the torture itself in make
# test.
RACE_PKGS = $(shell $(GO) list $(PKGS) | grep -v '/harness/torture$$')

race: objstore
	$(GO) test -count=1 -race -timeout 40m $(RACE_PKGS)

# Every benchmark; the backfill ones run each workload once per approach,
# beside the raw-Pebble pipeline, and BenchmarkScale runs at 1M rows. One
# package at a time (-p 1): two benchmark binaries at once would share the
# cores and each measure the other.
bench: objstore
	@mkdir -p $(OUT)
	@$(COMMIT_LINE) > $(OUT)/bench.txt
	$(GO) test -p 1 -run '^$$' -bench . -benchtime 2s -timeout 120m $(PKGS) | tee -a $(OUT)/bench.txt

# Every benchmark of every package once (-benchtime 1x) at the sizes -short
# gives them (each package's benchmarks say which): jobs, stores and the
# accuracy matrix small enough that each benchmark takes seconds. It shows
# that each runs, not how fast, and fails if any fails or panics; its
# figures are not results. CI runs it. A test binary's own -timeout does not
# cover benchmarks: go test kills one at -timeout plus a minute.
bench-smoke:
	$(GO) test -run '^$$' -bench . -benchtime 1x -short -timeout 10m $(PKGS)

# BenchmarkETA alone (about 10 minutes: its jobs run under a rate limit),
# into $(OUT)/eta.txt, whose ETA table make results prefers to make bench's.
# BENCH_ETA_FLAGS=-eta-long adds a job of about 7 minutes.
BENCH_ETA_FLAGS ?=
bench-eta:
	@mkdir -p $(OUT)
	@$(COMMIT_LINE) > $(OUT)/eta.txt
	$(GO) test -run '^$$' -bench '^BenchmarkETA$$' -benchtime 1x -timeout 60m ./bench/ $(BENCH_ETA_FLAGS) | tee -a $(OUT)/eta.txt

# The job kinds' benchmarks alone (several upstream tables; snapshot backfill)
# into $(OUT)/jobs.txt, whose table make results prefers to make bench's.
bench-jobs:
	@mkdir -p $(OUT)
	@$(COMMIT_LINE) > $(OUT)/jobs.txt
	$(GO) test -run '^$$' -bench '^Benchmark(MultiUpstream|SnapshotBackfill)$$' -benchtime 1x -timeout 60m ./bench/ | tee -a $(OUT)/jobs.txt

# The full accuracy matrix: every pk shape at 10k, 100k and 1M rows, in 1, 4,
# 256 and 4096 vnodes, under four churn patterns (288 backfills; hours on
# two cores: MATRIX_ROWS=10000,100000 takes about half an hour). make bench
# runs the reduced matrix of make test; make results prefers this output.
MATRIX_ROWS ?= 10000,100000,1000000
matrix:
	@mkdir -p $(OUT)
	@$(COMMIT_LINE) > $(OUT)/matrix.txt
	$(GO) test -run '^$$' -bench '^BenchmarkAccuracyMatrix$$' -benchtime 1x -timeout 12h ./bench/ -matrix-rows $(MATRIX_ROWS) | tee -a $(OUT)/matrix.txt

# benchstat over three runs of the backfill benchmarks (compared with the
# previous run's file when there is one).
bench-compare:
	@mkdir -p $(OUT)
	@if [ -f $(OUT)/bench-new.txt ]; then mv $(OUT)/bench-new.txt $(OUT)/bench-old.txt; fi
	$(GO) test -run '^$$' -bench 'Backfill|Recovery|ProgressVsScan' -benchtime 1x -count 3 -timeout 60m ./bench/ | tee $(OUT)/bench-new.txt
	@if [ -f $(OUT)/bench-old.txt ]; then \
		$(GO) run golang.org/x/perf/cmd/benchstat@latest $(OUT)/bench-old.txt $(OUT)/bench-new.txt; \
	else \
		$(GO) run golang.org/x/perf/cmd/benchstat@latest $(OUT)/bench-new.txt; \
	fi

# BenchmarkScale at 1M, 4M and 16M rows, without churn and with it, each in
# both snapshot orders (about two hours here), into
# $(OUT)/scale.txt: the store beside raw Pebble in one process, and per size
# the per-row cost, memory, statistics costs, commit latency and LSM shape;
# for the workload without churn also a child process holding only the store
# and the job (bench/solo_test.go), for its peak RSS. make results tabulates
# and plots it. Each pipeline's directory goes once it is measured (at 16M
# rows with churn, the one look I took mid-run found 4.8 GB; all five kept
# to the cell's end had filled 30 GB).
scale:
	@mkdir -p $(OUT)
	@$(COMMIT_LINE) > $(OUT)/scale.txt
	$(GO) test -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 6h ./bench/ \
		-scale-rows 1M,4M,16M -scale-workloads uniform | tee -a $(OUT)/scale.txt
	$(GO) test -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 6h ./bench/ \
		-scale-rows 1M,4M,16M -scale-workloads update-churn | tee -a $(OUT)/scale.txt

# Regenerates README.md's summary table and docs/results.md's tables from
# the last make bench output ($(OUT)/bench.txt; make bench runs first when
# there is none), make scale's ($(OUT)/scale.txt, when there is one; else
# the 1M rows of make bench), make bench-eta's and make bench-jobs's
# ($(OUT)/eta.txt, $(OUT)/jobs.txt, when there are; else make bench's) and
# make matrix's (docs/accuracy.md), each table stamped with the commit its
# output's first line names; docs/scale.png from the scale figures when
# they span two sizes or more (make scale's), and
# docs/progress.png from a run of the main job.
results:
	@mkdir -p $(OUT) docs
	@if [ ! -f $(OUT)/bench.txt ]; then $(MAKE) --no-print-directory bench; fi
	$(GO) run ./tools/results -bench $(OUT)/bench.txt -scale $(OUT)/scale.txt -matrix-bench $(OUT)/matrix.txt \
		-eta-bench $(OUT)/eta.txt -jobs-bench $(OUT)/jobs.txt -readme README.md -results docs/results.md -plot docs/scale.png
	$(GO) run ./cmd/lsmstats backfill --rows 200000 --workload update-churn --crash-at 20 --bars off \
		--json docs/progress.json --plot docs/progress.png

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# Each fuzz target for FUZZTIME, a duration or an execution count (make fuzz
# FUZZTIME=10m, or FUZZTIME=5000000x, which Go 1.26's end-of-run race cannot
# fail; see test). FUZZSEED=N seeds the mutator (default: the clock).
FUZZSEED ?=
FUZZENV   = $(if $(FUZZSEED),GODEBUG=fuzzseed=$(FUZZSEED))
fuzz:
	$(FUZZENV) $(GO) test -run '^$$' -fuzz '^FuzzComparer$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./keys
	$(FUZZENV) $(GO) test -run '^$$' -fuzz '^FuzzDecodeSummary$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./internal/sstsummary
	$(FUZZENV) $(GO) test -run '^$$' -fuzz '^FuzzDecodeState$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./backfill
	$(FUZZENV) $(GO) test -run '^$$' -fuzz '^FuzzLogValue$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./internal/livebuckets

# The crash torture of the whole stack: 1,000 SIGKILLs (make test runs 25).
torture:
	$(GO) test -count=1 -v -timeout 60m -run '^TestTorture$$' ./harness/torture -torture-kills 1000

# Fault injection at length (make test runs short versions): random faults
# around 3,000 steps of the store, 200 child processes with WAL/MANIFEST
# faults, 30 s of the concurrency test, and 2,100 corruption injections
# (make test runs 210). Each test logs its faults or outcomes per kind.
faults:
	$(GO) test -count=1 -v -timeout 60m -run '^TestFaults(Random|Crash)$$' ./lsm -fault-steps 3000 -fault-crash-runs 200
	$(GO) test -count=1 -v -timeout 60m -run '^TestConcurrent$$' ./lsm -concurrent-for 30s
	$(GO) test -count=1 -v -timeout 60m -run '^TestCorruption$$' ./cmd/lsmstats -corruption-injections 2100

# The soak: backfill jobs on churning workloads over one store directory,
# with random SIGKILLs, injected I/O faults (errorfs), context cancels and
# reopens with rescale, every invariant checked after each event, for
# SOAK_FOR (make soak SOAK_FOR=30m; make test runs 20 s). It prints the
# events per kind and the findings, and fails on any finding. make soak
# explores: its seed is time based (make test's is fixed); SOAK_SEED=N
# replays the seed a soak printed.
SOAK_FOR  ?= 10m
SOAK_SEED ?=
soak:
	$(GO) test -count=1 -v -timeout 0 -run '^TestSoak$$' ./harness/soak -soak-for $(SOAK_FOR) \
		$(if $(SOAK_SEED),-soak-seed $(SOAK_SEED),-random-seeds)

clean:
	rm -rf bin $(OUT)

# The API compatibility check (RELEASING.md): the exported API of the public
# packages against the last release recorded in api/, allowed to break it
# only when CHANGELOG.md's Unreleased section declares a breaking version
# (a new minor one before v1). CI runs it.
.PHONY: apicheck release
apicheck:
	$(GO) run ./tools/apicount -check api -changelog CHANGELOG.md

# make release VERSION=vX.Y.Z: records the API in api/VERSION.txt, tags the
# release commit (annotated, local) and names it in CHANGELOG.md (RELEASING.md).
release:
	@if [ -z "$(VERSION)" ]; then echo "make release VERSION=vX.Y.Z"; exit 2; fi
	./tools/release.sh $(VERSION)
