# Two commands for users: `make demo` and `make test`. Both prepare the machine first.
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TEST_JOBS ?= 2
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: demo test lint unit integration molecule bench setup clean

$(STAMP): pyproject.toml constraints.txt scripts/setup-env.sh
	scripts/setup-env.sh

setup: $(STAMP)

demo: $(STAMP)
	scripts/demo.sh

# Files run in collection order (--no-loadscope-reorder): the integration files, the long ones,
# first, the many short unit files last, so that both workers finish together. xdist's default
# order (most tests first) left the single-test files, the longest, for the end, on one worker.
test: $(STAMP) lint
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder tests
	$(MAKE) --no-print-directory molecule

lint: $(STAMP)
	scripts/lint.sh

molecule: $(STAMP)
	scripts/molecule.sh

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf .xceprov .pytest_cache .mypy_cache .ruff_cache
