# lsmstats — see README.md. Targets a newcomer can guess.
GO       ?= go
PKGS     := ./...
FUZZTIME ?= 10s

.PHONY: all build test race bench lint fuzz fuzz-long demo torture clean

all: build test

build:
	$(GO) build $(PKGS)

# The test command of README.md: unit, data-driven, randomized, crash and
# short fuzz runs.
test: build
	$(GO) test -count=1 -timeout 20m $(PKGS)
	$(MAKE) --no-print-directory fuzz FUZZTIME=5s

race:
	$(GO) test -count=1 -race -timeout 30m $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s -timeout 60m $(PKGS)

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# Each fuzz target for FUZZTIME (make fuzz FUZZTIME=10m for a long run).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzComparer$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./internal/keys
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeSummary$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./stats

clean:
	rm -rf bin out
