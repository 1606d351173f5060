# Developer entry points. CI runs scripts/test (through .ci/run); these
# targets add the long-running checks that stay out of CI.
#
#   make test                 every test: go vet, go test -race ./..., Node SDK tests (scripts/test)
#   make lint                 go mod tidy -diff and the pinned staticcheck (scripts/lint; CI runs it)
#   make soak                 the soak of RELIABILITY.md against the real binary (SOAK_DURATION, default 10m)
#   make fuzz                 every Fuzz target in the module for FUZZTIME each (default 30s)
#   make bench                Go benchmarks, then `gemini-proxy bench` (savings and overhead; BENCHMARKS.md)
#
# Soak knobs (environment): SOAK_RATE (req/s; default: SOAK_LOAD of the
# measured capacity), SOAK_LOAD (default 0.8), SOAK_TENANTS (4), SOAK_CACHE
# (cache.max_bytes, 32MiB). Run the soak on an otherwise idle machine.

GO ?= go
SOAK_DURATION ?= 10m
FUZZTIME ?= 30s
BENCH_ARGS ?= --quick

.PHONY: test lint soak fuzz bench

test:
	scripts/test

lint:
	scripts/lint

soak:
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -v -timeout 0 -run '^TestSoak$$' ./internal/reliability/

# Each target runs alone (go test -fuzz takes one target per package run).
# A crash leaves its input in that package's testdata/fuzz/<Target>/:
# commit it as a seed together with the fix. Minimising each new
# interesting input is capped at 5s: at the default (60s) the fuzzer spent
# most of a short run minimising instead of executing.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$target ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg; \
		done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	$(GO) run ./cmd/gemini-proxy bench $(BENCH_ARGS)
