# Thin wrapper over meson. `make` builds build/ankusa; `make run` and `make test` install
# their Debian dependencies first (scripts/deps.sh is idempotent and quick when all present).
SHELL := /bin/bash
BUILD ?= build
ASAN_BUILD ?= build-asan
TEST_BUILD ?= build-test
PYTEST ?= /usr/bin/python3 -m pytest
CONFIG ?= examples/quickstart/ankusa.yml

# Reconfigure when a source file appears or disappears (meson lists them at setup).
SRCLIST := $(shell ls src/*/*.c src/*.c tests/unit/*.c tests/powerfs/*.c tests/blobtool/*.c 2>/dev/null | sort | md5sum | cut -c1-12)

.PHONY: all deps run test layers unit e2e asan test-build bench fuzz clean format drill

all: $(BUILD)/ankusa

deps:
	@bash scripts/deps.sh

# quiet when it works; the compiler's messages when it does not
define ninja
	@ninja -C $(1) > $(1)/.ninja.out 2>&1 || { cat $(1)/.ninja.out; exit 1; }
endef

define setup
	@if [ ! -f $(1)/build.ninja ] || [ "$$(cat $(1)/.srclist 2>/dev/null)" != "$(SRCLIST)" ]; then \
	  if [ -f $(1)/build.ninja ]; then meson setup --reconfigure $(1) $(2) >/dev/null; \
	  else meson setup $(1) $(2) >/dev/null; fi && echo "$(SRCLIST)" > $(1)/.srclist; fi
endef

$(BUILD)/ankusa: FORCE
	$(call setup,$(BUILD),)
	$(call ninja,$(BUILD))
	@echo "built $(BUILD)/ankusa"

# The e2e suite runs against a build with test seams compiled in (clock override,
# fault injection) and against the sanitizer build.
test-build: FORCE
	$(call setup,$(TEST_BUILD),-Dtest_hooks=true)
	$(call ninja,$(TEST_BUILD))

asan: FORCE
	$(call setup,$(ASAN_BUILD),-Dtest_hooks=true -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug)
	$(call ninja,$(ASAN_BUILD))

run: deps $(BUILD)/ankusa
	./$(BUILD)/ankusa serve --config $(CONFIG)

unit: test-build asan
	meson test -C $(TEST_BUILD) --print-errorlogs
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  meson test -C $(ASAN_BUILD) --print-errorlogs
	@# Criterion runs each test in a child and does not fail it on a sanitizer report:
	@# read the log instead, so a leak or UB fails the build.
	@if grep -nE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' $(ASAN_BUILD)/meson-logs/testlog.txt; then \
	  echo "sanitizer reports in unit tests (see above)"; exit 1; fi

# Two pytest-xdist workers, a test file per worker at a time (a file's servers and
# fixtures stay in one process); helpers.reserve_port gives each worker its own ports.
E2E_JOBS ?= 2
E2E_PAR = $(if $(filter-out 0 1,$(E2E_JOBS)),-n $(E2E_JOBS) --dist loadfile)
e2e: test-build asan
	ANKUSA_BIN=$(abspath $(TEST_BUILD))/ankusa $(PYTEST) -q $(E2E_PAR) tests/e2e
	ANKUSA_BIN=$(abspath $(ASAN_BUILD))/ankusa ANKUSA_SANITIZER=1 $(PYTEST) -q $(E2E_PAR) tests/e2e -m "not slow"

# Every harness in fuzz/ runs briefly on each `make test`; the campaign, each harness to 10M
# executions or 30 minutes: `make fuzz FUZZ_SECONDS=1800` (FUZZ_JOBS=2 runs two at once).
FUZZ_SECONDS ?= 10
fuzz:
	bash scripts/fuzz.sh $(FUZZ_SECONDS)

# The long drills, by hand: 100 power cuts under tests/powerfs, 100 kills at random moments.
# `make test` runs the same files with their short defaults.
DRILLS := $(wildcard tests/e2e/test_powerloss.py tests/e2e/test_kill_drill.py)
# Their figures print (-s) and land in bench/out/drill-kill.json; docs/drills.md records them.
drill: deps test-build
	mkdir -p bench/out
	ANKUSA_DRILL_CUTS=100 ANKUSA_DRILL_KILLS=100 ANKUSA_DRILL_REPORT=$(abspath bench/out)/drill-kill.json \
	  ANKUSA_BIN=$(abspath $(TEST_BUILD))/ankusa $(PYTEST) -q -s $(DRILLS)
	ANKUSA_ARCHIVE_PROOF_HOOKS=200000 ANKUSA_BIN=$(abspath $(TEST_BUILD))/ankusa $(PYTEST) -q -s \
	  tests/e2e/test_archive.py::test_200k_hooks_leave_the_store_and_stay_readable

# The include order of src/ (DESIGN.md §5): a folder includes only the folders before it.
layers:
	@bash scripts/layers.sh

# layers, unit (normal, ASan), e2e (normal, ASan), fuzz: make stops at the first that fails
test: deps $(BUILD)/ankusa layers unit e2e fuzz
	@echo "suites: 6 passed, 0 failed"

bench: deps $(BUILD)/ankusa
	bash bench/ingest.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TEST_BUILD)

FORCE:
