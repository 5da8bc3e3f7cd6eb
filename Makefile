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

test: $(STAMP) lint
	$(BIN)/pytest -q -p no:cacheprovider -n $(TEST_JOBS) --dist loadfile tests
	$(MAKE) --no-print-directory molecule

lint: $(STAMP)
	scripts/lint.sh

molecule: $(STAMP)
	scripts/molecule.sh

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf .xceprov .pytest_cache .mypy_cache .ruff_cache
